"""`kubectl` for the KubeRay provider (__init__.py) and its RayJob (rayjob.py): the
command line for a cluster's context and namespace, one error line where it fails, and
the few reads both make."""

import os
import shutil
import subprocess
import time

from scripts.core.errors import KitError, short
from scripts.core.inputs import strict_json

POLL_S = 5.0  # between two looks at pods or a RayJob; RAYKIT_KUBECTL_POLL_S overrides it (tests)
DELETE_WAIT_S = 300  # for the operator to remove every pod of a deleted RayCluster
MANAGED_BY = {"app.kubernetes.io/managed-by": "raykit"}  # on everything the kit applies


def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if found is None:
        raise KitError("kubectl is not on PATH; install it (https://kubernetes.io/docs/tasks/tools/) "
                       "and point it at the cluster running the KubeRay operator")
    return found


def kubectl(record: dict, *args: str) -> list[str]:
    """The kubectl command line for the record's (or values') context and namespace. A
    record's context is pinned (pinned_target): checked, once a process, to point still
    at the API server `make up` launched on."""
    check_pinned(record)
    context = ["--context", record["context"]] if record.get("context") else []
    return [kubectl_binary(), *context, "--namespace", record["namespace"], *args]


# --- the context a launch is pinned to ------------------------------------------------
# A record without its context would follow kubectl's current one: a `make down` after
# `kubectl config use-context` read NotFound there, said the cluster was deleted and
# forgot it while it billed on; a `make up` there started a second one.

def kubeconfig() -> dict:
    """kubectl's merged kubeconfig ($KUBECONFIG or ~/.kube/config), as it reads it; no API call."""
    result = subprocess.run([kubectl_binary(), "config", "view", "-o", "json"], capture_output=True,
                            text=True, timeout=60)
    if result.returncode != 0:
        raise KitError(f"`kubectl config view` failed: {kubectl_error(result)}; check $KUBECONFIG")
    return json_object(result.stdout, "kubectl config view -o json")


def context_server(config: dict, context: str) -> str | None:
    """The API server URL `context` points at in `config`; None where it is not there."""
    entries = lambda key: [e for e in config.get(key) or [] if isinstance(e, dict)]  # noqa: E731
    found = [c.get("context") or {} for c in entries("contexts") if c.get("name") == context]
    if not found or not isinstance(found[0], dict):
        return None
    server = [c.get("cluster") or {} for c in entries("clusters") if c.get("name") == found[0].get("cluster")]
    return str(server[0].get("server")) if server and isinstance(server[0], dict) and server[0].get("server") else None


def pinned_target(values: dict) -> dict:
    """target(values) with its context resolved (the values' own, else kubectl's current one,
    read now) and the server it points at: what `up` records and `run` uses throughout, so
    that no later change of kubectl's current context moves the kit to another cluster."""
    where, config = target(values), kubeconfig()
    context = where["context"] or config.get("current-context")
    if not context:
        raise KitError("kubectl has no current context; `kubectl config use-context NAME` (`kubectl "
                       "config get-contexts` lists them), or set kubernetes.context")
    server = context_server(config, context)
    if server is None:
        raise KitError(f"kubernetes.context: {short(context, 80)} is not a context of your kubeconfig "
                       "(`kubectl config get-contexts` lists them)")
    return where | {"context": context, "server": server}


_PINNED_OK: set[tuple[str, str]] = set()


def check_pinned(record: dict) -> None:
    """A record's context still names the API server it was launched on: refused (one line)
    where the context is gone or points elsewhere, before any call reaches another cluster."""
    if not record.get("server") or (record["context"], record["server"]) in _PINNED_OK:
        return
    what = f"'{record['cluster']}'" if record.get("cluster") else "this cluster"
    now = context_server(kubeconfig(), record["context"])
    if now is None:
        raise KitError(f"the kubectl context {short(record['context'], 80)} that {what} was launched "
                       f"in is no longer in your kubeconfig; restore it (for EKS: `aws eks "
                       f"update-kubeconfig --name <cluster> --alias {record['context']}`) and try again")
    if now != record["server"]:
        raise KitError(f"the kubectl context {short(record['context'], 80)} now points at {short(now, 80)}, "
                       f"not {short(record['server'], 80)} where {what} was launched; point it back "
                       "(or restore the kubeconfig) and try again: nothing was done")
    _PINNED_OK.add((record["context"], record["server"]))


def run_kubectl(record: dict, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
    command = kubectl(record, *args)
    try:
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise KitError(f"`kubectl {' '.join(args[:3])}` did not answer within {timeout:g} s; "
                       "is the cluster reachable (`kubectl cluster-info`)?") from None
    if check and result.returncode != 0:
        raise KitError(f"`kubectl {' '.join(args[:3])}` failed: {kubectl_error(result)}")
    return result


def kubectl_error(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout or "").strip().splitlines()
    return short(lines[-1] if lines else f"exit code {result.returncode}", 300)[1:-1]


def get_json(record: dict, *args: str) -> dict:
    return json_object(run_kubectl(record, "get", *args, "-o", "json").stdout, f"kubectl get {' '.join(args)}")


def json_object(text: str, command: str) -> dict:
    """What kubectl printed where JSON was asked for, as an object; anything else (a
    plugin's or a wrapper's text, a list, nothing) is one error line naming the command."""
    try:
        found = strict_json(text)
    except (ValueError, RecursionError):
        found = None
    if not isinstance(found, dict):
        raise KitError(f"`{short(command, 80)[1:-1]}` printed no JSON object where it was asked "
                       f"for one (it printed {short(text.strip()[:60], 70)}); check that `kubectl` "
                       "is kubectl itself, not a wrapper that prints text")
    return found


def target(values: dict) -> dict:
    """What kubectl needs of a values file: its context and namespace."""
    return {"context": values["kubernetes"]["context"], "namespace": values["kubernetes"]["namespace"]}


def missing(result: subprocess.CompletedProcess) -> bool:
    """Whether a failed `kubectl get` says the object does not exist (not: could not ask)."""
    return "NotFound" in result.stderr or "not found" in result.stderr


def exists(where: dict, kind: str, name: str) -> bool:
    found = run_kubectl(where, "get", kind, name, "-o", "name", check=False)
    return found.returncode == 0 and bool(found.stdout.strip())


def delete(where: dict, kind: str, name: str) -> None:
    """Delete one object and wait (DELETE_WAIT_S at most) until it is gone, with the rights
    the Role grants (delete, get). Not `kubectl delete --wait`: on an object that carries a
    finalizer (a RayJob's ray.io/rayjob-finalizer) kubectl waits through a list and a watch
    by field selector, which the API server authorizes as `list` and `watch`."""
    run_kubectl(where, "delete", kind, name, "--ignore-not-found", "--wait=false")
    deadline = time.monotonic() + DELETE_WAIT_S
    while (found := run_kubectl(where, "get", kind, name, "-o", "name", check=False)).returncode == 0:
        if time.monotonic() > deadline:
            raise KitError(f"{kind} {name} is still there {DELETE_WAIT_S} s after its deletion "
                           f"(a finalizer?): `kubectl -n {where['namespace']} get {kind} {name} -o yaml`")
        time.sleep(poll_s())
    if not missing(found):
        raise KitError(f"could not see whether {kind} {name} is gone: {kubectl_error(found)}")


def require_rights(where: dict, resources: list[str]) -> None:
    """This identity may create each of `resources` in the namespace (`kubectl auth can-i`)."""
    for resource in resources:
        allowed = run_kubectl(where, "auth", "can-i", "create", resource, check=False)
        if allowed.stdout.strip() != "yes":
            raise KitError(f"this identity may not create {resource} in namespace {where['namespace']}; "
                           "ask for the Role `make render CLUSTER=...` writes (docs/kubernetes.md)")


def pods(record: dict) -> list[dict]:
    return get_json(record, "pods", "-l", f"ray.io/cluster={record['name']}").get("items", [])


def wait_until_no_pods(where: dict, cluster: str, deleted: str) -> None:
    """Wait (DELETE_WAIT_S at most) until no pod of RayCluster `cluster` is left, after
    `deleted` (what was deleted, for the error) went."""
    deadline = time.monotonic() + DELETE_WAIT_S
    while left := [p["metadata"]["name"] for p in pods(where | {"name": cluster})]:
        if time.monotonic() > deadline:
            raise KitError(f"{deleted} is deleted but pods remain: {', '.join(left[:5])}; "
                           f"`kubectl -n {where['namespace']} get pods -l ray.io/cluster={cluster}`")
        time.sleep(poll_s())


def poll_s() -> float:
    text = os.environ.get("RAYKIT_KUBECTL_POLL_S", "")
    return float(text) if text.replace(".", "", 1).isdigit() else POLL_S


def print_events(record: dict, pod_names: list[str], last: int = 20) -> list[dict]:
    """The last events of the cluster's pods and of the RayCluster itself, printed; returned."""
    events = get_json(record, "events").get("items", [])
    ours = [e for e in events if e.get("involvedObject", {}).get("name") in {*pod_names, record["name"]}]
    ours.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    for e in ours[-last:]:
        print(f"  event {e['involvedObject'].get('kind', '?')}/{e['involvedObject'].get('name')}: "
              f"{e.get('reason', '?')}: {short(e.get('message', ''), 200)[1:-1]}", flush=True)
    return ours
