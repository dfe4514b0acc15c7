"""`make down` locally: stop the processes carrying the cluster's marker, and only those;
then its CPU groups and temp dir."""

from scripts.core import state
from scripts.providers.local import cpu_quota
from scripts.providers.local.names import cluster_id
from scripts.providers.local.processes import cluster_processes, stop_processes


def forget_stale(cluster: str, record: dict) -> list[str]:
    """Nothing of a stopped cluster is left to delete: only its record."""
    state.forget(cluster)
    return []


def down(cluster: str, record: dict | None, purge: bool = False) -> str:
    """Stop every process that carries this cluster's marker, and their children."""
    stopped = 0
    for _ in range(3):  # a dying autoscaler may still be starting a node: sweep again
        procs = cluster_processes(cluster)
        if not procs:
            break
        stop_processes(procs)
        stopped += len(procs)
    group = cpu_quota.cluster_group(cluster_id(cluster))
    left = "" if cpu_quota.remove(group) else f"; its cgroup {group} still holds a process"
    state.forget(cluster)
    logs = f"; its logs stay in {record['temp_dir']}/session_latest/logs" if record else ""
    return f"local cluster '{cluster}': {stopped} processes stopped{logs}{left}"
