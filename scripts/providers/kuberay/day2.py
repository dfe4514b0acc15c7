"""Day 2 on KubeRay: whether the recorded RayCluster still runs, its status, dashboard,
shell and autoscaler log, and the port-forward a job is submitted through."""

import base64
import subprocess
from contextlib import contextmanager

from scripts.core import tunnel
from scripts.core.errors import KitError, not_running
from scripts.providers.kuberay import crd
from scripts.providers.kuberay.kubectl import get_json, kubectl, missing, pods, run_kubectl
from scripts.providers.kuberay.launch import group_of, watchdog_said
from scripts.providers.kuberay.names import DASHBOARD_PORT, HEAD_TYPE, NAME
from scripts.providers.kuberay.teardown import ours


def same_cluster(values: dict, record: dict) -> bool:
    """A RayCluster is its name in its namespace (in whatever context: the kit cannot
    know which a values file's cluster will be launched in, so it counts as the same)."""
    return record["provider"] == NAME and (values["kubernetes"]["namespace"], values["cluster_name"]) \
        == (record["namespace"], record["name"])


def is_running(record: dict) -> bool:
    """Whether the RayCluster exists; where the API cannot be asked, it stands."""
    try:
        result = run_kubectl(record, "get", "raycluster", record["name"], "-o", "name", check=False)
    except KitError:
        return True
    return result.returncode == 0 or not missing(result)


def require_running(record: dict) -> None:
    """The recorded RayCluster runs, and is the one `make up` launched (its launch id): one
    of the same name that is someone else's never receives a job or a shell."""
    if ours(record) is None:
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
    if record.get("watchdog_minutes"):
        print(watchdog_said(record), flush=True)
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


def fetch_folder(record: dict, folder: str, dest) -> None:
    """`kubectl cp` of the run's folder from the head pod's ray-head container (its tar)."""
    dest.mkdir(parents=True, exist_ok=True)
    code = subprocess.call(kubectl(record, "cp", "-c", "ray-head", f"{head_pod(record)}:{folder.rstrip('/')}",
                                   str(dest)))
    if code:
        raise KitError(f"`kubectl cp` of {folder} from the head pod failed (exit {code}); a run on "
                       "--storage s3://... outlives the pods (docs/kubernetes.md)")
