"""The AWS provider: `ray up`/`ray down` of a cluster of EC2 instances.

Every value the template (cluster_templates/aws.yaml.j2) lays out is computed here; the
rules Ray and the schema miss are checked here, on the values and on the rendered config
(every node_config against botocore's EC2 RunInstances input shape, enums included).
"""

import base64
import copy
import difflib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from contextlib import contextmanager

from jobs.raykit import placement
from scripts import catalog
from scripts.core import state
from scripts.core.errors import CapacityRefused, KitError, short
from scripts.core.paths import NODE_PROGRAMS, REPO
from scripts.core.submit import JobFiles, JobPackages
from scripts.core.ray_cli import free_port, port_open, ray_cli, ray_env
from scripts.providers.aws_preflight import NO_CREDENTIALS, driver_problems
from scripts.providers.aws_preflight import preflight as check_account

NAME = "aws"
HEAD_TYPE = "ray.head.default"
DEFAULT_JOB_TIMEOUT_S = 6 * 3600.0  # TIMEOUT= overrides it (up to 7 days)
JOB_PACKAGES = JobPackages.PIP  # a job's requirements.txt: Ray's pip runtime_env, over the image's packages
JOB_FILES = JobFiles.UPLOAD  # each node unpacks its own copy of the job's folder
BILLS = True  # its nodes are EC2 instances, priced from scripts/catalog.py
STOPS_WITHOUT_RECORD = False  # the record names what was launched: without it, nothing is touched
# Ports of the head's GCS and every node's object manager; the cluster's security group
# opens all traffic between its own nodes, so any fixed ports do.
GCS_PORT = 6379
OBJECT_MANAGER_PORT = 8076
# Ray's token authentication needs the token on every node; the kit does not distribute
# it yet, so auth stays off on AWS: the dashboard binds to the head's 127.0.0.1 (reached
# through an SSH tunnel) and the security group admits only SSH and the cluster's nodes.
AUTH_MODE = "disabled"
DASHBOARD_PORT = 8265  # Ray's default; the head binds it to 127.0.0.1
# The kit's node-side programs (scripts/node/, and nothing else of the kit) as Ray's
# file_mounts puts them in each node's container (Ray wants a directory, not a file):
# head_start_ray_commands starts the autostop watchdog (autostop.py) from there after Ray,
# worker_start_ray_commands the spot watcher (spot_watch.py); both standalone.
NODE_PROGRAMS_REMOTE_DIR = "~/raykit_node"
# Every node's dead-man switch (scripts/node/deadman.py, on the host): powered off, and so
# terminated, GRACE minutes after boot if Ray never ran (the GPU image's pull and the setup
# commands take 10-25 min), or IDLE minutes after Ray stopped running there.
DEADMAN_PROGRAM = NODE_PROGRAMS / "deadman.py"
DEADMAN_UNIT = "raykit-deadman"
DEADMAN_GRACE_MIN = 45
DEADMAN_IDLE_MIN = 10
MAX_TUNNEL_WAIT_S = 60
READY_POLL_S = 10
# Tags Ray's autoscaler puts on every instance it launches (ray.autoscaler.tags); a worker
# is tagged up-to-date once it has joined the cluster.
TAG_CLUSTER, TAG_KIND, TAG_USER_TYPE = "ray-cluster-name", "ray-node-type", "ray-user-node-type"
# The kit's own tag on everything of a cluster it makes (instances, volumes, group, roles):
# the head's policy conditions on it and the watchdog terminates by it (scripts/node/
# autostop.py spells it once more: a node program imports nothing of the kit).
KIT_TAG = "ray-kit-cluster"
TAG_STATUS, UP_TO_DATE, UPDATE_FAILED = "ray-node-status", "up-to-date", "update-failed"

# EBS volume sizes per type, GiB (docs.aws.amazon.com/ebs/latest/userguide/ebs-volume-types.html,
# 2026-11); st1 and sc1 cannot be boot volumes.
EBS_SIZE_GB = {"gp2": (1, 16384), "gp3": (1, 16384), "io1": (4, 16384), "io2": (4, 65536),
               "st1": (125, 16384), "sc1": (125, 16384), "standard": (1, 1024)}
BOOT_VOLUME_TYPES = ("gp2", "gp3", "io1", "io2", "standard")

# Packages the jobs import, installed into every node's image by its setup commands; their
# pins come from requirements.txt. (A job's own requirements.txt is JOB_PACKAGES' business.)
NODE_IMAGE_PACKAGES = ("torch", "torchvision", "timm", "autograd", "pandas", "portpicker",
                "scipy", "semver", "pymoo", "setuptools")
# ...and on GPU nodes only: NVML's bindings, which torch.cuda.utilization needs (the Ray
# image lacks them); without them the ViT job cannot tell a busy GPU from a host-bound one.
GPU_NODE_IMAGE_PACKAGES = ("nvidia-ml-py",)
NODEPS_REQUIREMENTS = REPO / "jobs" / "adaptdl_mnist" / "requirements-nodeps.txt"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's own CPU-only wheels
CONTAINER_USER = "1000:100"  # the `ray` user and `users` group of Ray's Docker images

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
        "data_buckets": {"type": "array", "maxItems": 20, "items": {"type": "string",
                                                                   "pattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"}},
        "up_at": {"type": "number", "minimum": 0},  # epoch seconds; autostop counts from it
        "autostop_minutes": {"type": "integer", "minimum": 0, "maximum": 10080},
    },
}


# --- values -> config ---------------------------------------------------------------

def nodes_of(values: dict) -> dict:
    """{dotted key in the values file: node values} for the head and each worker type."""
    return {"head": values["head"]} | {f"workers.{n}": w for n, w in values["workers"].items()}


def value_problems(values: dict) -> list[str]:
    problems = []
    aws, docker = values["aws"], values["docker"]
    region = aws["region"]
    if region not in catalog.REGIONS:
        problems.append(f"aws.region: unknown region {short(region)}" + did_you_mean(region, catalog.REGIONS))
    elif aws["image_id"] in catalog.KNOWN_AMIS:
        ami_region, ami_name = catalog.KNOWN_AMIS[aws["image_id"]]
        if ami_region != region:
            problems.append(f"aws.image_id: {aws['image_id']} is an AMI of {ami_region}, not "
                            f"{region}; set image_id: auto (the current DLAMI of the region)")
        else:
            problems += driver_problems(aws["image_id"], ami_name)
    zone = aws["availability_zone"]
    if zone and zone[:-1] != region:
        problems.append(f"aws.availability_zone: {zone} is not in region {region}; "
                        f"use a zone such as {region}a")
    problems += volume_problems(docker["volumes"])
    if aws["ssh_cidr"] != "auto" and aws["security_group_ids"]:
        problems.append("aws.ssh_cidr: applies to the group the kit creates, but "
                        "aws.security_group_ids names your own; set the SSH rule in your group "
                        "and ssh_cidr: auto, or drop security_group_ids")
    for i, option in enumerate(docker["extra_run_options"]):
        if option.split("=")[0] in ("--volume", "--mount"):
            problems.append(f"docker.extra_run_options[{i}]: mounts go in docker.volumes, "
                            "whose host dirs the kit creates; move it there")

    nodes = nodes_of(values)
    volume_types = ec2_enum("VolumeType")
    for key, node in nodes.items():
        itype = node["instance_type"]
        spec = catalog.INSTANCE_TYPES.get(itype)
        if spec is None:
            problems.append(f"{key}.instance_type: unknown instance type {short(itype)}"
                            + did_you_mean(itype, catalog.INSTANCE_TYPES)
                            + " (known: scripts/catalog.py INSTANCE_TYPES; add it there)")
            continue
        problems += disk_problems(key, node["disk"], spec, volume_types, docker)
        unsupported = catalog.gpu_support_problem(itype)
        if unsupported:
            problems.append(f"{key}.instance_type: {itype}: {unsupported}; pick a newer GPU "
                            "type such as g5.xlarge (A10G) or g6.xlarge (L4)")

    specs = {k: catalog.INSTANCE_TYPES.get(n["instance_type"]) for k, n in nodes.items()}
    if None not in specs.values():
        problems += mix_problems(values, nodes, specs)
    return problems


# Directories of the node's OS: the kit creates each volume's host dir, hands it to the
# container's user, and mounts a fresh data volume over the first one, so a host path here
# (or under the first group) would hide or take over the system's own files, after billing.
SYSTEM_DIR_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc",
                    "/run", "/sbin", "/snap", "/sys", "/usr")
SYSTEM_DIRS = ("/", "/home", "/home/ubuntu", "/mnt", "/opt", "/root", "/srv", "/tmp", "/var",
               "/var/lib", "/var/log")


def volume_problems(volumes: list[dict]) -> list[str]:
    problems = []
    for i, volume in enumerate(volumes):
        for side in ("host", "container"):
            if {".", ".."} & set(volume[side].split("/")):
                problems.append(f"docker.volumes[{i}].{side}: {short(volume[side])} has a '.' or "
                                "'..' part; write the path without them")
        host = volume["host"].rstrip("/") or "/"
        if host in SYSTEM_DIRS or any(host == top or host.startswith(top + "/")
                                      for top in SYSTEM_DIR_TREES):
            problems.append(f"docker.volumes[{i}].host: {short(volume['host'])} is a system directory "
                            "of the node (the kit chowns each host dir to the container's user and "
                            "mounts a data volume over the first); use a dir of its own such as /mnt/data")
    containers = [v["container"].rstrip("/") or "/" for v in volumes]
    for i, path in enumerate(containers):
        if path in containers[:i]:
            problems.append(f"docker.volumes[{i}].container: {short(volumes[i]['container'])} is "
                            f"docker.volumes[{containers.index(path)}]'s too (Docker refuses to "
                            "start the container); give each volume its own container path")
    return problems


def disk_problems(key: str, disk: dict, spec, volume_types: list[str], docker: dict) -> list[str]:
    problems = []
    vtype = disk["volume_type"]
    if vtype not in volume_types:
        return [f"{key}.disk.volume_type: {short(vtype)} is not an EBS volume type"
                + did_you_mean(vtype, volume_types)]
    if vtype not in BOOT_VOLUME_TYPES:
        problems.append(f"{key}.disk.volume_type: {vtype} cannot be a boot volume; "
                        f"use one of {', '.join(BOOT_VOLUME_TYPES)}")
    low, high = EBS_SIZE_GB[vtype]
    for size_key in ("root_gb", "data_gb"):
        size = disk[size_key]
        if (size_key == "root_gb" or size) and not low <= size <= high:
            problems.append(f"{key}.disk.{size_key}: {size} GiB is outside {vtype}'s "
                            f"{low}-{high} GiB; pick a size in that range")
    need = catalog.min_root_gb(spec.gpus > 0)
    if disk["root_gb"] < need:
        problems.append(
            f"{key}.disk.root_gb: {disk['root_gb']} GB is too small for the AMI "
            f"({catalog.AMI_ROOT_SNAPSHOT_GB} GB) plus the {'GPU' if spec.gpus else 'CPU'} "
            f"Docker image and packages; set root_gb: {need} or more")
    if disk["data_gb"] and disk["data_gb"] == disk["root_gb"]:
        problems.append(f"{key}.disk.data_gb: must differ from root_gb (the data "
                        "volume is found by its size at boot); change one of them")
    if disk["data_gb"] and not docker["volumes"]:
        problems.append(f"{key}.disk.data_gb: the data volume mounts on the first "
                        "docker.volumes host path; add a docker volume")
    return problems


def mix_problems(values: dict, nodes: dict, specs: dict) -> list[str]:
    if values["mix"] == "homogeneous":
        if not any(spec.gpus for spec in specs.values()):
            return ["head.instance_type: no node type has a GPU to train on; "
                    "pick a GPU type such as g5.xlarge"]
        return []
    problems = []
    if specs["head"].gpus == 0:
        problems.append(f"head.instance_type: {values['head']['instance_type']} has no GPU, but "
                        "a heterogeneous mix trains on the head; pick a GPU type such as g5.xlarge")
    for key, spec in specs.items():
        if key != "head" and spec.gpus:
            problems.append(f"{key}.instance_type: {nodes[key]['instance_type']} has "
                            f"{spec.gpus} GPU(s), but workers of a heterogeneous mix are CPU-only "
                            "preprocessors; pick a CPU type such as c5.4xlarge, or set mix: homogeneous")
    return problems


def did_you_mean(word: str, choices) -> str:
    hint = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def template_context(cluster: str, values: dict) -> dict:
    aws, docker, head = values["aws"], values["docker"], values["head"]
    data_volumes = sorted({n["disk"]["data_gb"] for n in nodes_of(values).values()} - {0})
    return {
        "region": aws["region"],
        "availability_zone": aws["availability_zone"],
        # `auto` until `make up` resolves it (the launched config records the id); a
        # rendered file keeps EC2's own SSM reference, which RunInstances resolves itself.
        "image_id": (f"resolve:ssm:{catalog.DLAMI_SSM_PARAMETER}" if aws["image_id"] == "auto"
                     else aws["image_id"]),
        "key_pair": aws["key_pair"],
        "ssh_private_key": f"~/.ssh/{aws['key_pair']}.pem" if aws["key_pair"] else None,
        "ssh_user": aws["ssh_user"],
        # Given groups replace the one Ray would create (it never adds rules to them).
        "security_group_name": None if aws["security_group_ids"] else security_group_name(values),
        "security_group_ids": aws["security_group_ids"],
        "subnet_ids": aws["subnet_ids"],
        "use_internal_ips": aws["use_internal_ips"],
        "tags": {KIT_TAG: values["cluster_name"]} | aws["tags"],
        "common_run_options": [f"-v {shlex.quote(v['host'])}:{shlex.quote(v['container'])}"
                               for v in docker["volumes"]]
        + ["--ulimit nofile=65536:65536"] + docker["extra_run_options"],
        # Only the head needs rights (its autoscaler launches and stops the workers).
        "head": aws_node(HEAD_TYPE, head, preprocess=head["preprocess"], spot=False,
                         root_device=aws["root_device"])
        | {"iam_instance_profile": iam_profile(head_profile_name(values))},
        "workers": [aws_node(name, w, preprocess=True, spot=w["spot"], root_device=aws["root_device"])
                    | {"min_workers": w["min_workers"], "max_workers": w["max_workers"],
                       "iam_instance_profile": iam_profile(worker_profile_name(values))}
                    for name, w in values["workers"].items()],
        "initialization_commands": deadman_commands() + host_dir_commands(docker, data_volumes),
        "head_start_ray_command": (
            f"ulimit -n 65536; RAY_AUTH_MODE={AUTH_MODE} ray start --head --port={GCS_PORT} "
            f"--object-manager-port={OBJECT_MANAGER_PORT} "
            "--autoscaling-config=~/ray_bootstrap_config.yaml "
            "--dashboard-host=127.0.0.1 --disable-usage-stats"),
        "file_mounts": {NODE_PROGRAMS_REMOTE_DIR: str(NODE_PROGRAMS)},  # the watchdog is always on
        "autostop_command": autostop_command(values),
        "worker_start_ray_command": (
            f"ulimit -n 65536; RAY_AUTH_MODE={AUTH_MODE} ray start "
            f"--address=$RAY_HEAD_IP:{GCS_PORT} --object-manager-port={OBJECT_MANAGER_PORT} "
            "--disable-usage-stats"),
        "spot_watch_command": spot_watch_command(values),
    }


def autostop_command(values: dict) -> str:
    """The head's watchdog, always: it stops a job past its time limit (recorded with the
    job), and after autostop_minutes with no job (0: never) it terminates every instance
    tagged with this cluster, its own head last (the head policy allows just that)."""
    return (f"nohup python {NODE_PROGRAMS_REMOTE_DIR}/autostop.py " + shlex.join([
        "--address", f"http://127.0.0.1:{DASHBOARD_PORT}",
        "--minutes", str(values["autostop_minutes"]),
        "--aws", values["cluster_name"], values["aws"]["region"]])
        + " > /tmp/raykit-autostop.log 2>&1 &")


def spot_watch_command(values: dict) -> str | None:
    """Where a worker type is spot: each worker drains its Ray node on AWS's interruption
    notice (scripts/node/spot_watch.py; on an on-demand worker it exits at once). Ray's updater
    sets RAY_HEAD_IP for the start commands; nothing of the values file enters it."""
    if not any(w["spot"] for w in values["workers"].values()):
        return None
    return (f"nohup python {NODE_PROGRAMS_REMOTE_DIR}/spot_watch.py --gcs $RAY_HEAD_IP:{GCS_PORT} "
            "> /tmp/raykit-spot-watch.log 2>&1 &")


def security_group_name(values: dict) -> str:
    """The cluster's security group, which `make up` makes (the name Ray would give it)."""
    return f"ray-{values['cluster_name']}"


def head_profile_name(values: dict) -> str | None:
    """The head's instance profile: `auto`, the kit's own least-privilege one for this
    cluster (made by `make up`); a name or ARN of yours; None, Ray's ray-autoscaler-v1
    (EC2 and S3 full access), only where the values file asks for it with null."""
    profile = values["aws"]["iam_instance_profile"]
    return f"raykit-{values['cluster_name']}-head" if profile == "auto" else profile


def worker_profile_name(values: dict) -> str | None:
    """The workers' instance profile: only where the values name data buckets (they read
    the jobs' data from them, read-only); otherwise none (workers call no AWS API)."""
    return f"raykit-{values['cluster_name']}-worker" if values["aws"]["data_buckets"] else None


def iam_profile(name_or_arn: str | None) -> dict | None:
    """RunInstances' IamInstanceProfile: {"Arn": ...} for an ARN, else {"Name": ...}."""
    if not name_or_arn:
        return None
    return {"Arn": name_or_arn} if name_or_arn.startswith("arn:") else {"Name": name_or_arn}


def aws_node(name: str, node: dict, preprocess: bool, spot: bool, root_device: str) -> dict:
    spec = catalog.INSTANCE_TYPES[node["instance_type"]]
    disk = node["disk"]
    # Where work runs is the labels' business (placement.py): no custom resources. A node
    # that preprocesses offers Ray the vCPUs the catalog leaves to it (one stays with
    # Ray's own processes), plus one per GPU for its training workers.
    resources = {"CPU": (catalog.preprocess_vcpus(node["instance_type"]) + spec.gpus
                         if preprocess else spec.vcpus)}
    if spec.gpus:
        resources["GPU"] = spec.gpus
    volumes = [{"device": root_device, "size_gb": disk["root_gb"], "type": disk["volume_type"]}]
    if disk["data_gb"]:
        volumes.append({"device": "/dev/sdf", "size_gb": disk["data_gb"],
                        "type": disk["volume_type"]})
    # /dev/shm holds Ray's object store inside the container: size it well above Ray's
    # default share (30% of RAM) so the store is never capped by Docker's 64 MB default.
    run_options = [f"--shm-size={max(1, int(spec.memory_gib * 0.4))}g"]
    if spec.gpus:
        run_options.append("--gpus all")
    return {
        "name": name,
        "instance_type": node["instance_type"],
        "resources": resources,
        "labels": placement.node_labels(name, trainer_slots=spec.gpus, preprocess=preprocess),
        "volumes": volumes,
        "market_type": "spot" if spot else None,  # the head is never spot: losing it ends the cluster
        "image": catalog.DOCKER_IMAGE["gpu" if spec.gpus else "cpu"],
        "run_options": run_options,
        "setup_commands": job_setup_commands(gpu=spec.gpus > 0),
    }


def deadman_commands() -> list[str]:
    """Host-side, first of all: the node's dead-man switch (scripts/node/deadman.py) as a
    systemd unit that restarts if it dies, so a node on which Ray never starts or has
    stopped powers itself off (and, launched with InstanceInitiatedShutdownBehavior=
    terminate, is terminated). The program travels base64-encoded: its text never meets a
    shell. A second `ray up` replaces the unit."""
    program = base64.b64encode(DEADMAN_PROGRAM.read_bytes()).decode()
    return [
        f"sudo mkdir -p /opt/raykit && echo {program} | base64 -d | sudo tee "
        "/opt/raykit/deadman.py > /dev/null",
        f"sudo systemctl stop {DEADMAN_UNIT} 2>/dev/null; sudo systemctl reset-failed "
        f"{DEADMAN_UNIT} 2>/dev/null; sudo systemd-run --unit {DEADMAN_UNIT} --property "
        f"Restart=always python3 /opt/raykit/deadman.py --grace-minutes {DEADMAN_GRACE_MIN} "
        f"--idle-minutes {DEADMAN_IDLE_MIN}",
    ]


def host_dir_commands(docker: dict, data_volume_sizes: list[int]) -> list[str]:
    """Host-side commands: create every mounted host dir, owned by the container's user
    (Ray's images run as uid 1000; a root-owned mount is read-only to the jobs); where a
    node has a data volume, format it once and mount it on the first volume's host dir.
    The volume is found by its exact size, since NVMe device names do not follow the
    BlockDeviceMapping's."""
    commands = [f"sudo mkdir -p {shlex.quote(v['host'])}" for v in docker["volumes"]]
    commands += [f"sudo chown {CONTAINER_USER} {shlex.quote(v['host'])}" for v in docker["volumes"]]
    if data_volume_sizes and docker["volumes"]:
        target = shlex.quote(docker["volumes"][0]["host"])
        for size_gb in data_volume_sizes:
            size_bytes = int(size_gb) * 1024**3
            commands.append(
                f"DEV=$(lsblk -bdnpo NAME,SIZE | awk '$2 == {size_bytes} {{print $1; exit}}'); "
                f"if [ -n \"$DEV\" ]; then (sudo blkid \"$DEV\" || sudo mkfs.ext4 -q \"$DEV\") "
                f"&& (mountpoint -q {target} || sudo mount \"$DEV\" {target}) "
                f"&& sudo chown {CONTAINER_USER} {target}; fi"
            )
    return commands


def pinned_requirements(path) -> dict[str, str]:
    """{name: 'name==version'} for every pinned line of a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([A-Za-z0-9_.+!-]+)", line.strip())
        if match:
            pins[match.group(1).lower()] = f"{match.group(1)}=={match.group(3)}"
    return pins


def job_setup_commands(gpu: bool) -> list[str]:
    """The jobs' pinned packages, installed in the container. A CPU-only node (a
    preprocessor) first takes torch and torchvision from PyTorch's CPU wheel index: the
    default build is CUDA's, whose torch and nvidia-* wheels take 4.4 GB installed
    (measured in .venv), pulled on every worker boot for nothing. `torch==X` then counts
    as satisfied by the CPU build (X+cpu), so the second command installs only the rest."""
    pins = pinned_requirements(REPO / "requirements.txt")
    packages = NODE_IMAGE_PACKAGES + (GPU_NODE_IMAGE_PACKAGES if gpu else ())
    missing = [p for p in packages if p not in pins]
    if missing:
        raise KitError(f"requirements.txt: no pinned version for {', '.join(missing)}")
    nodeps = pinned_requirements(NODEPS_REQUIREMENTS).values()
    commands = [] if gpu else [
        f"pip install -q --no-cache-dir --index-url {TORCH_CPU_INDEX} "
        + shlex.join([pins["torch"], pins["torchvision"]])]
    return commands + [
        "pip install -q --no-cache-dir " + shlex.join(pins[p] for p in packages),
        "pip install -q --no-cache-dir --no-deps " + shlex.join(nodeps),
    ]


# --- checks on the rendered config --------------------------------------------------

def config_problems(config: dict) -> list[str]:
    problems = []
    for name, node_type in config["available_node_types"].items():
        problems += [f"available_node_types.{name}.node_config{p}"
                     for p in run_instances_problems(node_type["node_config"])]
    return problems + mount_problems(config)


def ec2_model():
    import botocore.session

    return botocore.session.get_session().get_service_model("ec2")


def ec2_enum(shape_name: str) -> list[str]:
    return list(ec2_model().shape_for(shape_name).enum)


def run_instances_problems(node_config: dict) -> list[str]:
    """node_config as RunInstances parameters: botocore's validator (names, types,
    required members) plus the enum values it does not check."""
    from botocore.validate import ParamValidator

    shape = ec2_model().operation_model("RunInstances").input_shape
    # SubnetIds is Ray's, not EC2's: Ray turns it into one SubnetId per launch.
    params = {"MinCount": 1, "MaxCount": 1, **node_config}
    if isinstance(params.pop("SubnetIds", None), list) and "SubnetId" not in params:
        params["SubnetId"] = "subnet-00000000"
    report = ParamValidator().validate(params, shape)
    problems = []
    if report.has_errors():
        problems += [": " + line.strip() for line in report.generate_report().splitlines()]
    problems += [f"{path}: {short(value)} is not one of {', '.join(allowed)}"
                 for path, value, allowed in enum_violations(params, shape, "")]
    return problems


def enum_violations(value, shape, path):
    if shape.type_name == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                yield from enum_violations(value[name], member, f"{path}.{name}")
    elif shape.type_name == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            yield from enum_violations(item, shape.member, f"{path}[{i}]")
    elif shape.type_name == "string" and shape.enum and isinstance(value, str):
        if value not in shape.enum:
            yield path, value, shape.enum


def mount_problems(config: dict) -> list[str]:
    """Every `-v host:container` host path must be created by an initialization command:
    Docker would create a missing one as root, hiding a typo in an empty directory."""
    docker = config.get("docker", {})
    options = list(docker.get("run_options", [])) + list(docker.get("head_run_options", []))
    for node_type in config["available_node_types"].values():
        options += node_type.get("docker", {}).get("worker_run_options", [])
    created = {shlex.split(c)[-1] for c in config.get("initialization_commands", [])
               if c.startswith("sudo mkdir -p ")}
    problems = []
    for option in options:
        words = shlex.split(option)
        for flag, arg in zip(words, words[1:] + [""]):
            if flag in ("-v", "--volume") and arg.split(":")[0] not in created:
                problems.append(f"docker.run_options: host path of mount {short(arg)} is not "
                                "created by any initialization command; add it to docker.volumes")
    return problems


def node_usd_per_hour(node: dict, region: str) -> float | None:
    """The instance's on-demand price plus its EBS volumes' (billed per GB-month); None
    where scripts/catalog.py lists no price for the region."""
    disk = node["disk"]
    return catalog.node_usd_per_hour(node["instance_type"], region, disk["volume_type"],
                                     disk["root_gb"] + disk["data_gb"])


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
                     f"{image}, {usd(node_usd_per_hour(node, aws['region']), '~$%.2f/h each')}")
    return lines



def usd(value: float | None, form: str = "~$%.2f/h") -> str:
    return form % value if value is not None else "no list price in scripts/catalog.py"


def companion_files(cluster: str, values: dict) -> dict[str, str]:
    return {"head-policy.json": json.dumps(head_policy(values), indent=2) + "\n"}


def head_policy(values: dict) -> dict:
    """A least-privilege IAM policy for the head's instance profile (aws.iam_instance_profile).
    The head's autoscaler describes, launches, tags, and terminates this cluster's workers
    and nothing else: launches must carry the cluster's tag on the instance and its volumes,
    and only instances with that tag may be tagged, stopped or terminated. Ray's default
    role (ray-autoscaler-v1) gets AmazonEC2FullAccess and AmazonS3FullAccess instead.
    Workers get no profile: they call no AWS API."""
    region, name = values["aws"]["region"], values["cluster_name"]
    arn = f"arn:aws:ec2:{region}"
    in_region = {"StringEquals": {"aws:RequestedRegion": region}}
    statements = [
        {"Sid": "ReadTheCluster", "Effect": "Allow", "Resource": "*", "Condition": in_region,
         "Action": ["ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeImages",
                    "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups"]},
        {"Sid": "LaunchOnlyTaggedWorkers", "Effect": "Allow", "Action": "ec2:RunInstances",
         "Resource": [f"{arn}:*:instance/*", f"{arn}:*:volume/*"],
         "Condition": {"StringEquals": {f"aws:RequestTag/{KIT_TAG}": name}}},
        {"Sid": "LaunchFromTheClustersNetworkAndImage", "Effect": "Allow",
         "Action": "ec2:RunInstances",
         "Resource": [f"{arn}::image/*", f"{arn}:*:subnet/*", f"{arn}:*:network-interface/*",
                      f"{arn}:*:security-group/*", f"{arn}:*:key-pair/*"]},
        {"Sid": "TagAtLaunch", "Effect": "Allow", "Action": "ec2:CreateTags",
         "Resource": [f"{arn}:*:instance/*", f"{arn}:*:volume/*"],
         "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}}},
        {"Sid": "ManageOnlyTheClustersNodes", "Effect": "Allow",
         "Action": ["ec2:CreateTags", "ec2:TerminateInstances", "ec2:StopInstances",
                    "ec2:StartInstances"],
         "Resource": f"{arn}:*:instance/*",
         "Condition": {"StringEquals": {f"ec2:ResourceTag/{KIT_TAG}": name}}},
    ]
    if values["aws"]["data_buckets"]:
        # The driver lists the job's data files on the head; the head launches workers
        # with their own read-only profile, which it must be allowed to pass.
        statements += data_read_statements(values["aws"]["data_buckets"])
        statements.append({"Sid": "PassTheWorkersRole", "Effect": "Allow", "Action": "iam:PassRole",
                           "Resource": f"arn:aws:iam::*:role/{worker_profile_name(values)}",
                           "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}})
    if values["aws"]["ebs_kms_key"]:
        # Encrypted volumes take the account's default EBS key; where that is customer-
        # managed, launching through EC2 needs these rights on it (AWS's "Required KMS key
        # policy for use with encrypted volumes"), through EC2 only.
        statements.append({"Sid": "EncryptTheNodesVolumes", "Effect": "Allow",
                           "Action": ["kms:CreateGrant", "kms:Decrypt", "kms:DescribeKey",
                                      "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*"],
                           "Resource": values["aws"]["ebs_kms_key"],
                           "Condition": {"StringEquals": {"kms:ViaService": f"ec2.{region}.amazonaws.com"}}})
    if any(w["spot"] for w in values["workers"].values()):
        # A RunInstances with InstanceMarketOptions (spot) also creates a spot instance
        # request, a resource of its own that the call must be allowed on (AWS's example
        # policies, "Work with Spot Instances"); Ray tags only instances and volumes, so it
        # carries no cluster tag to condition on.
        statements.append({"Sid": "LaunchSpotWorkers", "Effect": "Allow",
                           "Action": "ec2:RunInstances",
                           "Resource": f"{arn}:*:spot-instances-request/*"})
        # The first spot launch of an account creates EC2's spot service-linked role.
        statements.append({"Sid": "SpotServiceLinkedRole", "Effect": "Allow",
                           "Action": "iam:CreateServiceLinkedRole", "Resource": "*",
                           "Condition": {"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}}})
    return {"Version": "2012-10-17", "Statement": statements}


def data_read_statements(buckets: list[str]) -> list[dict]:
    """Read-only access to the data buckets: list them, read their objects."""
    return [
        {"Sid": "ListTheDataBuckets", "Effect": "Allow",
         "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
         "Resource": [f"arn:aws:s3:::{b}" for b in buckets]},
        {"Sid": "ReadTheDataBuckets", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": [f"arn:aws:s3:::{b}/*" for b in buckets]},
    ]


def worker_policy(values: dict) -> dict:
    """The workers' policy: read the data buckets, nothing else. Ray Data's read tasks run
    on the workers, and pyarrow ships no credentials from the driver to them: without a
    role of their own they could read nothing of an `s3://` data set."""
    return {"Version": "2012-10-17", "Statement": data_read_statements(values["aws"]["data_buckets"])}


S3_URI = re.compile(r"s3://([^/\s]+)")


def data_problems(record: dict, args: list[str]) -> list[str]:
    """The S3 buckets a job's ARGS name that the cluster's nodes cannot read: only those in
    aws.data_buckets are readable (read-only) by its workers, where preprocessing reads."""
    readable = set(record.get("data_buckets") or [])
    named = sorted({m.group(1) for arg in args for m in S3_URI.finditer(arg)})
    return [f"ARGS: s3://{bucket}: the nodes of '{record['cluster']}' cannot read bucket {bucket} "
            f"(aws.data_buckets: {sorted(readable) or '[]'}); add it to aws.data_buckets in the "
            "values file and `make up` again (its nodes get read-only access)"
            for bucket in named if bucket not in readable]


# --- lifecycle ----------------------------------------------------------------------

# The error code EC2 answers RunInstances with when a zone has no capacity for the type
# right now (botocore's ClientError text, which `ray up` prints): another zone may have some.
CAPACITY_ERROR = "InsufficientInstanceCapacity"

def require_credentials() -> None:
    """Fail with one line before `ray up`/`ray down` would fail with a traceback."""
    import boto3
    import botocore.exceptions

    try:
        found = boto3.Session().get_credentials()
    except botocore.exceptions.BotoCoreError as e:
        raise KitError(f"AWS credentials: {short(str(e), 120)}; fix your AWS configuration") from None
    if found is None:
        raise KitError(NO_CREDENTIALS)


def run_ray(args: list[str], keep_output: bool = False):
    """A `ray` command in a session of its own: the terminal's Ctrl-C reaches the kit,
    which decides (an interrupted `ray up` is stopped; `ray down` is let finish). Its exit
    code; with keep_output, (code, its output), echoed as it comes."""
    proc = subprocess.Popen([ray_cli(), *args], env=ray_env(), start_new_session=True,
                            **({"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT,
                                "text": True} if keep_output else {}))
    try:
        if not keep_output:
            return proc.wait()
        lines = []
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines = (lines + [line])[-500:]  # the tail is where `ray up` says why it failed
        return proc.wait(), "".join(lines)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def up(cluster: str, config_text: str, values: dict) -> dict:
    record = {"cluster": cluster, "provider": NAME, "cluster_name": values["cluster_name"],
              "region": values["aws"]["region"],
              "min_workers": {name: w["min_workers"] for name, w in values["workers"].items()},
              "ready_timeout_s": values["ready_timeout_minutes"] * 60,
              "security_group": None if values["aws"]["security_group_ids"]
              else security_group_name(values),
              "ray_key_pair": values["aws"]["key_pair"] is None,
              "ray_role": values["aws"]["iam_instance_profile"] is None,
              "head_role": (head_profile_name(values)
                            if values["aws"]["iam_instance_profile"] == "auto" else None),
              "worker_role": worker_profile_name(values),
              "data_buckets": values["aws"]["data_buckets"],
              "up_at": time.time(), "autostop_minutes": values["autostop_minutes"]}
    state.save(cluster, record, config_text)  # from here on, `make down` can stop it
    stop_hint = f"instances of '{cluster}' may be running: `make down CLUSTER={cluster}` stops them"
    if kit_creates_ssh_group(values):
        import boto3

        create_ssh_group(boto3.client("ec2", region_name=record["region"]), values)
    if record["head_role"] or record["worker_role"]:
        import boto3

        iam = boto3.client("iam")
        if record["worker_role"]:  # first: the head's policy passes it
            ensure_role(iam, values, record["worker_role"], worker_policy(values), "the workers' data reads")
        if record["head_role"]:
            ensure_head_role(iam, values)
    try:
        code, output = run_ray(["up", "-y", "--no-config-cache", "--disable-usage-stats",
                                str(state.config_path(cluster))], keep_output=True)
    except KeyboardInterrupt:
        print(f"interrupted: {stop_hint}", flush=True)
        raise
    if code != 0 and CAPACITY_ERROR in output:
        zone = values["aws"]["availability_zone"]
        raise CapacityRefused(zone, f"zone {zone} has no {values['head']['instance_type']} "
                              f"capacity now ({CAPACITY_ERROR}); no head was launched")
    if code != 0:
        raise KitError(f"`ray up` failed (exit {code}); {stop_hint}")
    wait_until_ready(record)
    return record


def joined_workers(record: dict, status: str = UP_TO_DATE) -> dict[str, int]:
    """{worker type: running instances in `status`}, from the tags the head's autoscaler
    sets: up-to-date (joined), or update-failed (its setup failed; the autoscaler
    terminates and relaunches it, each one billed)."""
    import boto3

    ec2 = boto3.client("ec2", region_name=record["region"])
    filters = [{"Name": f"tag:{TAG_CLUSTER}", "Values": [record["cluster_name"]]},
               {"Name": f"tag:{TAG_KIND}", "Values": ["worker"]},
               {"Name": f"tag:{TAG_STATUS}", "Values": [status]},
               {"Name": "instance-state-name", "Values": ["running"]}]
    counts: dict[str, int] = {}
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                node_type = tags.get(TAG_USER_TYPE, "?")
                counts[node_type] = counts.get(node_type, 0) + 1
    return counts


def kit_creates_ssh_group(values: dict) -> bool:
    """The kit makes the cluster's security group (SSH from ssh_cidr alone) unless the
    values name groups of their own; `auto` is resolved at preflight, before `up`."""
    if values["aws"]["security_group_ids"]:
        return False
    if values["aws"]["ssh_cidr"] == "auto":
        raise KitError("aws.ssh_cidr: auto is resolved by the preflight; run `make up`, "
                       "which runs it first")
    return True


EC2_TRUST = {"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
IAM_PROPAGATION_S = 15  # a new instance profile is usable by RunInstances only after a while


def ensure_head_role(iam, values: dict, wait_s: float | None = None) -> str:
    """The head's least-privilege role and instance profile (head_profile_name, head_policy)."""
    return ensure_role(iam, values, head_profile_name(values), head_policy(values),
                       "the head's autoscaler", wait_s)


def ensure_role(iam, values: dict, name: str, policy: dict, purpose: str,
                wait_s: float | None = None) -> str:
    """A role and instance profile, both `name`, with `policy`: made and tagged with the
    cluster on the first `make up`, reused (its policy brought up to date) after; a role of
    that name that is not this cluster's is refused. Returns the profile's name. Deleted
    by `make down PURGE=1` (delete_head_role)."""
    cluster = values["cluster_name"]
    tag = {"Key": KIT_TAG, "Value": cluster}
    try:
        role = iam.get_role(RoleName=name)["Role"]
    except iam.exceptions.NoSuchEntityException:
        role = None
    if role is not None:
        tags = iam.list_role_tags(RoleName=name)["Tags"]
        if tag not in tags:
            raise KitError(f"IAM role {name} exists but is not cluster '{cluster}''s (no tag "
                           f"{KIT_TAG}={cluster}); delete it, or rename the cluster")
    else:
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(EC2_TRUST),
                        Description=f"Ray cluster {cluster}: {purpose} (ray-kit)", Tags=[tag])
    iam.put_role_policy(RoleName=name, PolicyName="ray-kit", PolicyDocument=json.dumps(policy))
    try:
        profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    except iam.exceptions.NoSuchEntityException:
        profile = iam.create_instance_profile(InstanceProfileName=name, Tags=[tag])["InstanceProfile"]
    if name not in [r["RoleName"] for r in profile["Roles"]]:
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
        wait = (float(os.environ.get("RAYKIT_IAM_WAIT_S") or IAM_PROPAGATION_S)  # tests: 0
                if wait_s is None else wait_s)
        print(f"IAM role and instance profile {name} made (least privilege); waiting {wait:g} s "
              "for IAM to propagate", flush=True)
        time.sleep(wait)
    return name


def delete_head_role(iam, name: str) -> bool:
    """Remove a role and instance profile that `make up` made (the head's, the workers'); False if gone."""
    found = False
    try:
        for role in iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]:
            iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role["RoleName"])
        iam.delete_instance_profile(InstanceProfileName=name)
        found = True
    except iam.exceptions.NoSuchEntityException:
        pass
    try:
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=policy)
        iam.delete_role(RoleName=name)
        found = True
    except iam.exceptions.NoSuchEntityException:
        pass
    return found


def create_ssh_group(ec2, values: dict) -> str:
    """The cluster's security group with SSH from aws.ssh_cidr only, plus all traffic
    between the cluster's own nodes. Ray adds its default rules (SSH from anywhere) only to
    a group that has none, so it leaves this one as it is. Purged by `make down PURGE=1`."""
    aws, name = values["aws"], security_group_name(values)
    vpc = ec2.describe_subnets(SubnetIds=aws["subnet_ids"][:1])["Subnets"][0]["VpcId"]
    ssh = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
           "IpRanges": [{"CidrIp": aws["ssh_cidr"], "Description": "SSH (aws.ssh_cidr)"}]}
    found = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]},
                                                  {"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]
    if found:
        group = found[0]
        ssh_sources = {r["CidrIp"] for p in group["IpPermissions"] if p.get("FromPort") == 22
                       for r in p.get("IpRanges", [])}
        if ssh_sources != {aws["ssh_cidr"]}:
            raise KitError(f"security group {name} ({group['GroupId']}) exists with SSH open to "
                           f"{', '.join(sorted(ssh_sources)) or 'nobody'}, not {aws['ssh_cidr']}; "
                           f"`make down CLUSTER=... PURGE=1` (or delete it), then `make up` again")
        return group["GroupId"]
    group_id = ec2.create_security_group(
        GroupName=name, VpcId=vpc, Description=f"Ray cluster {values['cluster_name']} (ray-kit)",
        TagSpecifications=[{"ResourceType": "security-group", "Tags": [
            {"Key": KIT_TAG, "Value": values["cluster_name"]}]}])["GroupId"]
    own_nodes = {"IpProtocol": "-1", "UserIdGroupPairs": [
        {"GroupId": group_id, "Description": "the cluster's own nodes"}]}
    ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[ssh, own_nodes])
    return group_id


def wait_until_ready(record: dict, joined=joined_workers, poll_s: float = READY_POLL_S) -> None:
    """`ray up` returns once the head is ready; the head's autoscaler then launches the
    workers, and each boots, pulls its image and installs packages. Wait until min_workers
    of every worker type joined, printing a line whenever the count changes."""
    want = {name: n for name, n in record["min_workers"].items() if n}
    start, shown = time.monotonic(), None
    while want:
        have = joined(record)
        elapsed = time.monotonic() - start
        line = ", ".join(f"{name} {min(have.get(name, 0), n)}/{n}" for name, n in want.items())
        if line != shown:
            print(f"  workers joined: {line} after {elapsed:.0f} s", flush=True)
            shown = line
        missing = {name: n - have.get(name, 0) for name, n in want.items() if have.get(name, 0) < n}
        if not missing:
            return
        if elapsed > record["ready_timeout_s"]:
            failed = joined(record, UPDATE_FAILED)
            raise KitError(
                f"after {elapsed / 60:.0f} min still missing: "
                + ", ".join(f"{n} x {name}" for name, n in missing.items())
                + "".join(f"; {n} x {name} launched but its setup failed (tagged {UPDATE_FAILED}: "
                          "the autoscaler relaunches it, each one billed)"
                          for name, n in failed.items() if name in missing)
                + f"; the head's autoscaler says: {launch_errors(record)}; the cluster is left "
                f"as it is: `make status CLUSTER={record['cluster']}` shows it, "
                f"`make down CLUSTER={record['cluster']}` stops it")
        time.sleep(poll_s)


# What the head's autoscaler (v2, `ray up`'s default) logs when a worker cannot be had,
# as Ray 2.60 writes it (tests/test_aws_moto.py reads each from Ray's installed source):
#   v2 node_provider   "Failed to launch {count} nodes of type {node_type}: {e}"   (EC2 refused)
#   v2 ray installer   "Ray installation failed on instance {cloud_instance_id}: {e}", each
#                      of its attempts (the instance is terminated after the last, so its
#                      update-failed tag is seldom there at the time-out)
#   updater            "Setup command `{}` failed with exit code {}. stderr: {}" (no login
#                      shell), or "Error message: {}" ("SSH command failed." with one)
AUTOSCALER_FAILURES = ("Failed to launch", "Ray installation failed on instance",
                       "failed with exit code", "Error message: ")
INSTALL_FAILED = re.compile(r"Ray installation failed on instance (i-[0-9a-f]+): (.*)")


def launch_errors(record: dict) -> str:
    """The head autoscaler's last launch and setup failures, read over SSH from its log,
    each failed instance named with its worker type."""
    command = ("grep -h -e 'Failed to launch' -e 'Ray installation failed on instance' "
               "-e 'failed with exit code' -e 'Error message: ' "
               "/tmp/ray/session_latest/logs/monitor.* 2>/dev/null | tail -n 12")
    try:
        result = subprocess.run([ray_cli(), "exec", str(state.config_path(record["cluster"])),
                                 command], env=ray_env(), capture_output=True, text=True,
                                timeout=120, start_new_session=True)
    except subprocess.TimeoutExpired:
        return "(its log could not be read within 120 s)"
    import boto3

    return autoscaler_failures(result.stdout, instance_types(
        boto3.client("ec2", region_name=record["region"]), record))


def instance_types(ec2, record: dict) -> dict[str, str]:
    """{instance id: worker type} of the cluster's instances, terminated ones too (Ray's
    v2 installer terminates a worker after its last failed attempt)."""
    try:
        filters = [{"Name": f"tag:{TAG_CLUSTER}", "Values": [record["cluster_name"]]}]
        return {i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(TAG_USER_TYPE, "?")
                for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
                for r in page["Reservations"] for i in r["Instances"]}
    except Exception:  # noqa: BLE001 (the failure lines still say what they can)
        return {}


def autoscaler_failures(log_text: str, types: dict[str, str] | None = None) -> str:
    """The failure lines of the autoscaler's log, last ones last, in one line; an instance
    whose Ray installation failed is named with its worker type (`types`: instance ->
    type): '<type> (<instance>) failed its setup: <error>'."""
    found = []
    for line in log_text.splitlines():
        if not any(f in line for f in AUTOSCALER_FAILURES):
            continue
        install = INSTALL_FAILED.search(line)
        if install:
            instance, error = install.groups()
            line = f"{(types or {}).get(instance, 'a worker')} ({instance}) failed its setup: {error}"
        found.append(line.strip())
    return (" | ".join(short(line, 200)[1:-1] for line in found[-3:])
            or "(no launch or setup failure in its log)")


def down(cluster: str, record: dict | None, purge: bool = False) -> str:
    """`ray down`, then check that no instance of the cluster is left, and say what Ray
    left behind; with purge, delete the cluster's own security group too."""
    if record is None:
        return (f"AWS cluster '{cluster}' was not launched from this checkout "
                f"(no {state.record_path(cluster)}); nothing to stop")
    if not state.config_path(cluster).is_file():
        raise KitError(f"{state.config_path(cluster)} is missing; stop '{cluster}' from the EC2 "
                       f"console (instances tagged {TAG_CLUSTER}={record['cluster_name']}), "
                       f"then delete {state.record_path(cluster)}")
    require_credentials()
    code = run_ray(["down", "-y", str(state.config_path(cluster))])
    if code != 0:
        raise KitError(f"`ray down` failed (exit {code}); the record is kept: run "
                       f"`make down CLUSTER={cluster}` again")
    import boto3

    ec2 = boto3.client("ec2", region_name=record["region"])
    left = cluster_instances(ec2, record, states=["pending", "running", "stopping", "stopped"])
    if left:
        raise KitError(f"`ray down` returned, but {len(left)} instance(s) tagged "
                       f"{TAG_CLUSTER}={record['cluster_name']} still run ({', '.join(left[:5])}); "
                       f"run `make down CLUSTER={cluster}` again, or terminate them in the EC2 console")
    behind = left_behind(ec2, record, purge)
    state.forget(cluster)
    return (f"AWS cluster '{cluster}': every instance terminated"
            + (f"; left behind: {'; '.join(behind)}" if behind else ""))


def cluster_instances(ec2, record: dict, states: list[str]) -> list[str]:
    filters = [{"Name": f"tag:{TAG_CLUSTER}", "Values": [record["cluster_name"]]},
               {"Name": "instance-state-name", "Values": states}]
    return [i["InstanceId"] for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
            for r in page["Reservations"] for i in r["Instances"]]


def left_behind(ec2, record: dict, purge: bool) -> list[str]:
    """What Ray created and `ray down` keeps: the cluster's security group (free, deleted
    with purge), and the key pair and IAM role Ray shares between all its clusters in the
    region (never deleted here: another cluster may use them)."""
    notes = []
    group = record["security_group"]
    found = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [group]}])["SecurityGroups"] if group else []
    for g in found:
        if purge:
            # A group cannot be deleted while an instance, even a terminating one, uses it.
            deadline = time.monotonic() + 600
            while cluster_instances(ec2, record, ["shutting-down"]) and time.monotonic() < deadline:
                time.sleep(READY_POLL_S)
            ec2.delete_security_group(GroupId=g["GroupId"])
            notes.append(f"nothing of security group {group} (deleted)")
        else:
            notes.append(f"security group {group} ({g['GroupId']}; free, "
                         "`make down PURGE=1` deletes it)")
    if record["ray_key_pair"]:
        notes.append(f"key pair ray-autoscaler_{record['region']} (shared by Ray's clusters "
                     "in the region; free)")
    if record["ray_role"]:
        notes.append("IAM role and instance profile ray-autoscaler-v1 (EC2 and S3 full access, "
                     "shared by Ray's clusters; free)")
    for role in (record.get("head_role"), record.get("worker_role")):
        if role and purge:
            import boto3

            delete_head_role(boto3.client("iam"), role)
            notes.append(f"nothing of IAM role and instance profile {role} (deleted)")
        elif role:
            notes.append(f"IAM role and instance profile {role} (least privilege; free, "
                         "`make down PURGE=1` deletes it)")
    return notes


def status(record: dict) -> int:
    return run_ray(["exec", str(state.config_path(record["cluster"])), "ray status"])


def dashboard(record: dict) -> int:
    with job_address(record) as (address, _, _):
        print(f"dashboard of '{record['cluster']}': {address} (an SSH tunnel to the head; "
              "Ctrl-C closes it)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


def attach(record: dict) -> int:
    # in this terminal's session: the remote shell needs it
    return subprocess.call([ray_cli(), "attach", str(state.config_path(record["cluster"]))],
                           env=ray_env())


def monitor(record: dict, follow: bool) -> int:
    config = str(state.config_path(record["cluster"]))
    if follow:
        return run_ray(["monitor", config])
    return run_ray(["exec", config, "tail -n 100 /tmp/ray/session_latest/logs/monitor.log"])


def is_running(record: dict) -> bool:
    """Whether any instance of the recorded cluster may still bill: its tag on an instance
    in any state but terminated. A record whose cluster autostopped, or whose launch failed
    before an instance started, is stale. Where the account cannot be asked (credentials,
    network), the record stands: never assume billing has stopped."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        ec2 = boto3.client("ec2", region_name=record["region"])
        return bool(cluster_instances(ec2, record, ["pending", "running", "stopping", "stopped",
                                                    "shutting-down"]))
    except (BotoCoreError, ClientError):
        return True


@contextmanager
def job_address(record: dict):
    """`ray dashboard` keeps an SSH port-forward to the head's dashboard open while we
    submit; the dashboard itself listens on the head's 127.0.0.1 only."""
    port = free_port()
    tunnel = subprocess.Popen(
        [ray_cli(), "dashboard", "--port", str(port), str(state.config_path(record["cluster"]))],
        env=ray_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + MAX_TUNNEL_WAIT_S
        while not port_open(port):
            if tunnel.poll() is not None:
                last = (tunnel.stderr.read().strip().splitlines() or ["no output"])[-1]
                raise KitError(f"`ray dashboard` exited: {short(last, 200)}; is the cluster up "
                               "(`make status`) and your SSH key in place?")
            if time.monotonic() > deadline:
                raise KitError(f"the dashboard tunnel did not open within {MAX_TUNNEL_WAIT_S} s")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", "python", None
    finally:
        # `ray dashboard` runs ssh as its child: stop the whole process group, or the ssh
        # holding the forwarded port would outlive it.
        stop_group(tunnel)


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started with start_new_session=True, and everything it started."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue
