"""The AWS provider's own rules: on a values file once its schema passed (what the schema
cannot say: instance types, disks, volumes, mixes), and on the rendered config (every
node_config against botocore's EC2 RunInstances input shape, enums included)."""

import difflib
import functools
import shlex

from scripts import catalog
from scripts.core import ray_config, roles
from scripts.core.errors import short
from scripts.providers.aws.preflight import driver_problems

# EBS volume sizes per type, GiB (docs.aws.amazon.com/ebs/latest/userguide/ebs-volume-types.html,
# 2026-11); st1 and sc1 cannot be boot volumes.
EBS_SIZE_GB = {"gp2": (1, 16384), "gp3": (1, 16384), "io1": (4, 16384), "io2": (4, 65536),
               "st1": (125, 16384), "sc1": (125, 16384), "standard": (1, 1024)}


BOOT_VOLUME_TYPES = ("gp2", "gp3", "io1", "io2", "standard")


def nodes_of(values: dict) -> dict:
    """{dotted key in the values file: node values} for the head and each worker type."""
    return {"head": values["head"]} | {f"workers.{n}": w for n, w in values["workers"].items()}


def cidr_problems(key: str, cidr: str) -> list[str]:
    """A range as EC2 reads it: no leading zeros (read as octal by some tools, refused by
    others), no host bits (`10.0.0.0/0` reads as a private range and is every address on
    the internet: EC2 keeps the prefix alone)."""
    import ipaddress

    try:
        ipaddress.IPv4Network(cidr, strict=True)
    except ValueError as e:
        if "host bits" not in str(e):
            return [f"{key}: {short(cidr)} is not an IPv4 range ({e}); write it as 203.0.113.0/24"]
        means = ipaddress.IPv4Network(cidr, strict=False)
        return [f"{key}: {short(cidr)} has host bits set, and EC2 reads it as {means}"
                + (" (every address on the internet)" if means.prefixlen == 0 else "")
                + f"; write {means} if you mean that, or the range you meant"]
    return []


# S3's rules for general purpose bucket names beyond the schema's characters and length
# (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html, 2026-11): names S3
# refuses at creation, which no bucket of that name can exist under.
BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def bucket_problems(key: str, name: str) -> list[str]:
    import ipaddress

    why = None
    if ".." in name:
        why = "has two adjacent periods"
    elif name.startswith(BUCKET_PREFIXES):
        why = f"starts with a prefix S3 reserves ({', '.join(BUCKET_PREFIXES)})"
    elif name.endswith(BUCKET_SUFFIXES):
        why = f"ends with a suffix S3 reserves ({', '.join(BUCKET_SUFFIXES)})"
    else:
        try:
            ipaddress.IPv4Address(name)
            why = "is formatted as an IP address"
        except ValueError:
            pass
    return [f"{key}: {short(name)} {why}: S3 refuses such a name, so no bucket has it; name the bucket "
            "the jobs read"] if why else []


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
    if aws["ssh_cidr"] == "auto" and aws["use_internal_ips"] and not aws["security_group_ids"]:
        # auto finds the public address this machine reaches AWS from; with internal IPs
        # `ray up` connects to the nodes' private ones, from a VPN, a peered VPC or the VPC
        problems.append("aws.ssh_cidr: auto opens SSH to this machine's public address only, but "
                        "with aws.use_internal_ips: true `ray up` connects from a private one; set "
                        "ssh_cidr to the range it connects from (your VPN's or VPC's, e.g. 10.0.0.0/16)")
    if aws["ssh_cidr"] != "auto":
        problems += cidr_problems("aws.ssh_cidr", aws["ssh_cidr"])
    for i, bucket in enumerate(aws["data_buckets"]):
        problems += bucket_problems(f"aws.data_buckets[{i}]", bucket)
    for i, place in enumerate(aws["output_buckets"]):
        bucket, _, prefix = place.partition("/")
        problems += bucket_problems(f"aws.output_buckets[{i}]", bucket)
        if prefix and ({".", ".."} & set(prefix.split("/"))):
            problems.append(f"aws.output_buckets[{i}]: {short(place)}: a prefix has no '.' or '..' part; "
                            "name the folder itself, such as my-bucket/runs")
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
        if spec is None and itype.split(".")[0] in catalog.OTHER_ACCELERATORS:
            problems.append(f"{key}.instance_type: {itype} carries {catalog.OTHER_ACCELERATORS[itype.split('.')[0]]}, "
                            "not NVIDIA GPUs: the kit's jobs train with CUDA torch; pick an NVIDIA type such "
                            "as g5.xlarge (A10G), g6.xlarge (L4) or p4d.24xlarge (A100)")
            continue
        if spec is None:
            problems.append(f"{key}.instance_type: unknown instance type {short(itype)}"
                            + did_you_mean(itype, catalog.INSTANCE_TYPES)
                            + " (the kit knows scripts/catalog.py's; docs/price-performance.md "
                              "says how to add one)")
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
    """The roles' rules across node types (scripts/core/roles.py), and what each role needs
    of its instance type: a GPU on every train node, one GPU model across them (DDP steps
    at the slowest rank's pace, and one job's model preset and batch size fit one memory
    size), none on a preprocessor or a coordinating head."""
    head = values["head"]
    problems = roles.role_problems(values)
    if values["mix"] == "homogeneous":
        if not any(spec.gpus for spec in specs.values()):
            problems.append("head.instance_type: no node type has a GPU to train on; "
                            "pick a GPU type such as g5.xlarge")
        return problems
    trains = [f"workers.{name}" for name in roles.train_types(values)]
    if head["role"] == "train" and specs["head"].gpus == 0:
        problems.append(f"head.instance_type: {head['instance_type']} has no GPU, but the head "
                        "has role train; pick a GPU type such as g5.xlarge, or set role: coordinate "
                        "and add a worker type with role: train")
    if head["role"] == "coordinate" and specs["head"].gpus:
        problems.append(f"head.instance_type: {head['instance_type']} has {specs['head'].gpus} "
                        "GPU(s), but a coordinating head uses none; pick a CPU type such as m6i.xlarge")
    for key in nodes:
        if key == "head":
            continue
        itype, gpus = nodes[key]["instance_type"], specs[key].gpus
        if key in trains and not gpus:
            problems.append(f"{key}.instance_type: {itype} has no GPU, but the type has role train; "
                            "pick a GPU type such as g5.12xlarge, or set role: preprocess")
        if key not in trains and gpus:
            problems.append(f"{key}.instance_type: {itype} has {gpus} GPU(s), but the type has role "
                            "preprocess (CPU-only); pick a CPU type such as c5.4xlarge, or set role: train")
    train_keys = trains + (["head"] if head["role"] == "train" else [])
    models = {specs[k].gpu_model for k in train_keys if specs[k].gpus}
    if len(models) > 1:
        problems.append(f"{trains[-1]}.instance_type: the train nodes have different GPUs "
                        f"({', '.join(sorted(models))}); one job trains in lockstep at the slowest "
                        "GPU's pace: give every train node type the same GPU model")
    return problems


def did_you_mean(word: str, choices) -> str:
    hint = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def config_problems(config: dict) -> list[str]:
    problems = ray_config.schema_problems(config)
    for name, node_type in config["available_node_types"].items():
        problems += [f"available_node_types.{name}.node_config{p}"
                     for p in run_instances_problems(node_type["node_config"])]
    return problems + mount_problems(config)


@functools.cache
def ec2_model():
    """botocore's EC2 service model, read once a process: ~0.2 s of JSON a read, and a
    local mix's validate builds its prices_as mix (AWS) more than once."""
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
