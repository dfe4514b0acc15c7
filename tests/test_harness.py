"""`make test`'s own machinery: the offline tests run beside the cluster tests at the lowest
CPU priority (tests/idle_priority.py), and its closing lines time both phases from their
common start (tests/timing.py)."""

import os
import subprocess
import sys

import pytest

from conftest import REPO
from scripts.providers.local import cpu_quota
from tests import timing

# run as a script: its scheduling policy and cpu cgroup, then those of the copy of it it starts
PROBE = """
import os, subprocess, sys
group = next((line.split(":", 2)[2] for line in open("/proc/self/cgroup").read().splitlines()
              if "cpu" in line.split(":")[1].split(",")), "-")
print(os.sched_getscheduler(0), group, flush=True)
if sys.argv[1:] != ["child"]:
    subprocess.run([sys.executable, __file__, "child"], check=True)
"""


def policies(tmp_path, *prefix: str) -> list[list[str]]:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    run = subprocess.run([*prefix, sys.executable, str(probe)], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return [line.split() for line in run.stdout.splitlines() if not line.startswith("== ")]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_offline_phase_and_what_it_starts_run_at_idle_priority_in_a_group_removed_after(tmp_path):
    command, child = policies(tmp_path, sys.executable, "-m", "tests.idle_priority")
    assert command[0] == child[0] == str(os.SCHED_IDLE)
    assert command[1:] == child[1:]  # the child stays in the command's group
    groups = cpu_quota.hierarchy()
    if groups and os.geteuid() == 0:  # where the kit may write cgroups: the smallest weight
        assert command[1].startswith("/raykit-offline-tests-")
        assert not (groups[1] / command[1].lstrip("/")).exists()  # removed when the command ended


def test_idle_priority_without_a_command_says_how_to_call_it():
    run = subprocess.run([sys.executable, "-m", "tests.idle_priority"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stderr.strip().startswith("usage: python -m tests.idle_priority")


def test_the_closing_lines_time_both_phases_from_their_common_start(tmp_path):
    for name, at in (("start", 1000), ("offline-end", 1500), ("cluster-end", 2530)):
        (tmp_path / name).write_text(f"{at}\n")
    (tmp_path / "cluster.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.local.test_chaos" name="test_kill" time="90.5"/>'
        '</testsuite></testsuites>')
    (tmp_path / "offline.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.aws.test_ray_up_moto" name="test_up" time="120.0"/>'
        '</testsuite></testsuites>')
    (tmp_path / "adaptdl-x.xml").write_text("<testsuites><testsuite><testcase")  # killed mid-write
    lines = timing.lines(tmp_path)
    assert lines[:3] == [
        "cluster phase (local Ray clusters, one test at a time): 25:30",
        "offline phase (the offline tests and adaptdl's suites, beside it at idle priority): 8:20",
        "make test's tests in all: 25:30 (the one-time kube-testbed build and .venv's install not counted)"]
    assert lines[3:] == ["the cluster phase's 1 slowest tests:", "     90.5 s  tests/local/test_chaos.py::test_kill",
                         "the offline phase's 1 slowest (at idle priority: waits for a core included):",
                         "    120.0 s  tests/aws/test_ray_up_moto.py::test_up"]
