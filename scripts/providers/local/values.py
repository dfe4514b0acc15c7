"""The rules on a local values file: what this machine can hold (memory, cores, CPU quotas),
the roles' rules, and the rendered config's provider; and the cores each node is given."""

import psutil

from scripts.core import ray_config, roles
from scripts.providers.local import cpu_sets, gpus
from scripts.providers.local.names import MIB, PROVIDER_CLASS


def value_problems(values: dict) -> list[str]:
    head, workers = values["head"], values["workers"]
    problems = role_problems(values)
    if head["preprocess"] and head["trainer_slots"] and head["cpus"] <= head["trainer_slots"]:
        # each training worker holds a CPU: none would be left for a preprocessing task
        problems.append(f"head.cpus: a head that trains and preprocesses needs a CPU per "
                        f"trainer slot plus one; set cpus: {head['trainer_slots'] + 1} or more")
    elif head["cpus"] < head["trainer_slots"]:  # its training workers would wait for good
        problems.append(f"head.cpus: each training worker holds a CPU; set cpus: "
                        f"{head['trainer_slots']} or more")
    # Simulated nodes all draw on this machine's RAM: more than it has would be killed
    # by the OOM killer mid-job instead of refused here.
    declared = head["memory_mb"] + head["object_store_mb"] + sum(
        w["max_workers"] * (w["memory_mb"] + w["object_store_mb"]) for w in workers.values())
    host = psutil.virtual_memory().total // MIB
    if declared > host:
        problems.append(f"workers: the nodes declare {declared} MiB of memory and object store "
                        f"at max_workers, more than this machine's {host} MiB; lower "
                        "memory_mb, object_store_mb or max_workers")
    cores = len(cpu_sets.host_cores())
    if values["pin_cpus"] and cores_needed(values) > cores:
        problems.append(f"pin_cpus: the nodes need {cores_needed(values)} cores of their own at "
                        f"max_workers, this machine has {cores}; lower cpus or max_workers, "
                        "or set pin_cpus: false (nodes then share cores)")
    return problems + quota_problems(values, cores) + gpus.problems(values, gpus.machine_gpus())


def quota_problems(values: dict, host_cores: int) -> list[str]:
    """A quota is a share of the node's own cores where it has them, and the quotas at
    max_workers fit this machine: beyond it, an added node adds no throughput."""
    problems, total = [], 0.0
    for where, node, count in [("head", values["head"], 1)] + [
            (f"workers.{n}", w, w["max_workers"]) for n, w in values["workers"].items()]:
        quota = node["cpu_quota"]
        if quota is None:
            continue
        total += quota * count
        if values["pin_cpus"] and quota > cores(node):
            problems.append(f"{where}.cpu_quota: {quota:g} cores of time on {cores(node)} pinned core(s); "
                            f"set at most {cores(node)}, or pin_cpus: false")
    if total > host_cores:
        problems.append(f"cpu_quota: the nodes' quotas at max_workers add up to {total:g} cores, more "
                        f"than this machine's {host_cores}: an added node would add no throughput; "
                        "lower cpu_quota or max_workers")
    return problems


def role_problems(values: dict) -> list[str]:
    """The roles' rules across node types (scripts/core/roles.py), and the trainer slots
    each role needs: one or more on a node that trains, none on one that does not."""
    head, workers = values["head"], values["workers"]
    problems = roles.role_problems(values)
    if head["role"] == "train" and head["trainer_slots"] < 1:
        problems.append("head.trainer_slots: a head with role train needs a trainer slot; set "
                        "trainer_slots: 1 (the stand-in for its GPU), or role: coordinate")
    if head["role"] == "coordinate" and head["trainer_slots"]:
        problems.append("head.trainer_slots: a coordinating head trains nothing; set trainer_slots: 0")
    for name, w in workers.items():
        if w["role"] == "train" and w["trainer_slots"] < 1:
            problems.append(f"workers.{name}.trainer_slots: a train worker needs a trainer slot "
                            "(the stand-in for a GPU); set trainer_slots: 1")
        if w["role"] == "train" and w["cpus"] < w["trainer_slots"]:
            problems.append(f"workers.{name}.cpus: each training worker holds a CPU; set cpus: "
                            f"{w['trainer_slots']} or more")
        if w["role"] == "preprocess" and w["trainer_slots"]:
            problems.append(f"workers.{name}.trainer_slots: a preprocess worker trains nothing; "
                            "set trainer_slots: 0, or role: train")
    return problems


def cores(node: dict) -> int:
    """The cores a node runs on with pin_cpus: `cores`, or as many as its `cpus`."""
    return node["cores"] or node["cpus"]


def cores_needed(values: dict) -> int:
    return cores(values["head"]) + sum(w["max_workers"] * cores(w)
                                       for w in values["workers"].values())


def core_sets(values: dict) -> tuple[list[int] | None, list[int]]:
    """(the head's cores, the cores its autoscaler hands to workers); (None, []) when the
    nodes share every core (pin_cpus: false)."""
    if not values["pin_cpus"]:
        return None, []
    host = cpu_sets.host_cores()
    head = cores(values["head"])
    return host[:head], host[head:cores_needed(values)]


def config_problems(config: dict) -> list[str]:
    problems = ray_config.schema_problems(config)
    if config["provider"].get("module") != PROVIDER_CLASS:
        problems.append(f"provider.module: must be {PROVIDER_CLASS}")
    return problems
