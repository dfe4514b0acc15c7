"""`note:` lines for a values file that is valid but unwise: said by `make validate`, `up`
and `run` before anything launches, never refused (the platform would take it; the user
may mean it). One function per kind of advice, each from the built values alone."""

import os

import yaml

from scripts import catalog
from scripts.core.paths import VALUES_DIRS

# Fewer preprocessing vCPUs than this per GPU, at min_workers, and the GPUs wait for data
# in any image job the kit has measured (ViT-B/16 on an A10G needs ~30 vCPUs of the kit's
# augmentation: docs/benchmarks.md); the planner sizes it from a measured profile.
VCPUS_PER_GPU_FLOOR = 2


def notes(built, *, cores: bool = True) -> list[str]:
    """Every note for the built values file; cores: the local cores note too (`make
    validate` says it; `up` and `run` of the demo's own mix, whose nodes share 2 cores on
    purpose, need not say it each time)."""
    values, where = built.values, built.cluster
    return [f"note: {where}: {line}" for line in
            disk_dearer_than_node(values) + gpus_underfed(values) + shared_cluster_name(built)
            + (more_cpus_than_cores(values) if cores else [])]


def aws_nodes(values: dict) -> dict:
    if values.get("provider") != "aws":
        return {}
    return {"head": values["head"]} | {f"workers.{n}": w for n, w in values["workers"].items()}


def disk_dearer_than_node(values: dict) -> list[str]:
    """An AWS node whose EBS volumes bill more per hour than the instance itself."""
    out = []
    region = values.get("aws", {}).get("region", "")
    for key, node in aws_nodes(values).items():
        disk = node["disk"]
        price = catalog.instance_usd_per_hour(node["instance_type"], region)
        per_gb = catalog.ebs_usd_per_gb_month(region, disk["volume_type"])
        if price is None or per_gb is None:
            continue
        gb = disk["root_gb"] + disk["data_gb"]
        disk_usd = gb * per_gb / catalog.HOURS_PER_MONTH
        if disk_usd > price:
            out.append(f"{key}.disk: {gb} GB of {disk['volume_type']} bills ${disk_usd:.2f}/h, more than the "
                       f"{node['instance_type']} itself (${price:.2f}/h); a run's data and checkpoints fit in "
                       "S3 (aws.data_buckets, aws.output_buckets) for far less")
    return out


def gpus_underfed(values: dict) -> list[str]:
    """AWS GPUs at min_workers fed by fewer than VCPUS_PER_GPU_FLOOR preprocessing vCPUs each."""
    nodes = aws_nodes(values)
    if not nodes:
        return []
    gpus = vcpus = 0
    for key, node in nodes.items():
        spec = catalog.INSTANCE_TYPES.get(node["instance_type"])
        if spec is None:
            return []
        count = 1 if key == "head" else node["min_workers"]
        gpus += spec.gpus * count
        if node.get("preprocess") if key == "head" else node.get("role") == "preprocess":
            vcpus += catalog.preprocess_vcpus(node["instance_type"]) * count  # as the template offers them
    if gpus and vcpus < VCPUS_PER_GPU_FLOOR * gpus:
        return [f"{gpus} GPU(s) fed by {vcpus} preprocessing vCPU(s) at min_workers: image jobs the kit "
                f"has measured wait for data below {VCPUS_PER_GPU_FLOOR} per GPU; `make plan PROFILE=` "
                "sizes the CPU workers from a measured run"]
    return []


def shared_cluster_name(built) -> list[str]:
    """Another values file with this cluster_name on the same platform: one cluster to it
    (`make up` of the second refuses while the first is up)."""
    if built.values.get("provider") == "local":
        return []  # local clusters are their own processes and ports
    name, twins = built.values["cluster_name"], []
    for folder in VALUES_DIRS:
        for path in sorted(folder.glob("*.yaml")):
            if path.stem == built.cluster:
                continue
            try:
                other = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(other, dict) and other.get("cluster_name") == name \
                    and other.get("provider") == built.values.get("provider"):
                twins.append(path.stem)
    if twins:
        return [f"cluster_name: {name} is also {', '.join(sorted(set(twins)))}'s: the two are one cluster "
                "to the platform (one `make up` at a time); give this file a name of its own"]
    return []


def more_cpus_than_cores(values: dict) -> list[str]:
    """A local mix whose nodes ask more CPUs than this machine has cores: they share cores,
    and a heterogeneous row's gain over a single one would be overstated."""
    if values.get("provider") != "local":
        return []
    wanted = values["head"]["cpus"] + sum(w["cpus"] * w["max_workers"] for w in values["workers"].values())
    cores = os.cpu_count() or 1
    if wanted > cores and not values.get("pin_cpus"):
        return [f"its nodes ask {wanted:g} CPUs and this machine has {cores} cores: they share them (the "
                "simulated CPUs are Ray's slots, not cores), so a bench on it overstates what more CPU nodes buy; "
                "scale the cpus down, or run it on a machine with that many cores"]
    return []
