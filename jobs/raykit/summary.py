"""A job's summary, assembled from the measured figures (measure.py: rank 0's steps, every
rank's preprocessing and train nodes), the cluster's shape (cluster.py), what Ray's state
says of the run (ray_state.run_facts: each node's type and node-seconds, nodes lost or
preempted, retried tasks), the prices the kit passed (contract.NodePrices), the
autopilot's report (autopilot.steering()) and the diagnosis, bill and verdict
(diagnosis.py, billing.py, verdict.py); report.py prints it. In the driver, after
trainer.fit():

    with autopilot.steering() as steered:
        result = trainer.fit()
    s = summary.summarize("my_job", result.metrics, shape, workers=..., batch_size=32, wall_s=...,
                          autopilot=steered.report)
    summary.emit(s)   # prints it, and the RESULT line the kit keeps in build/results/

summarize reads Ray and the environment once each, then assemble() builds the summary
from those figures alone (pure: tested without Ray). What `make submit` keeps in
build/results/, and `make plan PROFILE=` and `make bench` read.
"""

import json
import os
import time
from pathlib import Path

from raykit import contract
from raykit.billing import bill
from raykit.contract import NodePrices, finite
from raykit.diagnosis import diagnose, network_of
from raykit.ray_state import RunFacts, run_facts
from raykit.report import print_summary
from raykit.verdict import priced_verdict


def summarize(job: str, metrics: dict, shape: dict, *, workers: int, batch_size: int,
              wall_s: float, extra: dict | None = None, autopilot: dict | None = None) -> dict:
    """The job's summary from rank 0's metrics (TrainProfile.metrics) and the cluster's
    shape: Ray's facts about the run and the kit's prices read here, once; autopilot: the
    report steering() handed the job (None where none steered)."""
    fit_began = time.time() - wall_s
    return assemble(metrics, shape, run_facts(shape, fit_began), prices_passed(), autopilot,
                    job=job, workers=workers, batch_size=batch_size, wall_s=wall_s,
                    fit_began=fit_began, extra=extra)


def prices_passed() -> NodePrices | None:
    """The prices the kit passed the job (RAYKIT_NODE_PRICES), parsed once a run; None
    where it passed none, or something that is not the kit's (said in one line)."""
    try:
        return contract.node_prices()
    except ValueError as e:
        print(f"job's cost unknown: {e}", flush=True)
        return None


def assemble(metrics: dict, shape: dict, facts: RunFacts, prices: NodePrices | None,
             pilot: dict | None, *, job: str, workers: int, batch_size: int, wall_s: float,
             fit_began: float, extra: dict | None = None) -> dict:
    """The summary from the run's figures alone: what print_summary prints and `make
    plan PROFILE=` reads. fit_began: when trainer.fit() was called (epoch seconds)."""
    images_per_step = batch_size * workers
    mean_step = metrics["mean_step_s"] or float("nan")
    run = metrics.get("steady") or {}
    # the diagnosis judges the steady flow where the run reached it: the start-up's stock
    # feeds a trainer at its own pace, whatever the preprocessing delivers
    judged_step = run.get("steady_step_s") or metrics["mean_step_s"]
    judged_wait = run["steady_wait_s"] if run.get("steady") else metrics["mean_data_wait_s"]
    ranks = metrics.get("ranks") or []
    trains = {ip: {"type": facts.node_types.get(ip)} | node for ip, node in train_nodes(ranks, batch_size).items()}
    images_per_s = images_per_step / mean_step
    judged_rate = run.get("steady_images_per_s") or images_per_s
    network = network_of(judged_rate, facts.node_types, list(trains) or [metrics.get("trainer_node")],
                         metrics.get("preprocess_nodes") or {}, metrics.get("bytes_per_image"),
                         prices.network_gbps if prices else {})
    diagnosis = diagnose(
        mean_step_s=judged_step, mean_wait_s=judged_wait,
        max_wait_s=metrics["max_data_wait_s"], steps=metrics["steps"],
        mean_compute_s=metrics["mean_trainer_compute_s"], images_per_step=images_per_step,
        preprocess_s_per_image=metrics["preprocess_s_per_image"],
        preprocess_cpus=shape["preprocess_cpus"], worker_type=shape["worker_type"],
        cpus_per_worker=shape["cpus_per_worker"], gpu_busy=metrics["gpu_utilization"],
        on_gpu=str(metrics["device"]).startswith("cuda"), train_type=shape.get("train_type"),
        steps_needed=None if run.get("steady", True) else run.get("steps_needed"),
        host_cores=shape["host_cores"], network=network)
    return {
        "summary_version": contract.SUMMARY_VERSION,  # the shape contract.run_summary reads
        "job": job, "workers": workers, "batch_size": batch_size, **(extra or {}),
        **{k: metrics.get(k) for k in ("steps", "restarts", "resumed_from_step", "device", "gpu_model",
                                       "trainer_node", "warmup_s", "mean_step_s",
                                       "mean_data_wait_s", "max_data_wait_s",
                                       "preprocess_nodes", "final_loss")},
        "images_per_s": images_per_s,
        # the start-up, the stock and the steady flow (steady.py); the first step also from
        # trainer.fit()'s call, which adds Ray Train's controller and workers' start
        "steady": run or None,
        "first_step_s": run.get("first_step_s"),
        # (none where the step came before this fit: a finished run's summary, reported
        # again by a run submitted on its --storage-path)
        "first_step_after_fit_s": (metrics["first_step_at"] - fit_began
                                   if (metrics.get("first_step_at") or 0) > fit_began else None),
        "ramp_s": run.get("ramp_s"),
        "steady_images_per_s": run.get("steady_images_per_s"),
        "preprocess_node_start_s": metrics.get("preprocess_node_start_s") or {},
        "mean_compute_s": metrics["mean_step_s"] - metrics["mean_data_wait_s"],
        "mean_trainer_compute_s": metrics["mean_trainer_compute_s"],
        "data_wait_fraction": metrics["mean_data_wait_s"] / mean_step,
        "preprocess_s_per_image": metrics["preprocess_s_per_image"],
        "bytes_per_image": metrics.get("bytes_per_image"),  # as the trainers received it (make plan's network term)
        # the images that cost rests on, and those left out as their process's warm-up
        **{k: metrics.get(k) for k in ("preprocess_images_measured", "preprocess_warmup_images",
                                       "preprocess_cost_includes_warmup")},
        # GPU utilization (NVML) where the trainer has a GPU; else the share of each step
        # it spent computing rather than waiting for data.
        "trainer_utilization": (metrics["gpu_utilization"] if metrics["gpu_utilization"] is not None
                                else 1 - metrics["mean_data_wait_s"] / mean_step),
        "trainer_utilization_source": "nvml" if metrics["gpu_utilization"] is not None else "busy share",
        # each train node's workers: their wait and throughput (DDP steps in lockstep, so
        # a node that waits more holds every rank back), and whether the replicas agree
        "train_nodes": trains,
        "node_types": facts.node_types,
        "ranks_in_sync": ranks_in_sync(ranks),
        "cpu_use_by_node_type": cpu_use_by_node_type(shape["nodes"], metrics),
        "preprocess_cpus": shape["preprocess_cpus"],
        "preprocess_shares_trainer_cpus": shape["preprocess_shares_trainer_cpus"],
        "host_cores": shape["host_cores"],  # a local cluster's machine; None on a cloud
        "wall_s": wall_s,
        # each node type's node-seconds while the run ran, priced with what the kit passed
        "node_seconds": facts.node_seconds,
        "bill": bill(facts.node_seconds, prices),
        "autopilot": pilot,  # None where none steered
        # nodes that left during the run, drained on a spot notice or lost; Ray Data re-ran
        # the preprocessing they took with them elsewhere (the retried tasks)
        "preempted_nodes": facts.preempted_nodes,
        "lost_nodes": facts.lost_nodes,
        "retried_preprocessing_tasks": facts.retried_preprocessing_tasks,
        "diagnosis": diagnosis,
        "warnings": warnings_of(metrics),
        # the stall, its cause (the diagnosis's), the workers that would remove it, priced
        "verdict": priced_verdict(diagnosis, judged_rate, facts.node_types, prices),
    }


def emit(summary: dict, results: str = "", headline: str = "") -> dict:
    """Print the summary for a person, write it as JSON to `results` where one is named
    (nothing is written by default: `make submit` keeps every summary in build/results/),
    and print the RESULT line the kit keeps it from. Returns the summary as written."""
    print_summary(summary, headline)
    summary = finite(summary)  # standard JSON: the kit refuses Infinity when it reads it back
    if results:
        path = Path(os.path.expanduser(results))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2))
        print(f"summary written to {path}")
    print("RESULT " + json.dumps(summary), flush=True)
    return summary


def train_nodes(ranks: list[dict], batch_size: int) -> dict:
    """Per train node (IP): its training workers, their mean step and data wait, and the
    images/s they train (each worker `batch_size` images a step)."""
    out = {}
    for r in ranks:
        out.setdefault(r["trainer_node"], []).append(r)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {ip: {"workers": len(rs), "mean_step_s": mean([r["mean_step_s"] for r in rs]),
                 "mean_data_wait_s": mean([r["mean_data_wait_s"] for r in rs]),
                 "images_per_s": sum(batch_size / r["mean_step_s"] for r in rs if r["mean_step_s"])}
            for ip, rs in sorted(out.items())}


def ranks_in_sync(ranks: list[dict]) -> bool | None:
    """True where every worker's parameters ended bit for bit equal (DDP's promise), False
    where they differ; None where the job gave no model to compare or one worker trained."""
    digests = [r.get("params_digest") for r in ranks]
    if len(digests) < 2 or None in digests:
        return None
    return len(set(digests)) == 1


def cpu_use_by_node_type(nodes: dict, metrics: dict) -> dict:
    """Per node type: the share of its cores the job's work kept busy while training
    (preprocessing CPU seconds on its nodes, plus the trainer's own where it ran), out of
    cores x training seconds. Ray's own daemons are not counted."""
    out = {}
    for ip, node in nodes.items():
        row = out.setdefault(node["type"], {"nodes": 0, "cores": 0.0, "busy_cpu_s": 0.0})
        row["nodes"] += 1
        row["cores"] += node["cores"]
        row["busy_cpu_s"] += metrics["preprocess_cpu_s"].get(ip, 0.0)
        # every training worker's own CPU (rank 0's alone from a job of an older raykit)
        trainers = metrics.get("ranks") or [{"trainer_node": metrics["trainer_node"],
                                             "trainer_cpu_s": metrics["trainer_cpu_s"]}]
        row["busy_cpu_s"] += sum(r["trainer_cpu_s"] for r in trainers if r["trainer_node"] == ip)
    for row in out.values():
        window = row["cores"] * metrics["train_s"]
        row["utilization"] = min(1.0, row["busy_cpu_s"] / window) if window > 0 else 0.0
    return out


def warnings_of(metrics: dict) -> list[str]:
    """Figures the summary lacks, each in one line (printed, and kept in the summary)."""
    if metrics.get("gpu_utilization_error"):
        return [f"the GPU's utilization is missing: NVML could not be read "
                f"({metrics['gpu_utilization_error']}); trainer_utilization falls back to the busy "
                "share of each step, and the diagnosis cannot tell a busy GPU from a host-bound "
                "trainer. Install nvidia-ml-py (requirements.txt pins it) on the GPU node."]
    return []
