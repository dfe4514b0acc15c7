"""The hung-head alarm (scripts/providers/aws/alarm.py) on moto: set on the one head,
pointed at a new head by a second `make up`, deleted by `make down` (gone or never made:
nothing to do); AWS's refusals, fed through botocore's Stubber as AWS words them, are one
warning at `make up` and one note at `make down`, never a failed command. The whole flow
(`ray up`'s head, then `make down`) is in test_ray_up_moto.py."""

import boto3
from botocore.stub import Stubber
from moto import mock_aws
from ray.autoscaler.tags import TAG_RAY_NODE_KIND

from conftest import publish_dlami
from scripts.providers.aws import launch as aws_launch
from scripts.providers.aws.alarm import delete_head_alarm, set_head_alarm

RECORD = {"cluster_name": "hetero", "region": "us-east-1"}
NAME = "raykit-hetero-head-hung"


def launch_head(ec2, cluster_name="hetero") -> str:
    image = publish_dlami(ec2, "20261020")
    return ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                             TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                 {"Key": "ray-kit-cluster", "Value": cluster_name},
                                 {"Key": TAG_RAY_NODE_KIND, "Value": "head"}]}])["Instances"][0]["InstanceId"]


def alarm_on(cloudwatch) -> list[str]:
    return [d["Value"] for a in cloudwatch.describe_alarms(AlarmNames=[NAME])["MetricAlarms"]
            for d in a["Dimensions"]]


@mock_aws
def test_make_up_sets_the_alarm_on_its_head_and_a_second_up_moves_it(capsys):
    ec2, cloudwatch = boto3.client("ec2", region_name="us-east-1"), boto3.client("cloudwatch", region_name="us-east-1")
    launch_head(ec2, "another")  # another cluster's head is never watched for this one
    first = launch_head(ec2)
    aws_launch.watch_for_a_hung_head(RECORD)
    assert alarm_on(cloudwatch) == [first]
    assert "hung-head alarm: CloudWatch terminates the head after 15 min" in capsys.readouterr().out
    ec2.terminate_instances(InstanceIds=[first])
    second = launch_head(ec2)
    aws_launch.watch_for_a_hung_head(RECORD)
    assert alarm_on(cloudwatch) == [second]
    (alarm,) = cloudwatch.describe_alarms(AlarmNames=[NAME])["MetricAlarms"]
    assert alarm["TreatMissingData"] == "notBreaching" and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert delete_head_alarm(cloudwatch, "hetero") is None and alarm_on(cloudwatch) == []
    assert delete_head_alarm(cloudwatch, "hetero") is None  # none left: nothing to do


@mock_aws
def test_a_refused_alarm_is_one_warning_and_the_cluster_runs_on(monkeypatch, capsys):
    ec2 = boto3.client("ec2", region_name="us-east-1")
    launch_head(ec2)
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    stubber = Stubber(cloudwatch)
    stubber.add_client_error("put_metric_alarm", "AccessDenied", "User: arn:aws:iam::123456789012:user/u "
                             "is not authorized to perform: cloudwatch:PutMetricAlarm", 403)
    stubber.activate()
    real_client = boto3.client
    monkeypatch.setattr(boto3, "client", lambda service, **kw: cloudwatch if service == "cloudwatch"
                        else real_client(service, **kw))
    aws_launch.watch_for_a_hung_head(RECORD)
    out = capsys.readouterr().out
    assert out.startswith("warning: no hung-head alarm (AccessDenied: User: arn:aws:iam::") and out.count("\n") == 1
    assert "docs/aws.md lists the rights it needs" in out


def test_an_alarm_down_cannot_delete_is_a_note_not_a_failure():
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing")
    stubber = Stubber(cloudwatch)
    stubber.add_client_error("describe_alarms", "AccessDenied", "not authorized", 403)
    stubber.activate()
    note = delete_head_alarm(cloudwatch, "hetero")
    assert note.startswith(f"CloudWatch alarm {NAME} (not deleted: AccessDenied; $0.10 a month")
    stubber.add_client_error("put_metric_alarm", "LimitExceeded", "The maximum number of alarms "
                             "for this account has been reached", 400)
    assert set_head_alarm(cloudwatch, "hetero", "us-east-1", "i-0123456789abcdef0").startswith("LimitExceeded: ")
