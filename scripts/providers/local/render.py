"""Checked values -> what cluster_templates/local.yaml.j2 lays out (each node type's
resources, labels and cores), and the plan `make up DRY_RUN=1` prints."""

from jobs.raykit import placement
from scripts.providers.local import cpu_sets, gpus, priority
from scripts.providers.local.names import HEAD_TYPE, MIB, PROVIDER_CLASS
from scripts.providers.local.values import core_sets, cores


def template_context(cluster: str, values: dict) -> dict:
    head = values["head"]
    given = gpus.per_node(values, len(gpus.machine_gpus()))
    return {
        "provider_class": PROVIDER_CLASS,
        # a coordinating head offers no CPU: Ray schedules no task or worker there (the
        # job's driver needs none)
        "head": {"name": HEAD_TYPE,
                 "resources": resources(head, given["head"])
                 | ({"CPU": 0} if head["role"] == "coordinate" else {}),
                 "labels": head_labels(values)},
        "workers": [
            {"name": name, "min_workers": w["min_workers"], "max_workers": w["max_workers"],
             "resources": resources(w, given[f"workers.{name}"]) | {placement.type_resource(name): 1},
             "labels": placement.node_labels(name, trainer_slots=w["trainer_slots"],
                                             preprocess=w["role"] == "preprocess"),
             # read by loopback_node_provider.py (Ray's schema leaves node_config alone)
             "node_config": {"cores": cores(w) if values["pin_cpus"] else None,
                             "cpu_quota": w["cpu_quota"], "gpus": given[f"workers.{name}"],
                             "worker_niceness": priority.worker_niceness(w["role"])}}
            for name, w in values["workers"].items()
        ],
    }


def resources(node: dict, gpu_count: int = 0) -> dict:
    """Logical resources of a simulated node: its CPUs, memory, and the GPUs it was given
    (gpus.py); no custom ones. Where work runs is the labels' business
    (jobs/raykit/placement.py)."""
    return {"CPU": node["cpus"], "memory": node["memory_mb"] * MIB,
            "object_store_memory": node["object_store_mb"] * MIB} | ({"GPU": gpu_count} if gpu_count else {})


def head_labels(values: dict) -> dict[str, str]:
    """The head's labels: a train node with `trainer_slots` stand-ins for GPUs, or a
    coordinating one (no slots), and with pin_cpus the cores it really has."""
    head = values["head"]
    labels = placement.node_labels("head", head["trainer_slots"], head["preprocess"])
    if values["pin_cpus"]:
        labels[placement.CORES] = str(cores(head))
    return labels


def plan(values: dict, config: dict) -> list[str]:
    head = values["head"]
    head_cores, worker_cores = core_sets(values)
    machine = gpus.machine_gpus()
    given = gpus.per_node(values, len(machine))
    lines = ["simulated on this machine (loopback addresses), $0/h; "
             + (f"head on cores {cpu_sets.to_text(head_cores)}, workers on cores "
                f"{cpu_sets.to_text(worker_cores) or '(none)'}" if head_cores is not None
                else "every node sharing every core (pin_cpus: false), the trainers' Ray workers "
                     f"first on them (nice {priority.TRAINER}, the preprocess nodes' {priority.PREPROCESS})"),
             f"  {HEAD_TYPE}: 1 x {head['cpus']} CPUs{on_cores(values, head)}, "
             + (f"{head['trainer_slots']} trainer slot(s){on_gpus(given['head'])}, " if head["role"] == "train"
                else "coordinates (no Ray CPUs for work), ")
             + f"{head['memory_mb']} MiB + {head['object_store_mb']} MiB object store"]
    for name, w in values["workers"].items():
        lines.append(f"  {name}: {w['min_workers']}-{w['max_workers']} x {w['cpus']} CPUs{on_cores(values, w)}, "
                     + (f"{w['trainer_slots']} trainer slot(s){on_gpus(given[f'workers.{name}'])}, "
                        if w["role"] == "train" else "")
                     + f"{w['memory_mb']} MiB + {w['object_store_mb']} MiB object store")
    return lines + gpu_plan(values, machine)


def on_gpus(count: int) -> str:
    return f" on {count} GPU(s)" if count else " on the CPU"


def gpu_plan(values: dict, machine: list[str]) -> list[str]:
    """Where `gpus: auto` left GPUs of this machine unused, why."""
    wanted = sum(node["trainer_slots"] * count for _, node, count in gpus.train_nodes(values)
                 if node["gpus"] == "auto")
    given = gpus.per_node(values, len(machine))
    if machine and wanted and not any(given[where] for where, _, _ in gpus.train_nodes(values)):
        return [f"  gpus: auto: the train nodes hold {wanted} trainer slot(s) at max_workers and this "
                f"machine has {len(machine)} GPU(s): they train on the CPU; set gpus: to split them"]
    return []


def on_cores(values: dict, node: dict) -> str:
    return ((f" on {cores(node)} core(s) of its own" if values["pin_cpus"] else "")
            + (f" limited to {node['cpu_quota']:g} core(s) of time" if node["cpu_quota"] else ""))
