"""Job commands: submit, jobs, logs, stop-job, and run (up + submit + down)."""

import asyncio
from contextlib import contextmanager

from scripts.build import build
from scripts.commands.lifecycle import (
    preflight_and_launch,
    prepared,
    print_plan,
    refuse_if_up,
    require_record,
    signals_deferred,
    teardown,
)
from scripts.core import state, submit
from scripts.core.errors import KitError, not_running
from scripts.core.inputs import flag, job_id, job_requirements, parse_timeout, split_args
from scripts.core.paths import RESULTS
from scripts.core.ray_cli import use_auth_in_this_process
from scripts.providers import PROVIDERS, load_record


def cmd_submit(a) -> int:
    job_requirements(a.job)  # a typo in JOB or its requirements fails before any tunnel opens
    args, timeout, verbose = split_args(a.args), parse_timeout(a.timeout), flag("VERBOSE", a.verbose)
    return submit_to(require_record(a.cluster), a.job, args, timeout, verbose)[0]


def submit_to(record: dict, job: str, args: list[str], timeout: float | None,
              verbose: bool = False) -> tuple[int, dict | None]:
    """The job's exit code and summary (its RESULT line, None if it printed none)."""
    provider = PROVIDERS[record["provider"]]
    if timeout is None and provider.DEFAULT_JOB_TIMEOUT_S:
        timeout = provider.DEFAULT_JOB_TIMEOUT_S
        print(f"TIMEOUT is not set: on {provider.NAME.upper()} the job is stopped after "
              f"{timeout / 3600:g} h; set TIMEOUT=<seconds> (up to 7 days) to change it", flush=True)
    with provider.job_address(record) as (address, python, token):
        return submit.submit(address, job, args, python, token, timeout_s=timeout,
                             results_dir=RESULTS, verbose=verbose,
                             job_packages=provider.JOB_PACKAGES, job_files=provider.JOB_FILES)


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
        if follow:
            asyncio.run(submit.stream_logs(client, submission_id, []))
        else:
            print(client.get_job_logs(submission_id), end="")
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
    packages = job_requirements(a.job)  # checked before anything is launched
    args, timeout, verbose = split_args(a.args), parse_timeout(a.timeout), flag("VERBOSE", a.verbose)
    built = build(a.cluster)  # a refused config launches nothing and tears nothing down
    if built.provider.JOB_PACKAGES == "installed":
        submit.require_installed(a.job, packages)
    if flag("DRY_RUN", a.dry_run):
        return print_plan(prepared(built))
    return run_once(built, a.job, args, timeout, verbose)[0]


@contextmanager
def running_or_started(built):
    """The cluster's record: the running cluster's, left running after; or, where none
    runs, one launched here and torn down after, whatever happens (as `make run`)."""
    if load_record(built.cluster) is not None:
        yield require_record(built.cluster)
        return
    with state.lock(built.cluster):
        refuse_if_up(built.cluster)  # started by someone else meanwhile: theirs, not ours
        ready = prepared(built)
        try:
            yield preflight_and_launch(built, ready)
        finally:
            if state.record_path(built.cluster).exists():  # only what this run launched
                print(f"tearing down '{built.cluster}'", flush=True)
                with signals_deferred():
                    print(teardown(built.cluster), flush=True)


def run_once(built, job: str, args: list[str], timeout: float | None,
             verbose: bool = False) -> tuple[int, dict | None]:
    """Up, submit, down: the job's exit code and summary. Down runs whatever happens."""
    with state.lock(built.cluster):
        refuse_if_up(built.cluster)  # a cluster this run did not start is never torn down
        ready = prepared(built)  # refused: nothing launched, nothing torn down
        try:
            record = preflight_and_launch(built, ready)
            return submit_to(record, job, args, timeout, verbose)
        finally:
            if state.record_path(built.cluster).exists():  # only what this run launched
                print(f"tearing down '{built.cluster}'", flush=True)
                with signals_deferred():
                    print(teardown(built.cluster), flush=True)
