"""The rendered AWS configs launch what they say, against moto (in-process, offline)."""

import copy
import http.server
import threading
import time
import types
from contextlib import contextmanager

import boto3
import pytest
import yaml
from moto import mock_aws
from ray.autoscaler.tags import TAG_RAY_NODE_KIND

from conftest import load_example, publish_dlami
from scripts.providers.aws import iam as aws_iam
from scripts.providers.aws import launch as aws_launch
from scripts.providers.aws import teardown as aws_teardown
from scripts import catalog
from scripts.build import build, build_text


@pytest.fixture
def home(tmp_path, monkeypatch):
    # Ray's bootstrap writes the SSH key it creates to ~/.ssh: keep it out of the real home.
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.fixture(autouse=True)
def no_iam_propagation_wait(monkeypatch):
    """Ray's bootstrap sleeps twice 15 s after creating its IAM role and instance profile,
    for AWS to propagate them; moto has nothing to propagate. Only that module's clock is
    replaced (it uses time for nothing else): 30 s less per bootstrap, 3 min a suite."""
    from ray.autoscaler._private.aws import config

    monkeypatch.setattr(config, "time", types.SimpleNamespace(sleep=lambda seconds: None))


def launch_every_node_type(cluster: str, config: dict | None = None):
    """bootstrap_aws then AWSNodeProvider.create_node for each node type, as `ray up` and
    the autoscaler do; return {node type: instance description}."""
    from ray.autoscaler._private.aws.config import bootstrap_aws
    from ray.autoscaler._private.aws.node_provider import AWSNodeProvider
    from ray.autoscaler._private.util import prepare_config
    from ray.autoscaler.tags import NODE_KIND_HEAD, NODE_KIND_WORKER, TAG_RAY_NODE_KIND, \
        TAG_RAY_NODE_NAME, TAG_RAY_USER_NODE_TYPE

    values = build(cluster).values
    if values["aws"]["iam_instance_profile"] == "auto":  # as `make up` does before `ray up`
        aws_iam.ensure_head_role(boto3.client("iam"), values, wait_s=0)
    # (`make up` makes the placement group of aws.placement_group: cluster here too; moto
    # has no placement groups and launches into a name as into none: Stubber tests it)
    config = bootstrap_aws(prepare_config(config or build(cluster).config))
    provider = AWSNodeProvider(config["provider"], config["cluster_name"])
    ec2 = boto3.client("ec2", region_name=config["provider"]["region"])
    launched = {}
    for name, node_type in config["available_node_types"].items():
        kind = NODE_KIND_HEAD if name == config["head_node_type"] else NODE_KIND_WORKER
        tags = {TAG_RAY_NODE_KIND: kind, TAG_RAY_USER_NODE_TYPE: name,
                TAG_RAY_NODE_NAME: f"ray-{config['cluster_name']}-{kind}"}
        before = set(provider.non_terminated_nodes({}))
        provider.create_node(copy.deepcopy(node_type["node_config"]), tags, 1)
        (instance_id,) = set(provider.non_terminated_nodes({})) - before
        launched[name] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return config, provider, ec2, launched


@pytest.mark.parametrize("cluster,head_type,worker_type", [
    ("hetero", "g5.xlarge", "c5.4xlarge"),
    ("p4d_hetero", "p4d.24xlarge", "c5.18xlarge"),
])
def test_launch_head_and_workers_on_moto(home, cluster, head_type, worker_type):
    with mock_aws():
        config, provider, ec2, launched = launch_every_node_type(cluster)
        values = load_example(cluster)
        assert launched["ray.head.default"]["InstanceType"] == head_type
        assert launched["cpu_worker"]["InstanceType"] == worker_type
        for name, instance in launched.items():
            tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
            assert tags["ray-cluster-name"] == values["cluster_name"]
            assert tags["ray-user-node-type"] == name
            assert tags["ray-kit-cluster"] == values["cluster_name"]
            assert tags["project"] == "ray-hetero-kit"
            assert instance["MetadataOptions"]["HttpTokens"] == "required"
            assert instance["ImageId"] == config["available_node_types"][name]["node_config"]["ImageId"]

            node_values = values["head"] if name == "ray.head.default" else values["workers"][name]
            volume_ids = [m["Ebs"]["VolumeId"] for m in instance["BlockDeviceMappings"]]
            volumes = ec2.describe_volumes(VolumeIds=volume_ids)["Volumes"]
            expected_sizes = {node_values["disk"]["root_gb"]} | (
                {node_values["disk"]["data_gb"]} if node_values["disk"].get("data_gb") else set())
            assert {v["Size"] for v in volumes} == expected_sizes
            assert all(v["VolumeType"] == "gp3" and v["Encrypted"] for v in volumes)
            for volume in volumes:  # tagged like the instance, for cost allocation
                volume_tags = {t["Key"]: t["Value"] for t in volume.get("Tags", [])}
                assert volume_tags["ray-kit-cluster"] == values["cluster_name"]
                assert volume_tags["project"] == "ray-hetero-kit"
            assert instance["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
            # powering off terminates: what the node's dead-man switch relies on
            assert ec2.describe_instance_attribute(
                InstanceId=instance["InstanceId"], Attribute="instanceInitiatedShutdownBehavior"
            )["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"

        # the security group that bootstrap made opens SSH and nothing else to the world
        group_id = launched["ray.head.default"]["SecurityGroups"][0]["GroupId"]
        group = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
        public = [p for p in group["IpPermissions"] if p.get("IpRanges")]
        assert [(p["FromPort"], p["ToPort"]) for p in public] == [(22, 22)]

        provider.terminate_nodes(list(provider.non_terminated_nodes({})))
        states = {i["State"]["Name"]
                  for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}
        assert states <= {"shutting-down", "terminated"}
        assert provider.non_terminated_nodes({}) == []


def run_tagged(ec2, cluster_name, kind, node_type, status, count=1):
    """Instances tagged as Ray's autoscaler tags them."""
    tags = [{"Key": "ray-cluster-name", "Value": cluster_name}, {"Key": "ray-node-type", "Value": kind},
            {"Key": "ray-user-node-type", "Value": node_type}, {"Key": "ray-node-status", "Value": status}]
    ec2.run_instances(ImageId="ami-12345678", InstanceType="c5.4xlarge", MinCount=count,
                      MaxCount=count, TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])


RECORD = {"cluster": "hetero", "provider": "aws", "cluster_name": "hetero", "region": "us-east-1",
          "min_workers": {"cpu_worker": 2, "spare": 0}, "ready_timeout_s": 60,
          "security_group": "ray-hetero", "ray_key_pair": True, "ray_role": False}


def test_joined_workers_counts_only_this_clusters_joined_workers():
    from scripts.providers.aws.launch import joined_workers

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        run_tagged(ec2, "hetero", "head", "ray.head.default", "up-to-date")
        run_tagged(ec2, "hetero", "worker", "cpu_worker", "up-to-date", count=2)
        run_tagged(ec2, "hetero", "worker", "cpu_worker", "setting-up")  # still booting
        run_tagged(ec2, "other", "worker", "cpu_worker", "up-to-date")   # another cluster
        run_tagged(ec2, "hetero", "worker", "cpu_worker", "update-failed")  # its setup failed
        assert joined_workers(RECORD) == {"cpu_worker": 2}
        assert joined_workers(RECORD, "update-failed") == {"cpu_worker": 1}


def test_wait_until_ready_returns_once_min_workers_joined(capsys):
    from scripts.providers.aws import wait_until_ready

    polls = []

    def joins_on_third_poll(record):
        polls.append(1)
        return {"cpu_worker": min(len(polls) - 1, 2)}

    wait_until_ready(RECORD, joined=joins_on_third_poll, poll_s=0.01)
    assert len(polls) == 3
    assert capsys.readouterr().out.splitlines() == [
        "  workers joined: cpu_worker 0/2 after 0 s", "  workers joined: cpu_worker 1/2 after 0 s",
        "  workers joined: cpu_worker 2/2 after 0 s"]


def test_wait_until_ready_times_out_naming_what_is_missing(monkeypatch):
    from scripts.core.errors import KitError
    from scripts.providers import aws

    monkeypatch.setattr(aws_launch, "launch_errors", lambda record: "Failed to launch 2 node(s) of type cpu_worker.")
    with pytest.raises(KitError) as error:
        aws.wait_until_ready(RECORD | {"ready_timeout_s": 0.05},
                             joined=lambda r, status="up-to-date": {"cpu_worker": 1} if status == "up-to-date" else {},
                             poll_s=0.01)
    text = str(error.value)
    assert "still missing: 1 x cpu_worker" in text and "Failed to launch 2 node(s)" in text
    assert "`make down CLUSTER=hetero` stops it" in text and "\n" not in text


def ray_source(module: str) -> str:
    import importlib
    import inspect

    return inspect.getsource(importlib.import_module(module))


# What Ray 2.60 logs when a worker's setup fails, quoted from its installed source (the
# test fails if Ray words it otherwise): v2's installer, once per attempt; the updater.
RAY_INSTALL_FAILED = 'f"Ray installation failed on instance {instance.cloud_instance_id}: {e}"'
RAY_UNEXPECTED_STATUS = 'f"Ray installation failed with unexpected status: {tags.get(TAG_RAY_NODE_STATUS)}"'
RAY_SETUP_COMMAND_FAILED = '"Setup command `{}` failed with exit code {}. stderr: {}"'
RAY_SSH_FAILED = 'fail_msg = "SSH command failed."'


def test_the_failure_lines_are_the_ones_ray_writes():
    installer = "ray.autoscaler.v2.instance_manager.subscribers.threaded_ray_installer"
    assert RAY_INSTALL_FAILED in ray_source(installer)
    assert RAY_UNEXPECTED_STATUS in ray_source("ray.autoscaler.v2.instance_manager.ray_installer")
    assert RAY_SETUP_COMMAND_FAILED in ray_source("ray.autoscaler._private.updater")
    assert 'cli_logger.error("Error message: {}", str(e))' in ray_source("ray.autoscaler._private.updater")
    assert RAY_SSH_FAILED in ray_source("ray.autoscaler._private.command_runner")


def test_a_worker_whose_setup_failed_is_named_at_the_time_out_with_its_type_and_error(monkeypatch):
    """Under autoscaler v2 a worker whose setup fails is retried, then terminated: its
    update-failed tag is seldom there at the time-out. `make up` names its worker type
    (from the instance id Ray logs) and its last error, from the lines Ray writes."""
    from scripts.core.errors import KitError
    from scripts.providers import aws

    status_error = RAY_UNEXPECTED_STATUS[2:-1].replace("{tags.get(TAG_RAY_NODE_STATUS)}", "update-failed")
    log = "\n".join([
        "2026-11-23 08:01:02,000\tINFO autoscaler.py:1 -- StandardAutoscaler: 2 nodes",
        "Error message: " + RAY_SSH_FAILED.split('"')[1],  # the updater, with login shells
        "2026-11-23 08:03:04,000\tINFO threaded_ray_installer.py:80 -- " + RAY_INSTALL_FAILED[2:-1]
        .replace("{instance.cloud_instance_id}", "i-0abc123").replace("{e}", status_error),
        RAY_SETUP_COMMAND_FAILED[1:-1].format("pip install -q torch==2.14.1", 1, "No space left on device"),
    ])
    monkeypatch.setattr(aws_launch, "launch_errors", lambda record: aws_launch.autoscaler_failures(
        log, {"i-0abc123": "cpu_worker"}))
    counts = {"up-to-date": {}, "update-failed": {}}  # v2 terminated it: no tag left
    with pytest.raises(KitError) as error:
        aws.wait_until_ready(RECORD | {"ready_timeout_s": 0.05},
                             joined=lambda r, status="up-to-date": counts[status], poll_s=0.01)
    text = str(error.value)
    assert "still missing: 2 x cpu_worker" in text and "\n" not in text
    assert ("cpu_worker (i-0abc123) failed its setup: Ray installation failed with unexpected "
            "status: update-failed") in text
    assert "Setup command `pip install -q torch==2.14.1` failed with exit code 1. stderr: No space" in text
    assert aws_launch.autoscaler_failures("nothing here\n") == "(no launch or setup failure in its log)"


@mock_aws
def test_instance_types_names_terminated_workers_too():
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    (worker,) = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="c5.large",
                                  TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                      {"Key": "ray-cluster-name", "Value": "hetero"},
                                      {"Key": "ray-user-node-type", "Value": "cpu_worker"}]}])["Instances"]
    ec2.terminate_instances(InstanceIds=[worker["InstanceId"]])
    assert aws_launch.instance_types(ec2, RECORD) == {worker["InstanceId"]: "cpu_worker"}


def test_given_subnet_and_security_group_are_used_and_no_group_is_created(home, hetero_values):
    import yaml

    from scripts.build import build_text

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.1.0/24",
                                   AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"]
        ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": True})
        group = ec2.create_security_group(GroupName="mine", Description="mine", VpcId=vpc)["GroupId"]
        hetero_values["aws"] |= {"subnet_ids": [subnet], "security_group_ids": [group]}
        built = build_text("hetero", yaml.safe_dump(hetero_values).encode())
        _, provider, ec2, launched = launch_every_node_type("hetero", built.config)
        for instance in launched.values():
            assert instance["SubnetId"] == subnet
            assert [g["GroupId"] for g in instance["SecurityGroups"]] == [group]
        names = {g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"]}
        assert "ray-hetero" not in names
        provider.terminate_nodes(list(provider.non_terminated_nodes({})))


def test_down_reports_what_ray_left_behind_and_keeps_the_group_without_purge():
    from scripts.providers.aws.teardown import left_behind

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        group = ec2.create_security_group(GroupName="ray-hetero", Description="the kit's", TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": "ray-kit-cluster", "Value": "hetero"}]}])["GroupId"]
        notes = left_behind(ec2, RECORD, purge=False)
        assert notes == [f"security group ray-hetero ({group}; free, `make down PURGE=1` deletes it)",
                         "key pair ray-autoscaler_us-east-1 (shared by Ray's clusters in the region; free)"]
        assert ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"]
        assert left_behind(ec2, RECORD | {"security_group": None, "ray_key_pair": False}, purge=True) == []
        assert ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"]  # not the kit's to delete


def test_purge_deletes_only_the_clusters_own_group_and_waits_out_a_lingering_interface(monkeypatch):
    """A group of the same name in another VPC is someone else's; EC2 refuses to delete a
    group a terminated instance's interface still holds (DependencyViolation) for a while."""
    from botocore.stub import Stubber

    from scripts.providers import aws

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        other_vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        theirs = ec2.create_security_group(GroupName="ray-hetero", Description="another team's",
                                           VpcId=other_vpc)["GroupId"]
        ours = ec2.create_security_group(GroupName="ray-hetero", Description="the kit's", TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": "ray-kit-cluster", "Value": "hetero"}]}])["GroupId"]
        record = RECORD | {"ray_key_pair": False}
        assert aws_teardown.left_behind(ec2, record, purge=True) == ["nothing of security group ray-hetero (deleted)"]
        left = {g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]}
        assert theirs in left and ours not in left

    monkeypatch.setattr(aws_teardown, "READY_POLL_S", 0.01)
    client = boto3.client("ec2", region_name="us-east-1")
    in_use = "resource sg-0123 has a dependent object"
    with Stubber(client) as stub:
        stub.add_client_error("delete_security_group", "DependencyViolation", in_use)
        stub.add_client_error("delete_security_group", "DependencyViolation", in_use)
        stub.add_response("delete_security_group", {}, {"GroupId": "sg-0123"})
        aws_teardown.when_free(lambda: client.delete_security_group(GroupId="sg-0123"), "security group ray-hetero",
                      limit_s=5, poll_s=0.01)
        stub.assert_no_pending_responses()
        stub.add_client_error("delete_security_group", "DependencyViolation", in_use)
        with pytest.raises(aws.KitError, match="security group ray-hetero is still in use after 0 s "
                                               r"\(DependencyViolation: resource sg-0123 has a dependent object\)"):
            aws_teardown.when_free(lambda: client.delete_security_group(GroupId="sg-0123"), "security group ray-hetero",
                          limit_s=0, poll_s=0.01)


# --- preflight: read-only checks of the account, in moto --------------------------------

def preflight_of(values, dlami: str | None = "20261020", **clients):
    """The preflight in moto, where AWS's public DLAMI parameter names a release of
    `dlami` (None: the parameter is missing)."""
    from scripts.providers.aws.preflight import preflight

    if dlami and "ec2" not in clients:
        publish_dlami(boto3.client("ec2", region_name=values["aws"]["region"]), dlami)
    return preflight(values, **clients)


def checked(values: dict) -> dict:
    import yaml

    from scripts.build import build_text
    return build_text("hetero", yaml.safe_dump(values).encode()).values


def test_preflight_picks_one_zone_offering_every_type_with_a_public_subnet(hetero_values):
    with mock_aws():
        found = preflight_of(checked(hetero_values))
        assert found["account"] == "123456789012"
        assert found["availability_zone"] == "us-east-1a"  # the first that offers g5 and c5
        ec2 = boto3.client("ec2", region_name="us-east-1")
        subnet = ec2.describe_subnets(SubnetIds=[found["subnet"]])["Subnets"][0]
        assert subnet["AvailabilityZone"] == "us-east-1a" and subnet["MapPublicIpOnLaunch"]


def test_preflight_refuses_a_zone_that_lacks_a_type(hetero_values):
    from scripts.core.errors import KitError

    hetero_values["head"]["instance_type"] = "p4d.24xlarge"  # not offered in us-east-1f
    hetero_values["head"]["disk"]["root_gb"] = 300
    hetero_values["aws"]["availability_zone"] = "us-east-1f"
    with mock_aws(), pytest.raises(KitError) as error:
        preflight_of(checked(hetero_values))
    assert ("aws.availability_zone: us-east-1f does not offer p4d.24xlarge; zones that offer "
            "every type: us-east-1a, us-east-1b, us-east-1c, us-east-1d") in str(error.value)


def test_preflight_wants_a_subnet_with_public_ips_or_internal_ips(hetero_values):
    from scripts.core.errors import KitError

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.2.0.0/16")["Vpc"]["VpcId"]
        private = ec2.create_subnet(VpcId=vpc, CidrBlock="10.2.1.0/24",
                                    AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"]
        hetero_values["aws"]["subnet_ids"] = [private]
        with pytest.raises(KitError) as error:
            preflight_of(checked(hetero_values))
        assert "the subnets in aws.subnet_ids" in str(error.value)
        assert "set aws.subnet_ids to one that does, or aws.use_internal_ips: true" in str(error.value)
        hetero_values["aws"]["use_internal_ips"] = True
        hetero_values["aws"]["ssh_cidr"] = "10.0.0.0/16"  # SSH from inside: auto would find the public address
        # private IPs, but no route out: no node could pull its image or packages
        with pytest.raises(KitError, match=f"aws.use_internal_ips: no route out of {private} "):
            preflight_of(checked(hetero_values))
        # an internet gateway is no way out without public IPs
        igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
        table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        ec2.associate_route_table(RouteTableId=table, SubnetId=private)
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
        with pytest.raises(KitError, match="no route out of"):
            preflight_of(checked(hetero_values))
        # a NAT gateway (in a public subnet of the VPC) is
        public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.2.2.0/24",
                                   AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"]
        address = ec2.allocate_address(Domain="vpc")["AllocationId"]
        nat = ec2.create_nat_gateway(SubnetId=public, AllocationId=address)["NatGateway"]["NatGatewayId"]
        ec2.replace_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
        found = preflight_of(checked(hetero_values))
        assert (found["availability_zone"], found["subnet"]) == ("us-east-1b", private)


def test_the_root_volume_is_the_amis_own_root_device(home, hetero_values):
    """An AMI whose root device is /dev/xvda: the preflight reads it, the rendered root
    volume is that device, and an instance launched from it has one volume, of root_gb."""
    import yaml

    from scripts.build import build_text
    from scripts.providers import aws

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        image = ec2.register_image(Name="my-own-image", Architecture="x86_64")["ImageId"]
        # moto's RegisterImage ignores RootDeviceName (AWS's keeps it): set it in its store
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].amis[image].root_device_name = "/dev/xvda"
        assert ec2.describe_images(ImageIds=[image])["Images"][0]["RootDeviceName"] == "/dev/xvda"
        hetero_values["aws"]["image_id"] = image
        pinned, _ = aws.preflight(checked(hetero_values))
        assert pinned["aws"]["root_device"] == "/dev/xvda"
        config = build_text("hetero", yaml.safe_dump(pinned).encode()).config
        for node_type in config["available_node_types"].values():
            assert node_type["node_config"]["BlockDeviceMappings"][0]["DeviceName"] == "/dev/xvda"


def test_preflight_checks_the_key_pair_and_its_private_key(home, hetero_values):
    from scripts.core.errors import KitError

    hetero_values["aws"]["key_pair"] = "mine"
    with mock_aws():
        with pytest.raises(KitError) as error:
            preflight_of(checked(hetero_values))
        assert "aws.key_pair: no key pair 'mine' in us-east-1" in str(error.value)
        assert "~/.ssh/mine.pem is missing" in str(error.value)
        boto3.client("ec2", region_name="us-east-1").create_key_pair(KeyName="mine")
        (home / ".ssh").mkdir()
        (home / ".ssh" / "mine.pem").write_text("key")
        assert preflight_of(checked(hetero_values))["availability_zone"] == "us-east-1a"


def test_preflight_says_when_aws_rejects_the_credentials(hetero_values):
    from botocore.stub import Stubber

    from scripts.core.errors import KitError

    sts = boto3.client("sts", region_name="us-east-1")
    with Stubber(sts) as stub, pytest.raises(KitError) as error:
        stub.add_client_error("get_caller_identity", service_error_code="InvalidClientTokenId",
                              service_message="The security token included in the request is invalid.",
                              http_status_code=403)
        preflight_of(checked(hetero_values), sts=sts, ec2=object())
    assert str(error.value).startswith("AWS rejected the credentials (An error occurred "
                                       "(InvalidClientTokenId)")


def stubbed_quotas(limits: dict[str, float]):
    """A Service Quotas client answering GetServiceQuota with these values, in this order,
    in the real response shape (moto does not implement EC2's quotas)."""
    from botocore.stub import Stubber

    from scripts.providers.aws.preflight import VCPU_QUOTAS

    names = {code: name for code, name in VCPU_QUOTAS.values()}
    client = boto3.client("service-quotas", region_name="us-east-1")
    stub = Stubber(client)
    for code, value in limits.items():
        stub.add_response("get_service_quota", {"Quota": {
            "ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:us-east-1:123456789012:ec2/{code}",
            "QuotaCode": code, "QuotaName": names[code], "Value": value, "Unit": "None",
            "Adjustable": True, "GlobalQuota": False}},
            {"ServiceCode": "ec2", "QuotaCode": code})
    stub.activate()
    return client, stub


def test_preflight_refuses_a_quota_below_min_workers_and_notes_one_below_max_workers(hetero_values):
    from scripts.core.errors import KitError

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ec2.run_instances(ImageId="ami-12345678", InstanceType="c5.4xlarge", MinCount=2, MaxCount=2)
        # a new account: no G vCPUs; 96 standard vCPUs, 32 of them used already
        quotas, stub = stubbed_quotas({"L-DB2E81BA": 0.0, "L-1216C47A": 96.0})
        with pytest.raises(KitError) as error:
            preflight_of(checked(hetero_values), quotas=quotas)
        stub.assert_no_pending_responses()
        text = str(error.value)
        assert ("vCPU quota 'Running On-Demand G and VT instances' (L-DB2E81BA) is 0; the mix needs "
                "4 at min_workers and 0 already run: request at least 4 in the Service Quotas "
                "console") in text
        assert "L-1216C47A" not in text  # 64 needed at max_workers + 32 running fit in 96

        # 2 x c5.4xlarge (32 vCPUs) at min_workers + 32 running do not fit in 48: refused
        quotas, stub = stubbed_quotas({"L-DB2E81BA": 8.0, "L-1216C47A": 48.0})
        with pytest.raises(KitError) as error:
            preflight_of(checked(hetero_values), quotas=quotas)
        assert ("(L-1216C47A) is 48; the mix needs 32 at min_workers and 32 already run: "
                "request at least 64") in str(error.value) and "L-DB2E81BA" not in str(error.value)

        # 64: min_workers fit (32 + 32), max_workers (64 + 32) do not: a note, not a refusal
        quotas, stub = stubbed_quotas({"L-DB2E81BA": 8.0, "L-1216C47A": 64.0})
        found = preflight_of(checked(hetero_values), quotas=quotas)
        (note,) = found["notes"]
        assert note.startswith("vCPU quota 'Running On-Demand Standard") and "(L-1216C47A) is 64: it " \
            "holds min_workers, but max_workers needs 64 with 32 already running" in note
        assert "request 96" in note

        quotas, stub = stubbed_quotas({"L-DB2E81BA": 8.0, "L-1216C47A": 96.0})
        found = preflight_of(checked(hetero_values), quotas=quotas)
        assert found["notes"] == [] and found["availability_zone"] == "us-east-1a"


def test_preflight_counts_spot_workers_against_the_spot_quota(hetero_values):
    from scripts.providers.aws.preflight import vcpus_needed

    hetero_values["workers"]["cpu_worker"]["spot"] = True
    assert vcpus_needed(checked(hetero_values)) == {("g", "on-demand"): 4, ("standard", "spot"): 64}


def test_preflight_counts_every_train_node_against_its_gpu_familys_quota():
    """Several train nodes: the P quota must hold both p4d.24xlarge (96 vCPUs each), the
    standard one the coordinating head and the CPU workers; likewise G for multi_g5."""
    from scripts.providers.aws.preflight import vcpus_needed

    p4d = build("multi_p4d").values
    assert vcpus_needed(p4d, "min_workers") == {("p", "on-demand"): 2 * 96, ("standard", "on-demand"): 8 + 2 * 72}
    assert vcpus_needed(p4d) == {("p", "on-demand"): 2 * 96, ("standard", "on-demand"): 8 + 4 * 72}
    assert vcpus_needed(build("multi_g5").values, "min_workers") == {
        ("g", "on-demand"): 2 * 48, ("standard", "on-demand"): 4 + 2 * 16}


def test_preflight_notes_a_quota_it_cannot_read_and_goes_on(hetero_values):
    with mock_aws():  # moto answers NoSuchResource for EC2's quota codes
        found = preflight_of(checked(hetero_values))
    assert [n.split(":")[0] for n in found["notes"]] == [
        "quota L-DB2E81BA (Running On-Demand G and VT instances) not checked",
        "quota L-1216C47A (Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances) not checked"]


def test_ssh_cidr_restricts_ssh_and_ray_adds_no_rule_of_its_own(home, hetero_values):
    import yaml

    from scripts.build import build_text
    from scripts.core.errors import KitError
    from scripts.providers import aws

    hetero_values["aws"]["ssh_cidr"] = "203.0.113.0/24"
    with mock_aws():
        publish_dlami(boto3.client("ec2", region_name="us-east-1"))
        pinned, _ = aws.preflight(checked(hetero_values))
        assert pinned["aws"]["subnet_ids"]  # the group's VPC is the one Ray launches in
        ec2 = boto3.client("ec2", region_name="us-east-1")
        group = aws_launch.create_ssh_group(ec2, pinned)
        _, provider, ec2, launched = launch_every_node_type(
            "hetero", build_text("hetero", yaml.safe_dump(pinned).encode()).config)
        for instance in launched.values():  # Ray found the kit's group by its name and used it
            assert [g["GroupId"] for g in instance["SecurityGroups"]] == [group]
        rules = ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["IpPermissions"]
        ssh = [r for r in rules if r.get("FromPort") == 22]
        assert [[ip["CidrIp"] for ip in r["IpRanges"]] for r in ssh] == [["203.0.113.0/24"]]
        assert not any(ip["CidrIp"] == "0.0.0.0/0" for r in rules for ip in r.get("IpRanges", []))
        assert aws_launch.create_ssh_group(ec2, pinned) == group  # a second `make up` reuses it
        pinned["aws"]["ssh_cidr"] = "198.51.100.0/24"
        with pytest.raises(KitError, match="exists with SSH open to 203.0.113.0/24, not 198.51.100.0/24"):
            aws_launch.create_ssh_group(ec2, pinned)
        provider.terminate_nodes(list(provider.non_terminated_nodes({})))


def test_ssh_is_closed_by_default_to_all_but_the_address_make_up_runs_from(home, hetero_values):
    """ssh_cidr: auto (the default): the preflight asks AWS's checkip service (here its
    stand-in on 127.0.0.1) and opens SSH to that /32 alone; never Ray's 0.0.0.0/0."""
    from conftest import CHECKIP_ADDRESS
    from scripts.providers import aws

    assert hetero_values["aws"]["ssh_cidr"] == "auto"
    with mock_aws():
        publish_dlami(boto3.client("ec2", region_name="us-east-1"))
        pinned, found = aws.preflight(checked(hetero_values))
        assert pinned["aws"]["ssh_cidr"] == f"{CHECKIP_ADDRESS}/32"
        assert f"SSH open to {CHECKIP_ADDRESS}/32 only" in found[0]
        group = aws_launch.create_ssh_group(boto3.client("ec2", region_name="us-east-1"), pinned)
        rules = boto3.client("ec2", region_name="us-east-1").describe_security_groups(
            GroupIds=[group])["SecurityGroups"][0]["IpPermissions"]
        assert [ip["CidrIp"] for r in rules for ip in r.get("IpRanges", [])] == [f"{CHECKIP_ADDRESS}/32"]


@pytest.mark.parametrize("answer,message", [
    (None, "auto could not find the address this machine reaches AWS from"),
    (b"<html>captive portal</html>", "auto could not find the address"),
    (b"10.1.2.3\n", "auto found 10.1.2.3, which is no public address"),
])
def test_ssh_auto_without_a_public_address_is_one_line_naming_the_key(monkeypatch, home, hetero_values,
                                                                      answer, message):
    from conftest import start_checkip_standin
    from scripts.core.errors import KitError
    from scripts.providers import aws

    monkeypatch.setenv("RAYKIT_CHECKIP_URL", start_checkip_standin(answer) if answer
                       else "http://127.0.0.1:9/")  # nothing listens there
    with mock_aws():
        publish_dlami(boto3.client("ec2", region_name="us-east-1"))
        with pytest.raises(KitError, match=message) as refused:
            aws.preflight(checked(hetero_values))
    assert "aws.ssh_cidr: " in str(refused.value) and "\n" not in str(refused.value)


def test_the_head_gets_a_least_privilege_role_of_its_own_by_default(home):
    """iam_instance_profile: auto: `make up` makes role and profile raykit-<name>-head with
    the kit's head policy, tagged with the cluster; the head launches with it (never Ray's
    full-access ray-autoscaler-v1); a second `make up` reuses it; a role of that name that is
    not the cluster's is refused; PURGE's delete removes both."""
    import json

    from scripts.core.errors import KitError
    from scripts.providers import aws

    values = build("hetero").values
    with mock_aws():
        _, provider, ec2, launched = launch_every_node_type("hetero")
        iam = boto3.client("iam")
        head = launched["ray.head.default"]
        assert head["IamInstanceProfile"]["Arn"].endswith(":instance-profile/raykit-hetero-head")
        assert "IamInstanceProfile" not in launched["cpu_worker"]  # workers call no AWS API
        assert [r["RoleName"] for r in iam.list_roles()["Roles"]] == ["raykit-hetero-head"]  # no Ray role
        policy = iam.get_role_policy(RoleName="raykit-hetero-head", PolicyName="ray-kit")["PolicyDocument"]
        policy = json.loads(policy) if isinstance(policy, str) else policy
        assert policy == aws.head_policy(values)
        assert {"Key": "ray-kit-cluster", "Value": "hetero"} in iam.list_role_tags(
            RoleName="raykit-hetero-head")["Tags"]
        assert aws_iam.ensure_head_role(iam, values, wait_s=0) == "raykit-hetero-head"  # reused
        assert len(iam.list_instance_profiles()["InstanceProfiles"]) == 1
        provider.terminate_nodes(list(provider.non_terminated_nodes({})))
        assert aws_iam.delete_role(iam, "raykit-hetero-head")
        assert iam.list_roles()["Roles"] == [] and iam.list_instance_profiles()["InstanceProfiles"] == []
        iam.create_role(RoleName="raykit-hetero-head", AssumeRolePolicyDocument=json.dumps(aws_iam.EC2_TRUST))
        with pytest.raises(KitError, match="exists but is not cluster 'hetero''s"):
            aws_iam.ensure_head_role(iam, values, wait_s=0)


def test_a_customer_managed_default_ebs_key_gets_the_head_kms_rights_on_it(home, hetero_values):
    from scripts.core.inputs import json_text
    from scripts.providers import aws

    with mock_aws():
        publish_dlami(boto3.client("ec2", region_name="us-east-1"))
        pinned, _ = aws.preflight(checked(hetero_values))
        assert pinned["aws"]["ebs_kms_key"] is None  # AWS's own aws/ebs key: no rights needed
        assert "kms:" not in json_text(aws.head_policy(pinned))  # the kit's own JSON writer
        key = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["Arn"]
        boto3.client("ec2", region_name="us-east-1").modify_ebs_default_kms_key_id(KmsKeyId=key)
        pinned, _ = aws.preflight(checked(hetero_values))
        assert pinned["aws"]["ebs_kms_key"] == key
        (statement,) = [s for s in aws.head_policy(pinned)["Statement"] if s["Sid"] == "EncryptTheNodesVolumes"]
        assert statement["Resource"] == key and "kms:CreateGrant" in statement["Action"]
        assert statement["Condition"] == {"StringEquals": {"kms:ViaService": "ec2.us-east-1.amazonaws.com"}}


# --- the AMI and its driver -------------------------------------------------------------

def test_image_id_auto_resolves_the_current_dlami_from_aws_public_parameter(hetero_values):
    with mock_aws():
        found = preflight_of(checked(hetero_values))
        image = boto3.client("ec2", region_name="us-east-1").describe_images(
            ImageIds=[found["image_id"]])["Images"][0]
        assert found["image_name"] == image["Name"] == catalog.DLAMI_NAME + "20261020"
        assert not any("not checked" in note and "AMI" in note for note in found["notes"])


def test_preflight_pins_the_resolved_ami_for_every_node(hetero_values):
    from scripts.providers import aws

    with mock_aws():
        publish_dlami(boto3.client("ec2", region_name="us-east-1"))
        pinned, lines = aws.preflight(checked(hetero_values))
    assert pinned["aws"]["image_id"].startswith("ami-")
    assert f"AMI {pinned['aws']['image_id']} ({catalog.DLAMI_NAME}20261020, the current" in lines[0]
    config = build_text("hetero", yaml.safe_dump(pinned).encode()).config
    assert {t["node_config"]["ImageId"] for t in config["available_node_types"].values()} == \
        {pinned["aws"]["image_id"]}


def test_a_current_dlami_with_an_old_driver_is_refused(hetero_values):
    from scripts.core.errors import KitError

    with mock_aws(), pytest.raises(KitError) as error:
        preflight_of(checked(hetero_values), dlami="20250801")  # after 570's release, before 580's
    assert ("(DLAMI 20250801) has NVIDIA driver 570; torch's CUDA 13.0 needs >= 580: "
            "set image_id: auto or pin a newer release") in str(error.value)


def test_image_id_auto_without_the_parameter_says_what_to_do(hetero_values):
    from scripts.core.errors import KitError

    with mock_aws(), pytest.raises(KitError) as error:
        preflight_of(checked(hetero_values), dlami=None)
    assert f"aws.image_id: auto could not read {catalog.DLAMI_SSM_PARAMETER}" in str(error.value)
    assert "ParameterNotFound" in str(error.value)


def test_a_pinned_ami_must_exist_in_the_region(hetero_values):
    from scripts.core.errors import KitError

    hetero_values["aws"]["image_id"] = "ami-0123456789abcdef0"
    with mock_aws(), pytest.raises(KitError) as error:
        preflight_of(checked(hetero_values))
    assert ("aws.image_id: AMI ami-0123456789abcdef0 does not exist in us-east-1 (or is not "
            "shared with this account)") in str(error.value)


def test_a_pinned_ami_of_another_line_is_noted_not_refused(hetero_values):
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        hetero_values["aws"]["image_id"] = ec2.register_image(Name="my-golden-image")["ImageId"]
        found = preflight_of(checked(hetero_values))
    assert found["image_id"] == hetero_values["aws"]["image_id"]
    assert any("(my-golden-image) is not a Deep Learning Base AMI: its NVIDIA driver is not "
               "checked; the GPU nodes need >= 580" in note for note in found["notes"])


@pytest.mark.parametrize("release,driver", [
    ("20240101", 570), ("20250505", 570), ("20251030", 570), ("20251031", 580),
    ("20260106", 580), ("20260428", 595), ("20261020", 595),
])
def test_dlami_driver_by_release(release, driver):
    assert catalog.dlami_driver(catalog.DLAMI_NAME + release) == driver


def test_dlami_driver_is_unknown_for_other_names():
    assert catalog.dlami_driver("Deep Learning AMI GPU PyTorch 2.7 (Ubuntu 22.04) 20251031") is None
    assert catalog.dlami_driver(catalog.DLAMI_NAME + "2025") is None


# --- the head's least-privilege IAM policy ------------------------------------------------

def allows(policy: dict, action: str, tags: dict | None = None, request_tags: dict | None = None,
           resource: str = "instance", create_action: str | None = None, request: dict | None = None) -> bool:
    """Whether a statement of `policy` allows `action` on a resource of that kind, given
    the resource's tags, the request's, the call that tags at creation, and the request's
    other condition keys (`request`: ec2:InstanceType, ec2:MetadataHttpTokens; a list in
    StringEquals matches any of its values, and a key the request lacks matches nothing)."""
    request = request or {}
    for statement in policy["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if action not in actions or not any(r == "*" or f":{resource}/" in r for r in resources):
            continue
        wanted = statement.get("Condition", {}).get("StringEquals", {})
        if all((tags or {}).get(k.split("/", 1)[1]) == v for k, v in wanted.items()
               if k.startswith("ec2:ResourceTag/")) and \
           all((request_tags or {}).get(k.split("/", 1)[1]) == v for k, v in wanted.items()
               if k.startswith("aws:RequestTag/")) and \
           wanted.get("ec2:CreateAction", create_action) == create_action and \
           all(request.get(k) in (v if isinstance(v, list) else [v]) for k, v in wanted.items()
               if k in ("ec2:InstanceType", "ec2:MetadataHttpTokens")) and \
           all(k.startswith(("ec2:ResourceTag/", "aws:RequestTag/", "aws:RequestedRegion",
                             "ec2:CreateAction", "ec2:InstanceType", "ec2:MetadataHttpTokens")) for k in wanted):
            return True
    return False


def test_the_train_nodes_launch_into_the_clusters_placement_group(home):
    """multi_p4d (aws.placement_group: cluster): Ray's node provider launches the train
    workers into raykit-multi-p4d and nothing else; the head's policy lets its autoscaler
    launch into that group (a cluster without one gets no such right)."""
    from scripts.providers import aws

    with ray_provider_calls_in_moto("multi_p4d") as (config, provider, ec2, calls):
        for name in ("gpu_worker", "cpu_worker"):
            provider.create_node(copy.deepcopy(config["available_node_types"][name]["node_config"]),
                                 {TAG_RAY_NODE_KIND: "worker", "ray-user-node-type": name,
                                  "ray-node-name": "ray-multi-p4d-worker"}, 1)
    placements = [params.get("Placement", {}).get("GroupName") for name, params in calls if name == "RunInstances"]
    assert placements == ["raykit-multi-p4d", None]
    assert allows(aws.head_policy(build("multi_p4d").values), "ec2:RunInstances", resource="placement-group")
    assert not allows(aws.head_policy(build("multi_g5").values), "ec2:RunInstances", resource="placement-group")


def test_make_up_makes_the_placement_group_once_and_purge_deletes_it():
    """Against EC2's documented answers (botocore's Stubber: moto has no placement groups):
    the first `make up` makes raykit-<cluster> (cluster strategy, tagged with the cluster),
    a second reuses it, another's of that name is refused; `make down` notes it, and with
    PURGE=1 deletes it once no instance is shutting down."""
    from botocore.stub import Stubber

    from scripts.core.errors import KitError

    values = build("multi_p4d").values
    ec2 = boto3.client("ec2", region_name="us-east-1")
    name, tag = "raykit-multi-p4d", {"Key": "ray-kit-cluster", "Value": "multi-p4d"}
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_placement_groups", "InvalidPlacementGroup.Unknown",
                              expected_params={"GroupNames": [name]})
        stub.add_response("create_placement_group", {}, expected_params={
            "GroupName": name, "Strategy": "cluster",
            "TagSpecifications": [{"ResourceType": "placement-group", "Tags": [tag]}]})
        assert aws_launch.ensure_placement_group(ec2, values) == name
        stub.add_response("describe_placement_groups", {"PlacementGroups": [
            {"GroupName": name, "Strategy": "cluster", "State": "available", "Tags": [tag]}]})
        assert aws_launch.ensure_placement_group(ec2, values) == name  # reused: no create
        stub.add_response("describe_placement_groups", {"PlacementGroups": [
            {"GroupName": name, "Strategy": "spread", "State": "available", "Tags": []}]})
        with pytest.raises(KitError, match=f"a placement group {name} exists and is not this cluster's"):
            aws_launch.ensure_placement_group(ec2, values)

        record = {"cluster_name": "multi-p4d", "security_group": None, "ray_key_pair": False,
                  "ray_role": False, "placement_group": name}
        assert aws_teardown.left_behind(ec2, record, purge=False) == [
            f"placement group {name} (free, `make down PURGE=1` deletes it)"]
        stub.add_response("describe_instances", {"Reservations": []})  # none shutting down
        stub.add_response("delete_placement_group", {}, expected_params={"GroupName": name})
        assert aws_teardown.left_behind(ec2, record, purge=True) == [f"nothing of placement group {name} (deleted)"]
        stub.assert_no_pending_responses()


def test_purge_after_an_up_that_failed_before_the_placement_group_was_made():
    """A first `make up` that failed before its placement group existed: `make down PURGE=1`
    finds none to delete and goes on (it ended in "internal error" on every rerun)."""
    from botocore.stub import Stubber

    ec2 = boto3.client("ec2", region_name="us-east-1")
    name = "raykit-multi-p4d"
    record = {"cluster_name": "multi-p4d", "security_group": None, "ray_key_pair": False,
              "ray_role": False, "placement_group": name}
    with Stubber(ec2) as stub:
        stub.add_response("describe_instances", {"Reservations": []})
        stub.add_client_error("delete_placement_group", "InvalidPlacementGroup.Unknown",
                              expected_params={"GroupName": name})
        assert aws_teardown.left_behind(ec2, record, purge=True) == [f"nothing of placement group {name} (deleted)"]
        stub.add_response("describe_instances", {"Reservations": []})
        stub.add_client_error("delete_placement_group", "UnauthorizedOperation")
        with pytest.raises(Exception, match="UnauthorizedOperation"):  # any other refusal is said
            aws_teardown.left_behind(ec2, record, purge=True)


@contextmanager
def ray_provider_calls_in_moto(cluster: str, config: dict | None = None):
    """Ray's AWS node provider in moto after every node type was launched (as `ray up` and
    the autoscaler do), each EC2 call it makes from then on recorded as (operation,
    params); Ray's cached clients are cleared before and after. Yields (config, provider,
    ec2, calls)."""
    import boto3

    from ray.autoscaler._private.aws import utils as ray_aws_utils

    calls = []
    with mock_aws():
        boto3.setup_default_session()
        ray_aws_utils.resource_cache.cache_clear()
        ray_aws_utils.client_cache.cache_clear()
        try:
            config, provider, ec2, _ = launch_every_node_type(cluster, config)
            for resource in {id(r): r for r in (provider.ec2, provider.ec2_fail_fast)}.values():
                resource.meta.client.meta.events.register(
                    "provide-client-params.ec2",
                    lambda params, model, **_: calls.append((model.name, params)))
            yield config, provider, ec2, calls
        finally:
            ray_aws_utils.resource_cache.cache_clear()
            ray_aws_utils.client_cache.cache_clear()
            boto3.DEFAULT_SESSION = None


def test_the_head_policy_allows_what_the_autoscaler_does_to_its_own_cluster_only(home):
    """Every EC2 call Ray's node provider makes to launch, tag and terminate a worker is
    allowed by the policy `make render` writes; the same calls on another cluster's
    instance are not."""
    from scripts.providers import aws

    values = build("hetero").values
    policy = aws.head_policy(values)
    # `ray up` (the user's credentials) bootstraps and launches the head; from then on the
    # head's autoscaler, on the policy's rights, manages the workers
    with ray_provider_calls_in_moto("hetero") as (config, provider, ec2, calls):
        worker_type = config["available_node_types"]["cpu_worker"]
        before = set(provider.non_terminated_nodes({}))
        provider.create_node(copy.deepcopy(worker_type["node_config"]),
                             {TAG_RAY_NODE_KIND: "worker", "ray-user-node-type": "cpu_worker",
                              "ray-node-name": "ray-hetero-worker"}, 1)
        (worker,) = set(provider.non_terminated_nodes({})) - before
        provider.set_node_tags(worker, {"ray-node-status": "up-to-date"})
        provider.non_terminated_nodes({})  # flushes the batched tag update
        provider.terminate_node(worker)
        other = ec2.run_instances(ImageId="ami-12345678", InstanceType="c5.4xlarge", MinCount=1,
                                  MaxCount=1)["Instances"][0]["InstanceId"]
        tags_of = {i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}
                   for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}
    ops = {name for name, _ in calls}
    assert {"RunInstances", "CreateTags", "TerminateInstances", "DescribeInstances"} <= ops
    for name, params in calls:
        if name == "RunInstances":
            launch = {"ec2:InstanceType": params["InstanceType"],
                      "ec2:MetadataHttpTokens": params["MetadataOptions"]["HttpTokens"]}
            for spec in params["TagSpecifications"]:
                request_tags = {t["Key"]: t["Value"] for t in spec["Tags"]}
                assert allows(policy, "ec2:RunInstances", request_tags=request_tags,
                              resource=spec["ResourceType"], request=launch), spec
                # tags given at launch need CreateTags with ec2:CreateAction RunInstances
                assert allows(policy, "ec2:CreateTags", resource=spec["ResourceType"],
                              create_action="RunInstances")
        elif name in ("CreateTags", "TerminateInstances"):
            ids = params.get("Resources") or params.get("InstanceIds")
            assert all(allows(policy, f"ec2:{name}", tags=tags_of[i]) for i in ids), (name, ids)
        else:
            assert allows(policy, f"ec2:{name}"), name
    # another cluster's (or anyone's) instance: no tagging, no terminating
    assert not allows(policy, "ec2:TerminateInstances", tags=tags_of[other])
    assert not allows(policy, "ec2:CreateTags", tags=tags_of[other])
    assert not allows(policy, "ec2:RunInstances", request_tags={"ray-kit-cluster": "other"})
    # of the cluster's tag, but another type (a p5.48xlarge, say) or IMDSv1: refused
    ours = {"ray-kit-cluster": values["cluster_name"]}
    assert allows(policy, "ec2:RunInstances", request_tags=ours,
                  request={"ec2:InstanceType": "c5.4xlarge", "ec2:MetadataHttpTokens": "required"})
    assert not allows(policy, "ec2:RunInstances", request_tags=ours,
                      request={"ec2:InstanceType": "p5.48xlarge", "ec2:MetadataHttpTokens": "required"})
    assert not allows(policy, "ec2:RunInstances", request_tags=ours,
                      request={"ec2:InstanceType": "c5.4xlarge", "ec2:MetadataHttpTokens": "optional"})
    assert not any("ec2:StopInstances" in s["Action"] or "ec2:StartInstances" in s["Action"]
                   for s in policy["Statement"])
    assert not any(s["Action"] == "iam:CreateServiceLinkedRole" for s in policy["Statement"])


def test_the_head_policy_lets_the_autoscaler_launch_spot_workers(home, hetero_values):
    """A spot worker's RunInstances (Ray's create_node, replayed in moto) carries
    InstanceMarketOptions: AWS then also checks the call against the spot instance request
    it creates. The policy of a spot mix allows that resource; an on-demand mix's does not."""
    from scripts.providers import aws

    hetero_values["workers"]["cpu_worker"]["spot"] = True
    spot = build_text("hetero", yaml.safe_dump(hetero_values).encode())
    with ray_provider_calls_in_moto("hetero", copy.deepcopy(spot.config)) as (config, provider, _, calls):
        provider.create_node(copy.deepcopy(config["available_node_types"]["cpu_worker"]["node_config"]),
                             {TAG_RAY_NODE_KIND: "worker", "ray-user-node-type": "cpu_worker",
                              "ray-node-name": "ray-hetero-worker"}, 1)
    launches = [params for name, params in calls if name == "RunInstances"]
    assert launches and all(p["InstanceMarketOptions"]["MarketType"] == "spot" for p in launches)
    assert allows(aws.head_policy(spot.values), "ec2:RunInstances", resource="spot-instances-request")
    assert not allows(aws.head_policy(build("hetero").values), "ec2:RunInstances",
                      resource="spot-instances-request")


def test_make_render_writes_the_head_policy_beside_the_config(tmp_path):
    import json
    import os

    from conftest import make

    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path))
    run = make("render", "CLUSTER=hetero", env=env)
    assert run.returncode == 0, run.stderr
    policy = json.loads((tmp_path / "clusters" / "hetero.head-policy.json").read_text())
    assert policy["Version"] == "2012-10-17"
    assert {"StringEquals": {"ec2:ResourceTag/ray-kit-cluster": "hetero"}} in \
        [s.get("Condition") for s in policy["Statement"]]
    assert run.stdout.split() == [str(tmp_path / "clusters" / "hetero.yaml"),
                                  str(tmp_path / "clusters" / "hetero.head-policy.json"),
                                  str(tmp_path / "clusters" / "hetero.user-policy.json")]
    user = json.loads((tmp_path / "clusters" / "hetero.user-policy.json").read_text())
    roles = next(s for s in user["Statement"] if s["Sid"] == "TheKitsOwnRoles")
    assert roles["Resource"] == ["arn:aws:iam::*:role/raykit-*", "arn:aws:iam::*:instance-profile/raykit-*"]


def test_the_user_policy_file_grants_what_docs_aws_md_lists_and_nothing_else():
    """The user's rights were prose only (~45 actions in docs/aws.md): `make render` writes
    them as a policy file, and the two say the same."""
    import re

    from conftest import REPO
    from scripts.providers.aws.iam import user_policy

    text = (REPO / "docs" / "aws.md").read_text()
    section = text[text.index("**The user running the kit"):text.index("**Data on S3**")]
    listed = set(re.findall(r"`([a-z0-9]+:[A-Za-z]+)`", section))
    granted = {a for s in user_policy()["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str)
                                                                 else s["Action"])}
    assert listed == granted, (listed - granted, granted - listed)


def test_the_head_policy_lets_spot_workers_create_ec2s_spot_role_only_when_there_are_any():
    from scripts.providers import aws

    values = build("hetero").values
    values["workers"]["cpu_worker"]["spot"] = True
    spot = [s for s in aws.head_policy(values)["Statement"] if s["Action"] == "iam:CreateServiceLinkedRole"]
    assert spot and spot[0]["Condition"] == {"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}}


# --- zone fallback ------------------------------------------------------------------------

def capacity_error_text(zone: str) -> str:
    """What `ray up` prints when RunInstances is refused for capacity: botocore's own
    ClientError text, made by botocore's Stubber in the real error shape."""
    from botocore.exceptions import ClientError
    from botocore.stub import Stubber

    client = boto3.client("ec2", region_name="us-east-1")
    with Stubber(client) as stub:
        stub.add_client_error(
            "run_instances", service_error_code="InsufficientInstanceCapacity", http_status_code=500,
            service_message=f"We currently do not have sufficient g5.xlarge capacity in the "
                            f"Availability Zone you requested ({zone}). Our system will be working "
                            "on provisioning additional capacity.")
        try:
            client.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)
        except ClientError as e:
            return f"create_instances: Attempt failed with {e}, retrying.\n{e}\n"
    raise AssertionError("the stub did not raise")


@pytest.fixture
def launches(tmp_path, monkeypatch):
    """`ray up` stood in for: each call's zone (from the launched config) is recorded;
    the head finds no capacity in the zones listed in `launches.full`."""
    from scripts.core import state

    monkeypatch.setattr(state, "LAUNCHED", tmp_path / "launched")
    monkeypatch.setattr(aws_launch, "wait_until_ready", lambda record: None)
    tried, full = [], set()

    def ray_up(args, keep_output=False):
        zone = yaml.safe_load(open(args[-1]))["provider"]["availability_zone"]
        tried.append(zone)
        return (1, capacity_error_text(zone)) if zone in full else (0, "cluster up\n")

    monkeypatch.setattr(aws_launch, "run_ray", ray_up)
    return tried, full


def test_a_head_refused_capacity_is_launched_in_the_next_zone(home, launches, hetero_values, capsys):
    from scripts.commands.lifecycle import preflight_and_launch
    from scripts.core import state

    tried, full = launches
    with mock_aws():
        publish_dlami(boto3.client("ec2", region_name="us-east-1"), "20261020")
        built = build_text("hetero", yaml.safe_dump(hetero_values).encode())
        first = preflight_of(checked(hetero_values))["availability_zone"]
        full.add(first)
        record = preflight_and_launch(built)
    assert len(tried) == 2 and tried[0] == first and tried[1] != first
    assert record["cluster"] == "hetero"
    assert f"zone {first} has no g5.xlarge capacity now (InsufficientInstanceCapacity); no head " \
           "was launched; trying another zone" in capsys.readouterr().out
    launched = yaml.safe_load(state.config_path("hetero").read_text())
    assert launched["provider"]["availability_zone"] == tried[1]  # what `make down` reads


def test_a_zone_the_values_file_names_is_never_swapped(home, launches, hetero_values):
    from scripts.commands.lifecycle import preflight_and_launch
    from scripts.core.errors import KitError

    tried, full = launches
    hetero_values["aws"]["availability_zone"] = "us-east-1b"
    full.add("us-east-1b")
    with mock_aws():
        publish_dlami(boto3.client("ec2", region_name="us-east-1"), "20261020")
        with pytest.raises(KitError, match="aws.availability_zone: us-east-1b has no capacity "
                                           "for the head now; try again later"):
            preflight_and_launch(build_text("hetero", yaml.safe_dump(hetero_values).encode()))
    assert tried == ["us-east-1b"]


@mock_aws
def test_a_record_whose_cluster_has_no_instance_left_is_stale_and_one_with_an_instance_is_not():
    """After autostop (or a launch that failed before any instance started) `make up` asks
    the account: no instance of the cluster billing, so the record is stale and the launch
    goes ahead; one instance left, even stopped, and it is still refused."""
    from scripts.commands.lifecycle import refuse_if_up
    from scripts.core import state
    from scripts.core.errors import KitError
    from scripts.providers import load_record
    from scripts.providers.aws.alarm import set_head_alarm

    record = {"cluster": "stale_test", "provider": "aws", "cluster_name": "stale-test",
              "region": "us-east-1", "min_workers": {"cpu_worker": 1}, "ready_timeout_s": 600,
              "security_group": None, "ray_key_pair": False, "ray_role": False}
    state.save("stale_test", record, "cluster_name: stale-test\n")
    # the hung-head alarm `make up` set outlives a cluster that ended itself (autostop,
    # the dead-man): it goes with the stale record
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    assert set_head_alarm(cloudwatch, "stale-test", "us-east-1", "i-0123456789abcdef0") is None
    assert cloudwatch.describe_alarms()["MetricAlarms"]
    refuse_if_up("stale_test")  # nothing tagged: stale, forgotten
    assert load_record("stale_test") is None
    assert cloudwatch.describe_alarms()["MetricAlarms"] == []

    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    (instance,) = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="c5.large",
                                    TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                        {"Key": "ray-cluster-name", "Value": "stale-test"}]}])["Instances"]
    ec2.stop_instances(InstanceIds=[instance["InstanceId"]])  # a stopped one bills for its EBS
    state.save("stale_test", record, "cluster_name: stale-test\n")
    try:
        with pytest.raises(KitError, match="'stale_test' is already up"):
            refuse_if_up("stale_test")
    finally:
        state.forget("stale_test")


@mock_aws
def test_down_terminates_a_node_someone_stopped(monkeypatch, capsys):
    """`ray down` terminates pending and running nodes only (its AWS provider's
    non_terminated_nodes): a stopped node of the cluster (its disks bill) was left, and
    `make down` failed on every rerun. Ray's side is played as it acts."""
    from scripts.core import state
    from scripts.providers import aws

    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "ray-cluster-name", "Value": "stop-test"}]}]
    ids = [i["InstanceId"] for i in ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, InstanceType="c5.large",
                                                      TagSpecifications=tags)["Instances"]]
    ec2.stop_instances(InstanceIds=ids[:1])

    def ray_down(args, keep_output=False):
        assert args[0] == "down"
        running = aws_teardown.cluster_instances(ec2, record, ["pending", "running"])
        ec2.terminate_instances(InstanceIds=running)
        return 0

    monkeypatch.setattr(aws_teardown, "run_ray", ray_down)
    monkeypatch.setattr(aws_teardown, "require_credentials", lambda: None)
    record = {"cluster": "stop_test", "provider": "aws", "cluster_name": "stop-test", "region": "us-east-1",
              "min_workers": {}, "ready_timeout_s": 600, "security_group": None, "ray_key_pair": False,
              "ray_role": False}
    state.save("stop_test", record, "cluster_name: stop-test\nprovider:\n  type: aws\n  region: us-east-1\n")
    try:
        said = aws.down("stop_test", record)
    finally:
        state.forget("stop_test")
    assert said.startswith("AWS cluster 'stop_test': every instance terminated")
    assert f"terminated 1 stopped instance(s) `ray down` leaves: {ids[0]}" in capsys.readouterr().out
    assert aws_teardown.cluster_instances(ec2, record, ["pending", "running", "stopping", "stopped"]) == []


@mock_aws
def test_down_after_an_up_refused_before_any_instance_runs_no_ray_down(monkeypatch, capsys):
    """A first `make up` refused at CreateSecurityGroup keeps its record. `ray down`
    bootstraps the config again: refused too, `make down` failed on every rerun; allowed,
    Ray made its own group (SSH from anywhere, no kit tag) that PURGE cannot find and the
    next `make up` refused. With no instance of the cluster, `ray down` is not run."""
    from scripts.core import state
    from scripts.providers import aws

    def ray_down(args, keep_output=False):
        raise AssertionError(f"`ray {' '.join(args)}` ran with no instance to end")

    monkeypatch.setattr(aws_teardown, "run_ray", ray_down)
    monkeypatch.setattr(aws_teardown, "require_credentials", lambda: None)
    record = {"cluster": "refused_test", "provider": "aws", "cluster_name": "refused-test", "region": "us-east-1",
              "min_workers": {}, "ready_timeout_s": 600, "security_group": "ray-refused-test",
              "ray_key_pair": False, "ray_role": False}
    state.save("refused_test", record, "cluster_name: refused-test\nprovider:\n  type: aws\n  region: us-east-1\n")
    try:
        said = aws.down("refused_test", record)
    finally:
        state.forget("refused_test")
    assert said == "AWS cluster 'refused_test': every instance terminated"
    assert "`ray down` is not needed" in capsys.readouterr().out
    groups = boto3.client("ec2", region_name="us-east-1").describe_security_groups(
        Filters=[{"Name": "group-name", "Values": ["ray-refused-test"]}])["SecurityGroups"]
    assert groups == []


def test_a_world_open_group_without_the_kits_tag_is_to_be_deleted_by_hand(hetero_values):
    """PURGE deletes only the kit's own (tagged) group: the refusal of Ray's own group
    names the way that works."""
    from scripts.core.errors import KitError

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        subnet = ec2.describe_subnets()["Subnets"][0]
        group = ec2.create_security_group(GroupName="ray-hetero", Description="Ray's own",
                                          VpcId=subnet["VpcId"])["GroupId"]
        ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[{
            "IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
        hetero_values["aws"] |= {"subnet_ids": [subnet["SubnetId"]], "ssh_cidr": "203.0.113.9/32"}
        with pytest.raises(KitError, match=f"exists with SSH open to 0.0.0.0/0, not 203.0.113.9/32; delete it "
                                           rf"\(not the kit's: no ray-kit-cluster tag\).*{group}"):
            aws_launch.create_ssh_group(ec2, hetero_values)


def s3_as_the_worker(values: dict):
    """An S3 client holding what a worker node holds: the credentials of the workers' role
    (made by the kit's ensure_role with its worker_policy), assumed in moto. Its calls run
    as root: they count in the caller's set_initial_no_auth_action_count."""
    iam = boto3.client("iam", region_name="us-east-1")
    aws_iam.ensure_role(iam, values, "raykit-hetero-worker", aws_iam.worker_policy(values), "the workers", wait_s=0)
    role = iam.get_role(RoleName="raykit-hetero-worker")["Role"]["Arn"]
    creds = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=role, RoleSessionName="worker-node")["Credentials"]
    return boto3.client("s3", region_name="us-east-1", aws_access_key_id=creds["AccessKeyId"],
                        aws_secret_access_key=creds["SecretAccessKey"], aws_session_token=creds["SessionToken"])


def test_workers_read_the_data_buckets_with_credentials_of_their_own_and_nothing_else(home, hetero_values):
    """aws.data_buckets: the workers launch with a read-only profile of their own (Ray
    Data's read tasks run there, and pyarrow ships no credentials to them). With what a
    worker really holds (its role's credentials, moto enforcing IAM) it lists and reads the
    named bucket, and is refused another; the head may pass that role and read too."""
    import yaml
    from botocore.exceptions import ClientError
    from moto.core import set_initial_no_auth_action_count

    from scripts.build import build_text
    from scripts.providers import aws

    hetero_values["aws"]["data_buckets"] = ["team-images"]
    values = checked(hetero_values)
    config = build_text("hetero", yaml.safe_dump(values).encode()).config
    assert config["available_node_types"]["cpu_worker"]["node_config"]["IamInstanceProfile"] == {
        "Name": "raykit-hetero-worker"}
    head = aws.head_policy(values)["Statement"]
    assert {"Sid": "PassTheWorkersRole", "Effect": "Allow", "Action": "iam:PassRole",
            "Resource": "arn:aws:iam::*:role/raykit-hetero-worker",
            "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}} in head

    @set_initial_no_auth_action_count(12)  # the 12 set-up calls below as root, then IAM enforced
    @mock_aws
    def as_a_worker():
        s3 = boto3.client("s3", region_name="us-east-1")
        for bucket in ("team-images", "payroll"):
            s3.create_bucket(Bucket=bucket)
            s3.put_object(Bucket=bucket, Key="0/a.jpg", Body=b"jpeg")
        worker = s3_as_the_worker(values)
        assert [o["Key"] for o in worker.list_objects_v2(Bucket="team-images")["Contents"]] == ["0/a.jpg"]
        assert worker.get_object(Bucket="team-images", Key="0/a.jpg")["Body"].read() == b"jpeg"
        for refused in (lambda: worker.get_object(Bucket="payroll", Key="0/a.jpg"),
                        lambda: worker.put_object(Bucket="team-images", Key="x", Body=b"")):
            with pytest.raises(ClientError, match="AccessDenied"):
                refused()

    as_a_worker()


def test_nodes_write_runs_under_the_output_prefix_and_nowhere_else(home, hetero_values):
    """aws.output_buckets: with a worker's real credentials (its role, moto enforcing IAM),
    checkpoints and the model go in under the prefix (a multipart upload, as pyarrow does),
    are read back and deleted (Ray Train's num_to_keep); beside the prefix, in another
    bucket, nothing is written. The head's policy holds the same statements."""
    import yaml
    from botocore.exceptions import ClientError
    from moto.core import set_initial_no_auth_action_count

    from scripts.build import build_text
    from scripts.providers import aws

    hetero_values["aws"]["output_buckets"] = ["team-runs/ml"]
    values = checked(hetero_values)
    config = build_text("hetero", yaml.safe_dump(values).encode()).config
    assert config["available_node_types"]["cpu_worker"]["node_config"]["IamInstanceProfile"] == {
        "Name": "raykit-hetero-worker"}
    assert {s["Sid"] for s in aws.head_policy(values)["Statement"]} >= {
        "WriteTheRunsUnderTheOutputPrefixes", "ListTheOutputPrefix0", "PassTheWorkersRole"}

    @set_initial_no_auth_action_count(10)  # the set-up calls below as root, then IAM enforced
    @mock_aws
    def as_a_worker():
        s3 = boto3.client("s3", region_name="us-east-1")
        for bucket in ("team-runs", "payroll"):
            s3.create_bucket(Bucket=bucket)
        worker = s3_as_the_worker(values)
        key = "ml/run-1/checkpoint_000001/model.pt"
        upload = worker.create_multipart_upload(Bucket="team-runs", Key=key)["UploadId"]
        part = worker.upload_part(Bucket="team-runs", Key=key, UploadId=upload, PartNumber=1, Body=b"weights")
        worker.complete_multipart_upload(Bucket="team-runs", Key=key, UploadId=upload, MultipartUpload={
            "Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})
        assert worker.get_object(Bucket="team-runs", Key=key)["Body"].read() == b"weights"
        assert [o["Key"] for o in worker.list_objects_v2(Bucket="team-runs", Prefix="ml/")["Contents"]] == [key]
        worker.delete_object(Bucket="team-runs", Key=key)
        for refused in (lambda: worker.put_object(Bucket="team-runs", Key="other/x", Body=b""),
                        lambda: worker.put_object(Bucket="payroll", Key="ml/x", Body=b"")):
            with pytest.raises(ClientError, match="AccessDenied"):
                refused()

    as_a_worker()


def test_submit_refuses_s3_data_the_nodes_cannot_read_before_the_job_runs():
    from scripts.providers import aws

    record = RECORD | {"data_buckets": ["team-images"]}
    assert aws.job_problems(record, "vit_synthetic", ["--data", "s3://team-images/train/", "--steps", "5"]) == []
    (problem,) = aws.job_problems(record, "vit_synthetic", ["--data=s3://payroll/x", "--steps", "5"])
    assert problem.startswith("ARGS: s3://payroll: the nodes of 'hetero' cannot read bucket payroll")
    assert "add it to aws.data_buckets" in problem
    assert aws.job_problems(RECORD, "vit_synthetic", ["--data", "s3://any"])[0].startswith("ARGS: s3://any:")  # none named


class NotAws(http.server.BaseHTTPRequestHandler):
    """A proxy's error page, with 200 OK: what a captive portal or a broken proxy answers."""

    def do_POST(self):
        body = b"<html><head><title>Proxy error</title></head><body><p>502 Bad Gateway<br></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args):
        pass


def test_an_answer_that_is_not_aws_is_one_line_naming_the_network(monkeypatch, capsys, home):
    """botocore's ResponseParserError is no ClientError: it used to end as an internal error."""
    from scripts import kit

    server = http.server.HTTPServer(("127.0.0.1", 0), NotAws)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    try:
        code = kit.main(["preflight", "--cluster", "hetero"])
    finally:
        server.shutdown()
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: AWS's API answered with something that is not AWS's answer"), err
    assert "HTTPS_PROXY" in err


def test_ssh_auto_behind_a_proxy_or_with_internal_ips_is_refused_naming_the_key(monkeypatch, hetero_values):
    from scripts.core.errors import KitError
    from scripts.providers.aws.preflight import own_address_range

    monkeypatch.delenv("RAYKIT_CHECKIP_URL", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    problems = []
    assert own_address_range(problems) is None  # nothing asked of the network
    assert problems and problems[0].startswith("aws.ssh_cidr: auto would look up this machine's "
                                               "address through the proxy in HTTPS_PROXY")
    internal = copy.deepcopy(hetero_values)
    internal["aws"]["use_internal_ips"] = True
    with pytest.raises(KitError, match="aws.ssh_cidr: auto opens SSH to this machine's public address only"):
        checked(internal)
    internal["aws"]["ssh_cidr"] = "10.0.0.0/16"
    checked(internal)  # a range of its own: fine


def test_a_head_one_of_rays_tries_launched_is_neither_denied_nor_doubled_in_another_zone(
        home, launches, hetero_values, capsys):
    """Ray's head launch retries: one try refused capacity, a later one got a head. `make
    up` must not say none was launched, nor launch a second head in another zone."""
    from scripts.commands.lifecycle import preflight_and_launch
    from scripts.core.errors import KitError

    tried, full = launches
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        image = publish_dlami(ec2, "20261020")
        first = preflight_of(checked(hetero_values))["availability_zone"]
        full.add(first)
        ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                          TagSpecifications=[{"ResourceType": "instance", "Tags": [
                              {"Key": "ray-kit-cluster", "Value": hetero_values["cluster_name"]},
                              {"Key": TAG_RAY_NODE_KIND, "Value": "head"}]}])
        with pytest.raises(KitError, match=r"`ray up` failed \(exit 1\); instances of 'hetero' may be running"):
            preflight_and_launch(build_text("hetero", yaml.safe_dump(hetero_values).encode()))
    assert tried == [first]
    assert "no head was launched" not in capsys.readouterr().out


@mock_aws
def test_make_up_waits_until_ec2_takes_a_new_instance_profile(hetero_values, capsys):
    """EC2 refuses a profile IAM has not propagated yet (moto: one that does not exist yet);
    the dry runs go on until it is taken, or the limit passes."""
    from scripts.providers.aws.iam import wait_until_usable

    ec2, iam = boto3.client("ec2", region_name="us-east-1"), boto3.client("iam")
    values = checked(hetero_values)
    values["aws"]["image_id"] = publish_dlami(ec2, "20261020")
    threading.Timer(0.5, lambda: iam.create_instance_profile(InstanceProfileName="late")).start()
    started = time.monotonic()
    assert wait_until_usable(ec2, "late", values, limit_s=20, poll_s=0.1) is True
    assert 0.5 <= time.monotonic() - started < 10
    assert wait_until_usable(ec2, "never", values, limit_s=0.3, poll_s=0.1) is False
    assert "EC2 does not take instance profile never yet after 0.3 s" in capsys.readouterr().out
    assert not ec2.describe_instances()["Reservations"]  # dry runs: nothing launched


def test_the_profiles_dry_run_launches_in_the_named_groups_vpc(hetero_values):
    """Values naming security groups and no subnet, in an account with no default VPC: a
    dry run without a subnet is refused at once (VPCIdNotSpecified) and never waited on.
    It goes to a subnet of the groups' VPC in the pinned zone, as Ray's launch does."""
    from botocore.stub import ANY, Stubber

    from scripts.providers.aws.iam import wait_until_usable

    values = checked(hetero_values)
    values["aws"] |= {"security_group_ids": ["sg-0abc"], "subnet_ids": [], "availability_zone": "us-east-1b",
                      "image_id": "ami-0123456789abcdef0"}
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stub:
        stub.add_response("describe_security_groups", {"SecurityGroups": [{"GroupId": "sg-0abc", "VpcId": "vpc-1"}]},
                          {"GroupIds": ["sg-0abc"]})
        stub.add_response("describe_subnets", {"Subnets": [{"SubnetId": "subnet-b2"}, {"SubnetId": "subnet-b1"}]},
                          {"Filters": [{"Name": "vpc-id", "Values": ["vpc-1"]},
                                       {"Name": "availability-zone", "Values": ["us-east-1b"]},
                                       {"Name": "state", "Values": ["available"]}]})
        stub.add_client_error("run_instances", "DryRunOperation", expected_params={
            "DryRun": True, "ImageId": ANY, "InstanceType": ANY, "MinCount": 1, "MaxCount": 1,
            "IamInstanceProfile": {"Name": "p"}, "SubnetId": "subnet-b1"})
        assert wait_until_usable(ec2, "p", values, limit_s=1, poll_s=0.1) is True
        stub.assert_no_pending_responses()


def test_an_aws_refusal_is_one_line_naming_the_call_and_the_rights(monkeypatch, capsys, home, hetero_values):
    """A least-privilege user's first failure (AccessDenied or UnauthorizedOperation on a
    call the kit makes itself, here CreateSecurityGroup) read "internal error in the kit
    (ClientError), not in your input". moto enforces the user's IAM policy, as AWS would."""
    import json

    from moto.core.authorization import enable_iam_authentication

    from scripts import kit

    with mock_aws():
        iam = boto3.client("iam", region_name="us-east-1")
        iam.create_user(UserName="least-privilege")
        iam.put_user_policy(UserName="least-privilege", PolicyName="read-only", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="least-privilege")["AccessKey"]
        subnet = boto3.client("ec2", region_name="us-east-1").describe_subnets()["Subnets"][0]["SubnetId"]
        hetero_values["aws"] |= {"subnet_ids": [subnet], "ssh_cidr": "203.0.113.9/32"}
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        monkeypatch.delenv("AWS_SESSION_TOKEN")  # the user's long-term key, no session
        monkeypatch.setitem(kit.COMMANDS, "validate", lambda a: aws_launch.create_ssh_group(
            boto3.session.Session().client("ec2", region_name="us-east-1"), hetero_values))
        with enable_iam_authentication():
            code = kit.main(["validate", "--cluster", "hetero"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: AWS refused CreateSecurityGroup ("), err
    assert "docs/aws.md" in err and "user-policy.json" in err and "internal error" not in err


@mock_aws
def test_status_names_a_stopped_node_whose_disks_bill(monkeypatch, capsys):
    """EC2 stops an EBS-backed node at a retirement event: no safeguard runs on it, and
    `make status` said nothing of it."""
    from scripts.providers.aws import day2 as aws_day2

    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "ray-cluster-name", "Value": "status-test"}]}]
    ids = [i["InstanceId"] for i in ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, InstanceType="c5.large",
                                                      TagSpecifications=tags)["Instances"]]
    monkeypatch.setattr(aws_day2, "run_ray", lambda args: 0)
    record = {"cluster": "status_test", "cluster_name": "status-test", "region": "us-east-1"}
    assert aws_day2.status(record) == 0 and "stopped" not in capsys.readouterr().out
    ec2.stop_instances(InstanceIds=ids[1:])
    assert aws_day2.status(record) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"warning: 1 instance(s) of 'status_test' are stopped ({ids[1]})"), out
    assert "their disks bill until `make down CLUSTER=status_test`" in out
