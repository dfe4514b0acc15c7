"""`make down` on KubeRay: delete only the RayCluster carrying the record's launch id, and
wait until none of its pods is left."""

from scripts.core import state
from scripts.core.errors import KitError
from scripts.providers.kuberay.kubectl import delete as kubectl_delete
from scripts.providers.kuberay.kubectl import json_object, kubectl_error, missing, run_kubectl, wait_until_no_pods
from scripts.providers.kuberay.names import LAUNCH_ID


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


def forget_stale(cluster: str, record: dict) -> list[str]:
    """Nothing of a stopped cluster is left to delete: only its record."""
    state.forget(cluster)
    return []
