"""Refuse a bad cluster before anything is launched or billed.

Three layers, each error naming the values file, the key and the fix:
  1. the values file's shape (scripts/values.py, JSON schema: typos, types);
  2. check_values: the kit's own rules Ray misses (worker counts, GPU placement in a
     heterogeneous mix, known instance types and regions, disk big enough for the image);
  3. check_rendered: Ray's own prepare_config + validate_config on the rendered YAML, every
     AWS node_config against botocore's EC2 RunInstances input shape (enums included),
     and volume mounts whose host paths the initialization commands create.
"""

import copy
import difflib
import logging
import re
import shlex

from scripts import catalog
from scripts.errors import KitError
from scripts.local_provider import MAX_WORKERS as MAX_LOCAL_WORKERS
from scripts.values import REPO, check_schema, values_path

def validate(cluster: str, values: dict) -> dict:
    """Every check, in order; return the rendered config as a dict. Raises KitError."""
    import yaml

    from scripts.render import render_values

    check_schema(cluster, values)
    check_values(cluster, values)
    config = yaml.safe_load(render_values(cluster, values))
    check_rendered(cluster, config)
    return config


# --- 2. the kit's rules on the values ---------------------------------------------------


def check_values(cluster: str, values: dict) -> None:
    problems = worker_count_problems(values)
    if values["provider"] == "aws":
        problems += aws_problems(values)
    else:
        problems += local_problems(values)
    if problems:
        where = values_path(cluster).relative_to(REPO)
        raise KitError("\n".join(f"{where}: {p}" for p in problems))


def worker_count_problems(values: dict) -> list[str]:
    problems = []
    for name, w in values["workers"].items():
        key = f"workers.{name}"
        lo, hi = w["min_workers"], w["max_workers"]
        if lo < 0:
            problems.append(f"{key}.min_workers: {lo} is negative; set 0 or more")
        if hi < 0:
            problems.append(f"{key}.max_workers: {hi} is negative; set 0 or more")
        if lo > hi >= 0:
            problems.append(f"{key}: min_workers ({lo}) > max_workers ({hi}); "
                            f"raise max_workers to at least {lo}")
    return problems


def local_problems(values: dict) -> list[str]:
    problems = []
    if values["mix"] == "heterogeneous" and values["head"]["trainer_slots"] < 1:
        problems.append("head.trainer_slots: a heterogeneous mix trains on the head; "
                        "set trainer_slots: 1 (the stand-in for its GPU)")
    workers = sum(w["max_workers"] for w in values["workers"].values())
    if workers > MAX_LOCAL_WORKERS:
        problems.append(f"workers: {workers} workers need more than the {MAX_LOCAL_WORKERS} "
                        "loopback addresses the simulated cluster has; lower max_workers")
    return problems


def aws_problems(values: dict) -> list[str]:
    problems = []
    aws = values["aws"]
    region = aws["region"]
    if region not in catalog.REGIONS:
        problems.append(f"aws.region: unknown region {region!r}" + did_you_mean(region, catalog.REGIONS))
    elif not aws.get("image_id") and region not in catalog.AMI_BY_REGION:
        problems.append(f"aws.image_id: the kit pins no AMI for {region} (only "
                        f"{', '.join(catalog.AMI_BY_REGION)}); set aws.image_id "
                        "(see scripts/catalog.py for how to look one up)")
    zone = aws.get("availability_zone")
    if zone and not zone.startswith(region):
        problems.append(f"aws.availability_zone: {zone} is not in region {region}; "
                        f"use a zone such as {region}a")

    nodes = {"head": values["head"]} | {f"workers.{n}": w for n, w in values["workers"].items()}
    volume_types = ec2_enum("VolumeType")
    for key, node in nodes.items():
        itype = node["instance_type"]
        spec = catalog.INSTANCE_TYPES.get(itype)
        if spec is None:
            problems.append(f"{key}.instance_type: unknown instance type {itype!r}"
                            + did_you_mean(itype, catalog.INSTANCE_TYPES)
                            + " (known: scripts/catalog.py INSTANCE_TYPES; add it there)")
            continue
        disk = node["disk"]
        vtype = disk.get("volume_type", "gp3")
        if vtype not in volume_types:
            problems.append(f"{key}.disk.volume_type: {vtype!r} is not an EBS volume type"
                            + did_you_mean(vtype, volume_types))
        need = catalog.min_root_gb(spec.gpus > 0)
        if disk["root_gb"] < need:
            problems.append(
                f"{key}.disk.root_gb: {disk['root_gb']} GB is too small for the AMI "
                f"({catalog.AMI_ROOT_SNAPSHOT_GB} GB) plus the {'GPU' if spec.gpus else 'CPU'} "
                f"Docker image and packages; set root_gb: {need} or more")
        if disk.get("data_gb") and disk["data_gb"] == disk["root_gb"]:
            problems.append(f"{key}.disk.data_gb: must differ from root_gb (the data "
                            "volume is found by its size at boot); change one of them")
        if disk.get("data_gb") and not values["docker"]["volumes"]:
            problems.append(f"{key}.disk.data_gb: the data volume mounts on the first "
                            "docker.volumes host path; add a docker volume")

    specs = {k: catalog.INSTANCE_TYPES.get(n["instance_type"]) for k, n in nodes.items()}
    if None not in specs.values():
        if values["mix"] == "heterogeneous":
            if specs["head"].gpus == 0:
                problems.append(
                    f"head.instance_type: {values['head']['instance_type']} has no GPU, but "
                    "a heterogeneous mix trains on the head; pick a GPU type such as g5.xlarge")
            for key, spec in specs.items():
                if key != "head" and spec.gpus:
                    problems.append(
                        f"{key}.instance_type: {nodes[key]['instance_type']} has "
                        f"{spec.gpus} GPU(s), but workers of a heterogeneous mix are CPU-only "
                        "preprocessors; pick a CPU type such as c5.4xlarge, or set mix: homogeneous")
        elif not any(spec.gpus for spec in specs.values()):
            problems.append("head.instance_type: no node type has a GPU to train on; "
                            "pick a GPU type such as g5.xlarge")
    return problems


def did_you_mean(word: str, choices) -> str:
    hint = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


# --- 3. checks on the rendered cluster config --------------------------------------------


def check_rendered(cluster: str, config: dict) -> None:
    where = f"build/clusters/{cluster}.yaml (from cluster_templates/{cluster}.yaml)"
    problems = ray_schema_problems(config)
    if config["provider"]["type"] == "aws":
        for name, node_type in config["available_node_types"].items():
            problems += [f"available_node_types.{name}.node_config{p}"
                         for p in run_instances_problems(node_type["node_config"])]
        problems += mount_problems(config)
    if problems:
        raise KitError("\n".join(f"{where}: {p}" for p in problems))


def ray_schema_problems(config: dict) -> list[str]:
    """Ray's own checks, exactly as `ray up` runs them (defaults filled in first)."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    ray_logger = logging.getLogger("ray.autoscaler")
    level = ray_logger.level
    ray_logger.setLevel(logging.ERROR)  # its notes on filled-in defaults are noise here
    try:
        validate_config(prepare_config(copy.deepcopy(config)))
    except Exception as e:  # jsonschema.ValidationError, ValueError: Ray's own messages
        return [f"Ray rejects the config: {str(e).splitlines()[0]}"]
    finally:
        ray_logger.setLevel(level)
    return []


def ec2_input_shape():
    import botocore.session

    model = botocore.session.get_session().get_service_model("ec2")
    return model.operation_model("RunInstances").input_shape


def ec2_enum(shape_name: str) -> list[str]:
    import botocore.session

    model = botocore.session.get_session().get_service_model("ec2")
    return list(model.shape_for(shape_name).enum)


def run_instances_problems(node_config: dict) -> list[str]:
    """node_config as RunInstances parameters: botocore's validator (names, types,
    required members) plus the enum values it does not check."""
    from botocore.validate import ParamValidator

    shape = ec2_input_shape()
    params = {"MinCount": 1, "MaxCount": 1, **node_config}
    report = ParamValidator().validate(params, shape)
    problems = []
    if report.has_errors():
        for line in report.generate_report().splitlines():
            problems.append(": " + line.strip())
    problems += [f"{path}: {value!r} is not one of {', '.join(allowed)}"
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
    init = "\n".join(config.get("initialization_commands", []))
    problems = []
    for option in options:
        words = shlex.split(option)
        for flag, arg in zip(words, words[1:] + [""]):
            if flag in ("-v", "--volume"):
                host = arg.split(":")[0]
                if host.startswith("/") and not re.search(rf"{re.escape(host)}(\s|$|;)", init):
                    problems.append(
                        f"docker.run_options: host path {host} of mount {arg!r} is not created "
                        f"by any initialization command; add it to docker.volumes in the "
                        "values file (the kit then creates it) instead of extra_run_options")
    return problems
