"""The AWS provider: `ray up`/`ray down` of a cluster of EC2 instances, and what the kit
makes for it (its security group and IAM roles), behind the Provider interface.

Its concerns, a module each in this package:
  names.py       the names of what it makes: node type, tags, group, roles
  values.py      the rules on values files and on the rendered config
  render.py      checked values -> the template's context (cluster_templates/aws.yaml.j2)
  iam.py         the head's and the workers' least-privilege policies and roles
  preflight.py   read-only checks of the account before anything is created
  alarm.py       the hung-head CloudWatch alarm
  prices.py      what a mix bills, node by node (list prices and EBS)
  cli.py         the `ray` CLI against the rendered config, and the credentials it needs
  launch.py      `make up`: the group, placement group and roles, `ray up`, the wait for workers
  teardown.py    `make down`: `ray down`, then nothing of the cluster left
  day2.py        status, dashboard, attach, monitor, the tunnel jobs go through
  __init__.py    the provider's face (the interface): preflight, plan, and what a job needs
"""

import copy
import json
import re

import yaml

from scripts.core import state
from scripts.core.errors import KitError, short
from scripts.core.submit import JobFiles, JobPackages, storage_of
from scripts.providers.aws.iam import head_policy, user_policy
# the interface's members, each from the module of its concern (`make run` is the kit's up,
# submit and down here: EC2 has no job that ends its own instances)
from scripts.core.submit import no_platform_job as run_job  # noqa: F401
from scripts.core.submit import no_platform_plan as run_plan  # noqa: F401
from scripts.providers.aws.advice import value_notes  # noqa: F401
from scripts.providers.aws.day2 import (  # noqa: F401
    attach,
    dashboard,
    fetch_folder,
    is_running,
    job_address,
    monitor,
    same_cluster,
    status,
)
from scripts.providers.aws.launch import kit_creates_ssh_group, up, wait_until_ready  # noqa: F401
from scripts.providers.aws.names import HEAD_TYPE, NAME
from scripts.providers.aws.preflight import preflight as check_account
from scripts.providers.aws.price_list import fetch_prices  # noqa: F401
from scripts.providers.aws.prices import node_prices, node_usd_per_hour  # noqa: F401
from scripts.providers.aws.render import template_context  # noqa: F401
from scripts.providers.aws.teardown import down, forget_stale  # noqa: F401
from scripts.providers.aws.values import config_problems, nodes_of, value_problems  # noqa: F401

DEFAULT_JOB_TIMEOUT_S = 6 * 3600.0  # TIMEOUT= overrides it (up to 7 days)
JOB_PACKAGES = JobPackages.PIP  # a job's requirements.txt: Ray's pip runtime_env, over the image's packages
JOB_FILES = JobFiles.UPLOAD  # each node unpacks its own copy of the job's folder
STOPS_WITHOUT_RECORD = False  # the record names what was launched: without it, nothing is touched
LAPTOP_TOOLS = ("ssh", "rsync")  # `ray up` reaches and sets up the nodes with them (and `make fetch`)
SHARES_CLUSTER_NAMES = True  # two values files with one cluster_name are one cluster to AWS (its tag)


RECORD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cluster", "provider", "cluster_name", "region", "min_workers",
                 "ready_timeout_s", "security_group", "ray_key_pair", "ray_role"],
    "properties": {
        "cluster": {"type": "string"},
        "provider": {"const": NAME},
        "cluster_name": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,39}$"},
        "region": {"type": "string", "pattern": "^[a-z]{2}(-gov)?-[a-z]+-[0-9]$"},
        "min_workers": {"type": "object", "maxProperties": 10,
                        "propertyNames": {"pattern": "^[a-z][a-z0-9_-]{0,39}$"},
                        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 100}},
        "ready_timeout_s": {"type": "integer", "minimum": 60, "maximum": 14400},
        # What Ray creates for this cluster when the values name none of their own.
        "security_group": {"type": ["string", "null"], "pattern": "^ray-[a-z][a-z0-9_-]{0,39}$"},
        "ray_key_pair": {"type": "boolean"},
        "ray_role": {"type": "boolean"},
        # the head's role and instance profile `make up` made (iam_instance_profile: auto)
        "head_role": {"type": ["string", "null"], "pattern": "^raykit-[a-z][a-z0-9_-]{0,39}-head$"},
        # the workers' role, made where the values name data buckets; the buckets
        "worker_role": {"type": ["string", "null"], "pattern": "^raykit-[a-z][a-z0-9_-]{0,39}-worker$"},
        # the train nodes' cluster placement group `make up` made (aws.placement_group)
        "placement_group": {"type": ["string", "null"], "pattern": "^raykit-[a-z][a-z0-9_-]{0,39}$"},
        "data_buckets": {"type": "array", "maxItems": 20, "items": {"type": "string",
                                                                   "pattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"}},
        "output_buckets": {"type": "array", "maxItems": 20, "items": {
            "type": "string", "pattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9_.-]{1,200})*$"}},
        "up_at": {"type": "number", "minimum": 0},  # epoch seconds; autostop counts from it
        "autostop_minutes": {"type": "integer", "minimum": 0, "maximum": 10080},
    },
}


def preflight(values: dict, avoid_zones: tuple = ()) -> tuple[dict, list[str]]:
    found = check_account(values, avoid_zones=avoid_zones)
    pinned = copy.deepcopy(values)
    pinned["aws"]["availability_zone"] = found["availability_zone"]
    pinned["aws"]["image_id"] = found["image_id"]
    pinned["aws"]["root_device"] = found["root_device"]  # the AMI's
    pinned["aws"]["ebs_kms_key"] = found["ebs_kms_key"]  # the account's default, if a customer's
    pinned["aws"]["ssh_cidr"] = found["ssh_cidr"]  # auto: this machine's address, /32
    if kit_creates_ssh_group(pinned) and not values["aws"]["subnet_ids"]:
        # the kit creates the SSH group in this subnet's VPC: Ray must launch there too
        pinned["aws"]["subnet_ids"] = [found["subnet"]]
    how = "as set" if values["aws"]["availability_zone"] else "picked: it offers every instance type"
    summary = (f"preflight: account {found['account']}, zone {found['availability_zone']} ({how}), "
               f"subnet {found['subnet']} usable"
               + f", AMI {found['image_id']} ({found['image_name']}"
               + (", the current Deep Learning Base AMI)" if values["aws"]["image_id"] == "auto" else ")")
               + (f", key pair {values['aws']['key_pair']} found" if values["aws"]["key_pair"] else "")
               + (f", SSH open to {found['ssh_cidr']} only" if kit_creates_ssh_group(pinned) else "")
               + ("" if found["notes"] else ", vCPU quotas suffice"))
    return pinned, [summary] + [f"preflight: {note}" for note in found["notes"]]


def plan(values: dict, config: dict) -> list[str]:
    aws = values["aws"]
    node_types = config["available_node_types"]
    lines = [f"AWS {aws['region']}, zone {aws['availability_zone'] or 'any (Ray picks)'}, "
             f"AMI {config['available_node_types'][HEAD_TYPE]['node_config']['ImageId']}"]
    for key, node in nodes_of(values).items():
        name = HEAD_TYPE if key == "head" else key.split(".", 1)[1]
        count = "1" if key == "head" else f"{node['min_workers']}-{node['max_workers']}"
        disk = node["disk"]
        volumes = f"{disk['root_gb']} GB" + (f" + {disk['data_gb']} GB" if disk["data_gb"] else "")
        image = config["docker"]["image"] if key == "head" else \
            node_types[name]["docker"]["worker_image"]
        lines.append(f"  {name}: {count} x {node['instance_type']}"
                     f"{' (spot)' if key != 'head' and node['spot'] else ''}, {volumes} {disk['volume_type']}, "
                     f"{image}, {usd(node_usd_per_hour(node, aws), '~$%.2f/h each')}")
    return lines


def usd(value: float | None, form: str = "~$%.2f/h") -> str:
    return form % value if value is not None else "no list price (`make prices` reads the region's)"


def companion_files(cluster: str, values: dict) -> dict[str, str]:
    return {"head-policy.json": json.dumps(head_policy(values), indent=2) + "\n",
            "user-policy.json": json.dumps(user_policy(), indent=2) + "\n"}


S3_READ = re.compile(r"s3://[^\s,]+")  # an s3:// place in an argument (--data a,b lists several)


def job_problems(record: dict, job: str, args: list[str]) -> list[str]:
    """Every node's setup installs the jobs' packages (adaptdl's too). The S3 places a job's
    ARGS name that the cluster's nodes cannot reach: they read the buckets of
    aws.data_buckets (and of aws.output_buckets), and write only under aws.output_buckets,
    where a run's storage (checkpoints, the final model) must then be. A node's own disk is
    not another node's: with several train nodes, storage on a path would split the run."""
    readable = set(record.get("data_buckets") or [])
    writable = list(record.get("output_buckets") or [])
    storage = storage_of(args)
    written = storage if storage and storage.startswith("s3://") else None
    read = {m.group(0) for arg in args for m in S3_READ.finditer(arg)} - {written}
    named = sorted({written_bucket(uri) for uri in read
                    if written_bucket(uri) not in readable and not under_any(uri, writable)})
    problems = [f"ARGS: s3://{bucket}: the nodes of '{record['cluster']}' cannot read bucket {bucket} "
                f"(aws.data_buckets: {sorted(readable) or '[]'}); add it to aws.data_buckets in the "
                "values file and `make up` again (its nodes get read-only access)"
                for bucket in named]
    if written and not under_any(written, writable):
        problems.append(f"ARGS: {short(storage)} as the job's storage: the nodes of '{record['cluster']}' may "
                        f"write only under aws.output_buckets ({writable or '[]'}): the first checkpoint would "
                        f"fail; add {written_bucket(written)} (or bucket/prefix) to aws.output_buckets in the "
                        "values file and `make up` again")
    elif storage and storage.startswith("/") and train_nodes(record) > 1:
        problems.append(f"ARGS: {short(storage)} as the job's storage is a path on each node's own disk, and "
                        f"'{record['cluster']}' trains on {train_nodes(record)} nodes: each would checkpoint "
                        "apart and a restart could not resume; name s3://<a bucket of aws.output_buckets>")
    return problems


def written_bucket(uri: str) -> str:
    return uri[len("s3://"):].partition("/")[0]


def under_any(uri: str, places: list[str]) -> bool:
    """Whether s3://bucket/key lies under one of the output places (bucket or bucket/prefix)."""
    path = uri[len("s3://"):].rstrip("/")
    return any(path == place or path.startswith(place.rstrip("/") + "/") for place in places)


def train_nodes(record: dict) -> int:
    """The nodes with GPUs the launched config starts (the head's, each GPU type's min_workers)."""
    try:
        config = yaml.safe_load(state.config_path(record["cluster"]).read_text())
        types = config["available_node_types"]
        return sum((1 if name == config["head_node_type"] else int(t.get("min_workers") or 0))
                   for name, t in types.items() if (t.get("resources") or {}).get("GPU"))
    except (OSError, KeyError, TypeError, ValueError, AttributeError, yaml.YAMLError):
        return 0  # not the config `make up` wrote: `make down` says so


def images_to_bake(values: dict) -> dict[str, str]:
    raise KitError("`make image` builds the images a KubeRay values file names (images.job_packages: "
                   "baked, see k8s_hetero.yaml); AWS nodes install the jobs' packages at setup (node_packages.install_commands)")
