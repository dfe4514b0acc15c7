"""The local provider: a simulated multi-node Ray cluster on this machine, no cloud.

`up` starts a real Ray head whose autoscaler reads the launched config
(build/launched/<cluster>.yaml) and starts every min_workers node through
loopback_node_provider.py, each a real raylet on its own loopback address. The cluster
has a private temp dir (mode 0700, random name), its own ports and Ray's token
authentication. Every process it starts carries RAYKIT_CLUSTER_ID in its environment, a
marker derived from this checkout's build dir and the cluster's name: `down` stops the
processes that carry it (and their children), and nothing else; it never runs `ray stop`.
With `pin_cpus` (the default), each node runs on cores of its own (cpu_sets.py); with a
node type's `cpu_quota`, on that fraction of a core's time (cpu_quota.py).

Its concerns, a module each in this package:
  loopback_node_provider.py  the node provider the head's autoscaler loads: one raylet a node
  cpu_sets.py                which cores each node is pinned to
  cpu_quota.py               how much CPU time a node may use (cgroups)
  gpus.py                    which of this machine's GPUs each node trains on
  priority.py                whose work comes first on shared cores: the trainers'
  autostop.py                the watchdog beside the head (autostop and job limits)
  names.py                   the names its modules share: node type, head address, marker
  values.py                  the rules on values files (this machine's memory, cores, quotas)
  render.py                  checked values -> the template's context; the plan
  processes.py               a cluster's processes, found by its marker, and stopping them
  launch.py                  `make up`: the head, its watchdog, the wait for the nodes
  teardown.py                `make down`: the marked processes, groups and temp dir
  day2.py                    status, dashboard, attach, monitor, the job address
  __init__.py                the provider's face (the interface), and what a job needs of it
"""

from scripts.core.errors import KitError
from scripts.core.submit import JobFiles, JobPackages
# the interface's members, each from the module of its concern (`make run` is the kit's up,
# submit and down here: no platform job)
from scripts.core.submit import no_platform_job as run_job  # noqa: F401
from scripts.core.submit import no_platform_plan as run_plan  # noqa: F401
from scripts.providers.local.advice import value_notes  # noqa: F401
from scripts.providers.local.day2 import (  # noqa: F401
    attach,
    dashboard,
    fetch_folder,
    is_running,
    job_address,
    monitor,
    same_cluster,
    status,
)
from scripts.providers.local.launch import up, wait_until_ready  # noqa: F401
from scripts.providers.local.names import HEAD_TYPE, NAME  # noqa: F401
from scripts.providers.local.render import plan, template_context  # noqa: F401
from scripts.providers.local.teardown import down, forget_stale  # noqa: F401
from scripts.providers.local.values import config_problems, value_problems  # noqa: F401

DEFAULT_JOB_TIMEOUT_S = None  # it runs on this machine: no bill to cap
# A job's requirements.txt must already be satisfied in .venv, which every local node runs:
# Ray's pip runtime_env would clone that whole virtualenv (torch included, ~6 GB) per job.
JOB_PACKAGES = JobPackages.INSTALLED
# The job's folder as it is (a local:// URI). The simulated nodes share one session dir,
# where each node's agent unpacked an uploaded working_dir in turn, removing the copy
# before it: a process already running in it (the job's driver, a replica starting) lost
# its files and failed an import.
JOB_FILES = JobFiles.IN_PLACE
# A crashed run may leave processes without a readable record: they carry the cluster's
# marker, so `down` finds them anyway, and a corrupt record is skipped, not an error.
STOPS_WITHOUT_RECORD = True
LAPTOP_TOOLS = ()  # everything runs here, through .venv
SHARES_CLUSTER_NAMES = False  # a local cluster is its own processes and ports

RECORD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cluster", "provider", "gcs_address", "dashboard_url", "temp_dir",
                 "auth_token", "expected_nodes"],
    "properties": {
        "cluster": {"type": "string"},
        "provider": {"const": NAME},
        "gcs_address": {"type": "string", "pattern": r"^127\.0\.0\.2:[0-9]{1,5}$"},
        "dashboard_url": {"type": "string", "pattern": r"^http://127\.0\.0\.1:[0-9]{1,5}$"},
        "temp_dir": {"type": "string", "pattern": r"^/tmp/raykit-[A-Za-z0-9_]{8}/ray$"},
        "auth_token": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "expected_nodes": {"type": "integer", "minimum": 1, "maximum": 1000},
        "up_at": {"type": "number", "minimum": 0},  # epoch seconds; autostop counts from it
        "autostop_minutes": {"type": "number", "minimum": 0, "maximum": 10080},
    },
}


def node_prices(values: dict) -> None:
    """None: it runs on this machine's cores, and bills nothing; `make cost` and `make
    bench` price it through its prices_as, as the AWS mix it stands for (pricing/cost.py)."""
    return None


def fetch_prices(values: dict) -> str:
    raise KitError(f"CLUSTER={values['cluster_name']}: a local mix bills nothing and is priced as "
                   "the AWS mix its prices_as names; `make prices` reads an AWS mix's region")


def companion_files(cluster: str, values: dict) -> dict[str, str]:
    return {}


def preflight(values: dict, avoid_zones: tuple = ()) -> tuple[dict, list[str]]:
    return values, []  # value_problems already checked this machine's memory


def job_problems(record: dict, job: str, args: list[str]) -> list[str]:
    """Every local node runs as this user, with this user's credentials and .venv: it
    reads what the job's driver reads, and require_installed checks the packages."""
    return []


def images_to_bake(values: dict) -> dict[str, str]:
    raise KitError("`make image` builds the images a KubeRay values file names (images.job_packages: "
                   "baked, see k8s_hetero.yaml); the local cluster runs .venv, which has the jobs' packages")
