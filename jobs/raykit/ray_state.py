"""What Ray's own state says of a run, read in the driver: once after trainer.fit(), the
facts the summary assembles (run_facts: each node's type and each type's node-seconds,
the nodes lost or preempted, the preprocessing tasks Ray ran again); while it runs, for
the autopilot, whether the preprocessing produces yet and how busy its nodes' CPUs are."""

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class RunFacts:
    """What Ray's state says of a run, read once after trainer.fit() (run_facts)."""
    node_types: dict[str, str]          # every node's type by address
    node_seconds: dict[str, float]      # each type's node-seconds while the run ran
    preempted_nodes: list[str]          # of the start's, drained on a spot notice and gone
    lost_nodes: list[str]               # of the start's (not preempted), gone without a drain
    retried_preprocessing_tasks: int | None  # None: the state API did not answer


def run_facts(shape: dict, fit_began: float) -> RunFacts:
    """Ray's facts about the run, each read once (the summary's only Ray calls)."""
    import ray

    preempted = preempted_nodes(shape["nodes"])
    return RunFacts(
        node_types=node_types(shape["nodes"]), node_seconds=node_seconds(fit_began),
        preempted_nodes=preempted,
        lost_nodes=lost_nodes({ip: node for ip, node in shape["nodes"].items()
                               if ip not in preempted}),  # no need to probe those
        retried_preprocessing_tasks=retried_tasks(ray.get_runtime_context().get_job_id()))


def state_address() -> str | None:
    """The GCS of the Ray this process is connected to, for Ray's state API: without it the
    API looks for a Ray on the machine and, where several run (local clusters side by side,
    a driver started without RAY_ADDRESS), refuses to pick one ("Found multiple active Ray
    instances"), and the figures it gives are lost."""
    import ray

    return ray.get_runtime_context().gcs_address if ray.is_initialized() else None


def node_seconds(since_s: float, now_s: float | None = None, nodes=None) -> dict[str, float]:
    """Seconds each node type's nodes were up between since_s and now, nodes that joined
    or left meanwhile included: what the run held, node by node, as Ray's state API lists
    them (it keeps dead nodes, with their end time). By the node's raykit-node-type label."""
    from raykit.placement import NODE_TYPE

    now_s = now_s or time.time()
    if nodes is None:
        from ray.util.state import list_nodes
        try:
            nodes = list_nodes(address=state_address(), detail=True, limit=10_000,
                               raise_on_missing_output=False)
        except Exception as e:  # noqa: BLE001 (a summary without the bill beats no summary)
            print(f"node time unknown: Ray's state API failed ({type(e).__name__})", flush=True)
            return {}
    totals: dict[str, float] = {}
    for node in nodes:
        start = (node.start_time_ms or 0) / 1000
        end = (node.end_time_ms or 0) / 1000 or now_s  # 0: still alive
        held = min(end, now_s) - max(start, since_s)
        if start and held > 0:
            kind = (node.labels or {}).get(NODE_TYPE) or "unlabelled"
            totals[kind] = totals.get(kind, 0.0) + held
    return {k: round(v, 1) for k, v in sorted(totals.items())}


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
        tasks = list_tasks(address=state_address(), filters=[("job_id", "=", job_id)], limit=10_000,  # the API's most
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
        tasks = list_tasks(address=state_address(), filters=[("job_id", "=", job_id), ("state", "=", "FINISHED"),
                                    ("type", "=", "NORMAL_TASK")], limit=1000, timeout=5,
                           raise_on_missing_output=False)
    except Exception:  # noqa: BLE001 (the next poll asks again)
        return False
    return any(is_preprocessing(task.name) for task in tasks)


def draining_nodes() -> set[str]:
    """The ids of the nodes being drained (given back, or a spot notice): still Alive in
    ray.nodes() until their raylet exits, but taking no new task."""
    from ray._private.state import state  # DeveloperAPI: the GCS's view

    return set(state.get_draining_nodes())


def cpus_in_use(nodes: list[dict]) -> tuple[float, float]:
    """(CPUs held by running tasks, CPUs) on `nodes` (ray.nodes() entries), from the GCS's
    resource view (Ray's own: what its scheduler grants from). The autopilot passes its
    steered nodes, those being drained already left out (Pilot.steered_nodes): they take
    no new task, and their idle CPUs say nothing of the load."""
    from ray._private.state import available_resources_per_node  # DeveloperAPI: the GCS's view

    free = available_resources_per_node()
    busy = total = 0.0
    for node in nodes:
        if node["NodeID"] not in free:
            continue
        cpus = float(node["Resources"].get("CPU", 0.0))
        busy += max(0.0, cpus - float(free[node["NodeID"]].get("CPU", 0.0)))
        total += cpus
    return busy, total


def node_types(nodes: dict) -> dict[str, str]:
    """Every node's type by address: those of the start (cluster_shape) and those that
    joined since, such as a lost node's replacement (its raykit-node-type label)."""
    import ray

    from raykit.placement import NODE_TYPE

    types = {ip: node["type"] for ip, node in nodes.items()}
    for n in ray.nodes():
        types.setdefault(n["NodeManagerAddress"], n.get("Labels", {}).get(NODE_TYPE) or "worker")
    return dict(sorted(types.items()))
