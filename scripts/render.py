"""Render a values file into a Ray autoscaler cluster YAML: build/clusters/<cluster>.yaml.

Every value the template needs is computed here, in Python, and handed to one render
call; the templates only lay values out. Rendering is deterministic: the same values
file always gives the same bytes.
"""

import re
from pathlib import Path

import jinja2

from scripts import catalog
from scripts.errors import KitError
from scripts.values import BUILD, REPO, TEMPLATES, load_values

CLUSTERS = BUILD / "clusters"
HEAD = "ray.head.default"  # the head node type's name (fake providers require this one)
MIB = 1024 * 1024

# Packages the jobs import on the cluster's nodes; their pins come from requirements.txt.
JOB_PACKAGES = ("torch", "torchvision", "timm", "autograd", "pandas", "portpicker",
                "scipy", "semver", "pymoo", "setuptools")
NODEPS_REQUIREMENTS = REPO / "jobs" / "adaptdl_mnist" / "requirements-nodeps.txt"


def render_cluster(cluster: str) -> tuple[Path, str]:
    """Render cluster_templates/<cluster>.yaml to build/clusters/; return (path, text).
    The values' shape is checked first: the template needs well-formed values."""
    values = load_values(cluster)
    text = render_values(cluster, values)
    CLUSTERS.mkdir(parents=True, exist_ok=True)
    out = CLUSTERS / f"{cluster}.yaml"
    out.write_text(text)
    return out, text


def render_values(cluster: str, values: dict) -> str:
    """The cluster YAML for already-checked values: deterministic, no file written."""
    return render_template(values["provider"], build_context(cluster, values))


def render_template(provider: str, context: dict) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,  # a missing value is an error, never ""
        keep_trailing_newline=True,
    )
    try:
        return env.get_template(f"{provider}.yaml.j2").render(**context)
    except jinja2.UndefinedError as e:
        raise KitError(f"cluster_templates/{provider}.yaml.j2: {e}; "
                       "scripts/render.py must provide that value") from None


def build_context(cluster: str, values: dict) -> dict:
    common = {
        "values_file": f"{cluster}.yaml",
        "cluster_key": cluster,
        "cluster_name": values["cluster_name"],
        "idle_timeout_minutes": values["idle_timeout_minutes"],
        "max_workers": sum(w["max_workers"] for w in values["workers"].values()),
    }
    if values["provider"] == "local":
        return common | local_context(values)
    return common | aws_context(values)


# --- local -------------------------------------------------------------------------

def local_context(values: dict) -> dict:
    head = values["head"]
    return {
        "head": {
            "name": HEAD,
            "min_workers": 0,
            "max_workers": 0,
            "resources": local_resources(head, trainer_slots=head["trainer_slots"],
                                         preprocess=head.get("preprocess", False)),
        },
        "workers": [
            {
                "name": name,
                "min_workers": w["min_workers"],
                "max_workers": w["max_workers"],
                "resources": local_resources(w, trainer_slots=0, preprocess=True),
            }
            for name, w in values["workers"].items()
        ],
    }


def local_resources(node: dict, trainer_slots: int, preprocess: bool) -> dict:
    """Logical resources of a simulated node. `trainer` stands in for GPUs; `preprocess`
    marks CPUs that Ray Data may use (ray-project/ray#13270: declare them explicitly)."""
    resources = {"CPU": node["cpus"]}
    if trainer_slots:
        resources["trainer"] = trainer_slots
    if preprocess:
        resources["preprocess"] = node["cpus"]
    resources["memory"] = node["memory_mb"] * MIB
    resources["object_store_memory"] = node["object_store_mb"] * MIB
    return resources


# --- aws ---------------------------------------------------------------------------

def aws_context(values: dict) -> dict:
    aws, docker = values["aws"], values["docker"]
    region = aws["region"]
    image_id = aws.get("image_id") or catalog.AMI_BY_REGION.get(region)
    if image_id is None:  # check_values reports this first; kept for direct callers
        raise KitError(f"aws.region: no pinned AMI for {region}; set aws.image_id")
    head = values["head"]
    data_volumes = sorted({n["disk"].get("data_gb", 0) for n in all_aws_nodes(values)} - {0})
    return {
        "region": region,
        "availability_zone": aws.get("availability_zone"),
        "image_id": image_id,
        "key_pair": aws.get("key_pair"),
        "ssh_user": aws.get("ssh_user", "ubuntu"),
        "tags": {"ray-kit-cluster": values["cluster_name"]} | aws.get("tags", {}),
        "common_run_options": volume_run_options(docker) + ["--ulimit nofile=65536:65536"]
        + docker.get("extra_run_options", []),
        "head": aws_node(HEAD, head, preprocess=head.get("preprocess", False)),
        "workers": [
            aws_node(name, w, preprocess=True) | {
                "min_workers": w["min_workers"], "max_workers": w["max_workers"]}
            for name, w in values["workers"].items()
        ],
        "initialization_commands": host_dir_commands(docker, data_volumes),
        "setup_commands": job_setup_commands(),
    }


def all_aws_nodes(values: dict) -> list[dict]:
    return [values["head"], *values["workers"].values()]


def aws_node(name: str, node: dict, preprocess: bool) -> dict:
    spec = catalog.INSTANCE_TYPES[node["instance_type"]]
    disk = node["disk"]
    resources = {"CPU": spec.vcpus}
    if spec.gpus:
        # One training worker per GPU: `trainer` counts the slots the ViT job fills.
        resources |= {"GPU": spec.gpus, "trainer": spec.gpus}
    if preprocess:
        resources["preprocess"] = spec.vcpus
    volumes = [{"device": "/dev/sda1", "size_gb": disk["root_gb"],
                "type": disk.get("volume_type", "gp3")}]
    if disk.get("data_gb"):
        volumes.append({"device": "/dev/sdf", "size_gb": disk["data_gb"],
                        "type": disk.get("volume_type", "gp3")})
    # Ray's object store lives in /dev/shm: give it 40% of RAM (Ray defaults to 30%).
    run_options = [f"--shm-size={max(1, int(spec.memory_gib * 0.4))}g"]
    if spec.gpus:
        run_options.append("--gpus all")
    return {
        "name": name,
        "instance_type": node["instance_type"],
        "resources": resources,
        "volumes": volumes,
        "spot": node.get("spot", False),
        "image": catalog.DOCKER_IMAGE["gpu" if spec.gpus else "cpu"],
        "run_options": run_options,
    }


def volume_run_options(docker: dict) -> list[str]:
    return [f"-v {v['host']}:{v['container']}" for v in docker["volumes"]]


def host_dir_commands(docker: dict, data_volume_sizes: list[int]) -> list[str]:
    """Host-side commands: create every mounted host dir; where a node has a data volume,
    format it once and mount it on the first volume's host dir. The volume is found by
    its exact size, since NVMe device names do not follow the BlockDeviceMapping's."""
    commands = [f"sudo mkdir -p {v['host']}" for v in docker["volumes"]]
    if data_volume_sizes and docker["volumes"]:
        target = docker["volumes"][0]["host"]
        for size_gb in data_volume_sizes:
            size_bytes = size_gb * 1024**3
            commands.append(
                f"DEV=$(lsblk -bdnpo NAME,SIZE | awk '$2 == {size_bytes} {{print $1; exit}}'); "
                f"if [ -n \"$DEV\" ]; then (sudo blkid \"$DEV\" || sudo mkfs.ext4 -q \"$DEV\") "
                f"&& (mountpoint -q {target} || sudo mount \"$DEV\" {target}); fi"
            )
    return commands


def pinned_requirements(path: Path) -> dict[str, str]:
    """{name: 'name==version'} for every pinned line of a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s#]+)", line.strip())
        if match:
            pins[match.group(1).lower()] = f"{match.group(1)}=={match.group(3)}"
    return pins


def job_setup_commands() -> list[str]:
    pins = pinned_requirements(REPO / "requirements.txt")
    missing = [p for p in JOB_PACKAGES if p not in pins]
    if missing:
        raise KitError(f"requirements.txt: no pinned version for {', '.join(missing)}")
    nodeps = pinned_requirements(NODEPS_REQUIREMENTS).values()
    return [
        "pip install -q --no-cache-dir " + " ".join(pins[p] for p in JOB_PACKAGES),
        "pip install -q --no-cache-dir --no-deps " + " ".join(nodeps),
    ]
