"""Facts about AWS and Ray images that the templates and the validator share.

Everything here is a fixed fact the kit relies on; values files choose among them.
Prices are Linux on-demand list prices (USD/hour) of the regions in PRICED_REGIONS; they
price every figure in dollars the kit prints (scripts/pricing/: `make up`'s and
`make up DRY_RUN=1`'s estimate, `make cost`, `make plan`, `make bench`), never a bill:
check https://aws.amazon.com/ec2/pricing/ before budgeting.
"""

import functools
import json
import math
from dataclasses import dataclass

from scripts.core.inputs import strict_json
from scripts.core.paths import VALUES_DIRS

RAY_VERSION = "2.60.0"
PYTHON_TAG = "py311"
# rayproject/ray-ml is no longer published: the kit bases nodes on the plain Ray image
# and installs the jobs' pinned packages on top (setup_commands in aws.yaml.j2).
# GPU nodes take the same CUDA-less image as CPU nodes: the pinned torch's CUDA wheel
# brings its own CUDA 13.0 runtime (its nvidia-* wheels), and the NVIDIA container runtime
# mounts the host driver's libcuda and NVML into the container (`--gpus all` on AWS, the
# device plugin on Kubernetes). Ray's `-cu128` image added a CUDA 12.8 toolkit that nothing
# used, several GB on every GPU node's first pull (`-gpu` only aliases some `-cuXXX`).
DOCKER_IMAGE = {
    "gpu": f"rayproject/ray:{RAY_VERSION}-{PYTHON_TAG}-cpu",
    "cpu": f"rayproject/ray:{RAY_VERSION}-{PYTHON_TAG}-cpu",
}

# --- the GPU software chain: AMI driver >= what every CUDA on the node needs ------------
# The torch build the GPU nodes install (requirements.txt's torch==2.14.1, the default
# Linux wheel on PyPI): torch.version.cuda == "13.0", checked on this build machine.
# CPU-only nodes install PyTorch's CPU build and need no driver.
TORCH_CUDA = "13.0"
# Minimum NVIDIA Linux driver (major) per CUDA version: NVIDIA's CUDA Toolkit release
# notes, table "CUDA Toolkit and Corresponding Driver Versions" (GA releases: 12.1 >=
# 530.30.02, 12.8 >= 570.26, 12.9 >= 575.51.03, 13.0 >= 580.65.06), checked 2026-11. The
# NVIDIA container runtime refuses to start an image whose CUDA is newer than the driver.
CUDA_MIN_DRIVER = {"12.1": 530, "12.8": 570, "12.9": 575, "13.0": 580}
# AWS's Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04): NVIDIA driver, Docker
# and the NVIDIA container toolkit, also fine on CPU-only instances. AWS publishes the
# current release per region as this public SSM parameter (documented format
# /aws/service/deeplearning/ami/<arch>/<ami_type>/latest/ami-id); `image_id: auto` reads
# it at `make up` and the launched config records the id it found.
DLAMI_SSM_PARAMETER = ("/aws/service/deeplearning/ami/x86_64/"
                       "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id")
DLAMI_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) "  # + YYYYMMDD
# (first release date, NVIDIA driver major) of this AMI line, from the DLAMI release notes
# (docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-notes.html): 20250505
# ships 570; the releases of 20251031 ship 580.95.05; those of 20260428 on ship 595.x.
# A release between two rows is taken to have the older driver (never overestimated).
DLAMI_DRIVERS = ((20250505, 570), (20251031, 580), (20260428, 595))
# AMIs the kit knows offline: {id: (region, name)}; validation checks their driver.
KNOWN_AMIS = {
    "ami-0bbdd5918468148eb": ("us-east-1", DLAMI_NAME + "20250505"),
}


# EC2 families whose accelerators are not NVIDIA GPUs: real types, not typos of the kit's
# (a did-you-mean suggested g5.xlarge for inf2.xlarge), said so by `make validate`.
OTHER_ACCELERATORS = {
    "inf1": "AWS Inferentia", "inf2": "AWS Inferentia2", "trn1": "AWS Trainium", "trn1n": "AWS Trainium",
    "trn2": "AWS Trainium2", "dl1": "Habana Gaudi", "dl2q": "Qualcomm AI 100", "g4ad": "AMD Radeon Pro GPUs",
    "f1": "FPGAs", "f2": "FPGAs", "vt1": "Xilinx media accelerators",
}


def dlami_driver(ami_name: str) -> int | None:
    """The NVIDIA driver major of a Deep Learning Base OSS AMI, from its name's release
    date; None for any other AMI (its driver is unknown to the kit)."""
    date = ami_name[len(DLAMI_NAME):] if ami_name.startswith(DLAMI_NAME) else ""
    if not (len(date) == 8 and date.isdigit()):
        return None
    older = [driver for first, driver in DLAMI_DRIVERS if first <= int(date)]
    return older[-1] if older else DLAMI_DRIVERS[0][1]


def gpu_driver_needed() -> tuple[int, str]:
    """(driver major, why) that the GPU nodes' software needs: torch's CUDA alone (the
    image brings none)."""
    torch_needs = CUDA_MIN_DRIVER[TORCH_CUDA]
    return torch_needs, f"torch's CUDA {TORCH_CUDA} needs >= {torch_needs}"


# The oldest GPU architecture the pinned torch build ships kernels for: torch 2.14.1+cu130's
# torch.cuda.get_arch_list() is sm_75, sm_80, sm_86, sm_90, sm_100, sm_120 (read on this
# build machine; tests/test_render.py reads it again). On an older GPU torch imports, then
# fails at the first kernel ("no kernel image is available"), after the bill has started.
TORCH_MIN_COMPUTE_CAPABILITY = (7, 5)
# Compute capability per GPU model: NVIDIA's list of CUDA GPUs (developer.nvidia.com/cuda-gpus).
GPU_COMPUTE_CAPABILITY = {"T4": (7, 5), "A10G": (8, 6), "L4": (8, 9), "L40S": (8, 9), "V100": (7, 0),
                          "A100": (8, 0), "H100": (9, 0)}


def gpu_support_problem(instance_type: str) -> str | None:
    """Why the pinned torch build cannot use this type's GPU; None where it can (or no GPU)."""
    model = INSTANCE_TYPES[instance_type].gpu_model
    if model is None:
        return None
    major, minor = GPU_COMPUTE_CAPABILITY[model]
    need = TORCH_MIN_COMPUTE_CAPABILITY
    if (major, minor) >= need:
        return None
    return (f"its {model} (compute capability {major}.{minor}) is older than the pinned torch "
            f"CUDA {TORCH_CUDA} build supports (sm_{need[0]}{need[1]} and newer)")


@dataclass(frozen=True)
class InstanceType:
    vcpus: int
    gpus: int
    memory_gib: int
    gpu_model: str | None  # NVIDIA model; None for CPU-only types
    gpu_memory_gib: int    # per GPU
    usd_per_hour: dict     # {region: on-demand Linux list price, USD}


# On-demand Linux list prices, USD/hour, from aws.amazon.com/ec2/pricing/on-demand/ (and
# the instance-type pages for vCPUs, memory and GPUs), as of 2026-11; us-east-2 lists the
# same prices as us-east-1 for every type here. p5.48xlarge is after AWS's June 2025 cut
# of P5 prices. Re-check before budgeting: prices change, and other regions differ.
PRICED_REGIONS = ("us-east-1", "us-east-2")


def _type(vcpus: int, memory_gib: int, usd: float, gpus: int = 0, gpu_model: str | None = None,
          gpu_memory_gib: int = 0) -> InstanceType:
    return InstanceType(vcpus, gpus, memory_gib, gpu_model, gpu_memory_gib,
                        {region: usd for region in PRICED_REGIONS})


def _family(prefix: str, sizes: dict) -> dict:
    return {f"{prefix}.{size}": _type(*row) for size, row in sizes.items()}


INSTANCE_TYPES = {
    # GPU nodes (trainers): vCPUs, GiB, $/h, GPUs, model, GiB per GPU
    **_family("g4dn", {"xlarge": (4, 16, 0.526, 1, "T4", 16)}),
    **_family("g5", {  # NVIDIA A10G
        "xlarge": (4, 16, 1.006, 1, "A10G", 24), "2xlarge": (8, 32, 1.212, 1, "A10G", 24),
        "4xlarge": (16, 64, 1.624, 1, "A10G", 24), "8xlarge": (32, 128, 2.448, 1, "A10G", 24),
        "16xlarge": (64, 256, 4.096, 1, "A10G", 24), "12xlarge": (48, 192, 5.672, 4, "A10G", 24),
        "24xlarge": (96, 384, 8.144, 4, "A10G", 24), "48xlarge": (192, 768, 16.288, 8, "A10G", 24)}),
    **_family("g6", {  # NVIDIA L4
        "xlarge": (4, 16, 0.8048, 1, "L4", 24), "2xlarge": (8, 32, 0.9776, 1, "L4", 24),
        "4xlarge": (16, 64, 1.3232, 1, "L4", 24), "8xlarge": (32, 128, 2.0144, 1, "L4", 24),
        "16xlarge": (64, 256, 3.3968, 1, "L4", 24), "12xlarge": (48, 192, 4.6016, 4, "L4", 24),
        "24xlarge": (96, 384, 6.6752, 4, "L4", 24), "48xlarge": (192, 768, 13.3504, 8, "L4", 24)}),
    # g6e and c7a: the on-demand Price column of SkyPilot's maintained catalog
    # (skypilot-org/skypilot-catalog catalogs/v7/aws/vms.csv at 001367d2, read 2026-11-27;
    # the same in us-east-1 and us-east-2), sizes and GPUs as AWS's DescribeInstanceTypes
    # answers (moto's capture); the sizes that page did not show are left out, not guessed
    **_family("g6e", {  # NVIDIA L40S
        "xlarge": (4, 32, 1.861, 1, "L40S", 48), "4xlarge": (16, 128, 3.00424, 1, "L40S", 48),
        "8xlarge": (32, 256, 4.52856, 1, "L40S", 48), "48xlarge": (192, 1536, 30.13118, 8, "L40S", 48)}),
    **_family("p3", {  # NVIDIA V100
        "2xlarge": (8, 61, 3.06, 1, "V100", 16), "8xlarge": (32, 244, 12.24, 4, "V100", 16),
        "16xlarge": (64, 488, 24.48, 8, "V100", 16)}),
    **_family("p4d", {"24xlarge": (96, 1152, 32.7726, 8, "A100", 40)}),
    **_family("p5", {"48xlarge": (192, 2048, 55.04, 8, "H100", 80)}),
    # CPU-only nodes (preprocessors): vCPUs, GiB, $/h
    **_family("c5", {"large": (2, 4, 0.085), "xlarge": (4, 8, 0.17), "2xlarge": (8, 16, 0.34),
                     "4xlarge": (16, 32, 0.68), "9xlarge": (36, 72, 1.53),
                     "12xlarge": (48, 96, 2.04), "18xlarge": (72, 144, 3.06),
                     "24xlarge": (96, 192, 4.08)}),
    **_family("c6i", {"large": (2, 4, 0.085), "xlarge": (4, 8, 0.17), "2xlarge": (8, 16, 0.34),
                      "4xlarge": (16, 32, 0.68), "8xlarge": (32, 64, 1.36),
                      "12xlarge": (48, 96, 2.04), "16xlarge": (64, 128, 2.72),
                      "24xlarge": (96, 192, 4.08), "32xlarge": (128, 256, 5.44)}),
    **_family("c7i", {"large": (2, 4, 0.08925), "xlarge": (4, 8, 0.1785),
                      "2xlarge": (8, 16, 0.357), "4xlarge": (16, 32, 0.714),
                      "8xlarge": (32, 64, 1.428), "12xlarge": (48, 96, 2.142),
                      "16xlarge": (64, 128, 2.856), "24xlarge": (96, 192, 4.284),
                      "48xlarge": (192, 384, 8.568)}),
    **_family("c6a", {"large": (2, 4, 0.0765), "xlarge": (4, 8, 0.153), "2xlarge": (8, 16, 0.306),
                      "4xlarge": (16, 32, 0.612), "8xlarge": (32, 64, 1.224),
                      "12xlarge": (48, 96, 1.836), "16xlarge": (64, 128, 2.448),
                      "24xlarge": (96, 192, 3.672), "32xlarge": (128, 256, 4.896),
                      "48xlarge": (192, 384, 7.344)}),
    **_family("c7a", {"large": (2, 4, 0.10264), "2xlarge": (8, 16, 0.41056), "4xlarge": (16, 32, 0.82112),
                      "8xlarge": (32, 64, 1.64224), "12xlarge": (48, 96, 2.46336),
                      "16xlarge": (64, 128, 3.28448), "24xlarge": (96, 192, 4.92672),
                      "32xlarge": (128, 256, 6.56896), "48xlarge": (192, 384, 9.85344)}),
    **_family("m5", {"2xlarge": (8, 32, 0.384), "4xlarge": (16, 64, 0.768)}),
    **_family("m6i", {"large": (2, 8, 0.096), "xlarge": (4, 16, 0.192), "2xlarge": (8, 32, 0.384),
                      "4xlarge": (16, 64, 0.768), "8xlarge": (32, 128, 1.536),
                      "12xlarge": (48, 192, 2.304), "16xlarge": (64, 256, 3.072),
                      "24xlarge": (96, 384, 4.608), "32xlarge": (128, 512, 6.144)}),
}

# Network bandwidth per instance type, Gbit/s: (baseline, burst). AWS's DescribeInstanceTypes
# NetworkInfo.NetworkCards[].BaselineBandwidthInGbps / PeakBandwidthInGbps, summed over the
# network cards, as AWS answered it and moto 5.2.5 ships it (moto/ec2/resources/
# instance_types.json.gz, read 2026-11; tests/test_plan.py checks every row against it).
# The baseline is what a node sustains: "up to" types burst above it on credits that run
# out in 5-60 minutes, so the planner counts the baseline alone. The p3 types are not in
# that capture: unknown (None), and refused for training anyway (gpu_support_problem).
NETWORK_GBPS = {
    "g4dn.xlarge": (5, 25), "g5.xlarge": (2.5, 10), "g5.2xlarge": (5, 10), "g5.4xlarge": (10, 25),
    "g5.8xlarge": (25, 25), "g5.16xlarge": (25, 25), "g5.12xlarge": (40, 40), "g5.24xlarge": (50, 50),
    "g5.48xlarge": (100, 100), "g6.xlarge": (2.5, 10), "g6.2xlarge": (5, 10), "g6.4xlarge": (10, 25),
    "g6.8xlarge": (25, 25), "g6.16xlarge": (25, 25), "g6.12xlarge": (40, 40), "g6.24xlarge": (50, 50),
    "g6.48xlarge": (100, 100), "p4d.24xlarge": (400, 400), "p5.48xlarge": (3200, 3200), "c5.large": (0.75, 10),
    "c5.xlarge": (1.25, 10), "c5.2xlarge": (2.5, 10), "c5.4xlarge": (5, 10), "c5.9xlarge": (12, 12),
    "c5.12xlarge": (12, 12), "c5.18xlarge": (25, 25), "c5.24xlarge": (25, 25), "c6i.large": (0.781, 12.5),
    "c6i.xlarge": (1.562, 12.5), "c6i.2xlarge": (3.125, 12.5), "c6i.4xlarge": (6.25, 12.5), "c6i.8xlarge": (12.5, 12.5),
    "c6i.12xlarge": (18.75, 18.75), "c6i.16xlarge": (25, 25), "c6i.24xlarge": (37.5, 37.5), "c6i.32xlarge": (50, 50),
    "c7i.large": (0.781, 12.5), "c7i.xlarge": (1.562, 12.5), "c7i.2xlarge": (3.125, 12.5), "c7i.4xlarge": (6.25, 12.5),
    "c7i.8xlarge": (12.5, 12.5), "c7i.12xlarge": (18.75, 18.75), "c7i.16xlarge": (25, 25), "c7i.24xlarge": (37.5, 37.5),
    "c7i.48xlarge": (50, 50), "c6a.large": (0.781, 12.5), "c6a.xlarge": (1.562, 12.5), "c6a.2xlarge": (3.125, 12.5),
    "c6a.4xlarge": (6.25, 12.5), "c6a.8xlarge": (12.5, 12.5), "c6a.12xlarge": (18.75, 18.75), "c6a.16xlarge": (25, 25),
    "c6a.24xlarge": (37.5, 37.5), "c6a.32xlarge": (50, 50), "c6a.48xlarge": (50, 50), "m5.2xlarge": (2.5, 10),
    "m5.4xlarge": (5, 10), "m6i.large": (0.781, 12.5), "m6i.xlarge": (1.562, 12.5), "m6i.2xlarge": (3.125, 12.5),
    "m6i.4xlarge": (6.25, 12.5), "m6i.8xlarge": (12.5, 12.5), "m6i.12xlarge": (18.75, 18.75), "m6i.16xlarge": (25, 25),
    "m6i.24xlarge": (37.5, 37.5), "m6i.32xlarge": (50, 50), "g6e.xlarge": (2.5, 20), "g6e.4xlarge": (20, 20),
    "g6e.8xlarge": (25, 25), "g6e.48xlarge": (1600, 1600), "c7a.large": (0.781, 12.5), "c7a.2xlarge": (3.125, 12.5),
    "c7a.4xlarge": (6.25, 12.5), "c7a.8xlarge": (12.5, 12.5), "c7a.12xlarge": (18.75, 18.75), "c7a.16xlarge": (25, 25),
    "c7a.24xlarge": (37.5, 37.5), "c7a.32xlarge": (50, 50), "c7a.48xlarge": (50, 50),
}


def network_gbps(instance_type: str) -> float | None:
    """The baseline bandwidth a node of the type sustains, Gbit/s (None: unknown)."""
    found = NETWORK_GBPS.get(instance_type)
    return found[0] if found else None


# EBS list prices, USD per GB-month (aws.amazon.com/ebs/pricing, as of 2026-11), the same
# in every region of PRICED_REGIONS. An hour is 1/730 of a month in AWS's own arithmetic.
_EBS_LIST_USD = {"gp3": 0.08, "gp2": 0.10, "io1": 0.125, "io2": 0.125, "st1": 0.045, "sc1": 0.015,
                 "standard": 0.05}
EBS_USD_PER_GB_MONTH = {region: dict(_EBS_LIST_USD) for region in PRICED_REGIONS}
EBS_VOLUME_TYPES = tuple(_EBS_LIST_USD)  # what `make prices` reads for another region
HOURS_PER_MONTH = 730


def preprocess_vcpus(instance_type: str) -> int:
    """vCPUs of a node left to preprocessing. A GPU node keeps one per GPU for its training
    process (the step loop, collation and host-to-GPU copies) and one for Ray's head
    processes (GCS, dashboard, the job's driver); a CPU node keeps one for its raylet and
    the object transfers that ship its images to the trainer. The AWS template offers the
    rest to Ray as its CPUs (plus one per GPU for the trainers), and the planner counts the same."""
    spec = INSTANCE_TYPES[instance_type]
    return max(0, spec.vcpus - (spec.gpus + 1 if spec.gpus else 1))


def node_usd_per_hour(instance_type: str, region: str, volume_type: str = "gp3",
                      disk_gb: int = 0, spot: bool = False, zone: str | None = None) -> float | None:
    """An instance's price plus its EBS volumes', per hour: on-demand, or for a spot node
    the spot price `make prices` read (spot_usd_per_hour; on-demand, its ceiling, where none
    was read); None where neither this table nor a price list fetched for the region
    (`make prices`) has one."""
    price = (spot and spot_usd_per_hour(instance_type, region, zone)) or instance_usd_per_hour(instance_type, region)
    ebs = ebs_usd_per_hour(region, volume_type, disk_gb)
    if price is None or ebs is None:
        return None
    return price + ebs


def ebs_usd_per_hour(region: str, volume_type: str, disk_gb: int) -> float | None:
    """What `disk_gb` of an EBS volume type bills an hour (priced per GB-month); None where
    no source prices the volume type in the region."""
    per_gb = ebs_usd_per_gb_month(region, volume_type)
    return None if per_gb is None else disk_gb * per_gb / HOURS_PER_MONTH


# --- prices of other regions: `make prices` (scripts/providers/aws/price_list.py) -------
# reads them from AWS's Price List API into <values dir>/prices/aws-<region>.json, with the
# date it read them; this table's own prices win where it has them.
PRICE_LIST_FIELDS = {"region", "source", "fetched", "usd_per_hour", "ebs_usd_per_gb_month"}


def price_list_path(region: str, folder=None):
    """Where `make prices` writes the region's price list (the first values folder)."""
    if region not in REGIONS:  # a name that becomes part of a path: known names only
        raise ValueError(f"unknown region {region!r}")
    return (folder or VALUES_DIRS[0]) / "prices" / f"aws-{region}.json"


@functools.cache
def fetched_prices(region: str) -> dict | None:
    """The price list `make prices` fetched for the region, checked; None where none was.
    A file that is not one (edited, cut short) is one error line naming it."""
    return read_list(region, price_list_path, price_list_problem)


def read_list(region: str, path_of, problem_of) -> dict | None:
    """The first values folder's list of the region (path_of(region, folder)), checked by
    problem_of; None where there is none; one error line naming a file that is not one."""
    from scripts.core.errors import KitError

    if region not in REGIONS:
        return None
    for folder in VALUES_DIRS:
        path = path_of(region, folder)
        if not path.is_file():
            continue
        try:
            found = strict_json(path.read_text())
            problem = problem_of(found, region)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            problem = f"not JSON ({str(e)[:80]})"
        if problem:
            raise KitError(f"{path}: {problem}; run `make prices CLUSTER=...` for {region} again, "
                           "or delete the file")
        return found
    return None


def price_list_problem(found, region: str) -> str | None:
    """What makes `found` no price list of `region`; None when it is one."""
    if not isinstance(found, dict) or set(found) != PRICE_LIST_FIELDS:
        return f"a price list has exactly the keys {', '.join(sorted(PRICE_LIST_FIELDS))}"
    if found["region"] != region:
        return f"it prices {str(found['region'])[:40]!r}, not {region}"
    if not isinstance(found["fetched"], str) or not isinstance(found["source"], str):
        return "fetched and source are text"
    for key, known in (("usd_per_hour", INSTANCE_TYPES), ("ebs_usd_per_gb_month", EBS_VOLUME_TYPES)):
        table = found[key]
        if not isinstance(table, dict):
            return f"{key} maps names to prices"
        for name, price in table.items():
            if name not in known:
                return f"{key}: {str(name)[:40]!r} is not a type the kit knows"
            if isinstance(price, bool) or not isinstance(price, (int, float)) \
                    or not math.isfinite(price) or not 0 < price < 10_000:
                return f"{key}.{name}: {json.dumps(price)[:40]} is not a price in USD"
    return None


TABLE_AS_OF = "2026-11-01"  # when this file's prices were read (YYYY-MM-DD: compared as text)


def newest_fetched(region: str) -> dict | None:
    """The price list `make prices` fetched for the region where it is the newest source:
    read on or after this table's date (a user runs `make prices` to refresh stale
    prices, and a list read today outranks the table); None where the table is newer or
    none was fetched."""
    fetched = fetched_prices(region)
    return fetched if fetched and fetched["fetched"] >= TABLE_AS_OF else None


def instance_usd_per_hour(instance_type: str, region: str) -> float | None:
    """The type's on-demand $/h in the region, from the newest source that prices it: a
    fetched price list (newest_fetched), else this table, else an older fetched list."""
    for fetched in (newest_fetched(region), None, fetched_prices(region)):
        price = (fetched["usd_per_hour"] if fetched else INSTANCE_TYPES[instance_type].usd_per_hour).get(
            instance_type if fetched else region)
        if price is not None:
            return price
    return None


def ebs_usd_per_gb_month(region: str, volume_type: str) -> float | None:
    """A volume type's $/GB-month in the region, from the newest source, as instance prices."""
    for fetched in (newest_fetched(region), None, fetched_prices(region)):
        price = (fetched["ebs_usd_per_gb_month"].get(volume_type) if fetched
                 else EBS_USD_PER_GB_MONTH.get(region, {}).get(volume_type))
        if price is not None:
            return price
    return None


# --- spot prices: `make prices` also reads the region's current spot prices -----------
# (EC2 DescribeSpotPriceHistory) into <values dir>/prices/aws-<region>-spot.json: per
# instance type, the price in effect in each zone when read, with that time. Spot prices
# move, so every figure priced with them carries their date.
SPOT_LIST_FIELDS = {"region", "source", "fetched", "usd_per_hour"}


def spot_price_list_path(region: str, folder=None):
    return price_list_path(region, folder).with_name(f"aws-{region}-spot.json")


@functools.cache
def fetched_spot_prices(region: str) -> dict | None:
    """The spot prices `make prices` read for the region, checked; None where none were.
    A file that is not one is one error line naming it."""
    return read_list(region, spot_price_list_path, spot_list_problem)


def spot_list_problem(found, region: str) -> str | None:
    """What makes `found` no spot price list of `region`; None when it is one."""
    if not isinstance(found, dict) or set(found) != SPOT_LIST_FIELDS:
        return f"a spot price list has exactly the keys {', '.join(sorted(SPOT_LIST_FIELDS))}"
    if found["region"] != region:
        return f"it prices {str(found['region'])[:40]!r}, not {region}"
    if not isinstance(found["fetched"], str) or not isinstance(found["source"], str):
        return "fetched and source are text"
    if not isinstance(found["usd_per_hour"], dict):
        return "usd_per_hour maps instance types to zones' prices"
    for name, zones in found["usd_per_hour"].items():
        if name not in INSTANCE_TYPES:
            return f"usd_per_hour: {str(name)[:40]!r} is not a type the kit knows"
        if not isinstance(zones, dict) or not zones:
            return f"usd_per_hour.{name} maps zones to prices"
        for zone, price in zones.items():
            if not isinstance(zone, str) or zone[:-1] != region:
                return f"usd_per_hour.{name}: {str(zone)[:40]!r} is not a zone of {region}"
            if isinstance(price, bool) or not isinstance(price, (int, float)) \
                    or not math.isfinite(price) or not 0 < price < 10_000:
                return f"usd_per_hour.{name}.{zone}: {json.dumps(price)[:40]} is not a price in USD"
    return None


def spot_usd_per_hour(instance_type: str, region: str, zone: str | None = None) -> float | None:
    """The type's spot $/h as `make prices` read it: in `zone` where the mix pins one, else
    the highest of the region's zones (Ray may launch in any); None where none was read
    (or the zone offers none)."""
    fetched = fetched_spot_prices(region)
    zones = fetched["usd_per_hour"].get(instance_type, {}) if fetched else {}
    if zone:
        return zones.get(zone)
    return max(zones.values()) if zones else None


def spot_source(region: str) -> str | None:
    """When and how the region's spot prices were read; None where they were not."""
    fetched = fetched_spot_prices(region)
    return fetched and f"spot prices read {fetched['fetched']} by `make prices`"


def priced_regions() -> list[str]:
    """The regions with prices: this table's, then those `make prices` fetched."""
    return list(PRICED_REGIONS) + sorted(r for r in REGIONS - set(PRICED_REGIONS) if fetched_prices(r))


def price_source(region: str) -> str:
    """Where a region's prices come from, for the tables that print them."""
    if region in PRICED_REGIONS and not newest_fetched(region):
        return "scripts/catalog.py, as of 2026-11"
    fetched = fetched_prices(region)
    return (f"AWS's price list, read {fetched['fetched']} by `make prices`" if fetched
            else "none: `make prices` reads them from AWS")


AMI_ROOT_SNAPSHOT_GB = 75  # the AMI's root snapshot: a smaller root volume cannot launch

# Disk a node needs on top of the AMI: the Ray image plus the jobs' pip packages
# (a CUDA torch alone is ~6 GB). The validator refuses smaller root volumes.
DOCKER_DISK_GB = {"gpu": 35, "cpu": 15}

REGIONS = {
    "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1",
    "eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1", "eu-north-1",
    "ap-south-1", "ap-northeast-1", "ap-northeast-2", "ap-southeast-1",
    "ap-southeast-2", "sa-east-1",
}


def min_root_gb(has_gpu: bool) -> int:
    return AMI_ROOT_SNAPSHOT_GB + DOCKER_DISK_GB["gpu" if has_gpu else "cpu"]
