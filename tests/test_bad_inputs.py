"""Bad values are refused before anything launches, each with a message naming the key."""

import pytest

from conftest import load_example
from scripts.errors import KitError
from scripts.validate import run_instances_problems, validate


def set_path(values: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        values = values[key]
    values[last] = value


def rename(values: dict, dotted: str, new_key: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        values = values[key]
    values[new_key] = values.pop(last)


# (values file, change, text the error must contain)
AWS_CASES = [
    ("key typo in head", lambda v: rename(v, "head.instance_type", "instnce_type"),
     "head.instnce_type: unknown key; did you mean 'instance_type'"),
    ("key typo at top level", lambda v: rename(v, "idle_timeout_minutes", "idle_timout_minutes"),
     "idle_timout_minutes: unknown key; did you mean 'idle_timeout_minutes'"),
    ("key typo in a worker", lambda v: rename(v, "workers.cpu_worker.max_workers", "max_worker"),
     "workers.cpu_worker.max_worker: unknown key; did you mean 'max_workers'"),
    ("negative min_workers", lambda v: set_path(v, "workers.cpu_worker.min_workers", -1),
     "workers.cpu_worker.min_workers: -1 is negative"),
    ("min above max", lambda v: set_path(v, "workers.cpu_worker.min_workers", 5),
     "workers.cpu_worker: min_workers (5) > max_workers (4)"),
    ("unknown instance type", lambda v: set_path(v, "workers.cpu_worker.instance_type", "c5.4xlage"),
     "workers.cpu_worker.instance_type: unknown instance type 'c5.4xlage'; did you mean 'c5.4xlarge'?"),
    ("bad VolumeType", lambda v: set_path(v, "head.disk.volume_type", "gp9"),
     "head.disk.volume_type: 'gp9' is not an EBS volume type"),
    ("GPU-less head in a hetero mix", lambda v: set_path(v, "head.instance_type", "c5.4xlarge"),
     "head.instance_type: c5.4xlarge has no GPU"),
    ("GPU worker in a hetero mix", lambda v: set_path(v, "workers.cpu_worker.instance_type", "g5.xlarge"),
     "workers.cpu_worker.instance_type: g5.xlarge has 1 GPU(s)"),
    ("root disk too small for the image", lambda v: set_path(v, "head.disk.root_gb", 60),
     "head.disk.root_gb: 60 GB is too small"),
    ("unknown region", lambda v: set_path(v, "aws.region", "us-east-7"),
     "aws.region: unknown region 'us-east-7'"),
    ("region with no pinned AMI", lambda v: set_path(v, "aws.region", "eu-west-1"),
     "aws.image_id: the kit pins no AMI for eu-west-1"),
    ("malformed AMI id", lambda v: set_path(v, "aws.image_id", "ubuntu-22.04"),
     "aws.image_id: 'ubuntu-22.04' does not match"),
    ("zone outside the region", lambda v: set_path(v, "aws.availability_zone", "us-west-2a"),
     "aws.availability_zone: us-west-2a is not in region us-east-1"),
    ("mount whose host path nothing creates",
     lambda v: set_path(v, "docker.extra_run_options", ["-v /scratch:/scratch"]),
     "host path /scratch of mount '/scratch:/scratch' is not created"),
    ("missing required key", lambda v: v["head"].pop("disk"),
     "head: 'disk' is a required property"),
    ("wrong type", lambda v: set_path(v, "workers.cpu_worker.spot", "yes"),
     "workers.cpu_worker.spot: 'yes' is not of type 'boolean'"),
    ("unknown provider", lambda v: set_path(v, "provider", "gcp"),
     "provider: 'gcp' is not one of aws, local"),
    ("unknown mix", lambda v: set_path(v, "mix", "hetero"),
     "mix: 'hetero' is not one of ['heterogeneous', 'homogeneous']"),
    ("data volume the same size as root", lambda v: set_path(v, "head.disk.data_gb", 150),
     "head.disk.data_gb: must differ from root_gb"),
]

LOCAL_CASES = [
    ("no trainer slot on a hetero head", lambda v: set_path(v, "head.trainer_slots", 0),
     "head.trainer_slots: a heterogeneous mix trains on the head"),
    ("key typo in a local worker", lambda v: rename(v, "workers.cpu_worker.cpus", "cpu"),
     "workers.cpu_worker.cpu: unknown key; did you mean 'cpus'"),
    ("too many simulated workers", lambda v: set_path(v, "workers.cpu_worker.max_workers", 400),
     "workers: 400 workers need more than the 250 loopback addresses"),
]


@pytest.mark.parametrize("cluster,name,change,message",
                         [("hetero", *c) for c in AWS_CASES] + [("local", *c) for c in LOCAL_CASES],
                         ids=lambda x: x if isinstance(x, str) and " " in x else None)
def test_bad_values_are_refused_naming_the_key(cluster, name, change, message):
    values = load_example(cluster)
    change(values)
    with pytest.raises(KitError) as error:
        validate(cluster, values)
    text = str(error.value)
    assert message in text
    assert f"cluster_templates/{cluster}.yaml" in text  # names the file to edit


def test_at_least_fifteen_bad_inputs():
    assert len(AWS_CASES) + len(LOCAL_CASES) >= 15


def test_every_problem_is_reported_at_once(hetero_values):
    rename(hetero_values, "head.instance_type", "instnce_type")
    hetero_values["workers"]["cpu_worker"]["spot"] = "yes"
    with pytest.raises(KitError) as error:
        validate("hetero", hetero_values)
    assert "instnce_type" in str(error.value) and "spot" in str(error.value)


def test_node_config_is_checked_against_ec2_run_instances():
    assert run_instances_problems({"InstanceType": "g5.xlarge", "ImageId": "ami-12345678"}) == []
    problems = run_instances_problems({"InstanceTyp": "g5.xlarge",
                                       "MetadataOptions": {"HttpTokens": "always"},
                                       "BlockDeviceMappings": [{"Ebs": {"VolumeSize": "big"}}]})
    text = "\n".join(problems)
    assert 'Unknown parameter in input: "InstanceTyp"' in text
    assert ".MetadataOptions.HttpTokens: 'always' is not one of optional, required" in text
    assert "VolumeSize" in text


def test_cli_refuses_an_unknown_cluster_and_job():
    from scripts.kit import main

    assert main(["validate", "--cluster", "heteor"]) == 2
    assert main(["submit", "--cluster", "local", "--job", "vit_synthetc"]) == 2
