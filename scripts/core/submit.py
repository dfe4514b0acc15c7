"""Submit jobs/<JOB>/main.py to a cluster, stream its logs, return its exit code.

The job goes through Ray's job SDK with an entrypoint built by shlex.join, so every word
of ARGS reaches the job exactly as given: Ray runs the entrypoint through a shell, and
`ray job submit -- ...` would join the words without quoting them (a `$(...)` in ARGS
would run). A job that outlives its time limit, or a Ctrl-C, stops the job on the cluster.
"""

import asyncio
import datetime
import enum
import json
import logging
import os
import re
import shlex
import sys
import time
import uuid
from pathlib import Path

from jobs.raykit.contract import RunSummary
from scripts.core import charts
from scripts.core.errors import KitError, short
from scripts.core.inputs import job_dir, job_requirements, json_text, shown, strict_json
from scripts.core.paths import JOB_LIBRARY
from scripts.core.results import readable
from scripts.core.ray_cli import use_auth_in_this_process
from scripts.core.state import write_atomic
from scripts.node.autostop import JOB_LIMIT_KEY


class JobPackages(enum.StrEnum):
    """How a job's requirements.txt is honoured on a provider's nodes."""
    PIP = "pip"              # Ray's pip runtime_env installs them on each node
    INSTALLED = "installed"  # the nodes run this machine's .venv: they must be there already
    BAKED = "baked"          # the nodes' images hold them (`make image`): nothing is installed


class JobFiles(enum.StrEnum):
    """How a job's folder reaches a provider's nodes."""
    UPLOAD = "upload"      # Ray zips it into its object store; each node unpacks its copy
    IN_PLACE = "in place"  # every node runs on this machine and reads it where it is


ENTRYPOINT = "main.py"
# Every job runs under the kit's entrypoint (jobs/raykit/entry.py): it runs main.py as
# `python main.py` would, and starts the job's step log and stall watch beside it.
WATCHED = ["-m", "raykit.entry"]
PIP_SETUP_TIMEOUT_S = 1800
# Ray's job manager fails a job whose driver has not started within its job-start timeout
# (RAY_JOB_START_TIMEOUT_SECONDS, 900 s by default), read on the head: the job's first pip
# install (torch's CUDA wheels on a GPU node) may take the whole PIP_SETUP_TIMEOUT_S, so
# each provider starts the head's Ray with this.
JOB_START_ENV = {"RAY_JOB_START_TIMEOUT_SECONDS": f"{PIP_SETUP_TIMEOUT_S}"}
# Every job ends by printing its summary as `RESULT {json}`: the kit reads it from the log
# and keeps it in build/results/<id>.json. It is for machines: the stream shows it only
# with VERBOSE=1 (a person reads the job's own summary table above it).
RESULT_PREFIX = "RESULT "
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# The working dir is uploaded to the cluster (Ray caps it at 512 MiB): never caches or data.
EXCLUDES = [".git", "__pycache__", "*.pyc", ".pytest_cache", "data", "results", "*.ckpt"]
FINAL_STATUS_WAIT_S = 30
# Quiet by default (VERBOSE=1 shows all): Ray's own INFO lines are asked down at their
# source where a setting reaches it (QUIET_ENV, in the job's environment, and
# raykit.cluster.train_logging), and dropped from the stream where none does: the job
# supervisor's INFO lines and its echo of the entrypoint (the kit prints it), and the
# lines below. Warnings, errors and tracebacks of the job always pass.
QUIET_ENV = {"RAY_LOGGER_LEVEL": "warning", "RAY_DATA_LOG_LEVEL": "WARNING", "RAYKIT_VERBOSE": "0"}
RAY_INFO_LINE = re.compile(r"^(\x1b\[\d+m)?(\([^)]* pid=\d+[^)]*\))?(\x1b\[0m)? ?"
                           r"(\[)?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\s+(INFO|DEBUG) ")
WORKER_PREFIX = r"^(?:(\x1b\[\d+m)?\([^)]* pid=\d+[^)]*\)(\x1b\[0m)? )?"  # "(Actor pid=1) "
BENIGN_LINES = [
    # Ray 2.60's Train controller logs this at error level on every run; nothing failed
    re.compile(r"core_worker\.cc:\d+: Actor with class name: 'PreemptionWatcher' "
               r".* has constructor arguments in the object store and max_restarts > 0"),
    # Train's per-report INFO line, logged past its LoggingConfig by the report thread
    re.compile(WORKER_PREFIX + r"Reporting training result \d+: TrainingReport\("),
    # Ray Data's notice that progress bars are off: the jobs turn them off on purpose
    re.compile(WORKER_PREFIX + r"Progress bars disabled\. To enable, set "),
    # INFO records in Python logging's default format (logging.basicConfig), which adaptdl
    # and adaptdl-ray switch on in the controller and every replica: some 20 a generation
    re.compile(WORKER_PREFIX + r"INFO:[\w.]+:"),
]
# This process's own INFO loggers ("Uploading package ...")
SDK_LOGGERS = ["ray.dashboard.modules.dashboard_sdk", "ray.dashboard.modules.job.sdk",
               "ray._private.runtime_env.packaging"]


def submit(address: str, job: str, args: list[str], python: str, auth_token: str | None,
           timeout_s: float | None = None, env_vars: dict | None = None,
           results_dir: Path | None = None, verbose: bool = False, *,
           job_packages: JobPackages, job_files: JobFiles, detach: bool = False,
           cluster: str | None = None) -> tuple[int, dict | None]:
    """Run jobs/<job>/main.py on the cluster; block, streaming logs; return its exit code
    and its summary (the RESULT line; None if it printed none). The summary is also kept
    in results_dir/<submission id>.json. verbose: Ray's INFO lines too. job_packages and
    job_files: the provider's JOB_PACKAGES and JOB_FILES (no default: a forgotten one would
    give an AWS job the local behaviour)."""
    from ray.job_submission import JobSubmissionClient

    packages = job_requirements(job)
    if JobPackages(job_packages) is JobPackages.INSTALLED:
        require_installed(job, packages)
    for name in SDK_LOGGERS:  # imported above: their INFO level is set
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    use_auth_in_this_process(auth_token)
    entrypoint = shlex.join([python, *WATCHED, ENTRYPOINT, *args])
    runtime_env = job_runtime_env(job, packages, job_packages, job_files, verbose, env_vars)
    colour = colour_wanted()
    try:
        client = JobSubmissionClient(address)
        # The limit travels with the job: the cluster's watchdog (scripts/node/autostop.py)
        # stops it there, even with this process gone (a closed laptop, a lost tunnel).
        submission_id = client.submit_job(
            entrypoint=entrypoint, runtime_env=runtime_env,
            submission_id=f"{job}-{uuid.uuid4().hex[:8]}",
            metadata={JOB_LIMIT_KEY: f"{timeout_s:g}"} if timeout_s else None)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise KitError(f"could not submit to {address}: {short(str(e), 200)}") from None
    print(f"job {submission_id}: {entrypoint}", flush=True)
    if detach:  # the job runs on, its TIMEOUT with it (the cluster's watchdog stops it)
        print(f"detached: job {submission_id} runs on; follow it and keep its summary with `make logs "
              f"ID={submission_id} FOLLOW=1`; stop it with `make stop-job ID={submission_id}`", flush=True)
        return 0, None
    seen: list[str] = []
    try:
        asyncio.run(asyncio.wait_for(stream_logs(client, submission_id, seen, verbose, colour),
                                     timeout_s))
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
        code = exit_code(client, submission_id)
    except Exception as e:  # ... or right after the logs ended
        raise lost(submission_id, e) from None
    try:
        result = result_line("".join(seen))
    except KitError:
        result = None  # the job printed no summary (it failed early, or prints none)
    if results_dir is not None and result is not None:
        keep_result(results_dir, submission_id, job, args, code, result, cluster)
    said = readable(result)
    if said and said.status == "stalled":
        print(f"job {submission_id} stalled: {short(str(said.reason), 200)[1:-1]}; "
              f"stopped by the values file's stall_minutes; its logs: make logs ID={submission_id}",
              flush=True)
    return code, result


def job_runtime_env(job: str, packages: list[str], job_packages: JobPackages,
                    job_files: JobFiles, verbose: bool, env_vars: dict | None = None) -> dict:
    """The job's runtime_env: its folder and the kit's job library (uploaded, or where they
    are: JOB_FILES), its environment and, where the provider installs them (JOB_PACKAGES
    "pip"), its requirements."""
    # Every log line, in full: Ray's dedup would fold a job's periodic progress lines.
    # RAY_TRAIN_ENABLE_PRINT_PATCH=0: Ray Train (V2) re-routes a training worker's print()
    # through its logger and also prints it, so every line of it reached the log twice.
    # jobs/raykit ships with every job: `import raykit` works there.
    # (uploaded even "in place": Ray unpacks a module once per node and never replaces it)
    folder = ({"working_dir": f"local://{job_dir(job)}"} if JobFiles(job_files) is JobFiles.IN_PLACE
              else {"working_dir": str(job_dir(job)), "excludes": EXCLUDES})
    # RAY_COLOR_PREFIX=0: Ray colours each worker's "(pid=...)" prefix in the driver's log
    # whatever reads it; the kit's own stream strips escapes too (colour_wanted).
    runtime_env = folder | {"py_modules": [str(JOB_LIBRARY)]} | {"env_vars": {"RAY_DEDUP_LOGS": "0", "RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}
                           | ({} if colour_wanted() else {"RAY_COLOR_PREFIX": "0"})
                           | ({"RAYKIT_VERBOSE": "1"} if verbose else QUIET_ENV) | {"RAYKIT_JOB": job}
                           | (env_vars or {})}
    if packages and JobPackages(job_packages) is JobPackages.PIP:  # a virtualenv on each node, over the image's packages
        runtime_env["pip"] = {"packages": packages, "pip_check": False}
        # CUDA torch is ~3 GB of wheels: Ray's 10-minute default would fail a first start
        runtime_env["config"] = {"setup_timeout_seconds": PIP_SETUP_TIMEOUT_S}
    return runtime_env


def require_installed(job: str, packages: list[str]) -> None:
    """Each requirement satisfied in this Python (the local cluster's), or one error line
    naming it and the command that installs it."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    for text in packages:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate():
            continue
        try:
            found = version(requirement.name)
        except PackageNotFoundError:
            found = None
        if found is None or not requirement.specifier.contains(found, prereleases=True):
            have = f"{found} is installed" if found else "it is not installed"
            raise KitError(f"{shown(job_dir(job) / 'requirements.txt')}: {text} ({have}); the local cluster "
                           f"runs .venv: .venv/bin/pip install {shlex.quote(text)}")


def keep_result(results_dir: Path, submission_id: str, job: str, args: list[str], code: int,
                result: dict, cluster: str | None = None) -> None:
    """A copy of the job's summary on this machine, even when the job ran on AWS; with the
    cluster it ran on (`make fetch` copies a run folder on its head from there)."""

    path = results_dir / f"{submission_id}.json"
    write_atomic(path, json_text({"submission_id": submission_id, "job": job, "args": args, "cluster": cluster,
                                  "exit_code": code, "result": result}) + "\n", 0o644)
    print(f"summary kept in {shown(path)}", flush=True)
    report = (readable(result) or RunSummary()).autopilot
    if report and report.get("timeline"):
        chart = path.with_name(f"{submission_id}.autopilot.png")
        try:
            charts.autopilot_chart(report, chart)
        except (KeyError, TypeError, ValueError) as e:  # a summary of another shape: no chart
            print(f"no autopilot chart: its timeline is not the kit's ({type(e).__name__})", flush=True)
        else:
            print(f"autopilot's nodes and data wait over time: {shown(chart)}", flush=True)


def keep_ended(client, submission_id: str, text: str, results_dir: Path, cluster: str | None = None) -> None:
    """`make logs` of a job that has ended (a detached one, one whose terminal closed): its
    summary kept as `make submit` keeps it, where it printed one and none is kept yet."""
    if (results_dir / f"{submission_id}.json").exists():
        return
    info = client.get_job_info(submission_id)
    if not info.status.is_terminal():
        return
    try:
        result = result_line(text)
    except KitError:
        return  # it printed no summary
    words = shlex.split(info.entrypoint or "")
    args = words[words.index(ENTRYPOINT) + 1:] if ENTRYPOINT in words else []
    keep_result(results_dir, submission_id, submission_id.rsplit("-", 1)[0], args,
                exit_code(client, submission_id), result, cluster)


def lost(submission_id: str, error: Exception) -> KitError:
    return KitError(f"lost the cluster while following job {submission_id} "
                    f"({type(error).__name__}: {short(str(error), 120)}); `make status` shows "
                    "whether it is still up")


async def stream_logs(client, submission_id: str, seen: list[str], verbose: bool = True,
                      colour: bool = True) -> None:
    async for lines in client.tail_job_logs(submission_id):
        lines = lines.splitlines(keepends=True)
        print("".join(for_a_person(line, submission_id, verbose, colour) for line in lines),
              end="", flush=True)
        seen += [line for line in lines if line.startswith(RESULT_PREFIX)]


def colour_wanted() -> bool:
    """Colour only on a terminal, and never where NO_COLOR is set (no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def for_a_person(line: str, submission_id: str, verbose: bool, colour: bool) -> str:
    """A line of a job's log as the kit shows it: "" for Ray's chatter (quiet mode) and for
    the RESULT line (VERBOSE=1 shows both), its colour escapes gone where colour is not
    wanted."""
    if not verbose and (noise(line, submission_id) or line.startswith(RESULT_PREFIX)):
        return ""
    return line if colour else ANSI_ESCAPE.sub("", line)


def noise(line: str, submission_id: str) -> bool:
    """A line of Ray's own chatter that quiet mode leaves out (QUIET_ENV's comment)."""
    return (bool(RAY_INFO_LINE.match(line))
            or line.startswith(f"Running entrypoint for job {submission_id}: ")
            or any(pattern.search(line) for pattern in BENIGN_LINES))


def job_table(client) -> list[str]:
    """`make jobs`: one line per job, newest first: id, status, start, duration."""
    lines = []
    for info in sorted(client.list_jobs(), key=lambda i: i.start_time or 0, reverse=True):
        started = (datetime.datetime.fromtimestamp(info.start_time / 1000).strftime("%Y-%m-%d %H:%M:%S")
                   if info.start_time else "-")
        end = info.end_time or (time.time() * 1000 if info.start_time else None)
        duration = f"{(end - info.start_time) / 1000:.0f} s" if info.start_time and end else "-"
        lines.append(f"{info.submission_id or info.job_id:<28} {info.status.value:<10} {started:<19}  {duration}")
    header = f"{'ID':<28} {'STATUS':<10} {'STARTED':<19}  DURATION"
    return [header, *lines] if lines else ["(no jobs)"]


def latest_job(client) -> str:
    jobs = [i for i in client.list_jobs() if i.submission_id]
    if not jobs:
        raise KitError("no job has run on this cluster yet; `make submit` one")
    return max(jobs, key=lambda i: i.start_time or 0).submission_id


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


# The flags by which the kit's jobs name where Ray Train keeps checkpoints and the final
# model (the template's and the ViT job's): checked before a job is uploaded
STORAGE_FLAGS = ("--storage", "--storage-path")
URI = re.compile(r"[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def storage_of(args: list[str]) -> str | None:
    """The storage a job's ARGS name (the last one, as argparse keeps it); None for none."""
    found = None
    for i, arg in enumerate(args):
        for flag in STORAGE_FLAGS:
            if arg == flag and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(flag + "="):
                found = arg[len(flag) + 1:]
    return found or None


def storage_problems(args: list[str]) -> list[str]:
    """What no cluster can use as Ray Train's storage: a relative path (pyarrow refuses a
    path with no scheme, and the driver's working directory is a temporary folder)."""
    storage = storage_of(args)
    if storage is None or URI.match(storage) or storage.startswith("/"):
        return []
    return [f"ARGS: {short(storage)} as the job's storage is a relative path: Ray Train needs an "
            "absolute path every training node can write, or s3://bucket/prefix"]


def result_line(output: str) -> dict:
    """The last `RESULT {...}` line in a job's output, parsed."""
    lines = [line for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        raise KitError("the job printed no RESULT line")
    try:
        return strict_json(lines[-1][len(RESULT_PREFIX):])
    except (ValueError, RecursionError):
        raise KitError("the job's RESULT line is not JSON") from None


# A provider whose platform has no job that deletes its own cluster (EC2, this machine)
# answers the interface's run_job and run_plan with these: `make run` is then the kit's
# up, submit and down (down guaranteed), and its dry run is `up`'s.
def no_platform_job(built, job: str, args: list[str], timeout_s: float | None, verbose: bool,
                    env_vars: dict[str, str]) -> None:
    return None


def no_platform_plan(built, job: str, args: list[str], timeout_s: float | None) -> None:
    return None
