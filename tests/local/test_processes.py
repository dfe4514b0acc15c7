"""Stopping a local cluster's processes (scripts/providers/local/processes.py): every one of
them, found by its marker, gone before the stop returns, those started while the others
stopped included. A fresh clone's `make test` once failed at the stand-in head's teardown:
the stop returned while two of its processes (one started late) still ran."""

import subprocess
import sys

import psutil

from scripts.providers.local import processes
from scripts.providers.local.names import MARKER, cluster_id

# On SIGTERM it starts a successor carrying the same marker (as a raylet forks a worker
# while it stops), then exits; the successor waits to be stopped in its turn.
LATE_CHILD = """\
import os, signal, subprocess, sys, time
def successor(*_):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    os._exit(0)
signal.signal(signal.SIGTERM, successor)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_process_started_while_the_others_stop_is_stopped_too(tmp_path):
    cluster = f"stop-{tmp_path.name[-10:]}"
    marker = {MARKER: cluster_id(cluster, tmp_path)}
    first = subprocess.Popen([sys.executable, "-c", LATE_CHILD], env=marker | {"PATH": "/usr/bin:/bin"},
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert first.stdout.readline() == "ready\n"
        before = processes.cluster_processes(cluster, build=tmp_path)
        assert [p.pid for p in before] == [first.pid]
        processes.stop_processes(before)  # one look: the successor outlives it
        first.wait(timeout=10)
        late = processes.cluster_processes(cluster, build=tmp_path)
        assert late and first.pid not in [p.pid for p in late]
        stopped, alive = processes.stop_cluster(cluster, build=tmp_path)
        assert (stopped, alive) == (1, [])
        assert processes.cluster_processes(cluster, build=tmp_path) == []
    finally:
        for proc in processes.cluster_processes(cluster, build=tmp_path):
            proc.kill()


def test_what_outlives_the_limit_is_named(tmp_path, monkeypatch):
    """A process no signal ends in time (a machine too busy, an uninterruptible wait),
    played by a stop that does nothing: named by pid and name, not passed over."""
    cluster = f"stuck-{tmp_path.name[-10:]}"
    marker = {MARKER: cluster_id(cluster, tmp_path)}
    stuck = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(120)"],
                             env=marker, stdout=subprocess.PIPE, text=True)
    try:
        assert stuck.stdout.readline() == "ready\n"
        monkeypatch.setattr(processes, "stop_processes", lambda procs, grace_s=3: None)
        stopped, alive = processes.stop_cluster(cluster, build=tmp_path, limit_s=0.5)
        assert stopped == 1 and alive == [f"{stuck.pid} {psutil.Process(stuck.pid).name()}"]
    finally:
        stuck.kill()
        stuck.wait()
