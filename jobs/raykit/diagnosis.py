"""Bottleneck diagnosis in plain words, from figures the job measured.

Pure arithmetic (unit tested): is the trainer waiting for data, and if so how many more
preprocessing CPUs, and how many more nodes of the CPU worker type, would feed it; if not,
is its GPU the limit, or the host side that drives it.
"""

import math

DATA_BOUND_WAIT_FRACTION = 0.10  # the trainer idles >10% of each step waiting for data
# A trainer that never waits for data yet keeps its GPU busy less than half the time (NVML)
# is bound by its host side: Python, kernel launches, host-to-device copies. On a lent
# H200 ViT-base at 16-64 images a step kept the GPU 9-19% busy.
GPU_HOST_BOUND_BUSY = 0.5


def diagnose(*, mean_step_s: float, mean_wait_s: float, mean_compute_s: float, images_per_step: int,
             preprocess_s_per_image: float, preprocess_cpus: float,
             worker_type: str, cpus_per_worker: float, gpu_busy: float | None = None,
             on_gpu: bool = False) -> dict:
    """mean_step_s: wall time per step (wait + compute); mean_compute_s: the trainer's
    compute per step had it the hardware to itself (GPU: wall time; CPU: its CPU time);
    preprocess_s_per_image: CPU seconds one preprocessing CPU spends per image;
    preprocess_cpus: CPUs Ray Data may use; gpu_busy: the GPU's mean utilization while
    training (NVML), None without a GPU or where NVML could not be read; on_gpu: the
    trainer ran on a GPU (then a missing gpu_busy leaves compute vs host-bound open)."""
    wait_fraction = mean_wait_s / mean_step_s if mean_step_s > 0 else 0.0
    compute_s = max(mean_compute_s, 1e-9)
    demand = images_per_step / compute_s            # images/s the trainer could consume
    per_cpu = 1.0 / preprocess_s_per_image if preprocess_s_per_image > 0 else math.inf
    supply = per_cpu * preprocess_cpus              # images/s preprocessing can deliver
    cpus_needed = math.ceil(demand / per_cpu) if per_cpu != math.inf else 0
    more_cpus = max(0, cpus_needed - math.floor(preprocess_cpus))
    more_nodes = math.ceil(more_cpus / cpus_per_worker) if cpus_per_worker > 0 else 0
    data_bound = wait_fraction > DATA_BOUND_WAIT_FRACTION
    host_bound = not data_bound and gpu_busy is not None and gpu_busy < GPU_HOST_BOUND_BUSY
    unknown = not data_bound and on_gpu and gpu_busy is None
    if data_bound:
        text = (f"DATA-BOUND: the trainer waits for data {wait_fraction:.0%} of each step. "
                f"It could consume {demand:.1f} images/s; one CPU preprocesses "
                f"{per_cpu:.1f} images/s, so it needs ~{cpus_needed} preprocessing CPUs "
                f"(has {preprocess_cpus:g}): add {more_cpus} CPUs, i.e. {more_nodes} more "
                f"'{worker_type}' node(s) of {cpus_per_worker:g} CPUs "
                f"(raise its min_workers in the values file).")
    elif host_bound:
        text = (f"TRAINER-HOST-BOUND: the trainer waits for data only {wait_fraction:.0%} of "
                f"each step, yet its GPU was busy only {gpu_busy:.0%} of the time: Python, "
                "kernel launches and host-to-device copies bound each step, not the GPU. "
                "Neither more CPU workers nor a faster GPU would help; larger batches, mixed "
                "precision or torch.compile would.")
    elif unknown:
        text = (f"NOT DATA-BOUND: the trainer waits for data only {wait_fraction:.0%} of each "
                "step, so more CPU workers would not help. The GPU's utilization could not be "
                "read (NVML), so whether its GPU or its host side (Python, launches, copies) "
                "bounds each step is unknown: install nvidia-ml-py on the GPU node.")
    else:
        text = (f"COMPUTE-BOUND: the trainer waits for data only {wait_fraction:.0%} of each "
                f"step; preprocessing can deliver {supply:.1f} images/s against the "
                f"{demand:.1f} images/s the trainer consumes. More CPU workers would not help; "
                "a faster GPU (or more of them) would.")
    return {
        "verdict": ("data-bound" if data_bound else "trainer-host-bound" if host_bound
                    else "not-data-bound" if unknown else "compute-bound"),
        "gpu_busy": gpu_busy,
        "data_wait_fraction": wait_fraction,
        "trainer_images_per_s": demand,
        "preprocess_images_per_s_per_cpu": per_cpu,
        "preprocess_cpus": preprocess_cpus,
        "preprocess_cpus_needed": cpus_needed,
        "add_cpus": more_cpus,
        "add_worker_nodes": more_nodes,
        "worker_type": worker_type,
        "text": text,
    }
