"""Bottleneck diagnosis in plain words, from figures the job measured: the one place a
run's bottleneck is decided (verdict.py prices it; nothing rewrites it).

Pure arithmetic (unit tested): is the trainer waiting for data, and if so is it the CPU
count (how many more preprocessing CPUs, and nodes of the CPU worker type, would feed it),
the network (the CPU workers' images reach the train nodes about as fast as their links
carry them) or the pipeline itself (the CPUs suffice on paper, yet batches come late); if
not, is its GPU the limit, or the host side that drives it. Each verdict's remedy follows
from the same figures that chose it, so the text never asks for 0 more nodes, and never
contradicts `make plan` reading the same summary.
"""

import math
from dataclasses import dataclass

DATA_BOUND_WAIT_FRACTION = 0.10  # the trainer idles >10% of each step waiting for data
# A trainer that never waits for data yet keeps its GPU busy less than half the time (NVML)
# is bound by its host side: Python, kernel launches, host-to-device copies. On a lent
# H200 ViT-base at 16-64 images a step kept the GPU 9-19% busy.
GPU_HOST_BOUND_BUSY = 0.5
SURPLUS_HEADROOM = 1.1  # preprocessing CPUs kept past the trainer's need before any is called surplus
# Fewer measured steps than this and the pipeline's start-up (the first tasks scheduled,
# each worker process's imports) is a large share of the wait: the run is too short to say.
SHORT_RUN_STEPS = 30
# One wait at least this share of all the waiting is a stall (a node lost, a task retried,
# a slow start), not a steady shortfall.
STALL_SHARE = 0.5

# The network is the cause where the images the CPU workers preprocessed reach the train
# nodes at this share or more of the train nodes' baseline bandwidth: more CPUs then add
# nothing (`make plan` caps them there too)
NETWORK_BOUND_SHARE = 0.8

VERDICTS = ("data-bound", "pipeline-bound", "data-bound-unmeasured", "network-bound",
            "trainer-host-bound", "not-data-bound", "compute-bound")


@dataclass(frozen=True)
class Network:
    """What crossed the train nodes' links: the run's images/s, the share of them
    preprocessed on other nodes, the images/s those links carry at the images' size."""
    images_per_s: float
    remote_share: float
    carried_images_per_s: float
    bytes_per_image: float

    @property
    def full(self) -> bool:
        return self.images_per_s * self.remote_share >= NETWORK_BOUND_SHARE * self.carried_images_per_s


def network_of(images_per_s: float, node_types: dict[str, str], trainer_nodes: list[str],
               preprocessed: dict[str, int], bytes_per_image: float | None,
               network_gbps: dict[str, float]) -> Network | None:
    """node_types: {node ip: its type}; trainer_nodes: the ips that train; preprocessed:
    {node ip: images it preprocessed}; network_gbps: each type's baseline Gbit/s (the kit
    passes it). None where the links' bandwidth or the images' size is unknown."""
    total = sum(preprocessed.values())
    remote = sum(n for ip, n in preprocessed.items() if ip not in trainer_nodes) / total if total else 0.0
    link = sum(network_gbps.get(node_types.get(ip, ""), 0.0) for ip in trainer_nodes)
    if not link or not bytes_per_image:
        return None
    return Network(images_per_s, remote, link * 1e9 / 8 / bytes_per_image, bytes_per_image)


def diagnose(*, mean_step_s: float, mean_wait_s: float, mean_compute_s: float, images_per_step: int,
             preprocess_s_per_image: float, preprocess_cpus: float,
             worker_type: str | None, cpus_per_worker: float, gpu_busy: float | None = None,
             on_gpu: bool = False, steps: int | None = None,
             max_wait_s: float | None = None, train_type: str | None = None,
             steps_needed: int | None = None, host_cores: int | None = None,
             network: Network | None = None) -> dict:
    """mean_step_s: wall time per step (wait + compute); mean_compute_s: the trainer's
    compute per step had it the hardware to itself (GPU: wall time; CPU: its CPU time);
    preprocess_s_per_image: CPU seconds one preprocessing CPU spends per image (0: no stage
    measured it); preprocess_cpus: CPUs Ray Data may use; gpu_busy: the GPU's mean
    utilization while training (NVML), None without a GPU or where NVML could not be read;
    on_gpu: the trainer ran on a GPU (then a missing gpu_busy leaves compute vs host-bound
    open); steps and max_wait_s: the steps the means cover and the longest single wait
    (None: unknown), which tell a short run and a stall from a steady shortfall; train_type:
    the worker node type that trains, where the head does not (a mix of several train
    nodes), for a remedy that names it; steps_needed: where the run was too short to leave
    its start-up's stock (steady.py), the steps a run needs to show its steady flow;
    host_cores: the cores of the one machine every node shares (a local cluster), None
    where the nodes are machines of their own; network: what crossed the train nodes'
    links (network_of), None where unknown."""
    wait_fraction = mean_wait_s / mean_step_s if mean_step_s > 0 else 0.0
    compute_s = max(mean_compute_s, 1e-9)
    demand = images_per_step / compute_s            # images/s the trainer could consume
    measured = preprocess_s_per_image > 0
    per_cpu = 1.0 / preprocess_s_per_image if measured else math.inf
    supply = per_cpu * preprocess_cpus              # images/s preprocessing can deliver
    cpus_needed = math.ceil(demand / per_cpu) if measured else 0
    more_cpus = max(0, cpus_needed - math.floor(preprocess_cpus))
    # a local cluster's nodes are processes on one machine: past its cores, nodes add none
    beyond_host = host_cores is not None and cpus_needed > host_cores
    more_nodes = math.ceil(more_cpus / cpus_per_worker) if cpus_per_worker > 0 and not beyond_host else 0
    waiting = wait_fraction > DATA_BOUND_WAIT_FRACTION
    if waiting and not measured:
        verdict = "data-bound-unmeasured"
        text = (f"DATA-BOUND: the trainer waits for data {wait_fraction:.0%} of each step, but "
                "no preprocessing stage measured its CPU cost, so how many CPUs would feed it "
                "is unknown: wrap the preprocessing function in measure.measured and run again.")
    elif waiting and more_cpus > 0:
        verdict = "data-bound"
        text = (f"DATA-BOUND: the trainer waits for data {wait_fraction:.0%} of each step. "
                f"It could consume {demand:.1f} images/s; one CPU preprocesses "
                f"{per_cpu:.1f} images/s, so it needs ~{cpus_needed} preprocessing CPUs "
                f"(has {preprocess_cpus:g}): add {more_cpus} CPUs")
        if beyond_host:
            text += (f". That is more than this machine's {host_cores} cores, which every node of "
                     "this local cluster shares, so no number of local nodes would feed it; a "
                     "cloud mix would: `make plan PROFILE=<this summary>` sizes one (a values "
                     "file such as hetero.yaml).")
        elif worker_type:  # None where the cluster has no CPU worker type (cluster_shape)
            text += (f", i.e. {more_nodes} more '{worker_type}' node(s) of {cpus_per_worker:g} CPUs "
                     "(raise its min_workers in the values file, and max_workers to at least that).")
        else:  # a single mix: no node type to raise, so name the one to add
            text += (" on CPU-only nodes: this cluster has no CPU worker node type, so add one "
                     "(a `workers:` entry with `role: preprocess`, as in hetero.yaml) and let "
                     "`make plan PROFILE=<this summary>` size it.")
    elif waiting:
        verdict = "pipeline-bound"
        text = (f"PIPELINE-BOUND: the trainer waits for data {wait_fraction:.0%} of each step, "
                f"yet its {preprocess_cpus:g} preprocessing CPUs could deliver {supply:.1f} "
                f"images/s against the {demand:.1f} it consumes: more CPU nodes would not "
                "help. " + pipeline_cause(steps, mean_wait_s, max_wait_s))
    elif gpu_busy is not None and gpu_busy < GPU_HOST_BOUND_BUSY:
        verdict = "trainer-host-bound"
        text = (f"TRAINER-HOST-BOUND: the trainer waits for data only {wait_fraction:.0%} of "
                f"each step, yet its GPU was busy only {gpu_busy:.0%} of the time: Python, "
                "kernel launches and host-to-device copies bound each step, not the GPU. "
                "Neither more CPU workers nor a faster GPU would help; larger batches, mixed "
                "precision or torch.compile would.")
    elif on_gpu and gpu_busy is None:
        verdict = "not-data-bound"
        text = (f"NOT DATA-BOUND: the trainer waits for data only {wait_fraction:.0%} of each "
                "step, so more CPU workers would not help. The GPU's utilization could not be "
                "read (NVML), so whether its GPU or its host side (Python, launches, copies) "
                "bounds each step is unknown: install nvidia-ml-py on the GPU node.")
    else:
        verdict = "compute-bound"
        text = (f"COMPUTE-BOUND: the trainer waits for data only {wait_fraction:.0%} of each "
                f"step; preprocessing can deliver {supply:.1f} images/s against the "
                f"{demand:.1f} images/s the trainer consumes. More CPU workers would not help; "
                + (f"more '{train_type}' train nodes would (raise its min_workers, and max_workers "
                   "to match; plan the CPU workers for them with `make plan ARGS=\"--train-nodes "
                   "N ...\"`), or a faster GPU."
                   if train_type else "a faster GPU (or more of them) would."))
    if steps_needed and not waiting and measured and supply < demand:
        # fed from the start-up's stock: the wait says nothing yet, the cost per image does
        text += (f" But this run was fed mostly by the batches made during its start-up: at "
                 f"{per_cpu:.1f} images/s per CPU its {preprocess_cpus:g} CPUs would leave the "
                 f"trainer waiting once that stock is eaten. Run at least {steps_needed} steps "
                 "(--steps) to see its steady state.")
    elif steps_needed:
        text += (f" (The run was too short to leave its start-up's stock: run at least "
                 f"{steps_needed} steps to measure the steady flow.)")
    if waiting and network and network.full:
        # the CPUs or the pipeline would be blamed, but the link is full: no CPUs to ask for
        verdict = "network-bound"
        text = (f"NETWORK-BOUND: the trainer waits for data {wait_fraction:.0%} of each step, and its CPU "
                f"workers' images reach it about as fast as the train node's link carries them "
                f"(~{network.carried_images_per_s:.0f} images/s of {network.bytes_per_image:,.0f} bytes): "
                "more CPU workers would not help. Ship fewer bytes an image (uint8, smaller crops), "
                "preprocess on the train node, or train on a type with more bandwidth (`make plan`).")
    if verdict != "data-bound":  # the remedy is not more CPUs: the figures say none to add
        more_cpus = more_nodes = 0
    surplus_nodes = 0
    if measured and not waiting and not steps_needed and cpus_per_worker > 0:
        # CPUs past what the trainer takes, with a tenth to spare: whole worker nodes of
        # them bill for nothing (the README's demo had twice the need)
        kept = math.ceil(demand * SURPLUS_HEADROOM / per_cpu)
        surplus_nodes = max(0, math.floor((preprocess_cpus - kept) / cpus_per_worker))
        if surplus_nodes:
            text += (f" Its {preprocess_cpus:g} preprocessing CPUs could deliver {supply:.1f} images/s, "
                     f"~{kept} would do: {surplus_nodes} '{worker_type}' node(s) of {cpus_per_worker:g} "
                     f"CPUs are surplus (lower its min_workers by {surplus_nodes}; `make plan` sizes "
                     "the mix).")
    return {
        "verdict": verdict,
        "gpu_busy": gpu_busy,
        "data_wait_fraction": wait_fraction,
        "trainer_images_per_s": demand,
        "preprocess_images_per_s_per_cpu": per_cpu,
        "preprocess_cpus": preprocess_cpus,
        "preprocess_cpus_needed": cpus_needed,
        "add_cpus": more_cpus,
        "add_worker_nodes": more_nodes,
        "surplus_worker_nodes": surplus_nodes,
        "worker_type": worker_type,
        "host_cores": host_cores,
        "network_images_per_s": network.carried_images_per_s if network else None,
        "text": text,
    }


def pipeline_cause(steps: int | None, mean_wait_s: float, max_wait_s: float | None) -> str:
    """Where a wait comes from when the CPUs suffice: what the figures point to, and what to
    try."""
    if steps is not None and steps < SHORT_RUN_STEPS:
        return (f"The run is short ({steps} measured steps): the pipeline's start-up (the "
                "first tasks scheduled, each worker process's imports) weighs on so few steps. "
                f"Measure with --steps of {SHORT_RUN_STEPS * 2} or more before changing the mix.")
    if steps and max_wait_s is not None and mean_wait_s > 0 \
            and max_wait_s >= STALL_SHARE * mean_wait_s * steps:
        return (f"Most of the wait is one stall of {max_wait_s:.2f} s (a lost node, a retried "
                "task, a slow start): see the nodes and retried work above, and run again.")
    return ("The wait is spread over the steps: the pipeline delivers each batch late. Ray "
            "Data notices a finished task only every 0.1 s, so short tasks pay for it: make "
            "each task longer (more batches per task, larger blocks), and prefetch deeper "
            "(iter_batches(prefetch_batches=...)).")
