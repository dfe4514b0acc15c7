"""The providers a cluster can run on, one package each (scripts/providers/<name>/), all
with the same small interface.

A values file names its provider (`provider: aws`); the kit looks it up here and calls
only what `Provider` lists. Adding a provider is one package here, one template
(cluster_templates/<name>.yaml.j2) and one schema (cluster_templates/schema/<name>.schema.yaml).
An unknown provider is an error, never a fallback.
"""

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from scripts.core import state
from scripts.core.errors import KitError, short
from scripts.providers.common import Prices
from scripts.core.submit import JobFiles, JobPackages
from scripts.providers import aws, kuberay, local


class Provider(Protocol):
    """Everything the kit outside scripts/providers/ may use of a provider, and nothing
    more: tests/test_render.py checks each provider module against it, values, types and
    signatures included, from these annotations and methods.

    In two parts, as SkyPilot keeps a cloud's model apart from its provisioner: the model
    (its facts, and what it says of a values file: checks, the rendered config, prices,
    plans) runs offline, with no account and no machine touched, so validate, render, cost
    and every dry run work on a laptop without credentials; the provisioner acts on the
    account or the machine (preflight's read-only calls, up, down, jobs, day 2)."""

    # --- the model: facts and what the provider says of values, offline ----------------
    NAME: str  # as written in `provider:`; the template and schema carry the same name
    HEAD_TYPE: str  # the head's node type in the rendered config
    # A job's time limit when TIMEOUT is empty (None: none): a forgotten job on a cloud
    # cluster bills until it ends.
    DEFAULT_JOB_TIMEOUT_S: float | None
    JOB_PACKAGES: JobPackages  # how a job's requirements.txt is honoured on the nodes
    JOB_FILES: JobFiles  # how a job's folder reaches the nodes
    # `down` finds the cluster's nodes without its record (so a corrupt or missing record
    # does not keep a crashed run's nodes alive); False: without a record it touches nothing.
    STOPS_WITHOUT_RECORD: bool
    LAPTOP_TOOLS: tuple[str, ...]  # programs this machine needs on PATH (make preflight checks)
    SHARES_CLUSTER_NAMES: bool     # two values files with one cluster_name are one cluster to it
    RECORD_SCHEMA: dict  # JSON schema of the record `up` saves (scripts/core/state.py)

    def value_problems(self, values: dict) -> list[str]:
        """The provider's own rules on schema-checked values: 'key: problem; fix' each."""

    def value_notes(self, values: dict) -> list[str]:
        """`note:` lines for values that are valid but unwise (never refused), each 'key:
        what; what to do'; [] when none."""

    def template_context(self, cluster: str, values: dict) -> dict:
        """Everything the template lays out, computed from checked values."""

    def config_problems(self, config: dict) -> list[str]:
        """Every check of the rendered config: Ray's own schema for a Ray autoscaler config
        (scripts/core/ray_config.py), the provider's rules; KubeRay's CRD and operator rules
        for a RayCluster."""

    def companion_files(self, cluster: str, values: dict) -> dict[str, str]:
        """{file name suffix: text} that `make render` writes beside the config (AWS: the
        head's least-privilege IAM policy); {} when there is none."""

    def node_prices(self, values: dict) -> Prices | None:
        """What the mix bills, from scripts/catalog.py's list prices: `make cost`'s table,
        its $/h at min and at max workers, each node type's $/h (the run's bill), its
        bandwidth. None where it bills nothing (this machine's cores): pricing then prices
        it through its prices_as, as the AWS mix it stands for."""

    def plan(self, values: dict, config: dict) -> list[str]:
        """What `up` would launch, in lines a person reads (`make up DRY_RUN=1`)."""

    def run_plan(self, built, job: str, args: list[str], timeout_s: float | None) -> list[str] | None:
        """What `make run DRY_RUN=1` says where the platform runs the job itself (KubeRay:
        the RayJob, its limits and files), in lines a person reads; None where `make run`
        is up, submit and down (the dry run then says what `up` would launch)."""

    def same_cluster(self, values: dict, record: dict) -> bool:
        """Whether `values` would launch the cluster `record` (any provider's) names: one
        cluster to the platform, whatever CLUSTER each came from."""

    def job_problems(self, record: dict, job: str, args: list[str]) -> list[str]:
        """What would fail the job on the cluster's nodes, said before it runs, one
        'problem; fix' each: data its ARGS name that the nodes cannot read (AWS: s3://
        buckets outside aws.data_buckets), packages its nodes' images lack and no runtime_env
        can install (KubeRay's stock images); [] when none."""

    def images_to_bake(self, values: dict) -> dict[str, str]:
        """{"gpu"|"cpu": the tag the pods pull} for `make image` to build with the jobs'
        packages baked in; raise KitError saying why where the nodes get them otherwise."""

    # --- the provisioner: what reads or changes the account, the cluster or the machine --

    def preflight(self, values: dict, avoid_zones: tuple = ()) -> tuple[dict, list[str]]:
        """Read-only checks of the account or machine before anything is created; return
        the values with what they decided pinned (e.g. the zone, never one of avoid_zones:
        those refused capacity), and lines saying what was found. Raise KitError naming
        every problem and its fix."""

    def fetch_prices(self, values: dict) -> str:
        """`make prices`: the region's list prices from the platform's own price list, saved
        where scripts/catalog.py reads them; the file written. KitError where the mix has
        no such list (this machine's cores; KubeRay's node groups, priced in us-east-1)."""

    def up(self, cluster: str, config_text: str, values: dict) -> dict:
        """Save the cluster's record (state.save) before anything starts, launch from the
        rendered config, wait_until_ready; return the record down/status/job_address use.
        Raise CapacityRefused where the zone had no capacity for the head (nothing runs)."""

    def wait_until_ready(self, record: dict) -> None:
        """Block until the head and min_workers of every worker type have joined."""

    def is_running(self, record: dict) -> bool:
        """Whether the recorded cluster may still run (False: its record is stale)."""

    def forget_stale(self, cluster: str, record: dict) -> list[str]:
        """Forget the record of a cluster that ended itself (autostop, the dead-man, the
        hung-head alarm), with what it left that is its own and nothing but a bill (AWS:
        its alarm); lines saying what was deleted or kept."""

    def down(self, cluster: str, record: dict | None, purge: bool = False) -> str:
        """Stop what the record says was launched, and only that; check nothing of it is
        left; return what was done and what stays (purge: delete what is the cluster's own).
        record None: only a provider that STOPS_WITHOUT_RECORD looks for anything."""

    def status(self, record: dict) -> int:
        """Print the cluster's nodes and resources; return an exit code."""

    def dashboard(self, record: dict) -> int:
        """Print the dashboard's URL; where that needs a tunnel, keep it open until Ctrl-C."""

    def attach(self, record: dict) -> int:
        """An interactive shell on the head (locally: one aimed at the head)."""

    def monitor(self, record: dict, follow: bool) -> int:
        """The autoscaler's log: its last lines, or followed until Ctrl-C."""

    def fetch_folder(self, record: dict, folder: str, dest: Path) -> None:
        """Copy a run's folder, a path on the head, into `dest` on this machine (`make fetch`)."""

    def run_job(self, built, job: str, args: list[str], timeout_s: float | None,
                verbose: bool, env_vars: dict[str, str]) -> tuple[int, dict | None] | None:
        """`make run` as the platform's own job, whose cluster the platform deletes when the
        job ends (KubeRay's RayJob): its exit code and summary. None where the platform has
        no such job: the kit then runs up, submit and down itself (scripts/commands/jobs.py).
        built: the checked config (scripts/build.py's Built); the provider preflights it."""

    def job_address(self, record: dict) -> AbstractContextManager:
        """Context yielding (dashboard URL, python, auth token) for job submission."""


PROVIDERS: dict[str, Provider] = {aws.NAME: aws, kuberay.NAME: kuberay, local.NAME: local}


def provider(name, where: str, raw: dict | None = None) -> Provider:
    """The provider a values file names; one line where it names none the kit knows,
    suggesting the one whose schema knows most of the file's top-level keys."""
    if name not in PROVIDERS:
        raise KitError(f"{where}: provider: {short(name)} is not one of "
                       f"{', '.join(PROVIDERS)}; set `provider: {likely_provider(raw or {})}`")
    return PROVIDERS[name]


def likely_provider(raw: dict) -> str:
    """The provider whose values schema knows the file's keys best (fewest unknown keys,
    at any depth; local on a tie): instance types under the workers point at aws, pods at
    kuberay, cpus at local. A file half written (required keys missing) is judged too."""
    from scripts.core.paths import SCHEMAS
    from scripts.core.values import load_schema, schema_problems

    def unknown(name: str) -> int:
        schema = load_schema(SCHEMAS / f"{name}.schema.yaml")
        found = schema_problems(dict(raw, provider=name) if isinstance(raw, dict) else {}, schema)
        return sum(": unknown key;" in problem for problem in found)
    return min(PROVIDERS, key=lambda name: (unknown(name), name != local.NAME))


def load_record(cluster: str) -> dict | None:
    """The validated record of a launched cluster (each provider's RECORD_SCHEMA), or None."""
    return state.load(cluster, {name: p.RECORD_SCHEMA for name, p in PROVIDERS.items()})
