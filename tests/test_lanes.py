"""The cluster phase's lanes (tests/lanes.py): an `alone` test waits for the other lane's
test under way, and the other lane starts nothing new meanwhile. Real processes and real
flock locks; the order is read from what each process wrote."""

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO
from tests import lanes

TAKER = """
import sys, time
from pathlib import Path
from tests import lanes
name, alone, log, release = sys.argv[1], sys.argv[2] == "alone", Path(sys.argv[3]), Path(sys.argv[4])
with lanes.turn(alone=alone):
    with log.open("a") as f:
        f.write(name + " in\\n")
    while release.name != "-" and not release.exists():
        time.sleep(0.02)
    with log.open("a") as f:
        f.write(name + " out\\n")
"""


@pytest.fixture
def taker(tmp_path):
    """Starts a process that takes a turn: it logs `<name> in`, waits for the release file
    (if any), logs `<name> out`. Each is killed at the test's end, passed or failed."""
    started = []

    def start(name: str, alone: bool, tmp: Path, lock: Path, release: str = "-") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", TAKER, name, "alone" if alone else "shared",
                                 str(tmp / "log"), release], cwd=REPO,
                                env=dict(os.environ, **{lanes.LOCK_ENV: str(lock)}))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def until(check, what: str, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def waiting(pid: int) -> bool:
    """Whether the process waits for a flock (a `->` line of /proc/locks)."""
    return any(line.split()[1] == "->" and line.split()[5] == str(pid)
               for line in Path("/proc/locks").read_text().splitlines())


def test_an_alone_test_waits_for_the_other_lanes_test_and_goes_before_its_next(tmp_path, taker):
    lock, log, release = tmp_path / "lanes", tmp_path / "log", tmp_path / "release-a"
    first = taker("a", False, tmp_path, lock, str(release))  # the other lane's test under way
    until(lambda: log.exists() and "a in" in log.read_text(), "a never started")
    alone = taker("b", True, tmp_path, lock)
    until(lambda: waiting(alone.pid), "b never waited for a")
    # the other lane's next test: a shared turn would fit beside a's, but b is waiting
    nxt = taker("c", False, tmp_path, lock)
    until(lambda: waiting(nxt.pid), "c never waited")
    release.touch()
    for proc in (first, alone, nxt):
        assert proc.wait(timeout=60) == 0
    assert log.read_text().split("\n")[:-1] == ["a in", "a out", "b in", "b out", "c in", "c out"]


def test_shared_turns_run_side_by_side(tmp_path, taker):
    lock, log, release = tmp_path / "lanes", tmp_path / "log", tmp_path / "release"
    first = taker("a", False, tmp_path, lock, str(release))
    until(lambda: log.exists() and "a in" in log.read_text(), "a never started")
    second = taker("c", False, tmp_path, lock)  # both lanes' ordinary tests at once
    assert second.wait(timeout=60) == 0
    release.touch()
    assert first.wait(timeout=60) == 0
    assert log.read_text().split("\n")[:-1] == ["a in", "c in", "c out", "a out"]


NESTED = """
from tests import lanes
with lanes.turn(alone=True):
    with lanes.turn(alone=False):  # a cluster started inside the test: its own turn already
        print("nested")
"""


def test_a_turn_taken_inside_a_turn_does_not_wait_for_itself(tmp_path):
    # flock conflicts between two opens in one process: a second lock would wait forever
    run = subprocess.run([sys.executable, "-c", NESTED], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, **{lanes.LOCK_ENV: str(tmp_path / "lanes")}), timeout=60)
    assert run.returncode == 0 and run.stdout == "nested\n", run.stderr


WAITS = '''
import time

def test_waited_then_ran(request):
    request.node.user_properties.append(("lane_wait_s", 0.6))  # as the lanes' fixture records
    time.sleep(0.8)

def test_ran(request):
    time.sleep(0.3)
'''


def test_the_slowest_tests_leave_out_what_each_waited_for_its_turn(tmp_path):
    from tests import timing

    (tmp_path / "test_waits.py").write_text(WAITS)
    reports = tmp_path / "reports"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                          f"--junitxml={reports}/cluster-own.xml", str(tmp_path / "test_waits.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]
    found = {name.rpartition("::")[2]: (seconds, waited) for seconds, name, waited in timing.tests(reports)}
    raw = {case.get("name"): float(case.get("time"))
           for case in ET.parse(reports / "cluster-own.xml").getroot().iter("testcase")}
    assert raw["test_waited_then_ran"] >= 0.8 and raw["test_ran"] >= 0.3
    assert found["test_waited_then_ran"] == (pytest.approx(raw["test_waited_then_ran"] - 0.6), 0.6)
    assert found["test_ran"] == (raw["test_ran"], 0)


def test_each_test_s_outcome_is_said_the_moment_it_ends_on_the_progress_descriptor(monkeypatch):
    """make holds each lane's output until the lane ends; the lane says each outcome at once
    on the descriptor make leaves on the terminal (the Makefile's 9>&1): a pipe here."""
    from _pytest.reports import TestReport

    def report(when: str, outcome: str, duration: float = 0.0) -> TestReport:
        return TestReport("tests/local/test_x.py::test_y", ("tests/local/test_x.py", 1, "test_y"), {},
                          outcome, None, when, duration=duration)

    read, write = os.pipe()
    monkeypatch.setenv(lanes.PROGRESS_FD_ENV, str(write))
    for r in (report("setup", "passed"), report("call", "passed", 12.34), report("teardown", "passed"),
              report("setup", "skipped"), report("call", "failed", 1.0), report("teardown", "failed")):
        lanes.progress("own", r)
    os.close(write)
    with os.fdopen(read) as said:
        assert said.read().splitlines() == [
            "[own] PASSED tests/local/test_x.py::test_y (12.3 s)",
            "[own] SKIPPED tests/local/test_x.py::test_y (0.0 s)",
            "[own] FAILED tests/local/test_x.py::test_y (1.0 s)",
            "[own] FAILED tests/local/test_x.py::test_y (0.0 s)"]
    monkeypatch.delenv(lanes.PROGRESS_FD_ENV)
    lanes.progress("own", report("call", "passed"))  # a lane run by hand: nothing to say it on
