"""Lifecycle commands: validate, render, preflight, up, down, clean; and what the other
command groups share about a cluster's record (require_record, teardown)."""

import shutil

import yaml

from scripts.build import build_text
from scripts.commands.advice import notes
from scripts.commands.checked import checked
from scripts.commands.outputs import head_only_warnings
from scripts.core import state
from scripts.core.errors import CapacityRefused, KitError, NoAccount
from scripts.core.inputs import check_name, flag, values_file, values_shown
from scripts.core.paths import BENCH, BUILD, LAUNCHED, RENDERED, RESULTS, RUNS
from scripts.core.values import parse_yaml
from scripts.job_env import job_env
from scripts.pricing.cost import hourly_cost
from scripts.providers import PROVIDERS, load_record


def cmd_validate(a) -> int:
    built = checked(a.cluster)
    print(f"{values_shown(a.cluster)}: valid ({built.provider.NAME}; "
          "every check passed, nothing written or launched)")
    for line in notes(built):
        print(line)
    return 0


def cmd_render(a) -> int:
    built = checked(a.cluster)  # the template needs values that passed every check
    path = RENDERED / f"{a.cluster}.yaml"
    state.write_atomic(path, built.text, mode=0o644)
    print(path)
    for suffix, text in built.provider.companion_files(a.cluster, built.values).items():
        companion = RENDERED / f"{a.cluster}.{suffix}"
        state.write_atomic(companion, text, mode=0o644)
        print(companion)
    return 0


def cmd_preflight(a) -> int:
    built = prepared(checked(a.cluster))
    print(f"preflight of '{a.cluster}' passed ({built.provider.NAME}); nothing was created")
    return 0


def refuse_a_twin(built) -> None:
    """Another values file launched from this checkout that names the same cluster to the
    platform (aws: its cluster_name; kuberay: its name in its namespace) is refused, before
    any cloud or cluster call: up would adopt or break the other's nodes, and down of
    either would stop both. A record that cannot be read is said, not skipped in silence."""
    for other in state.launched_clusters():
        if other == built.cluster:
            continue
        try:
            record = load_record(other)
        except KitError as e:
            raise KitError(f"{state.record_path(other)}: cannot tell whether it is this cluster "
                           f"({str(e)[:120]}); `make down CLUSTER={other}` or remove it first") from None
        if record and built.provider.same_cluster(built.values, record):
            raise KitError(f"cluster_name: {built.values['cluster_name']!r} is the cluster CLUSTER={other} "
                           f"launched ({state.record_path(other)}): to {built.provider.NAME} two values "
                           f"files with one cluster_name are one cluster; give {built.cluster}.yaml its "
                           f"own cluster_name, or `make down CLUSTER={other}` first")


# What `apt-get install` gives each tool on Debian and Ubuntu, for the error's fix.
TOOL_PACKAGES = {"ssh": "openssh-client", "rsync": "rsync", "kubectl": "kubectl (see kubernetes.io/docs/tasks/tools)"}


def laptop_problem(provider) -> str | None:
    """The programs the provider needs on this machine that PATH lacks, before anything
    bills: `ray up` without ssh or rsync launched the head, then failed to set it up."""
    missing = [tool for tool in provider.LAPTOP_TOOLS if shutil.which(tool) is None]
    if not missing:
        return None
    return (f"this machine lacks {', '.join(missing)} on PATH, which {provider.NAME} needs "
            f"({', '.join(TOOL_PACKAGES[t] for t in missing)}); install them, then try again")


def prepared(built, avoid_zones: tuple = (), tools: bool = True):
    """The provider's read-only preflight, then the config rebuilt with what it pinned
    (through the same checks as any values file); first, refuse_a_twin and (tools) the
    programs this machine needs."""
    refuse_a_twin(built)
    problem = laptop_problem(built.provider) if tools else None
    if problem:
        raise KitError(problem)
    values, found = built.provider.preflight(built.values, avoid_zones)
    for line in found:
        print(line, flush=True)
    if values == built.values:
        return built
    return build_text(built.cluster, yaml.safe_dump(values, sort_keys=False).encode())


def cmd_up(a) -> int:
    built = checked(a.cluster)
    for line in notes(built):
        print(line, flush=True)
    if flag("DRY_RUN", a.dry_run):
        return dry_run(built)
    with state.lock(a.cluster):
        refuse_if_up(a.cluster)
        preflight_and_launch(built)
    return 0


def dry_run(built) -> int:
    """The plan after the account's preflight; without credentials, the plan from the
    values file alone, marked as such (a first look needs no account)."""
    problem = laptop_problem(built.provider)
    if problem:  # said, not refused: a dry run launches nothing
        print(f"note: {problem}", flush=True)
    try:
        built = prepared(built, tools=False)
    except NoAccount as e:
        print(f"dry run offline ({e}): the account is not checked (zone, subnet, AMI id, key "
              "pair, quotas); `make preflight` checks them", flush=True)
        return print_plan(built, offline=True)
    return print_plan(built)


def print_plan(built, offline: bool = False) -> int:
    cost = hourly_cost(built)
    print(f"dry run{' offline' if offline else ''}: CLUSTER={built.cluster} would launch "
          "(nothing is launched):")
    print("\n".join(built.provider.plan(built.values, built.config)))
    if cost:
        print(f"total ~${cost[0]:.2f}/h with min_workers, up to ~${cost[1]:.2f}/h at max_workers")
    return 0


def preflight_and_launch(built, ready=None) -> dict:
    """Preflight (unless `ready` is built's preflighted config), then launch. Where the
    zone the preflight picked has no capacity for the head (nothing was launched),
    preflight again without it: the next zone that offers every type, until none is left
    (a zone named in the values file is never swapped)."""
    refused: tuple = ()
    ready = ready or prepared(built)
    while True:
        try:
            return launch(ready)
        except CapacityRefused as e:
            print(f"{e}; trying another zone", flush=True)
            refused += (e.zone,)
            ready = prepared(built, refused)


def refuse_if_up(cluster: str) -> None:
    record = load_record(cluster)
    if record is None:
        return
    if PROVIDERS[record["provider"]].is_running(record):
        raise KitError(f"cluster '{cluster}' is already up; `make down CLUSTER={cluster}` "
                       "first, or use it as it is")
    print(f"cluster '{cluster}': its record is stale (nothing of it runs); starting afresh", flush=True)
    for line in PROVIDERS[record["provider"]].forget_stale(cluster, record):
        print(f"  {line}", flush=True)


def launch(built) -> dict:
    cost = hourly_cost(built)
    if cost and cost[1]:
        print(f"launching '{built.cluster}' on {built.provider.NAME.upper()}: ~${cost[0]:.2f}/h "
              f"with min_workers, up to ~${cost[1]:.2f}/h at max_workers (on-demand list prices)",
              flush=True)
    # what every job submitted to it will see: `make submit` passes this, not the values
    # file as it is then (checked against it: an edit since is refused, not taken silently)
    state.save_job_env(built.cluster, job_env(built))
    record = built.provider.up(built.cluster, built.text, built.values)
    print(f"cluster '{built.cluster}' is up", flush=True)
    return record


def cmd_down(a) -> int:
    check_name("CLUSTER", a.cluster)
    purge = flag("PURGE", a.purge)
    try:
        record = load_record(a.cluster)
    except KitError:
        record = None  # teardown says what it does with a corrupt record
    for line in head_only_warnings(a.cluster, PROVIDERS[record["provider"]]) if record else []:
        print(line, flush=True)  # said, not refused: `make down` is how a bill ends
    with state.lock(a.cluster):
        print(teardown(a.cluster, purge), flush=True)
    return 0


def teardown(cluster: str, purge: bool = False) -> str:
    """Stop what the cluster's record says was launched. Without a readable record, a
    provider whose nodes are found without it (STOPS_WITHOUT_RECORD: a crashed run's
    processes carry the cluster's marker) still stops them."""
    named = PROVIDERS.get(provider_named_in_values(cluster))
    try:
        record = load_record(cluster)
    except KitError:
        if named is None or not named.STOPS_WITHOUT_RECORD:
            raise
        print(f"ignoring the corrupt record {state.record_path(cluster)}", flush=True)
        record = None
    if record is not None:
        return PROVIDERS[record["provider"]].down(cluster, record, purge)
    if named is not None and named.STOPS_WITHOUT_RECORD:
        return named.down(cluster, None, purge)
    return f"cluster '{cluster}' was not launched from this checkout; nothing to stop"


def provider_named_in_values(cluster: str) -> str | None:
    """The values file's `provider:`, read without validating (a values file broken after
    `up` must not stop `down`); None if it cannot be read or names no text."""
    try:
        values = parse_yaml(values_file(cluster).read_bytes(), cluster)
    except KitError:
        return None
    named = values.get("provider") if isinstance(values, dict) else None
    return named if isinstance(named, str) else None


def require_record(cluster: str) -> dict:
    check_name("CLUSTER", cluster)
    record = load_record(cluster)
    if record is None:
        raise KitError(f"cluster '{cluster}' is not up; run `make up CLUSTER={cluster}`")
    return record



def cmd_clean(a) -> int:
    kept = state.launched_clusters()
    if BUILD.is_dir():
        for child in BUILD.iterdir():
            if (child == LAUNCHED and kept) or child in (RESULTS, BENCH, RUNS):  # records and results stay
                continue
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    if kept:
        print(f"kept {LAUNCHED}: the records of {', '.join(kept)}, which may still be running; "
              "`make down CLUSTER=<name>` each, then `make clean` again")
    return 0
