"""A stalled job is stopped whatever its code (jobs/raykit/stall.py, started for every job
by the kit's entrypoint, jobs/raykit/entry.py): the judgement on the step log's progress
and, for a job that records no step, on its GPUs' idleness; what the kit passes the job,
bad values refused; and on the real local cluster, a job whose data source hangs mid-loop
is stopped within its limit and `make submit` says it stalled, with autopilot.steering()
and without, and a slow but steady job is not. The GPU rule on a cluster with GPUs (the
stand-in NVML) is in tests/local/test_gpus.py."""

import sys
import uuid

import pytest
import yaml

from conftest import REPO, USER_JOBS, kept_summary, load_example, make

sys.path.insert(0, str(REPO / "jobs"))  # as a job imports it
from raykit import stall  # noqa: E402
from raykit.steps import StepLog  # noqa: E402
from scripts.build import build, build_text  # noqa: E402
from scripts.core.errors import KitError  # noqa: E402
from scripts.job_env import job_env  # noqa: E402


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


def test_held_gpus_idle_for_the_limit_are_a_stall_and_busy_or_unheld_ones_are_not():
    idle = {"10.0.0.5": [(0, True), (1, True)], "10.0.0.6": [(0, True)]}
    since, message = stall.gpus_idle(idle, None, now=100.0, limit_s=60)
    assert since == 100.0 and message is None  # idle from now on
    since, message = stall.gpus_idle(idle, since, now=159.0, limit_s=60)
    assert message is None
    since, message = stall.gpus_idle(idle, since, now=160.0, limit_s=60)
    assert "every GPU it held on 10.0.0.5, 10.0.0.6 was idle for 1.0 min" in message
    # one busy GPU anywhere, or none held (the job installing or starting): no clock
    assert stall.gpus_idle(idle | {"10.0.0.6": [(40, True)]}, 100.0, now=500.0, limit_s=60) == (None, None)
    assert stall.gpus_idle({"10.0.0.5": [(0, False)]}, 100.0, now=500.0, limit_s=60) == (None, None)
    # a GPU nobody holds does not count against the others: the held ones decide
    assert stall.gpus_idle({"a": [(0, True), (0, False)]}, 100.0, now=500.0, limit_s=60)[1] is not None
    assert stall.gpus_idle({}, None, now=500.0, limit_s=60) == (None, None)


def test_the_watch_judges_gpus_only_for_a_job_that_records_no_step():
    """With steps in the log the trainers' steps decide; with none, the GPU nodes' samples."""
    import threading

    class Log:  # a stand-in for the StepLog actor's handle: progress.remote() gives a value
        def __init__(self, progress):
            self.progress = type("Remote", (), {"remote": staticmethod(lambda: progress)})

    exits, samples = [], []

    def sample(nodes):
        samples.append(nodes)
        return {ip: [(0, True)] for ip in nodes}

    import ray  # ray.get of a plain value returns it: no cluster needed
    original = ray.get
    ray.get = lambda value, timeout=None: value
    try:
        watch = stall.Watch(0.01, Log((False, None, 0)), exit=exits.append, sample=sample)
        watch.gpu_nodes = {"10.0.0.5": "node-a"}
        assert watch.check() is False and watch.idle_since is not None  # idle from now on
        threading.Event().wait(0.02)
        assert watch.check() is True and exits == [stall.STALLED_EXIT]
        stepping = stall.Watch(60, Log((True, 10**12, 5)), exit=exits.append, sample=sample)
        stepping.gpu_nodes = {"10.0.0.5": "node-a"}
        before = len(samples)
        assert stepping.check() is False and len(samples) == before  # the steps decide: no sample
    finally:
        ray.get = original


@pytest.mark.parametrize("text,limit", [("", None), ("0", None), ("6", 6.0), ("1800", 1800.0)])
def test_the_kits_limit_reads_back(text, limit):
    assert stall.limit_from_env(text) == limit


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "6 s", "1e99"])
def test_a_limit_that_is_not_the_kits_stops_the_job_with_one_line(text):
    with pytest.raises(SystemExit) as stopped:
        stall.limit_from_env(text)
    assert str(stopped.value).startswith("error: RAYKIT_STALL_S")


def test_the_kit_passes_the_values_files_stall_minutes_in_seconds():
    assert job_env(build("local"))[stall.STALL_ENV] == "1800"  # the example's 30 minutes
    values = load_example("local") | {"stall_minutes": 0.1}
    assert job_env(build_text("local", yaml.safe_dump(values).encode()))[stall.STALL_ENV] == "6"
    off = load_example("local") | {"stall_minutes": 0}
    assert stall.STALL_ENV not in job_env(build_text("local", yaml.safe_dump(off).encode()))


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


UNSTEERED = '''import os, sys, time
import numpy as np, ray, torch
from raykit import measure

os.environ["RAYKIT_STALL_S"] = "4"  # the kit passes the values file's; a test's own is short
ray.init()
STEP_S = float(sys.argv[1])  # a step this long; after HANG_AT steps, a hang

def batches():
    for i in range(int(sys.argv[2])):
        time.sleep(STEP_S)
        yield {"x": np.zeros(2)}
    time.sleep(600)

steps = measure.TrainProfile(device=torch.device("cpu"))  # the template's API, no steering()
for batch in steps.batches(batches()):
    steps.step_done(batch)
    if len(steps.steps_s) == int(sys.argv[3]):
        break
print("RESULT " + '{"status": "done", "steps": %d}' % len(steps.steps_s))
'''


def run_job(env: dict, text: str, args: str) -> "subprocess.CompletedProcess":
    job = USER_JOBS / f"unsteered_{uuid.uuid4().hex[:6]}"
    job.mkdir()
    (job / "main.py").write_text(text)
    try:
        return make("submit", "CLUSTER=local", f"JOB={job.name}", f"ARGS={args}", env=env, timeout=240)
    finally:
        for f in job.iterdir():
            f.unlink()
        job.rmdir()


@pytest.mark.alone  # a step every 3 s against a 4 s limit
def test_a_job_without_steering_whose_loop_hangs_is_stopped_and_a_slow_steady_one_is_not(shared_local_cluster):
    import time as clock

    env, _ = shared_local_cluster
    started = clock.monotonic()
    run = run_job(env, UNSTEERED, "0.2 3 100")  # three steps, then the data source hangs
    took = clock.monotonic() - started
    assert run.returncode != 0 and f"Error {stall.STALLED_EXIT}" in run.stderr, run.stdout[-3000:] + run.stderr
    assert "error: stalled: the trainers made no step for" in run.stdout and "since step 3" in run.stdout
    assert kept_summary(run.stdout) | {"reason": None} == {
        "status": "stalled", "steps": 3, "stall_minutes": pytest.approx(4 / 60), "reason": None}
    # within the limit plus one poll (0.5 s here), past the job's start-up
    assert took < 120, took
    # a slow but steady job: a step every 3 s against a 4 s limit, six of them
    steady = run_job(env, UNSTEERED, "3 6 6")
    assert steady.returncode == 0, steady.stdout[-3000:] + steady.stderr
    assert kept_summary(steady.stdout) == {"status": "done", "steps": 6}
    assert "stalled" not in steady.stdout


NO_STEPS = '''import os, time
import ray

os.environ["RAYKIT_STALL_S"] = "4"
ray.init()
time.sleep(8)  # no step recorded, twice the limit
print('RESULT {"status": "done"}')
'''


def test_on_a_cluster_without_gpus_a_job_that_records_no_steps_is_told_it_is_not_watched(shared_local_cluster):
    env, _ = shared_local_cluster
    run = run_job(env, NO_STEPS, "")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    assert ("stall watch: this cluster has no GPU node, so a job that records no steps (raykit's "
            "measure) is not watched; one that does is") in run.stdout.replace("\n", " ")
    assert kept_summary(run.stdout) == {"status": "done"}


SHUTS_DOWN_MID_WATCH = """
import time
import ray
ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024 * 1024)
time.sleep(1.5)  # the watch is up, looking every 0.5 s
ray.shutdown()
time.sleep(1.0)  # a look of the watch's would fall here
print("job done")
"""


EXITS_AT_ONCE = """
import ray
ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024 * 1024)
print("job done")
"""


@pytest.mark.parametrize("text", [SHUTS_DOWN_MID_WATCH, EXITS_AT_ONCE], ids=["shutdown", "exit"])
def test_a_job_that_disconnects_while_watched_exits_as_it_would_alone(tmp_path, text):
    """A thread that calls Ray after ray.shutdown() makes Ray end the process with exit code
    1: the entrypoint's watch failed a job that had succeeded (a quick one, on KubeRay's
    test head). The watch now stops before the driver disconnects, by the job's own
    shutdown or at the interpreter's exit (Ray's exit hook), whenever they come."""
    import os
    import subprocess

    (tmp_path / "main.py").write_text(text)
    env = dict(os.environ, PYTHONPATH=str(REPO / "jobs"), RAYKIT_STALL_S="5")
    env.pop("RAY_ADDRESS", None)
    run = subprocess.run([sys.executable, "-m", "raykit.entry", "main.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "job done" in run.stdout
    assert "already been shutdown" not in run.stderr
