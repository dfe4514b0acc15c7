"""Faults on the real local cluster: what the user sees, and that nothing is left behind.
Each test prints what the fault cost (steps lost, wall time added)."""

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from conftest import REPO, local_cluster_up, make, processes_of, report

HEAD_IP = "127.0.0.2"
# Each test runs a real cluster for a minute or more: `pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local cluster for every fault: those it survives (a worker, the trainer), then
    the head."""
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


def alive_workers(env: dict) -> int:
    """Active cpu_worker nodes in the autoscaler's report (`make status`)."""
    status = make("status", "CLUSTER=local", env=env, timeout=120).stdout
    if "Active:" not in status:
        return 0
    active = status.split("Active:", 1)[1].split("Pending:", 1)[0]
    counts = [line.split() for line in active.splitlines() if line.strip().endswith(" cpu_worker")]
    return int(counts[0][0]) if counts else 0


def start_job(env: dict, job: str, args: str, until: str):
    """`make submit` in the background: the process, and its output up to the first line
    that contains `until` (the moment to strike)."""
    proc = subprocess.Popen(["make", "--no-print-directory", "submit", "CLUSTER=local",
                             f"JOB={job}", f"ARGS={args}"], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    output = []
    for line in proc.stdout:
        output.append(line)
        if until in line:
            break
    return proc, output


def kill(procs: list[psutil.Process]) -> float:
    """SIGKILL each (one may be gone already); return when, for measuring what followed."""
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    return time.monotonic()


def test_a_cpu_worker_killed_mid_job_costs_no_step_and_is_replaced(cluster, tmp_path, capsys):
    env, state = cluster
    results = tmp_path / "summary.json"
    steps, batch = 30, 8
    proc, output = start_job(env, "vit_synthetic", f"--steps {steps} --batch-size {batch} "
                             f"--image-size 64 --blur-count 20 --log-every 5 --results {results}",
                             until=f"step 5/{steps}:")
    victim = node_processes(state, "127.0.0.4")
    assert victim, "".join(output)[-3000:]
    killed = kill(victim)
    rest, _ = proc.communicate(timeout=600)
    finished = time.monotonic() - killed
    text = "".join(output) + rest
    assert proc.returncode == 0, text[-4000:]
    summary = json.loads(results.read_text())
    assert summary["steps"] == steps and sum(summary["preprocess_nodes"].values()) == steps * batch
    assert summary["lost_nodes"] == ["127.0.0.4"] and "lost nodes       127.0.0.4" in text
    # the autoscaler brings the cluster back to min_workers (2 CPU workers)
    deadline = time.monotonic() + 240
    while alive_workers(env) < 2 and time.monotonic() < deadline:
        time.sleep(5)
    replaced = time.monotonic() - killed
    report(capsys, f"CPU worker killed at step 5 of {steps}: no step lost, the job ended "
          f"{finished:.0f} s later, the node was replaced {replaced:.0f} s after the kill")
    assert alive_workers(env) == 2


def test_a_killed_training_worker_resumes_from_its_last_checkpoint(cluster, tmp_path, capsys):
    env, state = cluster
    results = tmp_path / "summary.json"
    steps, every = 30, 5
    proc, output = start_job(env, "vit_synthetic", f"--steps {steps} --batch-size 8 --image-size 64 "
                             f"--blur-count 20 --log-every 5 --checkpoint-every {every} "
                             f"--results {results}",
                             until=f"step 10/{steps}:")  # checkpoints of steps 5 and 10 are saved
    trainer = [p for p in processes_of(state) if " ".join(p.cmdline()).startswith("ray::RayTrainWorker")]
    assert len(trainer) == 1, "".join(output)[-3000:]
    killed = kill(trainer)
    rest, _ = proc.communicate(timeout=600)
    finished = time.monotonic() - killed
    text = "".join(output) + rest
    assert proc.returncode == 0, text[-4000:]
    summary = json.loads(results.read_text())
    resumed = summary["resumed_from_step"]
    assert summary["steps"] == steps and summary["restarts"] == 1
    # the last checkpoint Ray Train had registered when the worker died (the one of step
    # 10 may still have been on its way)
    assert every <= resumed <= 10 and resumed % every == 0
    assert f"restart 1: resuming from the checkpoint of step {resumed}" in text
    report(capsys, f"training worker killed after step 10 of {steps}: resumed from step {resumed}, "
          f"{10 - resumed}+ steps redone; the job ended {finished:.0f} s after the kill")


def test_a_killed_head_fails_make_submit_and_down_leaves_nothing(cluster, capsys):
    """Last in this module: the cluster does not survive it; the fixture's `make down`
    then checks that nothing of it is left."""
    env, state = cluster
    # the job runs: its summary is printed, then it sleeps
    proc, output = start_job(env, "smoke", "--tasks 1 --sleep 300", until="RESULT ")
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
