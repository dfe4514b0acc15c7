"""Faults on the real local cluster: what the user sees, and that nothing is left behind.
Each test prints what the fault cost (steps lost, wall time added)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import REPO, local_cluster_up, make, processes_of, report
from tests.harness.faults import finish, kill, start_job
from tests.harness.imds_standin import Imds
from scripts.core.ray_cli import ray_env

HEAD_IP = "127.0.0.2"
# ViT job flags under which the two CPU workers cannot keep up with the trainer: until the
# last step, preprocessing is under way on both (about 35 images/s per CPU, 100 wanted)
PREPROCESSING_BOUND = "--image-size 128 --blur-count 50 --log-every 5"
LEASE_REUSE_S = 1.0  # Ray's worker lease timeout (0.5 s), with as much again to spare
# Each test runs a real cluster for a minute or more: `pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local cluster for every fault: those it survives (a worker, a spot notice),
    then the head. (An AdaptDL replica's kill runs on the session's shared cluster, in
    jobs/test_adaptdl_mnist.py: every AdaptDL run in one lane, since adaptdl-ray's
    replicas take fixed ports and /tmp dirs on the host.)"""
    with local_cluster_up(tmp_path_factory.mktemp("build")) as (env, state):
        yield env, state


def raylet_trees(state: dict) -> dict[str, list[psutil.Process]]:
    """Each simulated node's raylet and everything under it (its workers, their tasks),
    by the node's address."""
    trees = {}
    for proc in processes_of(state):
        try:
            args = " ".join(proc.cmdline())
            if "raylet" in proc.name() and "--node_ip_address=" in args:
                ip = args.split("--node_ip_address=", 1)[1].split()[0]
                trees[ip] = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return trees


def node_processes(state: dict, ip: str) -> list[psutil.Process]:
    return raylet_trees(state).get(ip, [])


def head_node_processes(state: dict) -> list[psutil.Process]:
    """Every process of the head node: the cluster's processes less each worker node's."""
    workers = {proc.pid for ip, tree in raylet_trees(state).items() if ip != HEAD_IP for proc in tree}
    return [p for p in processes_of(state) if p.pid not in workers]


def worker_raylets(state: dict) -> int:
    """Worker nodes whose raylet runs: polled in this process (a `make status` per poll
    costs seconds); the autoscaler's own report (alive_workers) confirms at the end."""
    return sum(1 for ip in raylet_trees(state) if ip != HEAD_IP)


def alive_workers(env: dict) -> int:
    """Active cpu_worker nodes in the autoscaler's report (`make status`)."""
    status = make("status", "CLUSTER=local", env=env, timeout=120).stdout
    if "Active:" not in status:
        return 0
    active = status.split("Active:", 1)[1].split("Pending:", 1)[0]
    counts = [line.split() for line in active.splitlines() if line.strip().endswith(" cpu_worker")]
    return int(counts[0][0]) if counts else 0


def test_a_cpu_worker_killed_mid_job_costs_no_step_and_is_replaced(cluster, tmp_path, capsys):
    env, state = cluster
    results = tmp_path / "summary.json"
    # preprocessing-bound (PREPROCESSING_BOUND), so the node has work under way when it dies;
    # 80 steps, not 40: on a fresh clone's run (2026-11-29) the node held no task and no
    # unread output at step 10 of 40, nothing ran again, and the test failed on its schedule
    steps, batch = 80, 8
    proc, output = start_job(env, "vit_synthetic", f"--steps {steps} --batch-size {batch} "
                             f"{PREPROCESSING_BOUND} --results {results}", until=f"step 10/{steps}:")
    victim = node_processes(state, "127.0.0.4")
    assert victim, "".join(output)[-3000:]
    killed = kill(victim)
    text, summary, finished = finish(proc, output, results, since=killed)
    assert summary["steps"] == steps and sum(summary["preprocess_nodes"].values()) == steps * batch
    assert summary["lost_nodes"] == ["127.0.0.4"] and "lost nodes       127.0.0.4" in text
    # the work the node took with it (tasks under way, outputs in its object store) ran again
    retried = summary["retried_preprocessing_tasks"]
    assert retried >= 1 and f"retried work     {retried} preprocessing task(s)" in text
    # the autoscaler brings the cluster back to min_workers (2 CPU workers)
    deadline = time.monotonic() + 240
    while worker_raylets(state) < 2 and time.monotonic() < deadline:
        time.sleep(1)
    while alive_workers(env) < 2 and time.monotonic() < deadline:  # registered, too
        time.sleep(5)
    replaced = time.monotonic() - killed
    report(capsys, f"CPU worker killed at step 10 of {steps}: no step lost, {retried} "
           f"preprocessing tasks of {batch} images re-run, the job ended {finished:.0f} s "
           f"later, the node was replaced {replaced:.0f} s after the kill")
    assert alive_workers(env) == 2


def preprocessing_tasks(state: dict, submission_id: str) -> list[tuple[str, float]]:
    """(node ID, start time in epoch s) of each preprocessing task attempt the job ran, from
    Ray's state API (asked from a process with the cluster's token)."""
    code = f"""
import json
from ray.util.state import list_jobs, list_tasks
url = {state["dashboard_url"]!r}
job = next(j.job_id for j in list_jobs(address=url) if j.submission_id == {submission_id!r})
tasks = list_tasks(address=url, filters=[("job_id", "=", job)], limit=10000, detail=True)
print(json.dumps([(t.node_id, t.start_time_ms / 1000) for t in tasks
                  if "Preprocess" in t.name and t.start_time_ms]))
"""
    run = subprocess.run([sys.executable, "-c", code], env=ray_env(state["auth_token"]),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return [tuple(row) for row in json.loads(run.stdout.strip().splitlines()[-1])]


@pytest.mark.alone  # no task on the drained node past its lease (0.5 s, checked with 1 s)
def test_a_spot_notice_drains_a_cpu_worker_and_the_job_finishes(cluster, tmp_path, capsys):
    env, state = cluster
    results = tmp_path / "summary.json"
    # the notice comes early: most preprocessing is still to do (at 80 steps every task had
    # started 13 s in, before the drain, on a fresh clone's run twice: no task was left to
    # land elsewhere)
    steps, batch = 160, 8
    victim = sorted(ip for ip in raylet_trees(state) if ip != HEAD_IP)[0]
    with Imds(local_ipv4=victim) as imds:  # the victim's metadata service, on loopback
        watcher = subprocess.Popen(
            [sys.executable, "scripts/node/spot_watch.py", "--gcs", state["gcs_address"],
             "--imds", imds.url, "--poll-s", "1"],
            cwd=REPO, env=ray_env(state["auth_token"]), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:  # work is still being handed out after the notice
            # strike at the first step: uint8 images fit Ray Data's budget whole, and by step
            # 5 a loaded machine had started every preprocessing task
            proc, output = start_job(env, "vit_synthetic", f"--steps {steps} --batch-size {batch} "
                                     f"{PREPROCESSING_BOUND} --log-every 1 --results {results}",
                                     until=f"step 1/{steps}:")
            imds.schedule("terminate", in_s=120)
            noticed, noticed_mono = time.time(), time.monotonic()
            watched, _ = watcher.communicate(timeout=60)
        finally:
            if watcher.poll() is None:
                watcher.kill()
    text, summary, finished = finish(proc, output, results, since=noticed_mono)
    drained = re.search(rf"drained node {re.escape(victim)} \((\w+)\) at ([0-9.]+):", watched)
    assert drained, watched
    drained_at = float(drained.group(2))
    assert summary["steps"] == steps and sum(summary["preprocess_nodes"].values()) == steps * batch
    assert summary["preempted_nodes"] == [victim] and summary["lost_nodes"] == []
    assert f"preempted        {victim} (drained on a spot notice" in text
    # The drained node's raylet grants no new worker lease; a worker leased there before
    # may take queued tasks until its lease runs out (Ray's worker_lease_timeout_milliseconds,
    # 500 ms). After that no preprocessing task started there; the rest ran elsewhere.
    submission = re.search(r"(vit_synthetic-[0-9a-f]+)", text).group(1)
    tasks = preprocessing_tasks(state, submission)
    on_victim = [start for node, start in tasks if node == drained.group(1)]
    after = [start for node, start in tasks if start > drained_at + LEASE_REUSE_S]
    assert on_victim and after, (sorted(tasks, key=lambda task: task[1]), drained_at)
    assert max(on_victim) < drained_at + LEASE_REUSE_S, (sorted(on_victim), drained_at)
    deadline = time.monotonic() + 240  # the autoscaler replaces the node that left
    while worker_raylets(state) < 2 and time.monotonic() < deadline:
        time.sleep(1)
    while alive_workers(env) < 2 and time.monotonic() < deadline:  # registered, too
        time.sleep(5)
    assert alive_workers(env) == 2
    report(capsys, f"spot notice on {victim} at step 5 of {steps}: drained "
           f"{drained_at - noticed:.1f} s after the notice, no step lost, "
           f"{len(after)} preprocessing tasks after it, all on the other worker; the job "
           f"ended {finished:.0f} s after the notice")


def test_a_spot_notice_for_no_node_of_the_cluster_is_one_error_line(cluster):
    _, state = cluster
    with Imds(local_ipv4="127.0.0.250") as imds:
        imds.schedule()
        run = subprocess.run([sys.executable, "scripts/node/spot_watch.py", "--gcs", state["gcs_address"],
                              "--imds", imds.url, "--poll-s", "0.1"], cwd=REPO, timeout=120,
                             env=ray_env(state["auth_token"]), capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == "spot watch: error: no live Ray node at 127.0.0.250"
    assert "Traceback" not in run.stderr


def test_a_killed_head_fails_make_submit_and_down_leaves_nothing(cluster, capsys):
    """Last in this module: the cluster does not survive it; the fixture's `make down`
    then checks that nothing of it is left."""
    env, state = cluster
    # the job runs: its summary is printed, then it sleeps
    proc, output = start_job(env, "smoke", "--tasks 1 --sleep 300", until="smoke: ")
    head = head_node_processes(state)
    assert any("gcs_server" in " ".join(p.cmdline()) for p in head)
    killed = kill(head)
    try:
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    noticed = time.monotonic() - killed
    text = "".join(output) + rest
    report(capsys, f"head killed: `make submit` exited {proc.returncode} after {noticed:.0f} s; "
          "the job's remaining 300 s of work lost")
    assert proc.returncode != 0
    assert "error: lost the cluster while following job smoke-" in text, text[-2000:]
    assert "Traceback" not in text
    assert noticed < 30
    # the record stands, the cluster is gone: every day-2 command says so in the kit's line
    for target in ("status", "jobs", "logs", "dashboard", "monitor", "attach"):
        run = make(target, "CLUSTER=local", env=env, timeout=120)
        assert run.returncode == 2, (target, run.stdout[-500:], run.stderr[-500:])
        assert [line for line in run.stderr.splitlines() if not re.match(r"make(\[\d+\])?: ", line)] == [
            "error: cluster 'local' is not running (its record is stale); `make down CLUSTER=local` "
            "then `make up CLUSTER=local`"], (target, run.stderr[-1000:])
