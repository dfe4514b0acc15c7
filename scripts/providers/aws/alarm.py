"""The hung-head alarm: a CloudWatch alarm that terminates the head when EC2's status
checks fail for HUNG_MINUTES on end.

Every safeguard on the head runs on the head: the watchdog (autostop, job limits) and the
dead-man switch that watches it. A host that hangs (a kernel lock-up, a host that stops
answering) runs none of them, and bills on; the workers do power off (their raylets exit
once the head's GCS is gone, and their dead-man switches follow). EC2 checks every
instance from outside every minute (StatusCheckFailed: its system and its instance
checks); this alarm, set by `make up` on the head it launched and deleted by `make down`,
turns HUNG_MINUTES of failed checks into a terminate, done by CloudWatch's service-linked
role AWSServiceRoleForCloudWatchEvents (created with the first alarm of the account that
has an EC2 action: iam:CreateServiceLinkedRole, once). An alarm costs $0.10 a month.
Traced from AWS's PutMetricAlarm reference; tested on moto, never run against AWS.
"""

from scripts.core.errors import short
from scripts.providers.aws.names import KIT_TAG, head_alarm_name

HUNG_MINUTES = 15  # a reboot or a driver's load can fail a check for a few minutes


def set_head_alarm(cloudwatch, cluster_name: str, region: str, head_id: str) -> str | None:
    """Create (or point at a new head) the cluster's alarm; None where done, else the one
    line of what AWS refused (the cluster runs on without it: the caller warns)."""
    import botocore.exceptions

    try:
        cloudwatch.put_metric_alarm(
            AlarmName=head_alarm_name(cluster_name),
            AlarmDescription=(f"ray-kit: terminates the head of cluster {cluster_name} after "
                              f"{HUNG_MINUTES} min of failed EC2 status checks (a hung host)"),
            Namespace="AWS/EC2", MetricName="StatusCheckFailed",
            Dimensions=[{"Name": "InstanceId", "Value": head_id}],
            Statistic="Maximum", Period=60, EvaluationPeriods=HUNG_MINUTES,
            DatapointsToAlarm=HUNG_MINUTES, Threshold=1.0,
            ComparisonOperator="GreaterThanOrEqualToThreshold",
            TreatMissingData="notBreaching",  # no data (a stopped or gone head) is no hang
            AlarmActions=[f"arn:aws:automate:{region}:ec2:terminate"],
            Tags=[{"Key": KIT_TAG, "Value": cluster_name}])
    except botocore.exceptions.ClientError as e:
        error = e.response.get("Error", {})
        return f"{error.get('Code', '?')}: {short(error.get('Message', ''), 120)[1:-1]}"
    return None


def delete_head_alarm(cloudwatch, cluster_name: str) -> str | None:
    """Delete the cluster's alarm where there is one; a note for `make down` where one is
    left (None: none is)."""
    import botocore.exceptions

    name = head_alarm_name(cluster_name)
    try:
        found = cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]
        if found:
            cloudwatch.delete_alarms(AlarmNames=[name])
    except botocore.exceptions.ClientError as e:
        code = e.response.get("Error", {}).get("Code", "?")
        return (f"CloudWatch alarm {name} (not deleted: {code}; $0.10 a month; delete it in the "
                "CloudWatch console)")
    return None
