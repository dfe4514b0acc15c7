"""What Ray's own state says of a finished run, read by the summary in the driver: the
nodes lost (dead without a drain) or preempted (drained on a spot notice), each node's type,
and the preprocessing tasks Ray ran again."""


def lost_nodes(nodes: dict, timeout_s: float = 10) -> list[str]:
    """The nodes of the start that no longer run a task: each gets a task pinned to it
    (no CPU needed). Asking beats reading ray.nodes(): the GCS marks a killed node dead
    only after its health checks fail, which can outlast a short job."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, max_retries=0)
    def here() -> None:
        return None

    probes = {here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["id"], soft=False)).remote(): ip for ip, node in nodes.items()}
    answered, missing = ray.wait(list(probes), num_returns=len(probes), timeout=timeout_s)
    lost = {probes[ref] for ref in missing}
    for ref in answered:
        try:
            ray.get(ref)
        except Exception:  # the node was marked dead: the task could not run there
            lost.add(probes[ref])
    for ref in missing:
        ray.cancel(ref, force=True)
    return sorted(lost)


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
    return sum(1 for task in tasks if task.attempt_number > 0 and "Map" in task.name)


def node_types(nodes: dict) -> dict[str, str]:
    """Every node's type by address: those of the start (cluster_shape) and those that
    joined since, such as a lost node's replacement (its raykit-node-type label)."""
    import ray

    from raykit.placement import NODE_TYPE

    types = {ip: node["type"] for ip, node in nodes.items()}
    for n in ray.nodes():
        types.setdefault(n["NodeManagerAddress"], n.get("Labels", {}).get(NODE_TYPE) or "worker")
    return dict(sorted(types.items()))
