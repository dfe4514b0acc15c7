"""The kit's command line; the Makefile calls it (`python -m scripts.kit COMMAND`).

  validate  every check on CLUSTER's values file and its rendered config; writes nothing
  render    the same checks, then write the config to build/clusters/<cluster>.yaml (AWS:
            also <cluster>.head-policy.json, a least-privilege IAM policy for the head)
  preflight the same checks, then the provider's read-only checks of the account (AWS:
            credentials, a zone offering every type, a usable subnet, key pair, AMI, quotas)
  up        preflight, then start CLUSTER and wait until it is ready (DRY_RUN=1:
            print what would be launched, launch nothing)
  status    nodes and resources of a running CLUSTER
  submit    run jobs/<JOB>/main.py on CLUSTER; exit with the job's exit code; its summary
            (RESULT line) is kept in build/results/
  jobs      the jobs of CLUSTER: id, status, start, duration
  logs      a job's logs (ID=..., default the latest; FOLLOW=1 follows it)
  stop-job  stop the job ID=...
  dashboard the dashboard's URL (AWS: through an SSH tunnel kept open until Ctrl-C)
  attach    a shell on the head (local: a shell aimed at the cluster)
  monitor   the autoscaler's log (FOLLOW=1 follows it)
  down      stop what `up` started (local: its processes; aws: `ray down`, checked; PURGE=1:
            also the cluster's security group)
  run       up + submit + down; down runs, through Ctrl-C and SIGTERM, if this run launched
  clean     remove build/, keeping the records of clusters that may be running
  cost      CLUSTER's $/h per node type at min and max workers, with EBS, and totals
  plan      the cheapest mix that feeds the trainers, from PROFILE=<job summary> or ARGS
            (--gpu-instance, --trainer-images-per-s, --cpu-images-per-s; --json, --write NAME)
  bench     the ViT job on each of CLUSTERS in turn (up, job with ARGS, down), then one
            price-performance table, saved to build/bench/<time>/ (JSON, CSV, PNG);
            FROM=rows.json prints and plots saved or published rows instead

Inputs come from the environment the Makefile exports (KIT_CLUSTER, KIT_JOB, KIT_ARGS,
KIT_TIMEOUT, KIT_PROFILE, ...), or from the flags below; scripts/inputs.py checks them.
"""

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager

import yaml

from scripts import catalog, state, submit
from scripts.build import build, build_text
from scripts.errors import KitError
from scripts.inputs import (check_name, flag, job_dir, job_id, parse_timeout, split_args,
                            values_file)
from scripts.paths import BENCH, BUILD, LAUNCHED, LOGS, RENDERED, RESULTS
from scripts.providers import PROVIDERS, local
from scripts.ray_cli import use_auth_in_this_process
from scripts.values import parse_yaml


def cmd_validate(a) -> int:
    built = build(a.cluster)
    print(f"cluster_templates/{a.cluster}.yaml: valid ({built.provider.NAME}; "
          "every check passed, nothing written or launched)")
    return 0


def cmd_render(a) -> int:
    built = build(a.cluster)  # the template needs values that passed every check
    path = RENDERED / f"{a.cluster}.yaml"
    state.write_atomic(path, built.text, mode=0o644)
    print(path)
    for suffix, text in built.provider.companion_files(a.cluster, built.values).items():
        companion = RENDERED / f"{a.cluster}.{suffix}"
        state.write_atomic(companion, text, mode=0o644)
        print(companion)
    return 0


def cmd_preflight(a) -> int:
    built = prepared(build(a.cluster))
    print(f"preflight of '{a.cluster}' passed ({built.provider.NAME}); nothing was created")
    return 0


def prepared(built):
    """The provider's read-only preflight, then the config rebuilt with what it pinned
    (through the same checks as any values file)."""
    values, found = built.provider.preflight(built.values)
    for line in found:
        print(line, flush=True)
    if values == built.values:
        return built
    return build_text(built.cluster, yaml.safe_dump(values, sort_keys=False).encode())


def cmd_up(a) -> int:
    built = build(a.cluster)
    if flag("DRY_RUN", a.dry_run):
        return print_plan(prepared(built))
    with state.lock(a.cluster):
        refuse_if_up(a.cluster)
        launch(prepared(built))
    return 0


def print_plan(built) -> int:
    cost = built.provider.hourly_cost(built.values)
    print(f"dry run: CLUSTER={built.cluster} would launch (nothing is launched):")
    print("\n".join(built.provider.plan(built.values, built.config)))
    if cost:
        print(f"total ~${cost[0]:.2f}/h with min_workers, up to ~${cost[1]:.2f}/h at max_workers")
    return 0


def refuse_if_up(cluster: str) -> None:
    record = state.load(cluster)
    if record is None:
        return
    if PROVIDERS[record["provider"]].is_running(record):
        raise KitError(f"cluster '{cluster}' is already up; `make down CLUSTER={cluster}` "
                       "first, or use it as it is")
    print(f"cluster '{cluster}': its record is stale (nothing of it runs); starting afresh")
    state.forget(cluster)


def launch(built) -> dict:
    cost = built.provider.hourly_cost(built.values)
    if cost and cost[1]:
        print(f"launching '{built.cluster}' on {built.provider.NAME.upper()}: ~${cost[0]:.2f}/h "
              f"with min_workers, up to ~${cost[1]:.2f}/h at max_workers (on-demand list prices)",
              flush=True)
    record = built.provider.up(built.cluster, built.text, built.values)
    print(f"cluster '{built.cluster}' is up", flush=True)
    return record


def cmd_down(a) -> int:
    check_name("CLUSTER", a.cluster)
    purge = flag("PURGE", a.purge)
    with state.lock(a.cluster):
        print(teardown(a.cluster, purge), flush=True)
    return 0


def teardown(cluster: str, purge: bool = False) -> str:
    try:
        record = state.load(cluster)
    except KitError:
        if provider_named_in_values(cluster) != local.NAME:
            raise
        # A local cluster's processes are found by their marker, not by the record.
        print(f"ignoring the corrupt record {state.record_path(cluster)}", flush=True)
        record = None
    if record is not None:
        return PROVIDERS[record["provider"]].down(cluster, record, purge)
    if provider_named_in_values(cluster) == local.NAME:
        # No record, but a crashed run may have left processes: they carry the marker.
        return local.down(cluster, None)
    return f"cluster '{cluster}' was not launched from this checkout; nothing to stop"


def provider_named_in_values(cluster: str) -> str | None:
    """The values file's `provider:`, read without validating (a values file broken after
    `up` must not stop `down`); None if it cannot be read."""
    try:
        values = parse_yaml(values_file(cluster).read_bytes(), cluster)
    except KitError:
        return None
    return values.get("provider") if isinstance(values, dict) else None


def require_record(cluster: str) -> dict:
    check_name("CLUSTER", cluster)
    record = state.load(cluster)
    if record is None:
        raise KitError(f"cluster '{cluster}' is not up; run `make up CLUSTER={cluster}`")
    return record


def cmd_status(a) -> int:
    record = require_record(a.cluster)
    code = PROVIDERS[record["provider"]].status(record)
    if record.get("autostop_minutes"):
        print(autostop_status(a.cluster, record))
    return code


def autostop_status(cluster: str, record: dict) -> str:
    """The watchdog's own arithmetic on the same jobs: the time left, or what holds it."""
    from scripts.autostop import job_states, seconds_left

    minutes = record["autostop_minutes"]
    with job_client(cluster) as client:
        left = seconds_left(job_states(client), record["up_at"], time.time(), minutes * 60)
    if left is None:
        return f"autostop: held up by a running job (then {minutes} min with no job)"
    return (f"autostop: the cluster stops itself in {max(left, 0) / 60:.0f} min unless a job "
            f"starts ({minutes} min with no job; autostop_minutes in its values file)")


def cmd_submit(a) -> int:
    job_dir(a.job)  # a typo in JOB fails before any tunnel opens
    args, timeout = split_args(a.args), parse_timeout(a.timeout)
    return submit_to(require_record(a.cluster), a.job, args, timeout)[0]


def submit_to(record: dict, job: str, args: list[str], timeout: float | None) -> tuple[int, dict | None]:
    """The job's exit code and summary (its RESULT line, None if it printed none)."""
    provider = PROVIDERS[record["provider"]]
    if timeout is None and provider.DEFAULT_JOB_TIMEOUT_S:
        timeout = provider.DEFAULT_JOB_TIMEOUT_S
        print(f"TIMEOUT is not set: on {provider.NAME.upper()} the job is stopped after "
              f"{timeout / 3600:g} h; set TIMEOUT=<seconds> (up to 7 days) to change it", flush=True)
    with provider.job_address(record) as (address, python, token):
        return submit.submit(address, job, args, python, token, timeout_s=timeout,
                             results_dir=RESULTS)


@contextmanager
def job_client(cluster: str):
    """Ray's job client for a running cluster, through the provider's address (a tunnel
    on AWS); a lost connection or an unknown job is one error line."""
    from ray.job_submission import JobSubmissionClient

    record = require_record(cluster)
    with PROVIDERS[record["provider"]].job_address(record) as (address, _, token):
        use_auth_in_this_process(token)
        try:
            yield JobSubmissionClient(address)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise KitError(f"cluster '{cluster}': {str(e).splitlines()[0][:200]}") from None


def cmd_dashboard(a) -> int:
    record = require_record(a.cluster)
    return PROVIDERS[record["provider"]].dashboard(record)


def cmd_attach(a) -> int:
    record = require_record(a.cluster)
    return PROVIDERS[record["provider"]].attach(record)


def cmd_monitor(a) -> int:
    follow = flag("FOLLOW", a.follow)
    record = require_record(a.cluster)
    return PROVIDERS[record["provider"]].monitor(record, follow)


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
    job_dir(a.job)
    args, timeout = split_args(a.args), parse_timeout(a.timeout)
    built = build(a.cluster)  # a refused config launches nothing and tears nothing down
    if flag("DRY_RUN", a.dry_run):
        return print_plan(prepared(built))
    return run_once(built, a.job, args, timeout)[0]


def run_once(built, job: str, args: list[str], timeout: float | None) -> tuple[int, dict | None]:
    """Up, submit, down: the job's exit code and summary. Down runs whatever happens."""
    with state.lock(built.cluster):
        refuse_if_up(built.cluster)  # a cluster this run did not start is never torn down
        built = prepared(built)  # refused: nothing launched, nothing torn down
        try:
            record = launch(built)
            return submit_to(record, job, args, timeout)
        finally:
            if state.record_path(built.cluster).exists():  # only what this run launched
                print(f"tearing down '{built.cluster}'", flush=True)
                with signals_deferred():
                    print(teardown(built.cluster), flush=True)


def cmd_bench(a) -> int:
    """Each of CLUSTERS in turn: up, the ViT job with ARGS, down; then one table, saved."""
    from scripts import bench

    if a.from_:
        rows = bench.completed(bench.read_rows(a.from_))
        print(f"rows from {a.from_}:")
    else:
        args, timeout = split_args(a.args), parse_timeout(a.timeout)
        # Every values file checked and priced before the first cluster launches.
        clusters = [build(name) for name in bench.cluster_names(a.clusters)]
        prices = [bench.priced(built) for built in clusters]
        for built in clusters:
            refuse_if_up(built.cluster)
        measured, profile = [], None
        for built, (name, usd_per_hour) in zip(clusters, prices):
            print(f"\n== bench {len(measured) + 1}/{len(clusters)}: {name} (${usd_per_hour:.3f}/h)",
                  flush=True)
            code, summary = run_once(built, "vit_synthetic", args, timeout)
            if code != 0 or summary is None:
                if measured:
                    print(f"rows so far saved in {bench.save(bench.completed(measured), BENCH)}")
                raise KitError(f"bench: the ViT job failed on '{built.cluster}' (exit {code}); "
                               "its log is above")
            profile = profile or summary
            measured.append(bench.measured_row(name, usd_per_hour, summary, profile))
        rows = bench.completed(measured)
        print(f"\nthe ViT job with ARGS={' '.join(args) or '(the job defaults)'}; predicted "
              "images/s from the first row's profile; change in $ per 100 steps vs the first row:")
    print("\n".join("  " + line for line in bench.table(rows)))
    print(f"saved in {bench.save(rows, BENCH)} (rows.json: `make bench FROM=` reads it back)")
    return 0


@contextmanager
def signals_deferred():
    """Teardown runs to the end through any number of Ctrl-C, SIGTERM and SIGHUP."""
    caught = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in caught}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_clean(a) -> int:
    kept = state.launched_clusters()
    if BUILD.is_dir():
        for child in BUILD.iterdir():
            if (child == LAUNCHED and kept) or child in (RESULTS, BENCH):  # records and results stay
                continue
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    if kept:
        print(f"kept {LAUNCHED}: the records of {', '.join(kept)}, which may still be running; "
              "`make down CLUSTER=<name>` each, then `make clean` again")
    return 0


def cmd_cost(a) -> int:
    built = build(a.cluster)
    print("\n".join(built.provider.cost_table(built.values)))
    return 0


def cmd_plan(a) -> int:
    from scripts import planner

    profile, options = planner.profile_from(split_args(a.args), a.profile)
    if options.help:
        planner.parser().print_help()
        return 0
    ranked, alone = planner.options(profile, options.region)
    chosen = ranked[0]
    if options.write:
        write_plan(options.write, chosen, options.region)
    if options.json:
        print(json.dumps(planner.plan_json(chosen, ranked)))
        return 0
    reserved = catalog.INSTANCE_TYPES[chosen.head].vcpus - catalog.preprocess_vcpus(chosen.head)
    print(f"profile: {profile.gpu_instance} trains {profile.trainer_images_per_s:g} images/s "
          f"when fed; one vCPU preprocesses {profile.cpu_images_per_s:g} images/s "
          f"({options.region} on-demand prices + root EBS; a mix feeds the trainers when the "
          f"predicted data wait is < {planner.MAX_DATA_WAIT:.0%})")
    print(f"choice: {chosen.name}: ${chosen.usd_per_hour:.3f}/h, {chosen.images_per_s:.1f} images/s, "
          f"{chosen.data_wait:.0%} data wait, ${chosen.usd_per_million_images:.2f} per million images")
    print(f"  {chosen.preprocess_vcpus} vCPUs preprocess; the head keeps {reserved} for the "
          "training processes (one per GPU) and Ray's own, each worker one for its raylet")
    mix = planner.cheaper_mix_of_types(chosen, profile, options.region)
    if mix:
        print(f"  a mix of worker types would be cheaper still: {mix.name} "
              f"(${mix.usd_per_hour:.3f}/h)")
    print(f"the {min(len(ranked), planner.SHOWN_OPTIONS)} cheapest of {len(ranked)} options "
          "that feed the trainers, and the GPU instance alone:")
    rows = ranked[:planner.SHOWN_OPTIONS] + ([alone] if alone not in ranked[:planner.SHOWN_OPTIONS] else [])
    print("\n".join("  " + line for line in planner.table(rows, alone)))
    if options.write:
        print(f"wrote cluster_templates/{options.write}.yaml (it validates); "
              f"`make up CLUSTER={options.write}` launches it")
    return 0


def write_plan(name: str, chosen, region: str) -> None:
    """cluster_templates/NAME.yaml for the chosen mix; refused if the file exists; removed
    again if it does not validate (the planner's bug, said as such)."""
    from scripts import planner
    from scripts.paths import TEMPLATES

    check_name("--write", name)
    path = TEMPLATES / f"{name}.yaml"
    header = (f"# {name}: written by `make plan` on {time.strftime('%Y-%m-%d')}: {chosen.name}, "
              f"~${chosen.usd_per_hour:.2f}/h,\n# predicted {chosen.images_per_s:.1f} images/s "
              f"at {chosen.data_wait:.0%} data wait. Every key not shown takes the schema's "
              "default\n# (schema/aws.schema.yaml); hetero.yaml documents each.\n")
    text = header + yaml.safe_dump(planner.values_for(name, chosen, region), sort_keys=False)
    try:  # "x": never over an existing file, nor through a symlink at that name
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise KitError(f"ARGS: --write {name}: cluster_templates/{name}.yaml exists; pick "
                       "another name, or remove that file first") from None
    try:
        build(name)
    except KitError:
        path.unlink()
        raise


COMMANDS = {"validate": cmd_validate, "render": cmd_render, "preflight": cmd_preflight,
            "up": cmd_up, "status": cmd_status, "jobs": cmd_jobs, "logs": cmd_logs,
            "stop-job": cmd_stop_job, "dashboard": cmd_dashboard, "attach": cmd_attach,
            "monitor": cmd_monitor,
            "submit": cmd_submit, "down": cmd_down, "run": cmd_run, "clean": cmd_clean,
            "cost": cmd_cost, "plan": cmd_plan, "bench": cmd_bench}


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise KitError(f"{message}; see `python -m scripts.kit --help`")


def parse(argv) -> argparse.Namespace:
    env = os.environ
    p = Parser(prog="kit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=COMMANDS)
    p.add_argument("--cluster", default=env.get("KIT_CLUSTER") or "local",
                   help="a values file in cluster_templates/ (CLUSTER)")
    p.add_argument("--job", default=env.get("KIT_JOB") or "vit_synthetic",
                   help="a directory in jobs/ (JOB)")
    p.add_argument("--args", default=env.get("KIT_ARGS", ""), help="the job's flags, one string (ARGS)")
    p.add_argument("--timeout", default=env.get("KIT_TIMEOUT", ""),
                   help="stop the job after this many seconds (TIMEOUT)")
    p.add_argument("--dry-run", default=env.get("KIT_DRY_RUN", ""),
                   help="1: `up` prints what it would launch and launches nothing (DRY_RUN)")
    p.add_argument("--purge", default=env.get("KIT_PURGE", ""),
                   help="1: `down` also deletes the cluster's own security group (PURGE)")
    p.add_argument("--id", default=env.get("KIT_ID", ""), help="a job's submission id (ID)")
    p.add_argument("--follow", default=env.get("KIT_FOLLOW", ""),
                   help="1: `logs` follows the job until it ends (FOLLOW)")
    p.add_argument("--profile", default=env.get("KIT_PROFILE", ""),
                   help="a job summary for `plan`, e.g. build/results/<id>.json (PROFILE)")
    p.add_argument("--clusters", default=env.get("KIT_CLUSTERS", ""),
                   help="values files `bench` runs in turn, space-separated (CLUSTERS)")
    p.add_argument("--from", dest="from_", default=env.get("KIT_FROM", ""),
                   help="rows.json for `bench` to print and plot instead of running (FROM)")
    return p.parse_args(argv)


def raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def internal_error(exc: BaseException) -> str:
    """Write the traceback to build/logs/ (a private temp file if that fails); return where."""
    text = "".join(traceback.format_exception(exc))
    try:
        LOGS.mkdir(parents=True, exist_ok=True)
        path = LOGS / f"kit-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        path.write_text(text)
        return str(path)
    except OSError:
        fd, path = tempfile.mkstemp(prefix="kit-error-", suffix=".log")
        os.write(fd, text.encode())
        os.close(fd)
        return path


def main(argv=None) -> int:
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # `kill` ends like Ctrl-C
    signal.signal(signal.SIGHUP, raise_keyboard_interrupt)   # so does closing the terminal
    try:
        a = parse(argv)
        return COMMANDS[a.command](a)
    except KitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`make plan | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # a bug in the kit, not the user's input
        where = internal_error(e)
        print(f"error: internal error in the kit ({type(e).__name__}), not in your input; "
              f"details in {where}", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
