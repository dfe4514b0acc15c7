"""`make up` on KubeRay: the read-only preflight, the RayCluster applied with a launch id of
its own, and the wait until its pods are Ready (failing fast on what no wait mends: a pod
stuck in a back-off, a refusal the operator records)."""

import json
import os
import secrets
import time

import yaml

from scripts.core import state
from scripts.core.errors import KitError, short
from scripts.core.signals import signals_deferred
from scripts.node import autostop
from scripts.providers.kuberay import crd, watchdog
from scripts.providers.kuberay.kubectl import (
    exists,
    get_json,
    json_object,
    kubectl_error,
    missing,
    pods,
    poll_s,
    print_events,
    pinned_target,
    require_rights,
    run_kubectl,
    target,
)
from scripts.providers.kuberay.names import HEAD_TYPE, LAUNCH_ID, NAME
from scripts.providers.kuberay.teardown import down, ours


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


def up(cluster: str, config_text: str, values: dict) -> dict:
    """Record, apply the RayCluster with a launch id of its own, wait until its head and
    min_workers pods are Ready. On any failure, Ctrl-C included, delete it again."""
    record = pinned_target(values) | {
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
        if record["watchdog_minutes"]:
            print(watchdog_said(record, wait_s=watchdog_wait_s()), flush=True)
    except BaseException:
        with signals_deferred():
            try:
                print(down(cluster, record), flush=True)
            except KitError as e:  # the first error is the one to report; say what stays
                print(f"could not delete RayCluster {record['name']}: {e}", flush=True)
        raise
    return record


WATCHDOG_WAIT_S = 60  # for the watchdog's first line: its start, then one dry-run DELETE


def watchdog_wait_s() -> float:
    text = os.environ.get("RAYKIT_WATCHDOG_WAIT_S", "")  # tests shorten it
    return float(text) if text.isdigit() else WATCHDOG_WAIT_S


def watchdog_said(record: dict, wait_s: float = 0) -> str:
    """What the head's watchdog found at its start: whether its DELETE of the cluster
    would go through (autostop.delete_right's dry run), as a line for `up` and `status`;
    a refusal is a warning: after autostop_minutes with no job the cluster would bill on."""
    deadline = time.monotonic() + wait_s
    while True:
        heads = [p["metadata"]["name"] for p in pods(record) if group_of(p) == HEAD_TYPE]
        log = run_kubectl(record, "logs", heads[0], "-c", watchdog.NAME, "--tail=200",
                          check=False).stdout if heads else ""
        said = [line for line in log.splitlines() if line.startswith((autostop.RIGHT_OK, autostop.RIGHT_REFUSED))]
        if said:
            return ("warning: the watchdog " if said[-1].startswith(autostop.RIGHT_REFUSED) else
                    "the watchdog ") + said[-1].removeprefix("autostop: ")
        if time.monotonic() >= deadline:
            return ("the watchdog has not said yet whether it may delete the cluster (its first "
                    "line, a dry-run DELETE); `make status` shows it")
        time.sleep(poll_s())


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
    """Why a pod cannot start without someone's help, or None. KubeRay gives every worker
    a `wait-gcs-ready` init container with the worker's own image (v1.7.0 common/pod.go):
    an image that cannot be pulled shows there first."""
    status = pod.get("status", {})
    for status in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
        reason = status.get("state", {}).get("waiting", {}).get("reason")
        if reason in STUCK:
            return reason
    return None


def gpu_never_came(events: list[dict]) -> str:
    """What to say where pods waited for GPUs no node offered: a node autoscaler may have
    launched a GPU node whose GPUs never registered (no NVIDIA device plugin), and
    Karpenter keeps such a node, uninitialised and billing (aws/karpenter-provider-aws#1914)."""
    if not any("nvidia.com/gpu" in str(e.get("message", "")) or e.get("reason") == "Nominated" for e in events):
        return ""
    return ("; no node offered the GPUs asked for: without a running NVIDIA device plugin a GPU node never "
            "advertises them, and Karpenter keeps a node it launched for them, billing: `kubectl get "
            "nodeclaims` shows it, deleting its NodeClaim ends it (docs/kubernetes.md)")


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


# Without an operator reconciling the namespace a RayCluster gets no status and no pod, a
# RayJob no status: said within this, not after ready_timeout_minutes (or never, for a RayJob)
NO_OPERATOR_S = 120


def no_operator_s() -> float:
    text = os.environ.get("RAYKIT_NO_OPERATOR_S", "")  # tests shorten it
    return float(text) if text.isdigit() else NO_OPERATOR_S


def wait_until_ready(record: dict) -> None:
    started = time.monotonic()
    deadline = started + ready_timeout_s(record)
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
        if not current and time.monotonic() - started > no_operator_s() and not (ours(record) or {}).get("status"):
            raise KitError(f"RayCluster {record['name']} has no status and no pod after {no_operator_s():g} s: "
                           f"no KubeRay operator reconciles RayClusters in namespace {record['namespace']} "
                           "(not installed, crash-looping, or watching other namespaces: its "
                           "watchNamespace); `kubectl get pods -A -l app.kubernetes.io/name=kuberay-operator`")
        blocked = [(p["metadata"]["name"], stuck(p)) for p in current if stuck(p)]
        if blocked or time.monotonic() > deadline:
            events = print_events(record, [p["metadata"]["name"] for p in current])
            why = (f"pod {blocked[0][0]} is stuck in {blocked[0][1]}" if blocked else
                   f"not ready within {record['ready_timeout_minutes']} min")
            raise KitError(f"RayCluster {record['name']}: {why}; the pods' events are above "
                           f"(`kubectl describe pod` says more){gpu_never_came(events)}")
        time.sleep(poll_s())
