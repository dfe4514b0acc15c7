"""`note:` lines for AWS values that are valid but unwise (scripts/commands/advice.py says
them): a disk that bills more than its instance, GPUs fed by too few preprocessing vCPUs."""

from scripts import catalog
from scripts.providers.aws.values import nodes_of

# Fewer preprocessing vCPUs than this per GPU, at min_workers, and the GPUs wait for data
# in any image job the kit has measured (ViT-B/16 on an A10G needs ~30 vCPUs of the kit's
# augmentation: docs/benchmarks.md); the planner sizes it from a measured profile.
VCPUS_PER_GPU_FLOOR = 2


def value_notes(values: dict) -> list[str]:
    return disk_dearer_than_node(values) + gpus_underfed(values)


def disk_dearer_than_node(values: dict) -> list[str]:
    """A node whose EBS volumes bill more per hour than the instance itself."""
    out, region = [], values["aws"]["region"]
    for key, node in nodes_of(values).items():
        disk = node["disk"]
        gb = disk["root_gb"] + disk["data_gb"]
        price = catalog.instance_usd_per_hour(node["instance_type"], region)
        disk_usd = catalog.ebs_usd_per_hour(region, disk["volume_type"], gb)
        if price is None or disk_usd is None:
            continue
        if disk_usd > price:
            out.append(f"{key}.disk: {gb} GB of {disk['volume_type']} bills ${disk_usd:.2f}/h, more than the "
                       f"{node['instance_type']} itself (${price:.2f}/h); a run's data and checkpoints fit in "
                       "S3 (aws.data_buckets, aws.output_buckets) for far less")
    return out


def gpus_underfed(values: dict) -> list[str]:
    """GPUs at min_workers fed by fewer than VCPUS_PER_GPU_FLOOR preprocessing vCPUs each,
    counted as the template offers them (the head where it preprocesses, preprocess types)."""
    gpus = vcpus = 0
    for key, node in nodes_of(values).items():
        spec = catalog.INSTANCE_TYPES.get(node["instance_type"])
        if spec is None:
            return []
        count = 1 if key == "head" else node["min_workers"]
        gpus += spec.gpus * count
        if node.get("preprocess") if key == "head" else node.get("role") == "preprocess":
            vcpus += catalog.preprocess_vcpus(node["instance_type"]) * count
    if gpus and vcpus < VCPUS_PER_GPU_FLOOR * gpus:
        return [f"{gpus} GPU(s) fed by {vcpus} preprocessing vCPU(s) at min_workers: image jobs the kit "
                f"has measured wait for data below {VCPUS_PER_GPU_FLOOR} per GPU; `make plan PROFILE=` "
                "sizes the CPU workers from a measured run"]
    return []
