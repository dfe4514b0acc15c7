"""`make down` locally: stop the processes carrying the cluster's marker, and only those;
then its CPU groups and temp dir."""

from scripts.core import state
from scripts.providers.local import cpu_quota
from scripts.providers.local.names import cluster_id
from scripts.core.errors import KitError
from scripts.providers.local.processes import STOP_LIMIT_S, stop_cluster


def forget_stale(cluster: str, record: dict) -> list[str]:
    """Nothing of a stopped cluster is left to delete: only its record."""
    state.forget(cluster)
    return []


def down(cluster: str, record: dict | None, purge: bool = False) -> str:
    """Stop every process that carries this cluster's marker, and their children (a dying
    autoscaler may still be starting a node: stop_cluster looks again until none is left)."""
    stopped, alive = stop_cluster(cluster)
    if alive:
        raise KitError(f"local cluster '{cluster}': {len(alive)} of its processes still run "
                       f"{STOP_LIMIT_S} s after being killed ({', '.join(alive[:5])}); its record is kept: "
                       f"run `make down CLUSTER={cluster}` again")
    group = cpu_quota.cluster_group(cluster_id(cluster))
    left = "" if cpu_quota.remove(group) else f"; its cgroup {group} still holds a process"
    state.forget(cluster)
    logs = f"; its logs stay in {record['temp_dir']}/session_latest/logs" if record else ""
    return f"local cluster '{cluster}': {stopped} processes stopped{logs}{left}"
