"""How the fault tests strike: a job started in the background up to the line that says
when, a SIGKILL, and the job's end with what it cost (local/test_chaos.py,
local/test_train_nodes.py, jobs/test_adaptdl_mnist.py)."""

import json
import signal
import subprocess
import time

import psutil

from conftest import REPO, processes_of


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


def the_one_running(state: dict, name: str, output: list[str]) -> list[psutil.Process]:
    """The cluster's one process running Ray task or actor `name` (titled ray::<name>)."""
    found = [p for p in processes_of(state) if " ".join(p.cmdline()).startswith(f"ray::{name}")]
    assert len(found) == 1, "".join(output)[-3000:]
    return found


def finish(proc, output: list[str], results, since: float) -> tuple[str, dict, float]:
    """Wait for the job `start_job` began and check it succeeded: its whole output, its
    summary and the seconds from `since` (the fault) to its end."""
    rest, _ = proc.communicate(timeout=600)
    finished = time.monotonic() - since
    text = "".join(output) + rest
    assert proc.returncode == 0, text[-4000:]
    return text, json.loads(results.read_text()), finished
