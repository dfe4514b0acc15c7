"""Every values file builds; values land where they should; defaults come from the schema."""

import pytest
import yaml

from conftest import REPO, load_example
from scripts.providers.aws import render as aws_render
from scripts.providers.aws import values as aws_values
from scripts import catalog
from scripts.build import build, build_text, render_template
from scripts.core import node_packages
from scripts.core.errors import KitError
from scripts.core.inputs import available_clusters
from scripts.providers import PROVIDERS, Provider, aws, local
from scripts.providers.local import names as local_names
from scripts.core.values import load_schema, with_defaults

VALUES_FILES = sorted(p.stem for p in (REPO / "cluster_templates").glob("*.yaml"))


def test_examples_are_found():
    assert {"hetero", "single", "p4d_hetero", "local"} <= set(VALUES_FILES) <= set(available_clusters())


@pytest.mark.parametrize("cluster", VALUES_FILES)
def test_every_values_file_builds(cluster):
    built = build(cluster)
    if built.provider.NAME == "kuberay":  # a RayCluster, not a Ray autoscaler config
        assert built.config["metadata"]["name"] == load_example(cluster)["cluster_name"]
    else:
        assert built.config["cluster_name"] == load_example(cluster)["cluster_name"]
        assert built.config["head_node_type"] == built.provider.HEAD_TYPE
    assert built.text == build(cluster).text  # deterministic


@pytest.mark.parametrize("cluster", VALUES_FILES)
def test_every_values_file_shows_the_whole_surface(cluster):
    """Each example lists every key its schema knows (KubeRay-style), so a user sees what
    can be set; filling defaults into it adds nothing."""
    raw = load_example(cluster)
    schema = load_schema(REPO / "cluster_templates" / "schema" / f"{raw['provider']}.schema.yaml")
    assert with_defaults(yaml.safe_load(yaml.safe_dump(raw)), schema, schema) == raw


def interface_problems(module) -> list[str]:
    """What `module` lacks of the Provider protocol, or offers with another type or shape:
    every annotated member (only-annotated ones too, which dir(Provider) misses) with a
    value of its type, every method callable with the protocol's parameters."""
    import inspect
    import typing

    problems = []
    for name, wanted in typing.get_type_hints(Provider).items():
        if not hasattr(module, name):
            problems.append(f"{name} is missing")
            continue
        value = getattr(module, name)
        allowed = tuple(t if t is not type(None) else type(None)
                        for t in (typing.get_args(wanted) if typing.get_origin(wanted) in
                                  (typing.Union, __import__("types").UnionType) else (wanted,)))
        allowed = tuple(typing.get_origin(t) or t for t in allowed)
        if not isinstance(value, allowed) or (float in allowed and isinstance(value, bool)):
            problems.append(f"{name} = {value!r} is not {wanted}")
    for name, method in vars(Provider).items():
        if name.startswith("_") or not inspect.isfunction(method):
            continue
        if not callable(getattr(module, name, None)):
            problems.append(f"{name}() is missing")
            continue
        wanted = [p.name for p in inspect.signature(method).parameters.values()][1:]  # no self
        params = list(inspect.signature(getattr(module, name)).parameters.values())
        offered = [p.name for p in params]
        extra_required = [p.name for p in params[len(wanted):] if p.default is p.empty]
        if offered[:len(wanted)] != wanted or extra_required:  # extras only with defaults
            problems.append(f"{name}({', '.join(offered)}) is not {name}({', '.join(wanted)})")
    return problems


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_every_provider_offers_the_whole_interface(name):
    module = PROVIDERS[name]
    assert interface_problems(module) == []
    assert module.NAME == name
    assert (REPO / "cluster_templates" / f"{name}.yaml.j2").is_file()
    assert (REPO / "cluster_templates" / "schema" / f"{name}.schema.yaml").is_file()


def test_the_interface_check_sees_a_wrong_type_a_missing_member_and_a_changed_signature():
    """Before the house's third pass aws.py assigned JOB_PACKAGES twice, the package tuple
    last: a job's requirements never reached Ray's pip runtime_env on AWS."""
    import types

    broken = types.ModuleType("broken")
    vars(broken).update({k: v for k, v in vars(aws).items() if not k.startswith("_")})
    broken.JOB_PACKAGES = ("torch", "torchvision")
    del broken.STOPS_WITHOUT_RECORD
    broken.down = lambda cluster, record: ""
    assert interface_problems(broken) == [
        "JOB_PACKAGES = ('torch', 'torchvision') is not <enum 'JobPackages'>",
        "STOPS_WITHOUT_RECORD is missing",
        "down(cluster, record) is not down(cluster, record, purge)"]


def test_local_head_type_is_the_one_rays_fake_provider_registers():
    from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_TYPE

    assert local.HEAD_TYPE == FAKE_HEAD_NODE_TYPE


def config_of(cluster, values):
    return build_text(cluster, yaml.safe_dump(values).encode()).config


def test_defaults_come_from_the_schema():
    minimal = {"cluster_name": "mini", "provider": "aws", "aws": {"region": "us-east-1"},  # no default region
               "head": {"instance_type": "g5.xlarge", "disk": {"root_gb": 150}}}
    with pytest.raises(KitError, match="leave no node to preprocess at launch"):  # head.preprocess: false
        build_text("mini", yaml.safe_dump(minimal).encode())
    minimal["head"]["preprocess"] = True
    built = build_text("mini", yaml.safe_dump(minimal).encode())
    assert built.values["aws"] == {"region": "us-east-1", "availability_zone": None, "image_id": "auto",
                                   "root_device": "/dev/sda1", "ebs_kms_key": None,
                                   "key_pair": None, "subnet_ids": [], "security_group_ids": [],
                                   "use_internal_ips": False, "ssh_cidr": "auto",
                                   "iam_instance_profile": "auto", "placement_group": "none",
                                   "data_buckets": [], "output_buckets": [],
                                   "ssh_user": "ubuntu", "tags": {}}
    assert built.values["head"]["disk"] == {"root_gb": 150, "volume_type": "gp3", "data_gb": 0}
    assert built.values["idle_timeout_minutes"] == 10 and built.values["workers"] == {}
    assert built.config["auth"]["ssh_user"] == "ubuntu"


def test_hetero_head_is_gpu_trainer_and_workers_cpu_preprocessors():
    config = build("hetero").config
    head = config["available_node_types"][aws.HEAD_TYPE]
    worker = config["available_node_types"]["cpu_worker"]
    assert head["node_config"]["InstanceType"] == "g5.xlarge"
    # placement is by label alone: no custom resources (jobs/raykit/placement.py)
    assert head["resources"] == {"CPU": 4, "GPU": 1}
    assert head["labels"] == {"raykit-node-type": aws.HEAD_TYPE, "ray-subcluster": "train",
                              "raykit-trainer-slots": "1"}
    assert worker["node_config"]["InstanceType"] == "c5.4xlarge"
    # a CPU worker keeps one vCPU for its raylet and object transfers (catalog.preprocess_vcpus)
    assert worker["resources"] == {"CPU": 15, "raykit-node-cpu_worker": 1}  # and the type's own: the autopilot names it
    assert worker["labels"] == {"raykit-node-type": "cpu_worker", "ray-subcluster": "preprocess"}
    assert (worker["min_workers"], worker["max_workers"]) == (2, 4)
    assert config["max_workers"] == 4
    assert config["docker"]["image"] == catalog.DOCKER_IMAGE["gpu"]
    assert "--gpus all" in config["docker"]["head_run_options"]
    assert worker["docker"]["worker_image"] == catalog.DOCKER_IMAGE["cpu"]
    assert "--gpus all" not in worker["docker"]["worker_run_options"]


def test_secure_defaults():
    config = build("hetero").config
    provider = config["provider"]
    assert provider["cache_stopped_nodes"] is False
    assert "IpPermissions" not in provider["security_group"]  # only Ray's SSH default
    for node_type in config["available_node_types"].values():
        node_config = node_type["node_config"]
        assert node_config["MetadataOptions"]["HttpTokens"] == "required"
        assert all(m["Ebs"]["Encrypted"] for m in node_config["BlockDeviceMappings"])
        # image_id: auto renders EC2's own reference to AWS's public parameter; `make up`
        # resolves it once, so that every node of the cluster boots the same AMI
        assert node_config["ImageId"] == f"resolve:ssm:{catalog.DLAMI_SSM_PARAMETER}"
    start = " ".join(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in start and f"--port={aws_render.GCS_PORT}" in start
    assert f"RAY_AUTH_MODE={aws_render.AUTH_MODE}" in start


def test_values_land_in_node_config(hetero_values):
    hetero_values["workers"]["cpu_worker"] |= {"instance_type": "c5.9xlarge", "spot": True}
    hetero_values["workers"]["cpu_worker"]["disk"] = {"root_gb": 120, "volume_type": "io2"}
    hetero_values["head"]["disk"]["data_gb"] = 400
    hetero_values["aws"] |= {"image_id": "ami-0123456789abcdef0", "key_pair": "mine",
                             "availability_zone": "us-east-1b", "tags": {"team": "ml"}}
    config = config_of("hetero", hetero_values)
    worker = config["available_node_types"]["cpu_worker"]["node_config"]
    assert worker["InstanceType"] == "c5.9xlarge"
    assert worker["InstanceMarketOptions"] == {"MarketType": "spot"}
    assert worker["BlockDeviceMappings"][0]["Ebs"] == {
        "VolumeSize": 120, "VolumeType": "io2", "Encrypted": True, "DeleteOnTermination": True}
    assert worker["ImageId"] == "ami-0123456789abcdef0" and worker["KeyName"] == "mine"
    assert {"Key": "team", "Value": "ml"} in worker["TagSpecifications"][0]["Tags"]
    assert config["provider"]["availability_zone"] == "us-east-1b"
    assert config["auth"]["ssh_private_key"] == "~/.ssh/mine.pem"
    head = config["available_node_types"][aws.HEAD_TYPE]["node_config"]
    assert "InstanceMarketOptions" not in head
    assert [m["Ebs"]["VolumeSize"] for m in head["BlockDeviceMappings"]] == [150, 400]
    # the data volume is found by its size and mounted on the first volume's host dir
    init = "\n".join(config["initialization_commands"])
    assert str(400 * 1024**3) in init and "sudo mount \"$DEV\" /mnt/data" in init
    assert init.endswith(f"&& sudo chown {aws_render.CONTAINER_USER} /mnt/data; fi")  # writable once mounted


def test_network_and_iam_keys_land_in_the_config(hetero_values):
    hetero_values["aws"] |= {"subnet_ids": ["subnet-0123456789abcdef0"], "use_internal_ips": True,
                             "security_group_ids": ["sg-01234567"], "iam_instance_profile": "ray-head"}
    config = config_of("hetero", hetero_values)
    assert config["provider"]["use_internal_ips"] is True
    assert "security_group" not in config["provider"]  # the given group, not one of Ray's
    for name, node_type in config["available_node_types"].items():
        node_config = node_type["node_config"]
        assert node_config["SubnetIds"] == ["subnet-0123456789abcdef0"]
        assert node_config["SecurityGroupIds"] == ["sg-01234567"]
        is_head = name == aws.HEAD_TYPE
        assert node_config.get("IamInstanceProfile") == ({"Name": "ray-head"} if is_head else None)
    hetero_values["aws"]["iam_instance_profile"] = "arn:aws:iam::123456789012:instance-profile/ray-head"
    head = config_of("hetero", hetero_values)["available_node_types"][aws.HEAD_TYPE]
    assert head["node_config"]["IamInstanceProfile"] == {
        "Arn": "arn:aws:iam::123456789012:instance-profile/ray-head"}


def test_volume_mounts_and_shm():
    config = build("hetero").config
    assert "-v /mnt/data:/data" in config["docker"]["run_options"]
    assert "sudo mkdir -p /mnt/data" in config["initialization_commands"]
    assert f"sudo chown {aws_render.CONTAINER_USER} /mnt/data" in config["initialization_commands"]
    assert "--shm-size=6g" in config["docker"]["head_run_options"]


def test_setup_commands_install_the_pinned_job_packages_cpu_torch_on_cpu_nodes():
    config = build("hetero").config
    head = config["head_setup_commands"]
    worker = config["available_node_types"]["cpu_worker"]["worker_setup_commands"]
    pins = node_packages.pinned_requirements(REPO / "requirements.txt")
    for commands in (head, worker):
        words = " ".join(commands).split()
        for name in ("torch", "torchvision", "timm", "scipy"):
            assert pins[name] in words
        assert "--no-deps adaptdl==0.2.11 adaptdl-sched==0.2.11 adaptdl-ray==0.2.11" in commands[-1]
    # the GPU head takes the default (CUDA) build; the CPU worker PyTorch's CPU build first
    assert not any("--index-url" in c for c in head)
    assert worker[0] == (f"pip install -q --no-cache-dir --index-url {node_packages.TORCH_CPU_INDEX} "
                         f"{pins['torch']} {pins['torchvision']}")
    assert config["setup_commands"] == []


def test_local_nodes_are_placed_by_labels_not_custom_resources():
    config = build("local").config
    head = config["available_node_types"][local.HEAD_TYPE]
    worker = config["available_node_types"]["cpu_worker"]
    assert set(head["resources"]) == {"CPU", "memory", "object_store_memory"}
    # a worker type's own resource: only the autopilot's requests name it (Ray's v1
    # autoscaler ignores their label selectors); work is placed by labels
    assert set(worker["resources"]) == {"CPU", "memory", "object_store_memory", "raykit-node-cpu_worker"}
    assert head["labels"] == {"raykit-node-type": "head", "ray-subcluster": "train",
                              "raykit-trainer-slots": "1"}
    assert worker["labels"] == {"raykit-node-type": "cpu_worker", "ray-subcluster": "preprocess"}
    assert worker["resources"]["object_store_memory"] == 768 * 1024 * 1024
    assert config["provider"]["module"] == local_names.PROVIDER_CLASS
    # the single-node mix: a train node that preprocesses too, on one pinned core
    single = build("local_single").config["available_node_types"][local.HEAD_TYPE]["labels"]
    assert single == {"raykit-node-type": "head", "ray-subcluster": "train",
                      "raykit-trainer-slots": "1", "raykit-preprocess": "true", "raykit-cores": "1"}


def test_local_train_nodes_run_their_workers_first_and_preprocess_nodes_at_rays_default():
    """Each worker type's raylet is told its workers' niceness (priority.py): a train
    type's at the driver's 0, a preprocess type's at Ray's 15."""
    types = build("local_multi").config["available_node_types"]
    roles = load_example("local_multi")["workers"]
    assert {roles[name]["role"] for name in roles} == {"train", "preprocess"}
    for name, node in roles.items():
        assert types[name]["node_config"]["worker_niceness"] == (0 if node["role"] == "train" else 15), name


def test_the_local_plan_says_who_comes_first_on_shared_cores_and_not_on_pinned_ones():
    from scripts.providers.local import render as local_render

    shared, pinned = build("local"), build("local_single")
    assert "the trainers' Ray workers first on them (nice 0, the preprocess nodes' 15)" in \
        local_render.plan(shared.values, shared.config)[0]
    assert "nice" not in local_render.plan(pinned.values, pinned.config)[0]


def test_every_rendered_label_is_one_ray_accepts():
    """Node type names become label values: the schema keeps them within Ray's rule."""
    from ray._private.label_utils import validate_node_labels

    for name in ("hetero", "single", "p4d_hetero", "local", "local_hetero", "local_single"):
        for node_type in build(name).config["available_node_types"].values():
            validate_node_labels(node_type["labels"])


def test_missing_template_value_is_an_error_not_an_empty_string():
    with pytest.raises(KitError, match="'ssh_user' is undefined"):
        render_template("aws", {"values_file": "x.yaml", "cluster_name": "x", "max_workers": 1,
                                "idle_timeout_minutes": 5, "region": "us-east-1",
                                "availability_zone": None, "security_group_name": "ray-x",
                                "use_internal_ips": False})


def test_node_config_is_checked_against_ec2_run_instances():
    assert aws_values.run_instances_problems({"InstanceType": "g5.xlarge", "ImageId": "ami-12345678"}) == []
    problems = aws_values.run_instances_problems({"InstanceTyp": "g5.xlarge",
                                           "MetadataOptions": {"HttpTokens": "always"},
                                           "BlockDeviceMappings": [{"Ebs": {"VolumeSize": "big"}}]})
    text = "\n".join(problems)
    assert 'Unknown parameter in input: "InstanceTyp"' in text
    assert ".MetadataOptions.HttpTokens: 'always' is not one of optional, required" in text
    assert "VolumeSize" in text


def test_validate_and_render_never_touch_a_launched_config(tmp_path, monkeypatch, capsys):
    """`make validate` writes nothing; `make render` writes build/clusters/ only, never
    build/launched/, which a running cluster's autoscaler reads."""
    from scripts import kit
    from scripts.commands import lifecycle

    monkeypatch.setattr(lifecycle, "RENDERED", tmp_path / "clusters")
    assert kit.main(["validate", "--cluster", "local"]) == 0
    assert not (tmp_path / "clusters").exists()
    assert kit.main(["render", "--cluster", "local"]) == 0
    assert (tmp_path / "clusters" / "local.yaml").read_text() == build("local").text


def test_several_train_nodes_beside_a_coordinating_head():
    """multi_g5: the head offers Ray no CPU (nothing but the driver runs there), each
    4-GPU train node holds 4 trainer slots and all its vCPUs for them, preprocessors keep
    the train label off; local_multi renders the same shape with one slot per node."""
    config = build("multi_g5").config
    head = config["available_node_types"][aws.HEAD_TYPE]
    train, cpu = config["available_node_types"]["gpu_worker"], config["available_node_types"]["cpu_worker"]
    assert head["resources"] == {"CPU": 0}
    assert head["labels"] == {"raykit-node-type": aws.HEAD_TYPE, "ray-subcluster": "coordinate"}
    assert config["docker"]["image"] == catalog.DOCKER_IMAGE["cpu"]
    assert "--gpus all" not in config["docker"]["head_run_options"]
    assert train["resources"] == {"CPU": 48, "GPU": 4, "raykit-node-gpu_worker": 1}
    assert train["labels"] == {"raykit-node-type": "gpu_worker", "ray-subcluster": "train",
                               "raykit-trainer-slots": "4"}
    assert (train["min_workers"], train["max_workers"]) == (2, 2)
    assert train["docker"]["worker_image"] == catalog.DOCKER_IMAGE["gpu"]
    assert "--gpus all" in train["docker"]["worker_run_options"]
    assert any("nvidia-ml-py==" in c for c in train["worker_setup_commands"])
    assert cpu["labels"]["ray-subcluster"] == "preprocess" and "GPU" not in cpu["resources"]

    local_config = build("local_multi").config
    nodes = local_config["available_node_types"]
    assert nodes[local.HEAD_TYPE]["resources"]["CPU"] == 0
    assert nodes[local.HEAD_TYPE]["labels"]["ray-subcluster"] == "coordinate"
    assert nodes["gpu_worker"]["labels"] == {"raykit-node-type": "gpu_worker", "ray-subcluster": "train",
                                             "raykit-trainer-slots": "1"}
    assert nodes["cpu_worker"]["labels"] == {"raykit-node-type": "cpu_worker", "ray-subcluster": "preprocess"}


def test_a_preprocessing_gpu_head_keeps_a_vcpu_for_ray():
    """Its CPUs: one per GPU (the training workers) plus the catalog's preprocessing vCPUs;
    the last vCPU stays with Ray's head processes."""
    config = build("single").config
    head = config["available_node_types"][aws.HEAD_TYPE]
    vcpus = catalog.INSTANCE_TYPES[head["node_config"]["InstanceType"]].vcpus
    assert head["resources"] == {"CPU": vcpus - 1, "GPU": 1}
    assert head["labels"]["raykit-preprocess"] == "true"


def test_every_node_installs_nvml_at_its_pin():
    """torch.cuda.utilization needs nvidia-ml-py, which the Ray image lacks: without it the
    ViT job's GPU figure is missing on AWS. The jobs' requirements name it for every node,
    so CPU nodes take it too (a 50 KB wheel): no job's runtime_env installs anything there."""
    pin = next(line.split()[0] for line in (REPO / "requirements.txt").read_text().splitlines()
               if line.startswith("nvidia-ml-py=="))
    config = build("hetero").config
    assert any(pin in command for command in config["head_setup_commands"])
    worker = config["available_node_types"]["cpu_worker"]["worker_setup_commands"]
    assert any(pin in command for command in worker)


def test_the_catalogs_oldest_gpu_is_the_oldest_the_installed_torch_build_ships_kernels_for():
    """catalog.TORCH_MIN_COMPUTE_CAPABILITY is read off the pinned torch build: if torch's
    pin moves, this says whether the supported GPUs moved with it."""
    import torch

    oldest = min(int(arch.split("_")[1]) for arch in torch.cuda.get_arch_list() if arch.startswith("sm_"))
    assert oldest == int("".join(map(str, catalog.TORCH_MIN_COMPUTE_CAPABILITY)))
    for model in {spec.gpu_model for spec in catalog.INSTANCE_TYPES.values() if spec.gpu_model}:
        assert model in catalog.GPU_COMPUTE_CAPABILITY  # every GPU model of the catalog is rated


@pytest.mark.parametrize("cluster", ["hetero", "k8s_hetero"])
def test_the_heads_job_manager_waits_for_a_first_install_as_long_as_it_may_take(cluster):
    """Ray's job manager fails a job whose driver has not started within
    RAY_JOB_START_TIMEOUT_SECONDS (900 s by default), read in the head's dashboard process;
    a first pip install may take PIP_SETUP_TIMEOUT_S (1800 s)."""
    from scripts.core.submit import PIP_SETUP_TIMEOUT_S

    config = build(cluster).config
    if cluster == "hetero":
        (start,) = [c for c in config["head_start_ray_commands"] if "ray start --head" in c]
        assert f"RAY_JOB_START_TIMEOUT_SECONDS={PIP_SETUP_TIMEOUT_S} ray start --head" in start
        assert all("RAY_JOB_START_TIMEOUT_SECONDS" not in c for c in config["worker_start_ray_commands"])
    else:
        head = config["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        assert {"name": "RAY_JOB_START_TIMEOUT_SECONDS", "value": f"{PIP_SETUP_TIMEOUT_S}"} in head["env"]
        for group in config["spec"]["workerGroupSpecs"]:
            assert all(e["name"] != "RAY_JOB_START_TIMEOUT_SECONDS"
                       for e in group["template"]["spec"]["containers"][0].get("env", []))
