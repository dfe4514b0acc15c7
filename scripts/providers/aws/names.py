"""The names of what the kit makes for an AWS cluster, each written once: the head's node
type, the tags (Ray's and the kit's own), the security group, the placement group and the
IAM roles."""

NAME = "aws"  # the provider's, as values files write it
HEAD_TYPE = "ray.head.default"
# Tags Ray's autoscaler puts on every instance it launches (ray.autoscaler.tags); a worker
# is tagged up-to-date once it has joined the cluster.
TAG_CLUSTER, TAG_KIND, TAG_USER_TYPE = "ray-cluster-name", "ray-node-type", "ray-user-node-type"
TAG_STATUS, UP_TO_DATE, UPDATE_FAILED = "ray-node-status", "up-to-date", "update-failed"
# The kit's own tag on everything of a cluster it makes (instances, volumes, group, roles):
# the head's policy conditions on it and the watchdog terminates by it (scripts/node/
# autostop.py spells it once more: a node program imports nothing of the kit).
KIT_TAG = "ray-kit-cluster"


def security_group_name(values: dict) -> str:
    """The cluster's security group, which `make up` makes (the name Ray would give it)."""
    return f"ray-{values['cluster_name']}"


def placement_group_name(values: dict) -> str | None:
    """The cluster placement group of its train nodes (aws.placement_group: cluster), which
    `make up` makes; None where the values ask for none."""
    return f"raykit-{values['cluster_name']}" if values["aws"]["placement_group"] == "cluster" else None


def head_profile_name(values: dict) -> str | None:
    """The head's instance profile: `auto`, the kit's own least-privilege one for this
    cluster (made by `make up`); a name or ARN of yours; None, Ray's ray-autoscaler-v1
    (EC2 and S3 full access), only where the values file asks for it with null."""
    profile = values["aws"]["iam_instance_profile"]
    return f"raykit-{values['cluster_name']}-head" if profile == "auto" else profile


def worker_profile_name(values: dict) -> str | None:
    """The workers' instance profile: only where the values name data buckets (they read
    the jobs' data from them, read-only) or output buckets (train workers write the run's
    checkpoints there); otherwise none (workers call no AWS API)."""
    aws = values["aws"]
    return f"raykit-{values['cluster_name']}-worker" if aws["data_buckets"] or aws["output_buckets"] else None


def head_alarm_name(cluster_name: str) -> str:
    """The CloudWatch alarm that terminates the cluster's head when its host hangs
    (aws/alarm.py); one per cluster name and region."""
    return f"raykit-{cluster_name}-head-hung"
