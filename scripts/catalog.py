"""Facts about AWS and Ray images that the templates and the validator share.

Everything here is a fixed fact the kit relies on; values files choose among them.
Prices are us-east-1 Linux on-demand list prices (USD/hour) and are only used for the
cost estimate that `make up` prints: check https://aws.amazon.com/ec2/pricing/ before
budgeting.
"""

from dataclasses import dataclass

RAY_VERSION = "2.60.0"
PYTHON_TAG = "py311"
# rayproject/ray-ml is no longer published: the kit bases nodes on the plain Ray image
# and installs the jobs' pinned packages on top (setup_commands in aws.yaml.j2).
# The GPU image is pinned to an explicit CUDA tag: `-gpu` only aliases some `-cuXXX`
# image (cu121 as Ray's CI sets GPU_PLATFORM), whose CUDA would change under us.
RAY_IMAGE_CUDA = "12.8"
DOCKER_IMAGE = {
    "gpu": f"rayproject/ray:{RAY_VERSION}-{PYTHON_TAG}-cu128",
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


def dlami_driver(ami_name: str) -> int | None:
    """The NVIDIA driver major of a Deep Learning Base OSS AMI, from its name's release
    date; None for any other AMI (its driver is unknown to the kit)."""
    date = ami_name[len(DLAMI_NAME):] if ami_name.startswith(DLAMI_NAME) else ""
    if not (len(date) == 8 and date.isdigit()):
        return None
    older = [driver for first, driver in DLAMI_DRIVERS if first <= int(date)]
    return older[-1] if older else DLAMI_DRIVERS[0][1]


def gpu_driver_needed() -> tuple[int, str]:
    """(driver major, why) that the GPU nodes' software needs."""
    torch_needs, image_needs = CUDA_MIN_DRIVER[TORCH_CUDA], CUDA_MIN_DRIVER[RAY_IMAGE_CUDA]
    why = (f"torch's CUDA {TORCH_CUDA} needs >= {torch_needs} "
           f"(the Ray image's CUDA {RAY_IMAGE_CUDA} >= {image_needs})")
    return max(torch_needs, image_needs), why


@dataclass(frozen=True)
class InstanceType:
    vcpus: int
    gpus: int
    memory_gib: int
    usd_per_hour: float


INSTANCE_TYPES = {
    # GPU nodes (trainers)
    "g4dn.xlarge": InstanceType(4, 1, 16, 0.526),
    "g5.xlarge": InstanceType(4, 1, 16, 1.006),
    "g5.2xlarge": InstanceType(8, 1, 32, 1.212),
    "g5.12xlarge": InstanceType(48, 4, 192, 5.672),
    "g6.xlarge": InstanceType(4, 1, 16, 0.805),
    "p3.2xlarge": InstanceType(8, 1, 61, 3.06),
    "p4d.24xlarge": InstanceType(96, 8, 1152, 32.773),
    # CPU-only nodes (preprocessors)
    "c5.2xlarge": InstanceType(8, 0, 16, 0.34),
    "c5.4xlarge": InstanceType(16, 0, 32, 0.68),
    "c5.9xlarge": InstanceType(36, 0, 72, 1.53),
    "c5.18xlarge": InstanceType(72, 0, 144, 3.06),
    "c6i.4xlarge": InstanceType(16, 0, 32, 0.68),
    "m5.2xlarge": InstanceType(8, 0, 32, 0.384),
    "m5.4xlarge": InstanceType(16, 0, 64, 0.768),
}

# EBS list prices in us-east-1, USD per GB-month (aws.amazon.com/ebs/pricing, as of 2025;
# not re-checked here). An hour is 1/730 of a month in AWS's own arithmetic.
EBS_USD_PER_GB_MONTH = {"gp3": 0.08, "gp2": 0.10, "io1": 0.125, "io2": 0.125, "st1": 0.045,
                        "sc1": 0.015, "standard": 0.05}
HOURS_PER_MONTH = 730
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
