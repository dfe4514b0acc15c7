"""The KubeRay provider: the kit's mixes as a RayCluster on a Kubernetes cluster that runs
the KubeRay operator (>= 1.6: crd.MIN_KUBERAY_VERSION), driven through `kubectl`.

The kit launches no machines here: the cluster's node groups (EKS managed node groups,
Karpenter, GKE node pools) hold the pods, and the operator starts Ray in them. A values file
says what each group's pods ask for (CPUs, memory, GPUs), where they may run (node
selectors, tolerations) and their role; the rendered RayCluster is checked offline against
the pinned release's CRD and the operator's own rules (crd.py) before `kubectl`
sees it. `make run` is a RayJob instead (rayjob.py): the operator tears its cluster
down when the job ends, whatever happens to this machine.

Its concerns, a module each in this package:
  crd.py         the pinned release's CRDs and the operator's rules, ported
  kubectl.py     the `kubectl` plumbing: calls, JSON answers, rights, waits
  rayjob.py      `make run` as a RayJob
  watchdog.py    the head pod's autostop container (scripts/node/autostop.py)
  __init__.py    the provider's face (the interface): values, render, preflight, up, down, day 2

`up` labels the RayCluster with a launch id of its own and records it; `down` deletes only
a RayCluster carrying that id, then waits until none of its pods is left.
"""

import base64
import json
import os
import re
import secrets
import subprocess
import time
from contextlib import contextmanager

import yaml

from jobs.raykit import placement
from scripts import catalog
from scripts.core import node_packages, roles, state, tunnel
from scripts.core.errors import KitError, not_running, short
from scripts.core.signals import signals_deferred
from scripts.core.inputs import job_dir
from scripts.core.submit import JOB_START_ENV, JobFiles, JobPackages
from scripts.providers.kuberay import crd, rayjob, watchdog
from scripts.providers.kuberay.kubectl import delete as kubectl_delete
from scripts.providers.kuberay.kubectl import (
    MANAGED_BY,
    exists,
    get_json,
    json_object,
    kubectl,
    kubectl_error,
    missing,
    pods,
    poll_s,
    print_events,
    require_rights,
    run_kubectl,
    target,
    wait_until_no_pods,
)

NAME = "kuberay"
HEAD_TYPE = "headgroup"  # KubeRay's group name for the head (its pods' ray.io/group label)
DEFAULT_JOB_TIMEOUT_S = 6 * 3600.0  # GPU pods hold their nodes (and the node groups bill) until it ends
JOB_PACKAGES = JobPackages.PIP  # Ray's pip runtime_env, over the image's packages
JOB_FILES = JobFiles.UPLOAD  # through the dashboard; each pod unpacks its own copy
BILLS = False  # the Kubernetes cluster's node groups bill, not the kit: it launches no machine
STOPS_WITHOUT_RECORD = False  # without the record's launch id, no RayCluster is the kit's to delete
DASHBOARD_PORT = 8265  # the head service's dashboard port (KubeRay's default)
LAUNCH_ID = "raykit.dev/launch-id"  # a label on the RayCluster: `down` deletes only that one
SHM_VOLUME = "dshm"  # Ray's object store lives in /dev/shm: the container default is 64 MiB
# A volume mounted at one of these, or anywhere under the second kind, hides what the
# image needs there (Ray's images keep Python in /home/ray/anaconda3, Ray's session in /tmp/ray).
SYSTEM_PATHS = ("/", "/home", "/home/ray", "/tmp")
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root",
                "/run", "/sbin", "/sys", "/usr", "/var", "/home/ray/anaconda3", "/tmp/ray")

RECORD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cluster", "provider", "name", "namespace", "context", "launch_id",
                 "expected_pods", "ready_timeout_minutes"],
    "properties": {
        "cluster": {"type": "string"},
        "provider": {"const": NAME},
        "name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"},
        "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
        "context": {"type": ["string", "null"], "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,252}$"},
        "launch_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
        "expected_pods": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "ready_timeout_minutes": {"type": "integer", "minimum": 1, "maximum": 120},
        "job_packages": {"enum": ["install", "baked"]},  # images.job_packages (absent: install)
        # autostop_minutes: after so long with no job the head's watchdog deletes it (0: never)
        "watchdog_minutes": {"type": "integer", "minimum": 0, "maximum": 10080},
    },
}


# --- values -> RayCluster -----------------------------------------------------------

def value_problems(values: dict) -> list[str]:
    """The roles' rules across groups (scripts/core/roles.py), what each role needs of its
    pods (GPUs on every train group and on a training head, none elsewhere), and pods that
    can start: /dev/shm within the pod's memory, volumes on paths of their own."""
    head, workers = values["head"], values["workers"]
    problems = roles.role_problems(values)
    if head["role"] == "train" and head["pod"]["gpus"] < 1:
        problems.append("head.pod.gpus: a head with role train needs a GPU; set gpus: 1 or more, "
                        "or role: coordinate")
    if head["role"] == "coordinate" and head["pod"]["gpus"]:
        problems.append("head.pod.gpus: a coordinating head trains nothing; set gpus: 0")
    for name, w in workers.items():
        if w["role"] == "train" and w["pod"]["gpus"] < 1:
            problems.append(f"workers.{name}.pod.gpus: a train group needs GPUs; set gpus: 1 or more")
        if w["role"] == "preprocess" and w["pod"]["gpus"]:
            problems.append(f"workers.{name}.pod.gpus: a preprocess group trains nothing, and its "
                            "GPUs would idle; set gpus: 0, or role: train")
    for where, node in [("head", head)] + [(f"workers.{n}", w) for n, w in workers.items()]:
        for key in node["node_selector"]:
            problems += [f"{where}.node_selector: key '{key}': {p}"
                         for p in crd.qualified_name_problems(key)]
        problems += fit_problems(where, node, beside=HEAD_NEIGHBOURS if where == "head" else None)
        if node["pod"]["shm_gb"] >= node["pod"]["memory_gb"]:
            problems.append(f"{where}.pod.shm_gb: /dev/shm counts against the pod's memory "
                            f"({node['pod']['memory_gb']} GiB); set shm_gb below it")
    images = values["images"]
    if images["job_packages"] == "baked":
        problems += [f"images.{kind}: {images[kind]} is a stock Ray image, without the jobs' packages; "
                     "name the image `make image` built, or set images.job_packages: install"
                     for kind in ("gpu", "cpu") if is_stock_image(images[kind])]
    for kind in ("gpu", "cpu"):
        problems += [f"images.{kind}: {p}" for p in image_problems(images[kind])]
    for where, node in [("head", head)] + [(f"workers.{n}", w) for n, w in workers.items()]:
        problems += toleration_problems(where, node["tolerations"])
    mounts = [v["mount"] for v in values["volumes"]]
    if len({mount_path(m) for m in mounts}) < len(mounts):
        problems.append("volumes: two volumes share a mount; give each its own path")
    for i, mount in enumerate(mounts):
        path = mount_path(mount)
        if (".." in mount.split("/") or "." in mount.split("/") or path in SYSTEM_PATHS
                or any(path == tree or path.startswith(tree + "/") for tree in SYSTEM_TREES)):
            problems.append(f"volumes[{i}].mount: {mount} would hide the image's own files (its "
                            "Python, Ray's, or the object store in /dev/shm); mount it on a path of "
                            "its own, e.g. /data")
    return problems


def mount_path(mount: str) -> str:
    """A mount path as the container sees it: repeated and trailing slashes collapsed."""
    return "/" + "/".join(part for part in mount.split("/") if part)


# The image reference grammar of the container runtimes (distribution/reference, which the
# kubelet's runtime parses): [domain[:port]/]path[:tag][@algorithm:digest].
PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
IMAGE_NAME = re.compile(rf"(?:{DOMAIN_COMPONENT}(?:\.{DOMAIN_COMPONENT})*(?::[0-9]+)?/)?"
                        rf"{PATH_COMPONENT}(?:/{PATH_COMPONENT})*")
IMAGE_TAG = re.compile(r"[\w][\w.-]{0,127}")
IMAGE_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")


def image_problems(image: str) -> list[str]:
    """An image reference the runtime would refuse (the pod then waits in
    InvalidImageName until the ready time-out), or one with no tag nor digest (`latest`:
    another image on every pull)."""
    name, _, digest = image.partition("@")
    tag = ""
    last = name.rsplit("/", 1)[-1]
    if ":" in last:  # the tag: after the last path component's colon (a registry's port is before a /)
        name, tag = name[: len(name) - len(last)] + last.split(":", 1)[0], last.split(":", 1)[1]
    first = name.split("/", 1)[0]
    is_domain = "/" in name and ("." in first or ":" in first or first == "localhost")  # as the runtime normalizes it
    if not IMAGE_NAME.fullmatch(name) or len(name) > 255 or (
            not is_domain and not re.fullmatch(PATH_COMPONENT, first)):
        return [f"{short(image)} is no image reference a container runtime accepts (repository "
                "path components of a-z 0-9 separated by '.', '_', '__' or '-', at most 255); "
                "e.g. rayproject/ray:2.60.0-py311-cpu"]
    if "@" in image and not IMAGE_DIGEST.fullmatch(digest):
        return [f"{short(image)}: the digest after '@' is no algorithm:hex digest; e.g. @sha256:<64 hex>"]
    if ":" in last and not IMAGE_TAG.fullmatch(tag):
        return [f"{short(image)}: the tag {short(tag)} is not 1-128 letters, digits, '_', '.' or '-' "
                "(starting with a letter, digit or '_')"]
    if not tag and not digest:
        return [f"{short(image)} names no tag: every pull may take another image (latest); add one, "
                "e.g. :2.60.0-py311-cpu"]
    return stock_image_problems(image, tag) if is_stock_image(image) else []


def stock_image_problems(image: str, tag: str) -> list[str]:
    """Ray's own images say their Ray and Python in the tag: another Ray than the kit's
    (the RayCluster's rayVersion, the jobs' APIs, this machine's job client) or another
    Python than the pins are built for fails the first job, after the pods have started."""
    stock = re.fullmatch(r"(\d+\.\d+\.\d+)(?:-(py\d+))?(?:-.*)?", tag)
    if not stock:
        return [f"{short(image)}: the tag {short(tag)} names no Ray release ({catalog.RAY_VERSION}); "
                f"use a pinned one, e.g. rayproject/ray:{catalog.RAY_VERSION}-{catalog.PYTHON_TAG}-cpu"]
    version, python = stock.groups()
    if version != catalog.RAY_VERSION or (python or catalog.PYTHON_TAG) != catalog.PYTHON_TAG:
        return [f"{short(image)} runs Ray {version}" + (f" on {python}" if python else "")
                + f", and the kit's jobs and client are Ray {catalog.RAY_VERSION} on "
                f"{catalog.PYTHON_TAG}; use rayproject/ray:{catalog.RAY_VERSION}-{catalog.PYTHON_TAG}-cpu"]
    return []


def toleration_problems(where: str, tolerations: list[dict]) -> list[str]:
    """What the API server's ValidateTolerations refuses (the pod is never created): a key
    that is no qualified name, a value with operator Exists."""
    problems = []
    for i, toleration in enumerate(tolerations):
        problems += [f"{where}.tolerations[{i}].key: {p}" for p in crd.qualified_name_problems(toleration["key"])]
        if toleration.get("operator") == "Exists" and toleration.get("value"):
            problems.append(f"{where}.tolerations[{i}].value: must be empty with operator Exists "
                            "(Kubernetes refuses it); drop the value, or use operator: Equal")
    return problems


STOCK_IMAGE_REPOSITORIES = ("rayproject/ray", "docker.io/rayproject/ray", "rayproject/ray-ml")


def is_stock_image(image: str) -> bool:
    """One of Ray's own images: Ray and its dependencies, none of the jobs' packages."""
    return image.split("@")[0].rsplit(":", 1)[0] in STOCK_IMAGE_REPOSITORIES


INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
# What a node keeps from its pods: the kubelet's reservation grows with the pods a node may
# hold (EKS: 255 MiB + 11 MiB per pod), plus eviction headroom and the DaemonSets (CNI,
# kube-proxy, the NVIDIA device plugin, log agents). On EKS a c5.4xlarge has ~28.0 of its
# 32 GiB allocatable, a g5.12xlarge ~178 of 192: a pod asking for more than 85% of the
# type's memory, or for all its vCPUs but one, waits Pending for ever, or until one
# DaemonSet more takes the rest.
POD_MEMORY_SHARE = 0.85
NODE_RESERVED_VCPUS = 1
# What shares the head's node with the head's Ray container: the operator's autoscaler
# sidecar (KubeRay v1.7.0 common/pod.go BuildAutoscalerContainer: 500m, 512Mi), the kit's
# watchdog sidecar (watchdog.RESOURCES: 100m, 512Mi) and `make run`'s submitter pod, which
# runs where the head may (rayjob.SUBMITTER_RESOURCES: 200m, 512Mi): (vCPUs, GiB).
HEAD_NEIGHBOURS = (0.8, 1.5)
# Local disk a pod asks for, (request, limit), by whether it has GPUs: a job's first pip
# install writes ~7.4 GB on a GPU pod (CUDA packages, torch's wheels), ~1.5 GB on a CPU one
# (CPU torch); Ray's logs and spilled objects beside them.
EPHEMERAL = {True: ("12Gi", "40Gi"), False: ("4Gi", "20Gi")}


def instance_type_of(node: dict) -> str | None:
    """The catalog instance type a group's node selector names, or None (another selector,
    or a type the catalog does not know)."""
    names = [node["node_selector"][k] for k in INSTANCE_TYPE_LABELS if k in node["node_selector"]]
    return names[0] if names and names[0] in catalog.INSTANCE_TYPES else None


def room(spec) -> tuple[int, int]:
    """(vCPUs, GiB) of a node of the type that pods may ask for: the rest is the kubelet's
    and the DaemonSets'."""
    return spec.vcpus - NODE_RESERVED_VCPUS, int(spec.memory_gib * POD_MEMORY_SHARE)


def pods_per_node(pod: dict, spec) -> int:
    """How many of these pods one node of the type holds, with fit_problems' room left."""
    cpus, memory = room(spec)
    fits = [cpus // pod["cpus"], memory // pod["memory_gb"]]
    if pod["gpus"]:
        fits.append(spec.gpus // pod["gpus"])
    return max(1, min(fits))


def node_groups(values: dict) -> list[dict]:
    """Per group: the nodes its pods need at min and at max workers, and the instance type
    its selector names (None: not priceable). What the node groups bill while the cluster
    runs: a node the pods fill is a node the group keeps (one GPU or big pod per node)."""
    groups = []
    for name, node, low, high in [(HEAD_TYPE, values["head"], 1, 1)] + [
            (n, w, w["min_workers"], w["max_workers"]) for n, w in values["workers"].items()]:
        kind = instance_type_of(node)
        per = pods_per_node(node["pod"], catalog.INSTANCE_TYPES[kind]) if kind else 1
        groups.append({"name": name, "instance_type": kind, "pods": (low, high),
                       "nodes": (-(-low // per), -(-high // per))})
    return groups


def fit_problems(where: str, node: dict, beside: tuple[float, float] | None = None) -> list[str]:
    """The pod fits the instance type its node selector names (one the catalog knows),
    with room left for the kubelet and the DaemonSets, and for what runs beside it there
    (`beside`: vCPUs, GiB; the head's sidecars); nothing is said of other selectors."""
    name, pod = instance_type_of(node), node["pod"]
    if name is None:
        return []
    spec = catalog.INSTANCE_TYPES[name]
    cpus, memory = room(spec)
    extra_cpus, extra_memory = beside or (0, 0)
    cpus, memory = int(cpus - extra_cpus), int(memory - extra_memory)
    also = (f" and the {extra_cpus:g} vCPUs, {extra_memory:g} GiB of its sidecars and make run's "
            "submitter") if beside else ""
    problems = []
    if pod["gpus"] > spec.gpus:
        problems.append(f"{where}.pod.gpus: {pod['gpus']} GPU(s), but a {name} has {spec.gpus}; "
                        "ask for at most that, or select a larger type")
    if pod["cpus"] > cpus:
        problems.append(f"{where}.pod.cpus: {pod['cpus']} of a {name}'s {spec.vcpus} vCPUs leaves "
                        f"none for the kubelet and DaemonSets{also}; ask for at most {cpus}")
    if pod["memory_gb"] > memory:
        problems.append(f"{where}.pod.memory_gb: {pod['memory_gb']} GiB of a {name}'s "
                        f"{spec.memory_gib} GiB leaves too little for the kubelet and DaemonSets "
                        f"(about 85% is allocatable){also}; ask for at most {memory}")
    return problems


def template_context(cluster: str, values: dict) -> dict:
    head = values["head"]
    kube = values["kubernetes"]
    return {
        "namespace": kube["namespace"],
        "service_account": kube["service_account"],
        "image_pull_secrets": [{"name": s} for s in kube["image_pull_secrets"]],
        "resource_labels": MANAGED_BY | {"raykit.dev/cluster": values["cluster_name"]},
        "pod_labels": MANAGED_BY,
        "ray_version": catalog.RAY_VERSION,
        "idle_timeout_s": values["idle_timeout_minutes"] * 60,
        # a coordinating head offers Ray no CPU: no task or training worker lands there
        "head": group(values, head, placement.node_labels(
                    "head", head["pod"]["gpus"] if head["role"] == "train" else 0, head["preprocess"]),
                    {"CPU": "0"} if head["role"] == "coordinate" else {}, is_head=True)
                | {"sidecars": [watchdog.container(values, DASHBOARD_PORT)]},  # always: it also ends jobs past TIMEOUT
        "workers": [
            {"name": name, "min_workers": w["min_workers"], "max_workers": w["max_workers"]}
            | group(values, w, placement.node_labels(
                name, w["pod"]["gpus"] if w["role"] == "train" else 0, w["role"] == "preprocess"),
                {placement.type_resource(name): "1"})
            for name, w in values["workers"].items()
        ],
    }


def group(values: dict, node: dict, labels: dict, resources: dict | None = None,
          is_head: bool = False) -> dict:
    """One group's pod, as the template lays it out."""
    pod = node["pod"]
    container = {"cpu": str(pod["cpus"]), "memory": f"{pod['memory_gb']}Gi"}
    if pod["gpus"]:
        container["nvidia.com/gpu"] = str(pod["gpus"])
    claims = [{"name": f"data-{i}", "persistentVolumeClaim": {"claimName": v["claim"], "readOnly": v["read_only"]}}
              for i, v in enumerate(values["volumes"])]
    return {
        "labels": labels,
        "resources": resources or {},
        "image": values["images"]["gpu" if pod["gpus"] else "cpu"],
        "sidecars": [],  # containers beside Ray's (the head's: the watchdog)
        # every pip on a pod without a GPU (Ray's runtime_env installs) takes CPU torch; the
        # head's job manager waits as long for a job's first install as the install may take
        "env": ([] if pod["gpus"] else [{"name": k, "value": v} for k, v in node_packages.CPU_PIP_ENV.items()])
        + ([{"name": k, "value": v} for k, v in JOB_START_ENV.items()] if is_head else []),
        # requests = limits for CPU and memory (Guaranteed QoS); local disk asked for beside
        # them (it does not change the class): a GPU pod writes ~4.4 GB of CUDA packages and
        # ~3 GB of wheels at a job's first install, which a 20 GiB node root (EKS managed
        # node groups', Karpenter's default) or a LimitRange's default limit would evict
        "container_requests": container | {"ephemeral-storage": EPHEMERAL[bool(pod["gpus"])][0]},
        "container_limits": container | {"ephemeral-storage": EPHEMERAL[bool(pod["gpus"])][1]},
        "node_selector": node["node_selector"],
        "tolerations": node["tolerations"],
        # only the head's autoscaler talks to the Kubernetes API
        "service_account_token": is_head,
        "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{pod['shm_gb']}Gi"}}]
                   + claims,
        "volume_mounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
                         + [{"name": f"data-{i}", "mountPath": v["mount"], "readOnly": v["read_only"]}
                            for i, v in enumerate(values["volumes"])],
    }


def config_problems(config: dict) -> list[str]:
    """The pinned KubeRay release's CRD schema, then the operator's rules."""
    return crd.problems(config)


def companion_files(cluster: str, values: dict) -> dict[str, str]:
    """What the namespace's admin applies once: the Role the kit's users need (role_for),
    and the watchdog's right to delete this RayCluster (watchdog.rbac)."""
    return {"kubectl-role.yaml": "# The Role `make` needs in the namespace (scripts/providers/kuberay/'s "
            "role_for):\n# bind it to the users or CI identity that run the kit.\n"
            + yaml.safe_dump(role_for(values), sort_keys=False)
            + "---\n# The head's watchdog may delete this RayCluster after autostop_minutes with no "
            "job\n# (scripts/providers/kuberay/watchdog.py): a Role, bound to the head pod's account.\n"
            + yaml.safe_dump_all(watchdog.rbac(values, MANAGED_BY), sort_keys=False)}


def plan(values: dict, config: dict) -> list[str]:
    kube = values["kubernetes"]
    lines = [f"a RayCluster '{values['cluster_name']}' in namespace {kube['namespace']} of "
             f"{kube['context'] or 'kubectl’s current context'}; the pods run on the node groups "
             "their selectors match (those bill, not the kit)"]
    minutes = values["autostop_minutes"]
    return lines + pod_lines(values) + [
        "  autostop: " + (f"the head's watchdog deletes it (and so every pod) after {minutes} min "
                          "with no job" if minutes else "off (autostop_minutes: 0): it runs until `make down`")]


def pod_lines(values: dict) -> list[str]:
    """Each group's pods: how many, what each asks for, and where they may run."""
    lines = []
    for name, node, count in [(HEAD_TYPE, values["head"], "1")] + [
            (n, w, f"{w['min_workers']}-{w['max_workers']}") for n, w in values["workers"].items()]:
        pod = node["pod"]
        where = ", ".join(f"{k}={v}" for k, v in node["node_selector"].items()) or "any node"
        lines.append(f"  {name}: {count} pod(s) x {pod['cpus']} CPUs, {pod['memory_gb']} GiB"
                     + (f", {pod['gpus']} GPU(s)" if pod["gpus"] else "")
                     + f" ({node['role']}) on {where}")
    return lines


def run_job(built, job: str, args: list[str], timeout_s: float | None,
            verbose: bool, env_vars: dict[str, str]) -> tuple[int, dict | None]:
    """`make run` as a RayJob (rayjob.py): the operator deletes its cluster."""
    refused_packages(built.values, job)
    with state.lock(built.cluster):
        # the RayJob's cluster runs no watchdog (watchdog.without): its RoleBinding is not asked for
        for line in preflight(built.values | {"autostop_minutes": 0})[1]:
            print(line, flush=True)
        return rayjob.run(built, job, args, timeout_s or DEFAULT_JOB_TIMEOUT_S, verbose,
                          job_packages(built.values), JOB_FILES, env_vars)


def run_plan(built, job: str, args: list[str], timeout_s: float | None) -> list[str]:
    """The RayJob `make run` would create: its files, limits and images, then its cluster."""
    refused_packages(built.values, job)
    return rayjob.plan(built, job, args, timeout_s or DEFAULT_JOB_TIMEOUT_S, job_packages(built.values),
                       JOB_FILES) + pod_lines(built.values)


def job_packages(values: dict) -> JobPackages:
    """Baked images hold the jobs' packages: no pip runtime_env (an air-gapped cluster has no
    index to install from); stock ones install them (JOB_PACKAGES)."""
    return JobPackages.BAKED if values["images"]["job_packages"] == "baked" else JOB_PACKAGES


def refused_packages(values: dict, job: str) -> None:
    problems = package_problems(job, values["images"]["job_packages"])
    if problems:
        raise KitError("; ".join(problems))


def images_to_bake(values: dict) -> dict[str, str]:
    """The images the pods run (gpu if a pod has GPUs, cpu if one has none), where the
    values say they hold the jobs' packages."""
    images = values["images"]
    if images["job_packages"] != "baked":
        raise KitError("images.job_packages is install: the pods run stock images and pip-install "
                       "each job's packages; to bake them, set job_packages: baked and name your "
                       "registry's tags in images.gpu/images.cpu")
    pods = [values["head"]["pod"]] + [w["pod"] for w in values["workers"].values()]
    return {kind: images[kind] for kind, used in (("gpu", any(p["gpus"] for p in pods)),
                                                  ("cpu", any(not p["gpus"] for p in pods))) if used}


def job_problems(record: dict, job: str, args: list[str]) -> list[str]:
    """A job whose packages no runtime_env can install, on stock images. (The pods read
    what their service account may, e.g. S3 through EKS Pod Identity: the kit cannot see
    that from here, so it refuses no data.)"""
    return package_problems(job, record.get("job_packages", "install"))


def package_problems(job: str, job_packages: str) -> list[str]:
    """Ray's pip runtime_env installs a job's requirements.txt over any image; packages
    that install only without their dependencies (requirements-nodeps.txt) need an image
    that holds them, or the job dies of a ModuleNotFoundError after the pods have billed."""
    if job_packages == "baked" or not node_packages.needs_built_image(job_dir(job)):
        return []
    return [f"JOB={job}: its {node_packages.NODEPS_FILE} installs only with --no-deps, which Ray's "
            "runtime_env cannot do on the stock images (images.job_packages: install); build the "
            "kit's images (`make image`), name them in images.gpu/images.cpu and set "
            "images.job_packages: baked"]


# --- preflight ----------------------------------------------------------------------

def preflight(values: dict, avoid_zones: tuple = ()) -> tuple[dict, list[str]]:
    """Read-only, and with no more rights than the kit's Role (role_for): the API server
    answers, its KubeRay knows every field the kit renders (>= MIN_KUBERAY_VERSION: read
    from the API's own schema, `kubectl explain`, not from the cluster-scoped CRD), the
    namespace exists (where this identity may see namespaces), and it may create
    RayClusters there."""
    where = target(values)
    version = run_kubectl(where, "version", "-o", "json", check=False)
    if version.returncode != 0 and "localhost:8080" in version.stderr + version.stdout:
        # kubectl found no kubeconfig (or no current context) and fell back to its default
        raise KitError("kubectl has no cluster to talk to (no kubeconfig or no current context: "
                       "it tried localhost:8080); `aws eks update-kubeconfig --name <cluster>`, or "
                       "set kubernetes.context to one of `kubectl config get-contexts`")
    if version.returncode != 0:
        raise KitError(f"kubectl cannot reach the cluster: {kubectl_error(version)}; check "
                       "kubernetes.context and `kubectl cluster-info`")
    server = (json_object(version.stdout, "kubectl version -o json").get("serverVersion") or {}).get("gitVersion", "?")
    for field, since, what in crd.VERSIONED_FIELDS:
        known = run_kubectl(where, "explain", field, f"--api-version={crd.API_VERSION}", check=False)
        if "doesn't have a resource type" in known.stderr:
            raise KitError(f"the cluster has no {field.split('.')[0]} resource; install the KubeRay "
                           f"operator {crd.KUBERAY_VERSION} (docs/kubernetes.md)")
        if known.returncode != 0 and "does not exist" not in known.stderr:
            # not an answer about the field (the API's schema not served yet, a time-out)
            raise KitError(f"could not read the API's schema of {field.split('.')[0]} (`kubectl "
                           f"explain {field}`): {kubectl_error(known)}; try again, or check "
                           "`kubectl get --raw /openapi/v2 | head -c 100`")
        if known.returncode != 0:
            raise KitError(f"the installed KubeRay is older than {since}: it has no "
                           f"{field.split('.', 1)[1]} ({what}); the kit needs KubeRay >= "
                           f"{crd.MIN_KUBERAY_VERSION}: upgrade the operator to {crd.KUBERAY_VERSION} "
                           "(docs/kubernetes.md)")
    namespace = run_kubectl(where, "get", "namespace", where["namespace"], "-o", "name", check=False)
    if namespace.returncode != 0 and "NotFound" in namespace.stderr:
        raise KitError(f"kubernetes.namespace: {where['namespace']} does not exist; "
                       f"`kubectl create namespace {where['namespace']}` or name another")
    require_rights(where, ["rayclusters.ray.io"])  # `make run` checks a RayJob's (rayjob.py)
    if values["autostop_minutes"]:
        require_watchdog_binding(values)
    return values, [f"preflight: Kubernetes {server}, KubeRay >= {crd.MIN_KUBERAY_VERSION}, "
                    f"namespace {where['namespace']}"]


def require_watchdog_binding(values: dict) -> None:
    """The watchdog's RoleBinding is in place and binds its Role to the head pod's account:
    without it, or with a stale one (another account, another Role: it exists by name and
    grants nothing), the watchdog's delete is refused on an idle cluster, which then bills
    until `make down`."""
    name, namespace = watchdog.rbac_name(values), values["kubernetes"]["namespace"]
    found = run_kubectl(target(values), "get", "rolebinding", name, "-o", "json", check=False)
    said = None
    if found.returncode != 0:
        said = "does not exist" if missing(found) else f"cannot be read ({kubectl_error(found)})"
    else:
        binding = json_object(found.stdout, f"kubectl get rolebinding {name}")
        wanted = {"kind": "ServiceAccount", "name": watchdog.head_account(values), "namespace": namespace}
        subjects = binding.get("subjects") if isinstance(binding.get("subjects"), list) else []
        role = binding.get("roleRef") if isinstance(binding.get("roleRef"), dict) else {}
        if (role.get("kind"), role.get("name")) != ("Role", name):
            said = f"binds {short(str(role.get('kind')), 20)} {short(str(role.get('name')), 60)}, not Role {name}"
        elif not any(isinstance(s, dict) and {k: s.get(k) for k in wanted} == wanted for s in subjects):
            said = (f"does not bind the head pod's account (ServiceAccount {wanted['name']}; "
                    "a binding left from another cluster or account)")
    if said:
        raise KitError(f"autostop_minutes: {values['autostop_minutes']} needs the watchdog's RoleBinding "
                       f"{name} in namespace {namespace}, which {said}: the "
                       f"namespace's admin applies build/clusters/<CLUSTER>.kubectl-role.yaml "
                       "(`make render`) once; or set autostop_minutes: 0")


def role_for(values: dict) -> dict:
    """A namespaced Role with what the kit's kubectl calls need, and nothing more: the
    RayCluster and RayJob of this values file, their pods (read, logs, port-forward, exec
    for `make attach`), events, the head service, the submitter Job, the job-files
    ConfigMap and Ray's token Secret by name. Discovery, `kubectl version` and `auth
    can-i` need no Role. Bind it to the users or CI identity that run the kit."""
    name = values["cluster_name"]
    rule = lambda groups, resources, verbs, names=None: (  # noqa: E731
        {"apiGroups": groups, "resources": resources, "verbs": verbs} | ({"resourceNames": names} if names else {}))
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": f"raykit-{name}", "namespace": values["kubernetes"]["namespace"],
                     "labels": MANAGED_BY},
        "rules": [
            rule(["ray.io"], ["rayclusters", "rayjobs"], ["create"]),
            rule(["ray.io"], ["rayclusters", "rayjobs"], ["get", "delete"], [name]),
            rule([""], ["pods"], ["get", "list"]),
            rule([""], ["events"], ["list"]),
            rule([""], ["pods/log"], ["get"]),
            rule([""], ["pods/portforward", "pods/exec"], ["create"]),
            rule([""], ["services"], ["get"], [f"{name}-head-svc"]),
            rule([""], ["secrets"], ["get"], [name]),
            rule([""], ["configmaps"], ["create"]),
            rule([""], ["configmaps"], ["get", "patch", "delete"], [f"{name}-job-files"]),
            rule(["batch"], ["jobs"], ["get"], [name]),
            rule(["rbac.authorization.k8s.io"], ["rolebindings"], ["get"], [watchdog.rbac_name(values)]),
        ],
    }


# --- lifecycle ----------------------------------------------------------------------

def up(cluster: str, config_text: str, values: dict) -> dict:
    """Record, apply the RayCluster with a launch id of its own, wait until its head and
    min_workers pods are Ready. On any failure, Ctrl-C included, delete it again."""
    record = target(values) | {
        "cluster": cluster, "provider": NAME, "name": values["cluster_name"],
        "launch_id": secrets.token_hex(8),
        "expected_pods": {HEAD_TYPE: 1} | {n: w["min_workers"] for n, w in values["workers"].items()},
        "ready_timeout_minutes": values["ready_timeout_minutes"],
        "job_packages": values["images"]["job_packages"],
        "watchdog_minutes": values["autostop_minutes"],
    }
    resource = yaml.safe_load(config_text)
    resource["metadata"]["labels"][LAUNCH_ID] = record["launch_id"]
    if exists(record, "raycluster", record["name"]):
        raise KitError(f"a RayCluster '{record['name']}' already exists in namespace "
                       f"{record['namespace']}, not launched from this checkout; give cluster_name "
                       "another name")
    state.save(cluster, record, json.dumps(resource, indent=2) + "\n")
    try:
        run_kubectl(record, "apply", "-f", "-", stdin=json.dumps(resource))
        print(f"applied RayCluster {record['name']} in namespace {record['namespace']}", flush=True)
        wait_until_ready(record)
    except BaseException:
        with signals_deferred():
            try:
                print(down(cluster, record), flush=True)
            except KitError as e:  # the first error is the one to report; say what stays
                print(f"could not delete RayCluster {record['name']}: {e}", flush=True)
        raise
    return record


def group_of(pod: dict) -> str:
    labels = pod.get("metadata", {}).get("labels", {})
    return HEAD_TYPE if labels.get("ray.io/node-type") == "head" else labels.get("ray.io/group", "?")


def ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions", []))


# a container waiting for one of these needs someone's help (the kubelet's back-off states,
# not a first ErrImagePull, which a registry's hiccup can cause)
STUCK = ("ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CrashLoopBackOff")


def stuck(pod: dict) -> str | None:
    """Why a pod cannot start without someone's help, or None."""
    for status in pod.get("status", {}).get("containerStatuses", []):
        reason = status.get("state", {}).get("waiting", {}).get("reason")
        if reason in STUCK:
            return reason
    return None


def ready_timeout_s(record: dict) -> float:
    """ready_timeout_minutes; RAYKIT_READY_TIMEOUT_S (tests) shortens it."""
    text = os.environ.get("RAYKIT_READY_TIMEOUT_S", "")
    return float(text) if text.isdigit() else record["ready_timeout_minutes"] * 60


# Warning events KubeRay records on a RayCluster whose pods it cannot create: no wait helps
def is_operator_refusal(reason: str) -> bool:
    """A Warning the operator puts on a RayCluster when it cannot build it, and retries
    for ever (KubeRay v1.6/v1.7, utils/constant.go): a failed create (head or worker pod,
    Service, ServiceAccount, Role, PVC...), a spec or metadata it rejects, an autoscaler
    ServiceAccount the values name and nobody made."""
    return reason.startswith(("FailedToCreate", "Invalid")) or reason == "AutoscalerServiceAccountNotFound"


def refusal_hint(record: dict, reason: str, message: str) -> str:
    """The fix for the refusals a user can make, in the kit's words."""
    if "PodSecurity" in message:
        return ("; the namespace's Pod Security admission refuses Ray's pods: label it "
                "pod-security.kubernetes.io/enforce=baseline (docs/kubernetes.md)")
    if reason == "FailedToCreateService" and "already exists" in message:
        return (f"; a Service of that name is another's (a RayJob or RayService named {record['name']} "
                "in the namespace?): delete it, or change cluster_name")
    if reason == "AutoscalerServiceAccountNotFound":
        return (f"; kubernetes.service_account: create that ServiceAccount in namespace "
                f"{record['namespace']}, or set it to null")
    return ""


def operator_refusal(record: dict, uid: str | None) -> str | None:
    """Why the operator cannot build the cluster (its Warning event on this RayCluster: an
    event of an earlier one of the same name, which lives an hour, has another uid), or None."""
    for event in get_json(record, "events").get("items", []):
        about = event.get("involvedObject") if isinstance(event.get("involvedObject"), dict) else {}
        reason, message = str(event.get("reason", "")), str(event.get("message", ""))
        if (about.get("name") == record["name"] and about.get("kind") == "RayCluster"
                and (uid is None or about.get("uid") in (None, uid))
                and event.get("type") == "Warning" and is_operator_refusal(reason)):
            return f"{short(reason, 60)[1:-1]}: {short(message, 240)[1:-1]}{refusal_hint(record, reason, message)}"
    return None


def wait_until_ready(record: dict) -> None:
    deadline = time.monotonic() + ready_timeout_s(record)
    shown = None
    cluster = ours(record)
    uid = ((cluster or {}).get("metadata") or {}).get("uid")
    while True:
        refused = operator_refusal(record, uid)  # fail fast: not after ready_timeout_minutes
        if refused:
            raise KitError(f"RayCluster {record['name']}: the operator cannot create it: {refused}")
        current = pods(record)
        counts = {g: sum(1 for p in current if group_of(p) == g and ready(p)) for g in record["expected_pods"]}
        line = "pods ready: " + ", ".join(f"{g} {counts[g]}/{n}" for g, n in record["expected_pods"].items())
        if line != shown:
            print(line, flush=True)
            shown = line
        if all(counts[g] >= n for g, n in record["expected_pods"].items()):
            return
        blocked = [(p["metadata"]["name"], stuck(p)) for p in current if stuck(p)]
        if blocked or time.monotonic() > deadline:
            print_events(record, [p["metadata"]["name"] for p in current])
            why = (f"pod {blocked[0][0]} is stuck in {blocked[0][1]}" if blocked else
                   f"not ready within {record['ready_timeout_minutes']} min")
            raise KitError(f"RayCluster {record['name']}: {why}; the pods' events are above "
                           "(`kubectl describe pod` says more)")
        time.sleep(poll_s())


def ours(record: dict) -> dict | None:
    """The RayCluster if it exists and carries the record's launch id; None if it is gone.
    One of the same name with another launch id is someone else's: refused."""
    result = run_kubectl(record, "get", "raycluster", record["name"], "-o", "json", check=False)
    if result.returncode != 0:
        if missing(result):
            return None
        raise KitError(f"could not read RayCluster {record['name']}: {kubectl_error(result)}")
    found = json_object(result.stdout, f"kubectl get raycluster {record['name']} -o json")
    if (found.get("metadata") or {}).get("labels", {}).get(LAUNCH_ID) != record["launch_id"]:
        raise KitError(f"RayCluster {record['name']} in namespace {record['namespace']} is not the one "
                       "this checkout launched (another launch id); it is left alone")
    return found


def down(cluster: str, record: dict | None, purge: bool = False) -> str:
    if record is None:
        return f"cluster '{cluster}' has no record: nothing of it is the kit's to delete"
    if ours(record) is not None:
        kubectl_delete(record, "raycluster", record["name"])
    wait_until_no_pods(record, record["name"], f"RayCluster {record['name']}")
    state.forget(cluster)
    return (f"RayCluster {record['name']} deleted from namespace {record['namespace']}; none of its pods "
            "is left; their nodes bill until your node autoscaler removes them (docs/kubernetes.md)")


def same_cluster(values: dict, record: dict) -> bool:
    """A RayCluster is its name in its namespace (in whatever context: the kit cannot
    know which a values file's cluster will be launched in, so it counts as the same)."""
    return record["provider"] == NAME and (values["kubernetes"]["namespace"], values["cluster_name"]) \
        == (record["namespace"], record["name"])


def forget_stale(cluster: str, record: dict) -> list[str]:
    """Nothing of a stopped cluster is left to delete: only its record."""
    state.forget(cluster)
    return []


def is_running(record: dict) -> bool:
    """Whether the RayCluster exists; where the API cannot be asked, it stands."""
    try:
        result = run_kubectl(record, "get", "raycluster", record["name"], "-o", "name", check=False)
    except KitError:
        return True
    return result.returncode == 0 or not missing(result)


def require_running(record: dict) -> None:
    if not is_running(record):
        raise KitError(gone(record))


def gone(record: dict) -> str:
    """The line for a recorded RayCluster that no longer exists."""
    if record.get("watchdog_minutes"):
        return (f"RayCluster {record['name']} is gone: after {record['watchdog_minutes']} min with no "
                f"job its watchdog deletes it (or someone did); `make down CLUSTER={record['cluster']}` "
                f"forgets it, then `make up` starts afresh")
    return not_running(record["cluster"])


def head_pod(record: dict) -> str:
    require_running(record)
    heads = [p["metadata"]["name"] for p in pods(record)
             if group_of(p) == HEAD_TYPE and p.get("status", {}).get("phase") == "Running"]
    if not heads:
        raise KitError(f"RayCluster {record['name']} has no running head pod; `make status` shows its pods")
    return heads[0]


def status(record: dict) -> int:
    require_running(record)
    for args in (("get", "raycluster", record["name"]),
                 ("get", "pods", "-l", f"ray.io/cluster={record['name']}", "-o", "wide")):
        result = run_kubectl(record, *args)
        print(result.stdout, end="", flush=True)
    return 0


def dashboard(record: dict) -> int:
    with job_address(record) as (address, _, _):
        return tunnel.hold_open(record["cluster"], address, "kubectl port-forward to the head")


def attach(record: dict) -> int:
    return subprocess.call(kubectl(record, "exec", "-it", head_pod(record), "-c", "ray-head", "--", "bash"))


def monitor(record: dict, follow: bool) -> int:
    # KubeRay runs the autoscaler as a container of its own beside the head's
    return subprocess.call(kubectl(record, "logs", head_pod(record), "-c", "autoscaler",
                                   *(["--follow"] if follow else ["--tail=100"])))


def auth_token(record: dict) -> str:
    """Ray's token, which the operator keeps in the Secret named after the cluster."""
    secret = get_json(record, "secret", record["name"])
    try:
        return base64.b64decode(secret["data"]["auth_token"], validate=True).decode()
    except (KeyError, ValueError, TypeError):
        raise KitError(f"Secret {record['name']} holds no auth_token; is the operator "
                       f">= {crd.MIN_KUBERAY_VERSION} with authOptions.mode token?") from None


@contextmanager
def job_address(record: dict):
    """`kubectl port-forward` to the head service's dashboard while we use it, with Ray's
    token from the operator's Secret."""
    require_running(record)
    token = auth_token(record)

    def command(port: int) -> list[str]:
        return kubectl(record, "port-forward", f"service/{record['name']}-head-svc",
                       f"{port}:{DASHBOARD_PORT}", "--address", "127.0.0.1")

    with tunnel.forwarded(command, "kubectl port-forward", "`make status` shows whether the head is up") as port:
        yield f"http://127.0.0.1:{port}", "python", token
