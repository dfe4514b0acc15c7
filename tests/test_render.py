"""Every values file renders and validates; values land where they should."""

import pytest
import yaml

from conftest import REPO, load_example
from scripts import catalog
from scripts.errors import KitError
from scripts.render import HEAD, pinned_requirements, render_template, render_values
from scripts.validate import validate

VALUES_FILES = sorted(p.stem for p in (REPO / "cluster_templates").glob("*.yaml"))


def test_examples_are_found():
    assert {"hetero", "single", "p4d_hetero", "local"} <= set(VALUES_FILES)


@pytest.mark.parametrize("cluster", VALUES_FILES)
def test_every_values_file_renders_and_validates(cluster):
    config = validate(cluster, load_example(cluster))
    assert config["cluster_name"] == load_example(cluster)["cluster_name"]
    assert config["head_node_type"] == HEAD


@pytest.mark.parametrize("cluster", VALUES_FILES)
def test_rendering_is_deterministic(cluster):
    values = load_example(cluster)
    assert render_values(cluster, values) == render_values(cluster, load_example(cluster))


def render(cluster, values):
    return yaml.safe_load(render_values(cluster, values))


def test_hetero_head_is_gpu_trainer_and_workers_cpu_preprocessors():
    config = render("hetero", load_example("hetero"))
    head = config["available_node_types"][HEAD]
    worker = config["available_node_types"]["cpu_worker"]
    assert head["node_config"]["InstanceType"] == "g5.xlarge"
    assert head["resources"] == {"CPU": 4, "GPU": 1, "trainer": 1}
    assert worker["node_config"]["InstanceType"] == "c5.4xlarge"
    assert worker["resources"] == {"CPU": 16, "preprocess": 16}
    assert (worker["min_workers"], worker["max_workers"]) == (2, 4)
    assert config["max_workers"] == 4
    assert config["docker"]["image"] == catalog.DOCKER_IMAGE["gpu"]
    assert "--gpus all" in config["docker"]["head_run_options"]
    assert worker["docker"]["worker_image"] == catalog.DOCKER_IMAGE["cpu"]
    assert "--gpus all" not in worker["docker"]["worker_run_options"]
    assert catalog.RAY_VERSION in config["docker"]["image"]


def test_secure_defaults():
    config = render("hetero", load_example("hetero"))
    provider = config["provider"]
    assert provider["cache_stopped_nodes"] is False
    assert "IpPermissions" not in provider["security_group"]  # only Ray's SSH default
    for node_type in config["available_node_types"].values():
        node_config = node_type["node_config"]
        assert node_config["MetadataOptions"]["HttpTokens"] == "required"
        assert all(m["Ebs"]["Encrypted"] for m in node_config["BlockDeviceMappings"])
        assert node_config["ImageId"] == catalog.AMI_BY_REGION["us-east-1"]
    assert "--dashboard-host=127.0.0.1" in " ".join(config["head_start_ray_commands"])


def test_values_land_in_node_config(hetero_values):
    hetero_values["workers"]["cpu_worker"] |= {"instance_type": "c5.9xlarge", "spot": True}
    hetero_values["workers"]["cpu_worker"]["disk"] = {"root_gb": 120, "volume_type": "io2"}
    hetero_values["head"]["disk"]["data_gb"] = 400
    hetero_values["aws"]["image_id"] = "ami-0123456789abcdef0"
    config = render("hetero", hetero_values)
    worker = config["available_node_types"]["cpu_worker"]["node_config"]
    assert worker["InstanceType"] == "c5.9xlarge"
    assert worker["InstanceMarketOptions"] == {"MarketType": "spot"}
    assert worker["BlockDeviceMappings"][0]["Ebs"] | {} == {
        "VolumeSize": 120, "VolumeType": "io2", "Encrypted": True, "DeleteOnTermination": True}
    assert worker["ImageId"] == "ami-0123456789abcdef0"
    head = config["available_node_types"][HEAD]["node_config"]
    assert "InstanceMarketOptions" not in head
    assert [m["Ebs"]["VolumeSize"] for m in head["BlockDeviceMappings"]] == [150, 400]
    # the data volume is found by its size and mounted on the first volume's host dir
    init = "\n".join(config["initialization_commands"])
    assert str(400 * 1024**3) in init and "sudo mount \"$DEV\" /mnt/data" in init


def test_volume_mounts_and_shm():
    config = render("hetero", load_example("hetero"))
    assert "-v /mnt/data:/data" in config["docker"]["run_options"]
    assert "sudo mkdir -p /mnt/data" in config["initialization_commands"]
    # 40% of the g5.xlarge's 16 GiB for Ray's object store in /dev/shm
    assert "--shm-size=6g" in config["docker"]["head_run_options"]


def test_setup_commands_install_the_pinned_job_packages():
    setup = " ".join(render("hetero", load_example("hetero"))["setup_commands"])
    pins = pinned_requirements(REPO / "requirements.txt")
    for name in ("torch", "torchvision", "timm", "scipy"):
        assert pins[name] in setup.split()
    assert "--no-deps adaptdl==0.2.11 adaptdl-sched==0.2.11 adaptdl-ray==0.2.11" in setup


def test_local_resources_put_trainer_on_head_and_preprocess_on_workers():
    config = render("local", load_example("local"))
    head = config["available_node_types"][HEAD]["resources"]
    worker = config["available_node_types"]["cpu_worker"]["resources"]
    assert head["trainer"] == 1 and "preprocess" not in head
    assert worker["preprocess"] == worker["CPU"] and "trainer" not in worker
    assert worker["object_store_memory"] == 768 * 1024 * 1024
    assert config["provider"]["module"] == "scripts.local_provider.LoopbackNodeProvider"


def test_missing_template_value_is_an_error_not_an_empty_string():
    with pytest.raises(KitError, match="'ssh_user' is undefined"):
        context = {"values_file": "x.yaml", "cluster_key": "x", "cluster_name": "x",
                   "max_workers": 1, "idle_timeout_minutes": 5, "region": "us-east-1",
                   "availability_zone": None}
        render_template("aws", context)
