"""A stalled job is stopped (jobs/raykit/stall.py): the judgement on the step log's
progress, what the kit passes the job, bad values refused; and on the real local cluster,
a job whose data source hangs mid-loop is stopped within its limit and `make submit` says
it stalled."""

import sys
import uuid

import pytest
import yaml

from conftest import REPO, USER_JOBS, kept_summary, load_example, make

sys.path.insert(0, str(REPO / "jobs"))  # as a job imports it
from raykit import stall  # noqa: E402
from raykit.autopilot import StepLog  # noqa: E402
from scripts.build import build, build_text  # noqa: E402
from scripts.core.errors import KitError  # noqa: E402
from scripts.pricing import cost  # noqa: E402


def test_a_loop_with_no_step_for_the_limit_is_stalled_and_nothing_else_is():
    log = StepLog()
    assert stall.stalled(log.progress(), now=1000.0, limit_s=60) is None  # no loop yet: start-up
    log.waiting("rank0", 100.0)  # the loop began at 100 s and waits for its first batch
    assert stall.stalled(log.progress(), now=159.0, limit_s=60) is None
    assert "since their loop began" in stall.stalled(log.progress(), now=161.0, limit_s=60)
    log.record(150.0, 50.0, 49.0, 16, "rank0")
    log.waiting("rank0", 150.0)
    log.record(160.0, 10.0, 1.0, 16, "rank0")  # step 2 ended at 160 s
    assert stall.stalled(log.progress(), now=219.0, limit_s=60) is None
    assert "no step for 1.0 min since step 2" in stall.stalled(log.progress(), now=220.0, limit_s=60)
    log.waiting("rank0", None)  # its loop ended: an evaluation, a save, the end
    assert stall.stalled(log.progress(), now=10_000.0, limit_s=60) is None


def test_any_ranks_step_is_progress_and_a_late_rank_starts_no_new_clock():
    log = StepLog()
    log.waiting("a", 100.0)
    log.record(130.0, 30.0, 1.0, 16, "a")
    log.waiting("b", 120.0)  # began before a's last step
    assert log.progress() == (True, 130.0, 1)


@pytest.mark.parametrize("text,limit", [("", None), ("0", None), ("6", 6.0), ("1800", 1800.0)])
def test_the_kits_limit_reads_back(text, limit):
    assert stall.limit_from_env(text) == limit


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "6 s", "1e99"])
def test_a_limit_that_is_not_the_kits_stops_the_job_with_one_line(text):
    with pytest.raises(SystemExit) as stopped:
        stall.limit_from_env(text)
    assert str(stopped.value).startswith("error: RAYKIT_STALL_S")


def test_the_kit_passes_the_values_files_stall_minutes_in_seconds():
    assert cost.job_env(build("local"))[stall.STALL_ENV] == "1800"  # the example's 30 minutes
    values = load_example("local") | {"stall_minutes": 0.1}
    assert cost.job_env(build_text("local", yaml.safe_dump(values).encode()))[stall.STALL_ENV] == "6"
    off = load_example("local") | {"stall_minutes": 0}
    assert stall.STALL_ENV not in cost.job_env(build_text("local", yaml.safe_dump(off).encode()))


@pytest.mark.parametrize("cluster", ["local", "hetero", "k8s_hetero"])
@pytest.mark.parametrize("bad", [-1, 10081, "30", True, None])
def test_bad_stall_minutes_are_refused_naming_the_key(cluster, bad):
    values = load_example(cluster) | {"stall_minutes": bad}
    with pytest.raises(KitError, match="stall_minutes"):
        build_text(cluster, yaml.safe_dump(values).encode())


HANGING = '''import os, time
import numpy as np, ray, torch
from raykit import autopilot, measure

os.environ["RAYKIT_STALL_S"] = "4"  # the kit passes the values file's; a test's own is short
ray.init()

def batches():  # two batches, then the data source hangs
    yield {"x": np.zeros(2)}
    yield {"x": np.zeros(2)}
    time.sleep(600)

with autopilot.steering():
    steps = measure.TrainProfile(device=torch.device("cpu"))
    for batch in steps.batches(batches()):
        steps.step_done(batch)
print("RESULT {}")  # never reached
'''


def test_a_job_whose_data_source_hangs_is_stopped_as_stalled(shared_local_cluster):
    env, _ = shared_local_cluster
    job = USER_JOBS / f"hang_{uuid.uuid4().hex[:6]}"
    job.mkdir()
    (job / "main.py").write_text(HANGING)
    try:
        run = make("submit", "CLUSTER=local", f"JOB={job.name}", env=env, timeout=240)
    finally:
        for f in job.iterdir():
            f.unlink()
        job.rmdir()
    # the job's own exit code, which make passes on as its error
    assert run.returncode != 0 and f"Error {stall.STALLED_EXIT}" in run.stderr, run.stdout[-3000:] + run.stderr
    assert "error: stalled: the trainers made no step for" in run.stdout
    assert "since step 2 (stall_minutes: 0.0666667)" in run.stdout
    assert "stalled: " in run.stdout and "make logs ID=" in run.stdout
    kept = kept_summary(run.stdout)
    assert kept["status"] == "stalled" and kept["steps"] == 2
