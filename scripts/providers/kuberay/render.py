"""Checked values -> what cluster_templates/kuberay.yaml.j2 lays out (the RayCluster's
groups, pods and sidecars), the Role the kit's users need, and the plan `make up DRY_RUN=1`
prints."""

import yaml

from jobs.raykit import placement
from scripts import catalog
from scripts.core import node_packages
from scripts.core.submit import JOB_START_ENV
from scripts.providers.kuberay import watchdog
from scripts.providers.kuberay.kubectl import MANAGED_BY
from scripts.providers.kuberay.names import DASHBOARD_PORT, HEAD_TYPE


SHM_VOLUME = "dshm"  # Ray's object store lives in /dev/shm: the container default is 64 MiB


# Local disk a pod asks for, (request, limit), by whether it has GPUs: a job's first pip
# install writes ~7.4 GB on a GPU pod (CUDA packages, torch's wheels), ~1.5 GB on a CPU one
# (CPU torch); Ray's logs and spilled objects beside them.
EPHEMERAL = {True: ("12Gi", "40Gi"), False: ("4Gi", "20Gi")}

# Node autoscalers consolidate, drift or expire nodes by evicting their pods: the head's
# eviction ends the Ray cluster and its job (no GCS fault tolerance), and a worker's its
# tasks. Ray's autoscaler removes idle workers itself, and their empty nodes then go.
POD_ANNOTATIONS = {"karpenter.sh/do-not-disrupt": "true",
                   "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}

# The operator's autoscaler sidecar, as KubeRay sizes it by default (v1.7.0 common/pod.go:
# 500m, 512Mi), with local disk asked for too: a namespace quota on ephemeral-storage
# refuses a pod any container of which leaves it out (values.HEAD_NEIGHBOURS counts it)
AUTOSCALER_RESOURCES = {kind: {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
                        for kind in ("requests", "limits")}


def template_context(cluster: str, values: dict) -> dict:
    head = values["head"]
    kube = values["kubernetes"]
    return {
        "namespace": kube["namespace"],
        "service_account": kube["service_account"],
        "image_pull_secrets": [{"name": s} for s in kube["image_pull_secrets"]],
        "resource_labels": MANAGED_BY | {"raykit.dev/cluster": values["cluster_name"]},
        "pod_labels": MANAGED_BY | {"raykit.dev/cluster": values["cluster_name"]},
        "pod_annotations": POD_ANNOTATIONS,
        "autoscaler_resources": AUTOSCALER_RESOURCES,
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


def companion_files(cluster: str, values: dict) -> dict[str, str]:
    """What the namespace's admin applies once: the Role the kit's users need (role_for),
    and the watchdog's right to delete this RayCluster (watchdog.rbac)."""
    return {"kubectl-role.yaml": "# The Role `make` needs in the namespace (scripts/providers/kuberay/render.py's "
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


def role_for(values: dict) -> dict:
    """A namespaced Role with what the kit's kubectl calls need, and nothing more: the
    RayCluster and RayJob of this values file, their pods (read, logs, port-forward, exec
    for `make attach`; the submitter Job's pods, by its job-name label), events, the head service, the job-files
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
            rule(["rbac.authorization.k8s.io"], ["rolebindings"], ["get"], [watchdog.rbac_name(values)]),
        ],
    }
