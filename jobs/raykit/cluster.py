"""The cluster a job runs on, read from its nodes' labels (placement.py): how many training
workers it holds, how many CPUs preprocess, and the selectors that put Ray Data's tasks on
the preprocessing nodes and Ray Train's workers on the train nodes. In a job's driver:

    shape = cluster.cluster_shape()
    problem = cluster.check_shape(shape, workers)      # None, or the error to exit with
    data_options = cluster.configure_data(shape)       # for DataConfig(execution_options=...)
    ScalingConfig(num_workers=workers, label_selector=shape["train_selector"], ...)
"""

import os

from raykit import placement


def cluster_shape() -> dict:
    """What the cluster offers, read from its nodes' labels (placement.py): trainer slots,
    GPUs, preprocessing CPUs, its nodes, and the selectors a job places its work with."""
    import ray

    alive = [n for n in ray.nodes() if n["Alive"]]
    nodes = {}  # ip -> what the summary needs of each node
    for n in alive:
        labels, res = n.get("Labels", {}), n["Resources"]
        slots, head = placement.trainer_slots(labels), "node:__internal_head__" in res
        nodes[n["NodeManagerAddress"]] = {
            "id": n["NodeID"], "cpus": res.get("CPU", 0), "trainer_slots": slots, "head": head,
            "type": labels.get(placement.NODE_TYPE) or ("head" if head else "worker"),
            # a train node that preprocesses too keeps a CPU per training worker
            "preprocess_cpus": (max(0, res.get("CPU", 0) - slots) if placement.preprocesses(labels) else 0),
            # a pinned local node's real cores, where Ray's CPU slots differ from them
            "cores": float(labels.get(placement.CORES) or res.get("CPU", 0))}
    workers = [n for n in nodes.values() if n["preprocess_cpus"] and not n["trainer_slots"]]
    return {
        "trainer_slots": sum(n["trainer_slots"] for n in nodes.values()),
        "gpus": int(ray.cluster_resources().get("GPU", 0)),
        "preprocess_cpus": sum(n["preprocess_cpus"] for n in nodes.values()),
        # Where a node's trainers and its preprocessing share cores (a pinned local node
        # with fewer cores than CPUs), the planner's model, which counts preprocessing CPUs
        # as the trainers' suppliers, does not describe that mix.
        "preprocess_shares_trainer_cpus": any(
            n["trainer_slots"] + n["preprocess_cpus"] > n["cores"] for n in nodes.values()
            if n["trainer_slots"] and n["preprocess_cpus"]),
        "cpus_per_worker": max((n["cpus"] for n in workers), default=0),
        "worker_type": workers[0]["type"] if workers else "CPU worker",
        # the worker type that trains, where the head only coordinates (several train nodes)
        "train_type": next((n["type"] for n in nodes.values() if n["trainer_slots"] and not n["head"]), None),
        "nodes": nodes,
        "train_selector": placement.train_selector(),
        "data_selector": placement.data_selector(alive),
    }


def check_shape(shape: dict, workers: int) -> str | None:
    """Why the cluster cannot run `workers` training workers fed by preprocessing; None
    when it can."""
    if shape["trainer_slots"] < 1:
        return ("error: no node carries the train label (ray-subcluster=train); start the "
                "cluster with the kit (`make up`), whose head declares it")
    if not shape["preprocess_cpus"]:
        return ("error: no node preprocesses (ray-subcluster=preprocess); add CPU workers or "
                "set `preprocess: true` on the head")
    if workers > shape["trainer_slots"]:
        return (f"error: --workers {workers} exceeds the cluster's {shape['trainer_slots']} "
                "trainer slots (one per GPU, over every train node); lower --workers, or raise "
                "the train node type's min_workers (or the GPU head's size) in the values file")
    return None


def configure_data(shape: dict):
    """Ray Data on the preprocessing nodes: the selector in the driver's DataContext (for
    any dataset it runs itself) and as the ExecutionOptions to pass to Train's DataConfig,
    whose default drops the context's selector. Also: no per-operator progress bars (they
    would swamp the job log `make submit` streams)."""
    import ray.data
    from ray.data import ExecutionOptions

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.label_selector = shape["data_selector"]
    return ExecutionOptions(label_selector=shape["data_selector"], verbose_progress=False)


def train_logging():
    """Ray Train's LoggingConfig for RunConfig(logging_config=...): its INFO lines (worker
    group started, checkpoint created, ...) only where `make submit VERBOSE=1` asked."""
    from ray.train import LoggingConfig

    return LoggingConfig(log_level="INFO" if os.environ.get("RAYKIT_VERBOSE", "1") == "1" else "WARNING")
