"""Job commands: submit, jobs, logs, stop-job, and run (up + submit + down)."""

import asyncio
import os
import subprocess
import sys
import time
from contextlib import contextmanager

from jobs.raykit import contract
from scripts.build import build
from scripts.commands.checked import checked
from scripts.commands.lifecycle import (
    dry_run,
    preflight_and_launch,
    prepared,
    refuse_a_twin,
    refuse_if_up,
    require_record,
    teardown,
)
from scripts.commands.outputs import head_only_warnings
from scripts.core import state, submit
from scripts.core.errors import KitError, not_running, short
from scripts.core.inputs import (flag, job_dir, job_id, job_requirements, parse_timeout, split_args,
                                 values_shown)
from scripts.core.paths import JOB_LIBRARY, RESULTS
from scripts.core.ray_cli import use_auth_in_this_process
from scripts.core.signals import signals_deferred
from scripts.core.submit import JobPackages
from scripts.job_env import RAY_DATA_AUTOSCALER_OFF, job_env
from scripts.providers import PROVIDERS, load_record


def cmd_submit(a) -> int:
    job_requirements(a.job)  # a typo in JOB or its requirements fails before any tunnel opens
    args, timeout, verbose = split_args(a.args), parse_timeout(a.timeout), flag("VERBOSE", a.verbose)
    if args in (["--help"], ["-h"]):
        return job_help(a.job)
    return submit_to(require_record(a.cluster), a.job, args, timeout, verbose,
                     detach=flag("DETACH", a.detach))[0]


def job_help(job: str) -> int:
    """`make submit JOB=x ARGS=--help`: the job's flags, from its main.py run here (its
    argparse answers before it connects to Ray): no cluster needed, nothing launched."""
    folder = job_dir(job)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(JOB_LIBRARY.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("RAY_ADDRESS", None)  # never a cluster's
    return subprocess.run([sys.executable, "main.py", "--help"], cwd=folder, env=env, timeout=120).returncode


# The job's own parser, run here on ARGS: a mistyped flag is said before the job is uploaded
# and its packages installed on the cluster. Jobs that define parse_args(argv) (the kit's,
# and every copy of the template) get it; their argparse exits 2 with its message.
PARSE_ONLY = "import sys; sys.argv[0] = 'main.py'; import main; main.parse_args(sys.argv[1:])"


def job_args_problem(job: str, args: list[str]) -> str | None:
    """What the job's own parse_args says of ARGS, run on this machine (no cluster, no Ray
    started: the parsers answer before it); None where it takes them or the job has none."""
    folder = job_dir(job)
    try:
        if "def parse_args(" not in (folder / "main.py").read_text(errors="replace"):
            return None
    except OSError:
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(JOB_LIBRARY.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("RAY_ADDRESS", None)  # never a cluster's
    try:
        run = subprocess.run([sys.executable, "-c", PARSE_ONLY, *args], cwd=folder, env=env, timeout=120,
                             capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return None  # a parser that does more than parse: the cluster will say
    if run.returncode != 2:
        return None  # taken (0), or it failed for another reason the cluster will say as well
    said = [line for line in run.stderr.splitlines() if line.strip()]
    return f"ARGS: {said[-1] if said else 'refused by the job'} (`make submit JOB={job} ARGS=--help` lists its flags)"


def submit_to(record: dict, job: str, args: list[str], timeout: float | None,
              verbose: bool = False, env_vars: dict[str, str] | None = None,
              detach: bool = False) -> tuple[int, dict | None]:
    """The job's exit code and summary (its RESULT line, None if it printed none).
    `env_vars`: the job's prices and autopilot settings where the caller built the values
    (`make run`, a bench's variant); else what `make up` launched it with (launched_env)."""
    provider = PROVIDERS[record["provider"]]
    problem = job_args_problem(job, args)
    if problem:  # before anything is uploaded
        raise KitError(problem)
    problems = submit.storage_problems(args) + provider.job_problems(record, job, args)
    if problems:  # before the job runs: its tasks would fail on the nodes
        raise KitError("; ".join(problems))
    if timeout is None and provider.DEFAULT_JOB_TIMEOUT_S:
        timeout = provider.DEFAULT_JOB_TIMEOUT_S
        print(f"TIMEOUT is not set: on {provider.NAME.upper()} the job is stopped after "
              f"{timeout / 3600:g} h; set TIMEOUT=<seconds> (up to 7 days) to change it", flush=True)
    began = time.time()
    with provider.job_address(record) as (address, python, token):
        code, result = submit.submit(address, job, args, python, token, timeout_s=timeout,
                                     env_vars=launched_env(record["cluster"]) if env_vars is None else env_vars,
                                     results_dir=RESULTS, verbose=verbose,
                                     job_packages=job_packages_of(provider, record),
                                     job_files=provider.JOB_FILES, detach=detach, cluster=record["cluster"])
    # its model on a head that autostop or `make down` ends: said now, with the way home
    for line in head_only_warnings(record["cluster"], provider, kept_since=began):
        print(line, flush=True)
    return code, result


def job_packages_of(provider, record: dict) -> JobPackages:
    """How the cluster's nodes get a job's packages: the provider's way, or none where its
    images have them baked in (images.job_packages: baked, recorded at launch)."""
    return JobPackages.BAKED if record.get("job_packages") == "baked" else provider.JOB_PACKAGES


# What each entry of the job's environment carries, in the words of the values file
ENV_MEANING = {contract.NODE_PRICES_ENV: "the nodes' prices (instance types, disks, prices_as)",
               contract.AUTOPILOT_ENV: "the autopilot's settings (autopilot:, the preprocess type's bounds)",
               contract.STALL_ENV: "stall_minutes"} | {
    name: "the autopilot's switch for Ray Data's own autoscaler" for name in RAY_DATA_AUTOSCALER_OFF}


def launched_env(cluster: str) -> dict[str, str]:
    """The job's environment: what `make up` launched the cluster with (its nodes' prices,
    which the summary bills the run with, the autopilot's settings, the stall limit),
    checked against the values file as it is now. An edit since that changes what the
    job would see is refused, naming it (the cluster runs what was launched); a file that
    no longer builds leaves the launched one in force, said. Without a record (a cluster
    launched by an older kit), the file as it is now, its errors refused as validate's."""
    launched = state.load_job_env(cluster)
    try:
        now = job_env(build(cluster))  # job_env raises what checked() would (its pricing checks)
    except KitError as e:
        if launched is None:
            raise
        print(f"note: {values_shown(cluster)} no longer builds ({short(str(e), 120)}); the job gets "
              f"what '{cluster}' was launched with", flush=True)
        return launched
    if launched is None or now == launched:
        return now
    changed = sorted({ENV_MEANING.get(k, k) for k in set(now) | set(launched) if now.get(k) != launched.get(k)})
    raise KitError(f"{values_shown(cluster)} changed since `make up CLUSTER={cluster}` in what the job "
                   f"would see: {'; '.join(changed)}; the cluster runs what was launched: undo the edit, "
                   f"or `make down CLUSTER={cluster}` and `make up` again to launch the new one")


@contextmanager
def job_client(cluster: str):
    """Ray's job client for a running cluster, through the provider's address (a tunnel
    on AWS); a lost connection or an unknown job is one error line."""
    from ray.job_submission import JobSubmissionClient  # Ray's SDK: imported when used

    record = require_record(cluster)
    provider = PROVIDERS[record["provider"]]
    with provider.job_address(record) as (address, _, token):
        use_auth_in_this_process(token)
        try:
            yield JobSubmissionClient(address)
        except (ConnectionError, RuntimeError, ValueError) as e:
            if not provider.is_running(record):  # it died under the command
                raise KitError(not_running(cluster)) from None
            raise KitError(f"cluster '{cluster}': {str(e).splitlines()[0][:200]}") from None


def cmd_jobs(a) -> int:
    with job_client(a.cluster) as client:
        print("\n".join(submit.job_table(client)))
    return 0


def cmd_logs(a) -> int:
    follow = flag("FOLLOW", a.follow)
    chosen = job_id(a.id) if a.id else None
    with job_client(a.cluster) as client:
        submission_id = chosen or submit.latest_job(client)
        colour = submit.colour_wanted()  # the whole log (verbose), colour only on a terminal
        if follow:
            seen: list[str] = []
            asyncio.run(submit.stream_logs(client, submission_id, seen, True, colour))
            text = "".join(seen)
        else:
            text = client.get_job_logs(submission_id)
            print(text if colour else submit.ANSI_ESCAPE.sub("", text), end="")
        submit.keep_ended(client, submission_id, text, RESULTS, a.cluster)
    return 0


def cmd_stop_job(a) -> int:
    if not a.id:
        raise KitError("set ID= to the job to stop; `make jobs` lists them")
    submission_id = job_id(a.id)
    with job_client(a.cluster) as client:
        stopped = client.stop_job(submission_id)
        print(f"job {submission_id}: " + ("stop requested" if stopped else "had already ended"))
    return 0


def cmd_run(a) -> int:
    args, timeout, verbose = split_args(a.args), parse_timeout(a.timeout), flag("VERBOSE", a.verbose)
    built = checked(a.cluster)  # a refused config launches nothing and tears nothing down
    checked_job_packages(built.provider, a.job)  # before anything is launched
    refuse_a_twin(built)
    if flag("DRY_RUN", a.dry_run):
        lines = built.provider.run_plan(built, a.job, args, timeout)
        if lines is None:  # make run is up, submit and down: what up would launch (offline too)
            return dry_run(built)
        print(f"dry run: make run CLUSTER={built.cluster} JOB={a.job} would create (nothing is created):")
        print("\n".join(lines))
        return 0
    return run_once(built, a.job, args, timeout, verbose)[0]


def checked_job_packages(provider, job: str) -> list[str]:
    """The job's requirements.txt, refused before anything is launched where a line is no
    plain requirement or, where the nodes run this machine's .venv, is not installed."""
    packages = job_requirements(job)
    if provider.JOB_PACKAGES is JobPackages.INSTALLED:
        submit.require_installed(job, packages)
    return packages


@contextmanager
def running_or_started(built, *, reuse: bool = True):
    """The one way a command gets a cluster to run on; yields its record.

    reuse=True: a running cluster is used as it is and left running. Otherwise (none runs,
    or reuse=False, as `make run`, which never borrows a cluster it did not start): under
    the cluster's lock, preflight and launch it here, and tear it down after, whatever
    happens (a failed job, Ctrl-C, SIGTERM). Only what this call launched is torn down."""
    record = load_record(built.cluster)
    if reuse and record is not None and PROVIDERS[record["provider"]] is built.provider \
            and built.provider.is_running(record):
        yield record
        return
    with state.lock(built.cluster):
        refuse_if_up(built.cluster)  # started by someone else meanwhile: theirs, not ours
        ready = prepared(built)  # refused: nothing launched, nothing torn down
        try:
            yield preflight_and_launch(built, ready)
        finally:
            if state.record_path(built.cluster).exists():  # only what this call launched
                print(f"tearing down '{built.cluster}'", flush=True)
                with signals_deferred():
                    print(teardown(built.cluster), flush=True)


def run_once(built, job: str, args: list[str], timeout: float | None,
             verbose: bool = False) -> tuple[int, dict | None]:
    """Up, submit, down: the job's exit code and summary. Down runs whatever happens; a
    cluster this run did not start is refused, never torn down. Where the platform runs
    the job and deletes its cluster itself (a RayJob), the provider does it all."""
    env_vars = job_env(built)  # of the values this run launches, not of the file on disk
    ran = built.provider.run_job(built, job, args, timeout, verbose, env_vars)
    if ran is not None:
        return ran
    with running_or_started(built, reuse=False) as record:
        return submit_to(record, job, args, timeout, verbose, env_vars)
