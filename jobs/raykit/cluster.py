"""The cluster a job runs on, read from its nodes' labels (placement.py): how many training
workers it holds, how many CPUs preprocess, and the selectors that put Ray Data's tasks on
the preprocessing nodes and Ray Train's workers on the train nodes. In a job's driver:

    shape = cluster.cluster_shape()
    problem = cluster.check_shape(shape, workers)      # None, or the error to exit with
    data_options = cluster.configure_data(shape)       # for DataConfig(execution_options=...)
    cluster.warm_up(shape, ["my_pipeline_module"])     # preprocessing processes start now
    scaling_config=cluster.scaling_config(shape, workers)   # for the TorchTrainer
"""

import os

from raykit import contract, feed, placement


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
        "worker_type": workers[0]["type"] if workers else None,  # None: a single mix
        # the worker type that trains, where the head only coordinates (several train nodes)
        "train_type": next((n["type"] for n in nodes.values() if n["trainer_slots"] and not n["head"]), None),
        "nodes": nodes,
        # a local cluster (every node on a loopback address): the one machine's cores,
        # which all its nodes share; None where nodes are machines of their own
        "host_cores": os.cpu_count() if all(ip.startswith("127.") for ip in nodes) else None,
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


def scaling_config(shape: dict, workers: int):
    """Ray Train's ScalingConfig: `workers` training workers on the train nodes, each holding
    a CPU, and a GPU where the cluster has GPUs. The CPU is the one the kit keeps for each
    training worker (its step loop, collation, host-to-GPU copies): a train node that
    preprocesses too offers Ray one CPU per GPU beyond its preprocessing CPUs (the AWS
    template, cluster_shape's preprocess_cpus). Train's default gives a GPU worker no CPU,
    and Ray Data took that one as well: on a lent H100 a 4-CPU head ran 4 preprocessing
    tasks beside its trainer where the summary counted 3."""
    from ray.train import ScalingConfig

    use_gpu = shape["gpus"] > 0
    return ScalingConfig(num_workers=workers, use_gpu=use_gpu,
                         resources_per_worker={"CPU": 1, **({"GPU": 1} if use_gpu else {})},
                         label_selector=shape["train_selector"])


def configure_data(shape: dict):
    """Ray Data on the preprocessing nodes: the selector in the driver's DataContext (for
    any dataset it runs itself) and as the ExecutionOptions to pass to Train's DataConfig,
    whose default drops the context's selector. Also: no per-operator progress bars (they
    would swamp the job log `make submit` streams), and an executor loop that does not
    spin (feed.pace_executor_loop)."""
    import ray.data
    from ray.data import ExecutionOptions

    quiet_data_context()
    ray.data.DataContext.get_current().execution_options.label_selector = shape["data_selector"]
    return ExecutionOptions(label_selector=shape["data_selector"], verbose_progress=False)


def quiet_data_context() -> None:
    """No per-operator progress bars, and the paced executor loop, in the driver's
    DataContext. A Dataset copies the context when it is made, so this runs when raykit.cluster
    is imported, too: a job that makes its dataset before configure_data() (then passed to
    Train's DataConfig, which carries the selector whatever the order) keeps both; ~500
    progress lines flooded `make run` without it. (The driver's own selector, for datasets
    it runs itself, still applies only to those made after configure_data().)"""
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    feed.pace_executor_loop()


quiet_data_context()  # at import: before any dataset a job makes


def warm_up(shape: dict, modules: list[str]):
    """Start a worker process for every preprocessing CPU now, `modules` imported in each,
    while Ray Train's controller and workers start (~10 s): Ray keeps them idle for this
    job, and Ray Data's first tasks run in them instead of paying each process's start and
    imports (torch and torchvision: ~3 s a process on a loaded core) before their first
    batch. Fire and forget: returns a ref nobody needs to wait for.

    Each warming task holds a CPU, pinned node by node: without it a Ray Data task sent to a
    node still warming started a second process beside the warming one, and the two
    imports shared the node (27 s on a 0.25-core node, against ~12 s for one). Ray reuses
    an idle worker only for a task of the same runtime env, compared as serialized: Ray
    Data's tasks run under Ray Train's (the job's env plus the variables
    TrainController gets, Ray 2.60's DataParallelTrainer), as serialized by a worker. The
    warming tasks get the same: submitted from a task that carries Train's variables (a
    driver serializes the env otherwise, JSON with spaces). tests/jobs/ check that Ray
    Data's tasks run in the warmed processes."""
    import ray
    from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR
    from ray.train.v2._internal.constants import (
        DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
        get_env_vars_to_propagate,
    )

    env_vars = get_env_vars_to_propagate()  # as DataParallelTrainer gives its controller
    env_vars.setdefault(RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR,
                        DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE)
    per_node = {node["id"]: int(node["preprocess_cpus"]) for node in shape["nodes"].values()
                if node["preprocess_cpus"] >= 1}
    start_autoscaling_coordinator()
    start_data_stats_actor()
    start = ray.remote(num_cpus=0, max_retries=0, runtime_env={"env_vars": env_vars})(_start_warm)
    return start.remote(modules, per_node)


def start_autoscaling_coordinator() -> None:
    """Start Ray's AutoscalingCoordinator (a detached actor, one per cluster) now. Ray Train's
    controller creates it at its own start and waits up to 5 s for its first answer; the
    actor's process start and imports are 2 s of that wait on 2 cores, and on a GPU machine
    the 5 s ran out ("Failed to send resource request", then 5 s lost). Started here, at the
    job's start, it is ready when the controller asks. The same call as Train's, so either
    finds the other's (get_if_exists); fire and forget."""
    from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
        get_or_create_autoscaling_coordinator,
    )

    get_or_create_autoscaling_coordinator()


def start_data_stats_actor() -> None:
    """Start Ray Data's stats actor (a detached actor, one per cluster) now. The pipeline's
    executor creates it at its first run, so its process start and imports (~3 s of CPU)
    fell on the pipeline's first fill, on the same cores as its first tasks: the demo's
    first step came 1.3 s sooner on 2 cores with it started here (7.8 against 9.2 s into the
    training function, five fresh clusters each). The same call as Ray Data's (get_if_exists,
    on the caller's node: the driver's, the head); fire and forget."""
    from ray.data._internal.stats import get_or_create_stats_actor

    get_or_create_stats_actor()


def _warm(names: list[str]) -> None:
    import importlib

    for name in names:
        importlib.import_module(name)


def _start_warm(modules: list[str], per_node: dict[str, int]) -> None:
    """The warming tasks: on each preprocessing node, one per CPU, each importing `modules`.
    (Warming the head's processes for Ray Train's too was measured: on 2 cores it slowed
    Train's start more than it saved.)"""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    warm = ray.remote(num_cpus=1, max_retries=0)(_warm)
    ray.get([warm.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(modules)
             for node, cpus in per_node.items() for _ in range(cpus)])


def train_logging():
    """Ray Train's LoggingConfig for RunConfig(logging_config=...): its INFO lines (worker
    group started, checkpoint created, ...) only where `make submit VERBOSE=1` asked."""
    from ray.train import LoggingConfig

    return LoggingConfig(log_level="INFO" if os.environ.get(contract.VERBOSE_ENV, "1") == "1" else "WARNING")
