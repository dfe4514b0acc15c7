"""The kit's values files, checked: what KubeRay, the API server and the node groups would
refuse later (after the pods bill, or never, leaving a pod Pending), said before anything
is applied; and what the node groups need to hold the pods (node_groups: what they bill)."""

import re

from scripts import catalog
from scripts.core import roles
from scripts.core.errors import short
from scripts.providers.kuberay import crd
from scripts.providers.kuberay.names import HEAD_TYPE


# A volume mounted at one of these, or anywhere under the second kind, hides what the
# image needs there (Ray's images keep Python in /home/ray/anaconda3, Ray's session in /tmp/ray).
SYSTEM_PATHS = ("/", "/home", "/home/ray", "/tmp")


SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root",
                "/run", "/sbin", "/sys", "/usr", "/var", "/home/ray/anaconda3", "/tmp/ray")


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
    # each training worker holds a CPU (raykit.cluster.scaling_config), and a training head
    # that preprocesses needs one more for Ray Data: short of that, the job waits for good
    need = head["pod"]["gpus"] + (1 if head["preprocess"] else 0)
    if head["role"] == "train" and head["pod"]["gpus"] and head["pod"]["cpus"] < need:
        problems.append(f"head.pod.cpus: each of its {head['pod']['gpus']} training worker(s) holds a CPU"
                        + (", and preprocessing needs one more" if head["preprocess"] else "")
                        + f"; set cpus: {need} or more")
    for name, w in workers.items():
        if w["role"] == "train" and w["pod"]["gpus"] < 1:
            problems.append(f"workers.{name}.pod.gpus: a train group needs GPUs; set gpus: 1 or more")
        elif w["role"] == "train" and w["pod"]["cpus"] < w["pod"]["gpus"]:
            problems.append(f"workers.{name}.pod.cpus: each of its {w['pod']['gpus']} training workers "
                            f"holds a CPU; set cpus: {w['pod']['gpus']} or more")
        if w["role"] == "preprocess" and w["pod"]["gpus"]:
            problems.append(f"workers.{name}.pod.gpus: a preprocess group trains nothing, and its "
                            "GPUs would idle; set gpus: 0, or role: train")
        elif w["role"] == "preprocess" and instance_type_of(w) and catalog.INSTANCE_TYPES[instance_type_of(w)].gpus:
            # as the AWS side refuses it: a node autoscaler would buy GPU nodes for CPU pods
            itype = instance_type_of(w)
            problems.append(f"workers.{name}.node_selector: {itype} has {catalog.INSTANCE_TYPES[itype].gpus} "
                            "GPU(s), but the group has role preprocess (CPU-only): its pods would take GPU "
                            "nodes and leave their GPUs idle; select a CPU type such as c5.4xlarge, or set role: train")
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
