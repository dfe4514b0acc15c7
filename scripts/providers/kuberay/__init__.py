"""The KubeRay provider: the kit's mixes as a RayCluster on a Kubernetes cluster that runs
the KubeRay operator (>= 1.6: crd.MIN_KUBERAY_VERSION), driven through `kubectl`.

The kit launches no machines here: the cluster's node groups (EKS managed node groups,
Karpenter, GKE node pools) hold the pods, and the operator starts Ray in them. A values file
says what each group's pods ask for (CPUs, memory, GPUs), where they may run (node
selectors, tolerations) and their role; the rendered RayCluster is checked offline against
the pinned release's CRD and the operator's own rules (crd.py) before `kubectl`
sees it. `make run` is a RayJob instead (rayjob.py): the operator tears its cluster
down when the job ends, whatever happens to this machine.

Its concerns, a module each in this package:
  names.py       the names its modules share: the provider's, the head group's, the launch id label
  values.py      the rules on values files; what the node groups need to hold the pods
  render.py      checked values -> the template's context, the users' Role, the plan
  prices.py      what the node groups bill for the pods (and a pod's share of its node)
  crd.py         the pinned release's CRDs and the operator's rules, ported
  kubectl.py     the `kubectl` plumbing: calls, JSON answers, rights, waits
  launch.py      `make up`: preflight, apply, wait until the pods are Ready
  teardown.py    `make down`: delete only the RayCluster this checkout launched
  day2.py        status, dashboard, attach, monitor, the port-forward jobs go through
  rayjob.py      `make run` as a RayJob
  watchdog.py    the head pod's autostop container (scripts/node/autostop.py)
  __init__.py    the provider's face (the interface), and what a job needs of it

`up` labels the RayCluster with a launch id of its own and records it; `down` deletes only
a RayCluster carrying that id, then waits until none of its pods is left.
"""

from scripts.core import node_packages, state
from scripts.core.errors import KitError
from scripts.core.inputs import job_dir
from scripts.core.submit import JobFiles, JobPackages
from scripts.providers.kuberay import crd, rayjob
# the interface's members, each from the module of its concern
from scripts.providers.kuberay.day2 import (  # noqa: F401
    attach, dashboard, fetch_folder, is_running, job_address, monitor, same_cluster, status)
from scripts.providers.kuberay.launch import preflight, up, wait_until_ready  # noqa: F401
from scripts.providers.kuberay.names import HEAD_TYPE, NAME  # noqa: F401
from scripts.providers.kuberay.prices import node_prices  # noqa: F401
from scripts.providers.kuberay.render import companion_files, plan, pod_lines, template_context  # noqa: F401
from scripts.providers.kuberay.teardown import down, forget_stale  # noqa: F401
from scripts.providers.kuberay.values import value_problems  # noqa: F401

DEFAULT_JOB_TIMEOUT_S = 6 * 3600.0  # GPU pods hold their nodes (and the node groups bill) until it ends
JOB_PACKAGES = JobPackages.PIP  # Ray's pip runtime_env, over the image's packages
JOB_FILES = JobFiles.UPLOAD  # through the dashboard; each pod unpacks its own copy
STOPS_WITHOUT_RECORD = False  # without the record's launch id, no RayCluster is the kit's to delete
LAPTOP_TOOLS = ("kubectl",)  # every call to the cluster (`make fetch`: kubectl cp)
SHARES_CLUSTER_NAMES = True  # one RayCluster name in its namespace

RECORD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cluster", "provider", "name", "namespace", "context", "launch_id",
                 "expected_pods", "ready_timeout_minutes"],
    "properties": {
        "cluster": {"type": "string"},
        "provider": {"const": NAME},
        "name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"},
        "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
        "context": {"type": ["string", "null"], "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,252}$"},
        # the API server the context pointed at when `up` ran (kubectl.pinned_target)
        "server": {"type": "string", "maxLength": 2000},
        "launch_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
        "expected_pods": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "ready_timeout_minutes": {"type": "integer", "minimum": 1, "maximum": 120},
        "job_packages": {"enum": ["install", "baked"]},  # images.job_packages (absent: install)
        # autostop_minutes: after so long with no job the head's watchdog deletes it (0: never)
        "watchdog_minutes": {"type": "integer", "minimum": 0, "maximum": 10080},
    },
}


def fetch_prices(values: dict) -> str:
    raise KitError(f"CLUSTER={values['cluster_name']}: a KubeRay mix is priced by its node groups' "
                   "instance types in us-east-1 (scripts/catalog.py); `make prices` reads an AWS "
                   "mix's region")


def config_problems(config: dict) -> list[str]:
    """The pinned KubeRay release's CRD schema, then the operator's rules."""
    return crd.problems(config)


def run_job(built, job: str, args: list[str], timeout_s: float | None,
            verbose: bool, env_vars: dict[str, str]) -> tuple[int, dict | None]:
    """`make run` as a RayJob (rayjob.py): the operator deletes its cluster."""
    refused_packages(built.values, job)
    with state.lock(built.cluster):
        # the RayJob's cluster runs no watchdog (watchdog.without): its RoleBinding is not asked for
        for line in preflight(built.values | {"autostop_minutes": 0})[1]:
            print(line, flush=True)
        return rayjob.run(built, job, args, timeout_s or DEFAULT_JOB_TIMEOUT_S, verbose,
                          job_packages(built.values), JOB_FILES, env_vars)


def run_plan(built, job: str, args: list[str], timeout_s: float | None) -> list[str]:
    """The RayJob `make run` would create: its files, limits and images, then its cluster."""
    refused_packages(built.values, job)
    return rayjob.plan(built, job, args, timeout_s or DEFAULT_JOB_TIMEOUT_S, job_packages(built.values),
                       JOB_FILES) + pod_lines(built.values)


def job_packages(values: dict) -> JobPackages:
    """Baked images hold the jobs' packages: no pip runtime_env (an air-gapped cluster has no
    index to install from); stock ones install them (JOB_PACKAGES)."""
    return JobPackages.BAKED if values["images"]["job_packages"] == "baked" else JOB_PACKAGES


def refused_packages(values: dict, job: str) -> None:
    problems = package_problems(job, values["images"]["job_packages"])
    if problems:
        raise KitError("; ".join(problems))


def images_to_bake(values: dict) -> dict[str, str]:
    """The images the pods run (gpu if a pod has GPUs, cpu if one has none), where the
    values say they hold the jobs' packages."""
    images = values["images"]
    if images["job_packages"] != "baked":
        raise KitError("images.job_packages is install: the pods run stock images and pip-install "
                       "each job's packages; to bake them, set job_packages: baked and name your "
                       "registry's tags in images.gpu/images.cpu")
    pods = [values["head"]["pod"]] + [w["pod"] for w in values["workers"].values()]
    return {kind: images[kind] for kind, used in (("gpu", any(p["gpus"] for p in pods)),
                                                  ("cpu", any(not p["gpus"] for p in pods))) if used}


def job_problems(record: dict, job: str, args: list[str]) -> list[str]:
    """A job whose packages no runtime_env can install, on stock images. (The pods read
    what their service account may, e.g. S3 through EKS Pod Identity: the kit cannot see
    that from here, so it refuses no data.)"""
    return package_problems(job, record.get("job_packages", "install"))


def package_problems(job: str, job_packages: str) -> list[str]:
    """Ray's pip runtime_env installs a job's requirements.txt over any image; packages
    that install only without their dependencies (requirements-nodeps.txt) need an image
    that holds them, or the job dies of a ModuleNotFoundError after the pods have billed."""
    if job_packages == "baked" or not node_packages.needs_built_image(job_dir(job)):
        return []
    return [f"JOB={job}: its {node_packages.NODEPS_FILE} installs only with --no-deps, which Ray's "
            "runtime_env cannot do on the stock images (images.job_packages: install); build the "
            "kit's images (`make image`), name them in images.gpu/images.cpu and set "
            "images.job_packages: baked"]


def value_notes(values: dict) -> list[str]:
    """No advice of KubeRay's own yet (its node groups, not the kit, choose the machines)."""
    return []
