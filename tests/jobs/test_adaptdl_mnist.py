"""jobs/adaptdl_mnist: flags and data (units), then real runs on the local cluster: elastic
training to the end, a replica killed mid-epoch, a bad flag, a stalled job stopped by its
own time limit, and a job stopped mid-way by `make submit`'s TIMEOUT, each leaving no
process of the job behind."""

import csv
import importlib.util
import json
import re
import socket
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO, adaptdl_replica_dirs, kept_summary, make, processes_of, report
from tests.harness.faults import finish, kill, start_job, the_one_running

JOB_DIR = REPO / "jobs" / "adaptdl_mnist"


def job_module(name: str):
    """jobs/adaptdl_mnist/<name>.py under its own name (vit_synthetic has a main.py too)."""
    spec = importlib.util.spec_from_file_location(f"adaptdl_mnist_{name}", JOB_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


flags = job_module("flags")
data = job_module("data")
ports = job_module("ports")
summary_of = job_module("summary")


def test_synthetic_mnist_shapes_reproducible_and_balanced():
    train = data.synthetic_mnist(500, seed=1)
    images, labels = train.tensors
    assert images.shape == (500, 1, 28, 28) and images.dtype == torch.float32
    assert labels.dtype == torch.int64 and set(labels.tolist()) == set(range(10))
    assert torch.equal(images, data.synthetic_mnist(500, seed=1).tensors[0])
    assert not torch.equal(images, data.synthetic_mnist(500, seed=2).tensors[0])


def test_synthetic_mnist_is_learnable_by_its_class_patterns():
    # the nearest class mean (from the training set) classifies the test set far above chance
    train_x, train_y = data.synthetic_mnist(2000, seed=1).tensors
    test_x, test_y = data.synthetic_mnist(500, seed=2).tensors
    means = torch.stack([train_x[train_y == c].mean(0) for c in range(10)]).flatten(1)
    predicted = torch.cdist(test_x.flatten(1), means).argmin(1)
    assert (predicted == test_y).float().mean() > 0.5


def test_the_reducers_port_lies_above_the_ephemeral_range_and_is_free(tmp_path):
    """A port the OS may hand to any connection held a replica's reducer ("Could not
    connect to root") for a whole run: each job's span lies above ip_local_port_range."""
    span = tmp_path / "ip_local_port_range"
    span.write_text("32768\t60999\n")  # Linux's default
    offsets = ports.candidates(ports.ephemeral_high(span))
    assert offsets[0] == 14000 and offsets[-1] == 18400 and len(offsets) == 45  # 61000 .. 65499
    assert all(o % 100 == 0 for o in offsets)
    # every candidate's first port held by another program but one: that one is picked
    held = []
    try:
        for o in offsets[1:]:
            s = socket.socket()
            try:
                s.bind(("", ports.BASE + o))
            except OSError:  # held already: by another program, or an earlier job's
                s.close()    # connection in TIME_WAIT (failed right after the AdaptDL bench)
                continue
            held.append(s)
        assert ports.pick_offset(span) == offsets[0]
    finally:
        for s in held:
            s.close()
    # a range that leaves no room above it: upstream's span, any of it
    span.write_text("1024 65535")
    assert ports.candidates(ports.ephemeral_high(span)) == list(range(0, 10000, 100))
    # this machine's own range
    assert ports.pick_offset() in ports.candidates(ports.ephemeral_high())
    # the flag's bound is the last span's offset (flags.py restates it: loaded by path)
    assert flags.MAX_PORT_OFFSET == ports.MAX_OFFSET == 18435 and offsets[-1] <= ports.MAX_OFFSET


def test_defaults_are_valid():
    args = flags.parse([])
    assert (args.max_replicas, args.epochs, args.data) == (2, 2, "synthetic")


@pytest.mark.parametrize("argv,message", [
    (["--epochs", "0"], "--epochs must be at least 1"),
    (["-m", "0"], "--max-replicas must be at least 1"),
    (["--batch-size", "500"], "--batch-size 500 must lie within the per-replica bounds [32, 128]"),
    (["--local-bsz-min", "64", "--local-bsz-max", "32"], "--local-bsz-min 64 exceeds --local-bsz-max 32"),
    (["--max-batch-size", "16", "--batch-size", "32"], "--max-batch-size 16 is below --batch-size 32"),
    (["--timeout", "0"], "--timeout must be positive"),
    (["--port-offset", "20000"], "--port-offset must be -1 (a free span, per job) or 0 to 18435"),
    (["--port-offset", "-2"], "--port-offset must be -1"),
    (["--data", "cifar"], "invalid choice: 'cifar'"),
    (["--trainer", "horovod"], "invalid choice: 'horovod'"),
    (["--target-accuracy", "1.5"], "--target-accuracy must be from 0 to 1 (got 1.5)"),
    (["--lr", "nan"], "--lr must be a finite number (got nan)"),
    (["--cpus", "inf"], "--cpus must be a finite number (got inf)"),
])
def test_bad_flags_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        flags.parse(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_summary_times_the_target_and_counts_replica_seconds():
    args = flags.parse(["--target-accuracy", "0.8"])
    epochs = [{"epoch": 0, "replicas": 1, "global_batch_size": 64, "train_loss": 1.0,
               "test_accuracy": 0.7, "end_s": 40.0},
              {"epoch": 1, "replicas": 2, "global_batch_size": 128, "train_loss": 0.5,
               "test_accuracy": 0.85, "end_s": 70.0}]
    generations = [{"generation": 0, "replicas": 1, "start_s": 5.0},
                   {"generation": 1, "replicas": 2, "start_s": 25.0}]  # a rescale mid-epoch 0
    s = summary_of.summarize(args, epochs, generations, trainer="adaptdl", restarts=1)
    assert s["time_to_target_s"] == 70.0 and s["replica_seconds"] == 1 * 20 + 2 * 45
    assert s["replicas_over_time"] == [[5.0, 1], [25.0, 2]]
    assert s["end_s_per_epoch"] == [40.0, 70.0] and s["test_accuracy_per_epoch"] == [0.7, 0.85]
    assert s["trainer"] == "adaptdl" and s["target_accuracy"] == 0.8
    unreached = summary_of.summarize(flags.parse(["--target-accuracy", "0.9"]), epochs,
                                     generations, trainer="fixed", restarts=0)
    assert unreached["time_to_target_s"] is None
    first = summary_of.summarize(args, epochs[:1], generations[:1], trainer="fixed", restarts=0)
    assert first["time_to_target_s"] is None and first["replica_seconds"] == 35.0
    assert not summary_of.reached(epochs[1], 0.0)  # 0: no target, train every epoch


@pytest.fixture
def cluster(shared_local_cluster):
    """The session's local cluster: these tests submit jobs and read the cluster's
    processes, and each leaves nothing of its job behind (checked)."""
    return shared_local_cluster


def job_processes(state: dict) -> list[str]:
    """Processes of the cluster that belong to an AdaptDL job (Ray names its workers
    `ray::<task or actor>`; the driver runs main.py)."""
    names = ("run_adaptdl", "Controller", "SummaryBox", "listen_for_spot_termination")
    found = []
    for proc in processes_of(state):
        try:
            args = proc.cmdline()
        except Exception:  # exited meanwhile
            continue
        cmdline = " ".join(args)
        if any(f"ray::{name}" in cmdline for name in names) or args[1:2] == ["main.py"]:
            found.append(cmdline[:120])
    return found


def no_job_processes_within(state: dict, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := job_processes(state)) and time.monotonic() < deadline:
        time.sleep(1)
    return left


@pytest.mark.slow
def test_elastic_run_scales_to_two_replicas_and_learns(cluster, tmp_path):
    env, state = cluster
    results = tmp_path / "summary.json"
    dirs_before = adaptdl_replica_dirs()
    # One 1-CPU replica trains ~600 images/s. Its first scheduling hint comes after
    # --hint-interval s of training (upstream's fixed 30 s made this run ~160 s of 2 x
    # 40000 samples), and the controller rescales some 15-25 s in (it waits as long as the
    # first generation has run), restoring the second generation from its checkpoint.
    # 2 x 16000 samples take ~55 s on one replica. The rescale may fall inside epoch 0
    # (which then goes on with 2 replicas from where it was) or in epoch 1, so the checks
    # below hold either way.
    run = make("submit", "CLUSTER=local", "JOB=adaptdl_mnist",
               f"ARGS=-m 2 --epochs 2 --train-samples 16000 --hint-interval 5 --results {results}",
               env=env, timeout=900)
    assert run.returncode == 0, run.stdout[-6000:]
    summary = json.loads(results.read_text())
    assert kept_summary(run.stdout) == summary and "RESULT " not in run.stdout
    assert summary["epochs"] == 2 and len(summary["history"]) == 2
    assert summary["final_test_accuracy"] > 0.5  # chance is 0.1
    # Each generation's replica 0 says how many replicas it has. A generation may also end
    # before it says so (a replica failing at start: AdaptDL restarts it, once in CI), so
    # the checks are on the order: one replica first, two from a later generation on.
    generations = [(int(g), int(r)) for g, r in
                   re.findall(r"generation (\d+): (\d+) replica\(s\)", run.stdout)]
    assert generations, run.stdout[-6000:]
    assert generations[0][1] == 1, generations  # AdaptDL starts with one replica
    assert [g for g, _ in generations] == sorted({g for g, _ in generations}), generations
    assert any(r == 2 for g, r in generations[1:]), generations  # rescaled, from the checkpoint
    assert summary["max_replicas_used"] == 2 and summary["restarts"] >= 1
    assert all(e["global_batch_size"] for e in summary["history"])
    assert summary["history"][-1]["replicas"] == 2 and "epoch 1: replicas=2" in run.stdout
    assert no_job_processes_within(state, 30) == []
    assert adaptdl_replica_dirs() <= dirs_before  # each generation's replicas' dirs are removed


@pytest.mark.slow
def test_a_killed_adaptdl_replica_resumes_from_its_epoch_checkpoint(cluster, tmp_path, capsys):
    """A fault the cluster survives (from local/test_chaos.py): the replica's process killed."""
    env, state = cluster
    results = tmp_path / "summary.json"
    epochs = 3
    dirs_before = adaptdl_replica_dirs()
    proc, output = start_job(env, "adaptdl_mnist", f"-m 1 --epochs {epochs} --train-samples 6000 "
                             f"--results {results}", until="checkpoint saved at the start of epoch 2")
    time.sleep(3)  # some of epoch 2 trained: the work the kill loses
    killed = kill(the_one_running(state, "run_adaptdl", output))
    text, summary, finished = finish(proc, output, results, since=killed)
    assert "replica failure 1 of 2 allowed" in text
    assert "generation 1: 1 replica(s), 2 epoch(s) done before" in text  # from the checkpoint
    # each epoch trained to its end once: 0 and 1 by the first generation, 2 by the second
    assert [(e["epoch"], e["restarts"]) for e in summary["history"]] == [(0, 0), (1, 0), (2, 1)]
    assert summary["replicas_per_epoch"] == [1] * epochs  # -m 1 held, on the restart too
    assert summary["restarts"] == 1 and summary["final_test_accuracy"] > 0.5
    assert adaptdl_replica_dirs() <= dirs_before  # the launcher removed its replicas' dirs
    report(capsys, f"AdaptDL replica killed 3 s into epoch 2 of {epochs}: resumed at the start "
           f"of epoch 2, epochs 0-1 kept; the job ended {finished:.0f} s after the kill")


def test_bad_flag_fails_fast_with_its_message(cluster):
    env, _ = cluster
    started = time.monotonic()
    run = make("submit", "CLUSTER=local", "JOB=adaptdl_mnist", "ARGS=--epochs 0", env=env, timeout=300)
    assert run.returncode != 0
    assert "--epochs must be at least 1 (got 0)" in run.stdout
    assert time.monotonic() - started < 120


def test_a_job_that_cannot_place_a_replica_stops_at_its_time_limit(cluster):
    env, state = cluster
    # 4 CPUs a replica fits no worker: upstream's controller would wait forever.
    run = make("submit", "CLUSTER=local", "JOB=adaptdl_mnist", "ARGS=--cpus 4 --timeout 15",
               env=env, timeout=300)
    assert run.returncode != 0
    assert "no node besides the controller's has room for a replica" in run.stdout
    assert "did not finish within --timeout 15 s" in run.stdout
    assert no_job_processes_within(state, 30) == []


def test_a_job_stopped_mid_way_leaves_nothing_behind(cluster):
    env, state = cluster
    # 75 s: room for a slow start on a loaded machine (a replica that retried "Could not
    # connect to root" for a whole 35 s, then 75 s limit was held off its reducer port by
    # another program's connection: ports.py now picks ports no connection takes); 60000
    # samples take minutes, so the job is still mid-way when stopped
    dirs_before = adaptdl_replica_dirs()
    run = make("submit", "CLUSTER=local", "JOB=adaptdl_mnist", "TIMEOUT=75",
               "ARGS=--train-samples 60000", env=env, timeout=300)
    assert run.returncode != 0
    assert "ran past its 75 s limit" in run.stdout + run.stderr
    assert "generation 0: 1 replica(s)" in run.stdout  # it was training when stopped
    assert no_job_processes_within(state, 30) == []
    # in the 3 s between `ray job stop`'s SIGTERM and its SIGKILL, the launcher removed its
    # replicas' dirs (left behind by every stopped run until 2026-11-28)
    assert adaptdl_replica_dirs() <= dirs_before


@pytest.mark.slow
def test_bench_compares_adaptdl_with_fixed_ray_train_on_the_running_cluster(cluster):
    env, state = cluster
    run = make("bench", "CLUSTER=local", "JOB=adaptdl_mnist",
               "ARGS=--train-samples 512 --epochs 2 --target-accuracy 0.05", env=env, timeout=900)
    assert run.returncode == 0, run.stdout[-6000:]
    (saved,) = re.findall(r"^saved in (\S+)$", run.stdout, re.M)
    saved = Path(saved)
    meta = json.loads((saved / "rows.json").read_text())
    assert meta["cluster"] == "local as hetero" and meta["target_accuracy"] == 0.05
    rows = meta["rows"]
    assert [r["trainer"] for r in rows] == ["fixed", "adaptdl"]
    fixed, adaptdl = rows
    assert fixed["replicas_per_epoch"] == [2] * fixed["epochs"]  # -m 2, from the start
    assert fixed["global_batch_size_per_epoch"] == [64] * fixed["epochs"]
    assert adaptdl["replicas_over_time"][0][1] == 1  # AdaptDL starts with one
    assert fixed["replicas_over_time"] == [[fixed["replicas_over_time"][0][0], 2]]
    for r in rows:
        assert r["epochs"] == len(r["end_s_per_epoch"]) == len(r["test_accuracy_per_epoch"]) >= 1
        first = next(i for i, a in enumerate(r["test_accuracy_per_epoch"]) if a >= 0.05)
        assert first == r["epochs"] - 1  # the job stops at the target
        assert r["time_to_target_s"] == r["end_s_per_epoch"][first] > 0
        assert r["usd_to_target"] == pytest.approx(meta["usd_per_hour"] * r["time_to_target_s"] / 3600)
        assert r["replica_hours"] > 0 and r["wall_s"] > 0
    assert fixed["change"] is None or fixed["change"] == pytest.approx(0)
    assert adaptdl["change"] == pytest.approx(1 - adaptdl["usd_to_target"] / fixed["usd_to_target"])
    with open(saved / "rows.csv") as f:
        assert [r["trainer"] for r in csv.DictReader(f)] == ["fixed", "adaptdl"]
    with open(saved / "epochs.csv") as f:
        epochs = list(csv.DictReader(f))
    assert len(epochs) == fixed["epochs"] + adaptdl["epochs"]
    assert (saved / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = run.stdout[run.stdout.index("AdaptDL vs fixed Ray Train"):]
    assert re.search(r"^  fixed +\d+ ", table, re.M) and re.search(r"^  adaptdl +\d+ ", table, re.M)
    assert "tearing down" not in run.stdout  # the running cluster is not the bench's to stop
    assert make("status", "CLUSTER=local", env=env).returncode == 0
