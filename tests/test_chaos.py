"""Faults on the real local cluster: what the user sees, and that nothing is left behind.
Each test prints what the fault cost (steps lost, wall time added)."""

import os
import signal
import subprocess
import time

import psutil

from conftest import REPO, local_cluster_up, processes_of

HEAD_IP = "127.0.0.2"


def head_node_processes(state: dict) -> list[psutil.Process]:
    """The head's GCS and raylet: with them gone, the head node is gone."""
    found = []
    for proc in processes_of(state):
        try:
            args = " ".join(proc.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "gcs_server" in args or ("raylet" in proc.name() and f"--node_ip_address={HEAD_IP}" in args):
            found.append(proc)
    return found


def test_a_killed_head_fails_make_submit_quickly_and_down_leaves_nothing(tmp_path):
    with local_cluster_up(tmp_path / "build") as (env, state):
        proc = subprocess.Popen(["make", "--no-print-directory", "submit", "CLUSTER=local", "JOB=smoke",
                                 "ARGS=--tasks 1 --sleep 300"], cwd=REPO, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        output = []
        for line in proc.stdout:  # the job runs: its summary is printed, then it sleeps
            output.append(line)
            if line.startswith("RESULT "):
                break
        head = head_node_processes(state)
        assert len(head) == 2, [p.cmdline()[:2] for p in head]
        killed = time.monotonic()
        for p in head:
            p.send_signal(signal.SIGKILL)
        try:
            rest, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        noticed = time.monotonic() - killed
        text = "".join(output) + rest
        print(f"head killed: `make submit` exited {proc.returncode} after {noticed:.0f} s; "
              "the job's remaining 300 s of work lost")
        assert proc.returncode != 0
        assert "error: lost the cluster while following job smoke-" in text, text[-2000:]
        assert "Traceback" not in text
        assert noticed < 45  # the heartbeat's three misses, not Ray's 60 s reconnect timeout
    # local_cluster_up's exit ran `make down` and checked that no process of it is left
