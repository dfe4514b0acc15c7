"""What Ray's own state says of a run, read in the driver: by the summary, the nodes lost
(dead without a drain) or preempted (drained on a spot notice), each node's type, and the
preprocessing tasks Ray ran again; by the autopilot, whether the preprocessing produces yet."""

import socket
from concurrent.futures import ThreadPoolExecutor


def lost_nodes(nodes: dict, timeout_s: float = 5) -> list[str]:
    """The nodes of the start whose raylet is gone: the GCS has marked them dead, or their
    raylet's port takes no connection (refused at once where the machine lives on, as a
    killed local node's; no answer within timeout_s where the machine is gone). Asking the
    raylet beats reading ray.nodes() alone: the GCS marks a killed node dead only after its
    health checks fail, which can outlast a short job. (A task pinned to each node asked
    before: it started a worker process on every node at each job's end, ~1 s of CPU each
    and ~1.5-3 s of the job's wall on 2 cores.)"""
    import ray

    raylets = {n["NodeID"]: (n["NodeManagerAddress"], n["NodeManagerPort"])
               for n in ray.nodes() if n["Alive"]}
    with ThreadPoolExecutor(max_workers=min(32, len(nodes) or 1)) as pool:
        answers = {ip: pool.submit(raylet_listening, raylets[node["id"]], timeout_s)
                   for ip, node in nodes.items() if node["id"] in raylets}
    return sorted(ip for ip in nodes if ip not in answers or not answers[ip].result())


def raylet_listening(address: tuple[str, int], timeout_s: float) -> bool:
    """Whether a raylet's port at `address` (host, port) takes a TCP connection."""
    try:
        socket.create_connection(address, timeout=timeout_s).close()
        return True
    except OSError:  # refused, unreachable, timed out
        return False


def preempted_nodes(nodes: dict) -> list[str]:
    """The nodes of the start that Ray drained for preemption (the kit's spot watcher, on a
    spot notice) and that have left since: they went on notice, not by surprise."""
    import ray
    from ray.core.generated.common_pb2 import NodeDeathInfo

    ips = {node["id"]: ip for ip, node in nodes.items()}
    return sorted(ips[n["NodeID"]] for n in ray.nodes() if n["NodeID"] in ips
                  and n.get("DeathReason") == NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED)


def retried_tasks(job_id: str) -> int | None:
    """Ray Data tasks (map stages) Ray ran more than once: retries of tasks whose worker or
    node died, and re-runs of those whose output was lost with its node (lineage
    reconstruction). Ray's task events keep one row per attempt; every attempt after a
    task's first is retried work. None where the state API does not answer."""
    from ray.util.state import list_tasks

    try:
        tasks = list_tasks(filters=[("job_id", "=", job_id)], limit=10_000,  # the API's most
                           timeout=30, raise_on_missing_output=False)
    except Exception as e:  # noqa: BLE001 (a summary without the count beats no summary)
        print(f"retried work unknown: Ray's state API failed ({type(e).__name__})", flush=True)
        return None
    return sum(1 for task in tasks if task.attempt_number > 0 and is_preprocessing(task.name))


def is_preprocessing(task_name: str) -> bool:
    """A Ray Data map task (its operators fused: `ReadRange->MapBatches(augment)`), not
    one of Ray's actors' calls or the kit's warm-up."""
    return "Map" in task_name


def preprocessing_produced(job_id: str) -> bool:
    """Whether a preprocessing task of the job has finished: its node's processes have
    started and imported, and the pipeline produces (the autopilot's first fill). False
    where the state API does not answer (the first fill then stays unjudged, as before)."""
    from ray.util.state import list_tasks

    try:
        tasks = list_tasks(filters=[("job_id", "=", job_id), ("state", "=", "FINISHED"),
                                    ("type", "=", "NORMAL_TASK")], limit=1000, timeout=5,
                           raise_on_missing_output=False)
    except Exception:  # noqa: BLE001 (the next poll asks again)
        return False
    return any(is_preprocessing(task.name) for task in tasks)


def node_types(nodes: dict) -> dict[str, str]:
    """Every node's type by address: those of the start (cluster_shape) and those that
    joined since, such as a lost node's replacement (its raykit-node-type label)."""
    import ray

    from raykit.placement import NODE_TYPE

    types = {ip: node["type"] for ip, node in nodes.items()}
    for n in ray.nodes():
        types.setdefault(n["NodeManagerAddress"], n.get("Labels", {}).get(NODE_TYPE) or "worker")
    return dict(sorted(types.items()))
