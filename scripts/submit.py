"""Submit a job from jobs/<JOB>/ with `ray job submit`, stream its logs, return its exit code.

Locally the dashboard is on loopback; on AWS it is reached only through an SSH tunnel that
`ray dashboard <cluster yaml>` opens for the duration of the submit. A job that outlives
its time limit, or a Ctrl-C, stops the job on the cluster too.
"""

import json
import shlex
import socket
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from scripts.errors import KitError
from scripts.local_cluster import free_port, ray_cli, ray_env
from scripts.values import REPO

JOBS = REPO / "jobs"
ENTRYPOINT = "main.py"
RESULT_PREFIX = "RESULT "  # every job ends by printing its summary as `RESULT {json}`
# The working dir is uploaded to the cluster (capped at 100 MiB): never caches or data.
EXCLUDES = [".git", "__pycache__", "*.pyc", ".pytest_cache", "data", "results", "*.ckpt"]


def job_dir(job: str) -> Path:
    path = JOBS / job
    if not (path / ENTRYPOINT).is_file():
        known = sorted(p.name for p in JOBS.iterdir() if (p / ENTRYPOINT).is_file())
        raise KitError(f"no job '{job}': expected jobs/{job}/{ENTRYPOINT}; "
                       f"choose JOB= one of {', '.join(known)}")
    return path


def submit(dashboard_url: str, job: str, args: list[str], python: str,
           timeout_s: float | None = None, env_vars: dict | None = None) -> int:
    """Run jobs/<job>/main.py on the cluster; block, streaming logs; return its exit code."""
    workdir = job_dir(job)
    submission_id = f"{job}-{uuid.uuid4().hex[:8]}"
    # Every log line, in full: Ray's dedup would fold a job's periodic progress lines.
    runtime_env = {"excludes": EXCLUDES, "env_vars": {"RAY_DEDUP_LOGS": "0"} | (env_vars or {})}
    command = [
        ray_cli(), "job", "submit",
        f"--address={dashboard_url}",
        f"--submission-id={submission_id}",
        f"--working-dir={workdir}",
        f"--runtime-env-json={json.dumps(runtime_env)}",
        "--", python, ENTRYPOINT, *args,
    ]
    print(f"$ {shlex.join(command[1:])}", flush=True)
    proc = subprocess.Popen(command, env=ray_env())
    try:
        proc.wait(timeout=timeout_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as interrupt:
        stop_job(dashboard_url, submission_id)
        proc.terminate()
        proc.wait()
        if isinstance(interrupt, KeyboardInterrupt):
            raise
        raise KitError(f"job {submission_id} ran past its {timeout_s:.0f} s limit "
                       "(TIMEOUT=...) and was stopped") from None
    return job_exit_code(dashboard_url, submission_id)


def stop_job(dashboard_url: str, submission_id: str) -> None:
    subprocess.run([ray_cli(), "job", "stop", f"--address={dashboard_url}", submission_id],
                   env=ray_env(), capture_output=True, timeout=60)


def job_exit_code(dashboard_url: str, submission_id: str) -> int:
    """The job's own exit code (1 if it never got one, e.g. stopped), from its status."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    info = JobSubmissionClient(dashboard_url).get_job_info(submission_id)
    if info.status == JobStatus.SUCCEEDED:
        return 0
    print(f"job {submission_id} {info.status}: {(info.message or '').splitlines()[0]}",
          flush=True)
    return info.driver_exit_code or 1


@contextmanager
def dashboard_tunnel(cluster_yaml: Path):
    """`ray dashboard` keeps an SSH port-forward to the head's dashboard open while
    we submit; the dashboard itself listens on the head's 127.0.0.1 only."""
    port = free_port()
    tunnel = subprocess.Popen([ray_cli(), "dashboard", "--port", str(port), str(cluster_yaml)],
                              env=ray_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.monotonic() + 60
        while not port_open(port):
            if tunnel.poll() is not None:
                raise KitError(f"`ray dashboard` exited: {tunnel.stderr.read()[-2000:]}; "
                               "is the cluster up (`make up`) and your SSH key in place?")
            if time.monotonic() > deadline:
                raise KitError("the dashboard tunnel did not open within 60 s")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def result_line(output: str) -> dict:
    """The last `RESULT {...}` line in a job's output, parsed."""
    lines = [line for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        raise KitError("the job printed no RESULT line")
    return json.loads(lines[-1][len(RESULT_PREFIX):])
