"""Submit jobs/<JOB>/main.py to a cluster, stream its logs, return its exit code.

The job goes through Ray's job SDK with an entrypoint built by shlex.join, so every word
of ARGS reaches the job exactly as given: Ray runs the entrypoint through a shell, and
`ray job submit -- ...` would join the words without quoting them (a `$(...)` in ARGS
would run). A job that outlives its time limit, or a Ctrl-C, stops the job on the cluster.
"""

import asyncio
import json
import shlex
import time
import uuid

from scripts.errors import KitError, short
from scripts.inputs import job_dir
from scripts.ray_cli import use_auth_in_this_process

ENTRYPOINT = "main.py"
RESULT_PREFIX = "RESULT "  # every job ends by printing its summary as `RESULT {json}`
# The working dir is uploaded to the cluster (Ray caps it at 512 MiB): never caches or data.
EXCLUDES = [".git", "__pycache__", "*.pyc", ".pytest_cache", "data", "results", "*.ckpt"]
FINAL_STATUS_WAIT_S = 30


def submit(address: str, job: str, args: list[str], python: str, auth_token: str | None,
           timeout_s: float | None = None, env_vars: dict | None = None) -> int:
    """Run jobs/<job>/main.py on the cluster; block, streaming logs; return its exit code."""
    from ray.job_submission import JobSubmissionClient

    workdir = job_dir(job)
    use_auth_in_this_process(auth_token)
    entrypoint = shlex.join([python, ENTRYPOINT, *args])
    # Every log line, in full: Ray's dedup would fold a job's periodic progress lines.
    runtime_env = {"working_dir": str(workdir), "excludes": EXCLUDES,
                   "env_vars": {"RAY_DEDUP_LOGS": "0"} | (env_vars or {})}
    try:
        client = JobSubmissionClient(address)
        submission_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env,
                                          submission_id=f"{job}-{uuid.uuid4().hex[:8]}")
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise KitError(f"could not submit to {address}: {short(str(e), 200)}") from None
    print(f"job {submission_id}: {entrypoint}", flush=True)
    try:
        asyncio.run(asyncio.wait_for(stream_logs(client, submission_id), timeout_s))
    except (TimeoutError, asyncio.TimeoutError):
        stop(client, submission_id)
        raise KitError(f"job {submission_id} ran past its {timeout_s:g} s limit "
                       "(TIMEOUT=...) and was stopped") from None
    except KeyboardInterrupt:
        stop(client, submission_id)
        raise
    except Exception as e:  # the dashboard went away mid-job: the head died, or the tunnel
        raise lost(submission_id, e) from None
    try:
        return exit_code(client, submission_id)
    except Exception as e:  # ... or right after the logs ended
        raise lost(submission_id, e) from None


def lost(submission_id: str, error: Exception) -> KitError:
    return KitError(f"lost the cluster while following job {submission_id} "
                    f"({type(error).__name__}: {short(str(error), 120)}); `make status` shows "
                    "whether it is still up")


async def stream_logs(client, submission_id: str) -> None:
    async for lines in client.tail_job_logs(submission_id):
        print(lines, end="", flush=True)


def stop(client, submission_id: str) -> None:
    try:
        client.stop_job(submission_id)
        print(f"job {submission_id} stopped", flush=True)
    except Exception as e:  # the cluster may be gone already; the error above says why
        print(f"could not stop job {submission_id}: {short(str(e), 120)}", flush=True)


def exit_code(client, submission_id: str) -> int:
    """0 if the job succeeded; else its own exit code, or 1 if it never got one (stopped,
    or its driver never started). The log stream can end a moment before the status."""
    from ray.job_submission import JobStatus

    deadline = time.monotonic() + FINAL_STATUS_WAIT_S
    info = client.get_job_info(submission_id)
    while not info.status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.5)
        info = client.get_job_info(submission_id)
    if info.status == JobStatus.SUCCEEDED:
        return 0
    message = ((info.message or "").strip().splitlines() or [""])[0]
    print(f"job {submission_id} {info.status.value}: {short(message, 300)[1:-1]}", flush=True)
    return info.driver_exit_code or 1


def result_line(output: str) -> dict:
    """The last `RESULT {...}` line in a job's output, parsed."""
    lines = [line for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        raise KitError("the job printed no RESULT line")
    try:
        return json.loads(lines[-1][len(RESULT_PREFIX):])
    except ValueError:
        raise KitError("the job's RESULT line is not JSON") from None
