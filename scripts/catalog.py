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
DOCKER_IMAGE = {
    "gpu": f"rayproject/ray:{RAY_VERSION}-{PYTHON_TAG}-gpu",
    "cpu": f"rayproject/ray:{RAY_VERSION}-{PYTHON_TAG}-cpu",
}


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

# Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20250505: NVIDIA driver,
# Docker and the NVIDIA container toolkit, also fine on CPU-only instances. Ray's own
# default AMIs are years stale. To add a region, look its AMI up with
#   aws ec2 describe-images --owners amazon --region REGION --filters \
#     "Name=name,Values=Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)*"
# or set `aws.image_id` in the values file.
AMI_BY_REGION = {
    "us-east-1": "ami-0bbdd5918468148eb",
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
