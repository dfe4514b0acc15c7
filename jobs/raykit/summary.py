"""A job's summary, from the measured figures (measure.py: rank 0's steps, every rank's
preprocessing and train nodes) and the cluster's shape (cluster.py): throughput, the data
wait, each train node's figures, the preprocessing cost per image, nodes lost or
preempted, retried tasks, CPU use per node type, and the diagnosis (diagnosis.py). In the
driver, after trainer.fit():

    s = summary.summarize("my_job", result.metrics, shape, workers=..., batch_size=32, wall_s=...)
    summary.emit(s)   # prints it, and the RESULT line the kit keeps in build/results/

What `make submit` keeps in build/results/, and `make plan PROFILE=` and `make bench` read.
"""

import json
import os
import re
import textwrap
import time
from pathlib import Path

from raykit import autopilot, contract
from raykit.diagnosis import diagnose
from raykit.measure import finite
from raykit.verdict import priced_verdict, verdict_text


def summarize(job: str, metrics: dict, shape: dict, *, workers: int, batch_size: int,
              wall_s: float, extra: dict | None = None) -> dict:
    """The job's summary from rank 0's metrics (TrainProfile.metrics) and the cluster's
    shape: what print_summary prints and `make plan PROFILE=` reads."""
    import ray

    images_per_step = batch_size * workers
    preempted = preempted_nodes(shape["nodes"])
    types = node_types(shape["nodes"])
    mean_step = metrics["mean_step_s"] or float("nan")
    fit_began = time.time() - wall_s
    held = node_seconds(fit_began)  # what the run held, node type by node type
    run = metrics.get("steady") or {}
    # the diagnosis judges the steady flow where the run reached it: the start-up's stock
    # feeds a trainer at its own pace, whatever the preprocessing delivers
    judged_step = run.get("steady_step_s") or metrics["mean_step_s"]
    judged_wait = run["steady_wait_s"] if run.get("steady") else metrics["mean_data_wait_s"]
    return with_verdict({
        "job": job, "workers": workers, "batch_size": batch_size, **(extra or {}),
        **{k: metrics.get(k) for k in ("steps", "restarts", "resumed_from_step", "device",
                                       "trainer_node", "warmup_s", "mean_step_s",
                                       "mean_data_wait_s", "max_data_wait_s",
                                       "preprocess_nodes", "final_loss")},
        "images_per_s": images_per_step / mean_step,
        # the start-up, the stock and the steady flow (steady.py); the first step also from
        # trainer.fit()'s call, which adds Ray Train's controller and workers' start
        "steady": run or None,
        "first_step_s": run.get("first_step_s"),
        "first_step_after_fit_s": (metrics["first_step_at"] - fit_began
                                   if metrics.get("first_step_at") else None),
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
        "train_nodes": {ip: {"type": types.get(ip)} | node for ip, node
                        in train_nodes(metrics.get("ranks") or [], batch_size).items()},
        "node_types": types,
        "ranks_in_sync": ranks_in_sync(metrics.get("ranks") or []),
        "cpu_use_by_node_type": cpu_use_by_node_type(shape["nodes"], metrics),
        "preprocess_cpus": shape["preprocess_cpus"],
        "preprocess_shares_trainer_cpus": shape["preprocess_shares_trainer_cpus"],
        "wall_s": wall_s,
        # each node type's node-seconds while the run ran, priced with what the kit passed
        "node_seconds": held,
        "bill": bill(held, os.environ.get(contract.NODE_PRICES_ENV, "")),
        "autopilot": autopilot.last_report(),  # None where none steered
        # nodes that left during the run, drained on a spot notice or lost; Ray Data re-ran
        # the preprocessing they took with them elsewhere (the retried tasks)
        "preempted_nodes": preempted,
        "lost_nodes": lost_nodes({ip: node for ip, node in shape["nodes"].items()
                                  if ip not in preempted}),  # no need to probe those
        "retried_preprocessing_tasks": retried_tasks(ray.get_runtime_context().get_job_id()),
        "diagnosis": diagnose(
            mean_step_s=judged_step, mean_wait_s=judged_wait,
            max_wait_s=metrics["max_data_wait_s"], steps=metrics["steps"],
            mean_compute_s=metrics["mean_trainer_compute_s"], images_per_step=images_per_step,
            preprocess_s_per_image=metrics["preprocess_s_per_image"],
            preprocess_cpus=shape["preprocess_cpus"], worker_type=shape["worker_type"],
            cpus_per_worker=shape["cpus_per_worker"] or 1, gpu_busy=metrics["gpu_utilization"],
            on_gpu=str(metrics["device"]).startswith("cuda"), train_type=shape.get("train_type"),
            steps_needed=None if run.get("steady", True) else run.get("steps_needed")),
        "warnings": warnings_of(metrics),
    })


def with_verdict(summary: dict) -> dict:
    """The summary with its priced verdict (verdict.py): the stall, its cause, the workers
    that would remove it, $ per million images now and with them."""
    trainers = list(summary.get("train_nodes") or {}) or [summary.get("trainer_node")]
    verdict = priced_verdict(
        summary["diagnosis"], summary.get("steady_images_per_s") or summary["images_per_s"],
        summary["node_types"], trainers,
        summary.get("preprocess_nodes") or {}, summary.get("bytes_per_image"),
        os.environ.get(contract.NODE_PRICES_ENV, ""))
    diagnosis = summary["diagnosis"]
    if verdict["cause"] == "network":  # the diagnosis must not ask for CPUs the link cannot carry
        diagnosis = diagnosis | {"verdict": "network-bound", "add_cpus": 0, "add_worker_nodes": 0, "text": (
            f"NETWORK-BOUND: the trainer waits for data {diagnosis['data_wait_fraction']:.0%} of each step, "
            f"and its CPU workers' images reach it about as fast as the train node's link carries them "
            f"(~{verdict['network_images_per_s']:.0f} images/s of {summary['bytes_per_image']:,.0f} bytes): "
            "more CPU workers would not help. Ship fewer bytes an image (uint8, smaller crops), "
            "preprocess on the train node, or train on a type with more bandwidth (`make plan`).")}
    return summary | {"diagnosis": diagnosis, "verdict": verdict}


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


def node_seconds(since_s: float, now_s: float | None = None, nodes=None) -> dict[str, float]:
    """Seconds each node type's nodes were up between since_s and now, nodes that joined
    or left meanwhile included: what the run held, node by node, as Ray's state API lists
    them (it keeps dead nodes, with their end time). By the node's raykit-node-type label."""
    from raykit.placement import NODE_TYPE

    now_s = now_s or time.time()
    if nodes is None:
        from ray.util.state import list_nodes
        try:
            nodes = list_nodes(detail=True, limit=10_000, raise_on_missing_output=False)
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


def bill(node_seconds: dict[str, float], prices_json: str) -> dict | None:
    """What the run's nodes cost: each type's node-seconds at its $/h, from the prices the
    kit passed (None where it passed none: a local cluster without prices_as). A type
    without a price is listed unpriced, and then no total is claimed."""
    try:
        given = contract.node_prices(prices_json)
    except ValueError as e:
        print(f"job's cost unknown: {e}", flush=True)
        return None
    if given is None:
        return None
    prices, basis = given.usd_per_hour, given.basis
    by_type = {kind: {"node_seconds": seconds, "usd_per_hour": prices.get(kind),
                      "usd": None if kind not in prices else seconds / 3600 * prices[kind]}
               for kind, seconds in node_seconds.items()}
    unpriced = sorted(kind for kind, row in by_type.items() if row["usd"] is None)
    return {"usd": None if unpriced or not by_type else sum(r["usd"] for r in by_type.values()),
            "by_type": by_type, "priced_as": basis, "unpriced": unpriced}


def node_types(nodes: dict) -> dict[str, str]:
    """Every node's type by address: those of the start (cluster_shape) and those that
    joined since, such as a lost node's replacement (its raykit-node-type label)."""
    import ray

    from raykit.placement import NODE_TYPE

    types = {ip: node["type"] for ip, node in nodes.items()}
    for n in ray.nodes():
        types.setdefault(n["NodeManagerAddress"], n.get("Labels", {}).get(NODE_TYPE) or "worker")
    return dict(sorted(types.items()))


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


LABEL_WIDTH, WIDTH = 17, 88  # the table's label column, and a terminal's width


def row(label: str, text: str) -> None:
    """One row of the summary table: its text wrapped under its label, never one line of
    300 characters, and never a figure apart from its unit ("26.5 s")."""
    text = re.sub(r"(\d) (?=s\b|ms\b|images\b)", "\\1\u00a0", text)  # textwrap keeps these together
    print(textwrap.fill(text, WIDTH, initial_indent=f"{label:<{LABEL_WIDTH}}",
                        subsequent_indent=" " * LABEL_WIDTH, break_on_hyphens=False).replace("\u00a0", " "))


def print_summary(s: dict, headline: str = "") -> None:
    print(f"\n=== {s['job']} summary ===")
    row("steps", f"{s['steps']} x {s['workers']} worker(s) x {s['batch_size']} images "
                 f"({headline + ' on ' if headline else ''}{s['device']}, node {s['trainer_node']})")
    row("throughput", throughput_text(s))
    row("start-up", startup_text(s))
    row("mean step", f"{s['mean_step_s']:.3f} s = {s['mean_data_wait_s']:.3f} s waiting "
                     f"for data + {s['mean_compute_s']:.3f} s computing (every step after the first)")
    run = s.get("steady") or {}
    waits = (f"; per step p50 {run['wait_p50_s']:.3f} s, p95 {run['wait_p95_s']:.3f} s"
             if run.get("wait_p50_s") is not None else "")
    row("trainer idle", f"{s['data_wait_fraction']:.0%} of each step "
                        f"(longest wait {s['max_data_wait_s']:.2f} s{waits})")
    if len(s.get("train_nodes") or {}) > 1:
        for ip, node in s["train_nodes"].items():
            row("train node", f"{ip}: {node['workers']} worker(s), {node['images_per_s']:.1f} "
                              f"images/s, mean step {node['mean_step_s']:.3f} s (data wait "
                              f"{node['mean_data_wait_s']:.3f} s)")
    if s.get("ranks_in_sync") is not None:
        row("replicas", ("in sync: every worker's parameters are equal" if s["ranks_in_sync"]
                        else "OUT OF SYNC: the workers' parameters differ"))
    nodes = ", ".join(f"{ip}: {n} images" for ip, n in sorted(s["preprocess_nodes"].items()))
    row("preprocessed on", f"{nodes or '(no measured stage: wrap it in measure.measured)'}")
    if s.get("preprocess_images_measured"):
        left_out = (f"each worker process's first batch ({s['preprocess_warmup_images']} images: "
                    "imports, start-up) left out" if not s["preprocess_cost_includes_warmup"]
                    else "every batch was its process's first: start-up included, so it overstates")
        row("preprocess cost", f"{s['preprocess_s_per_image'] * 1000:.2f} ms CPU per image over "
                               f"{s['preprocess_images_measured']} images ({left_out})")
    if s.get("restarts"):
        row("restarts", f"{s['restarts']} (the last resumed from the checkpoint of step "
                        f"{s['resumed_from_step']}; its means cover the steps after it)")
    if s["preempted_nodes"]:
        row("preempted", f"{', '.join(s['preempted_nodes'])} (drained on a spot notice: "
                         "no new work went there)")
    if s["lost_nodes"]:
        row("lost nodes", f"{', '.join(s['lost_nodes'])} (their preprocessing was re-run)")
    if s["retried_preprocessing_tasks"]:
        row("retried work", f"{s['retried_preprocessing_tasks']} preprocessing task(s) re-run")
    for warning in s["warnings"]:
        row("WARNING", f"{warning}")
    row("diagnosis", s["diagnosis"]["text"])
    if s.get("autopilot"):
        row("autopilot", autopilot_text(s["autopilot"]))
    if s.get("verdict"):
        row("verdict", verdict_text(s["verdict"]))
    row("job's cost", bill_text(s.get("node_seconds") or {}, s.get("bill")))
    print()


def throughput_text(s: dict) -> str:
    """The steady rate where the run reached it, beside the whole run's; else why not."""
    run = s.get("steady") or {}
    overall = f"{s['images_per_s']:.1f} images/s over every step after the first"
    if run.get("steady"):
        return (f"{run['steady_images_per_s']:.1f} images/s steady (steps {run['steady_from_step']}-"
                f"{s['steps']}: data wait {run['steady_wait_share']:.0%}); {overall}")
    if not run:
        return overall
    return (f"{overall}; NO STEADY STATE: {run['stock_steps']} of the {s['steps'] - 1} steps after "
            "the first ate the batches made during the start-up, too few were left to measure "
            f"the steady flow: run at least {run['steps_needed']} steps (--steps)")


def startup_text(s: dict) -> str:
    """The start-up: the first step (from the training function's start, and from
    trainer.fit()'s), the ramp after it, steps 2-5's wait, and when every preprocessing
    node was at work."""
    run = s.get("steady") or {}
    if run.get("first_step_s") is None:
        return f"first step {s['warmup_s']:.1f} s"
    text = f"first step {run['first_step_s']:.1f} s into the training function"
    if s.get("first_step_after_fit_s") is not None:
        text += f" ({s['first_step_after_fit_s']:.1f} s after trainer.fit() began)"
    if run.get("ramp_s") is not None:
        text += f"; below its steady rate for {run['ramp_s']:.1f} s after it (ramp)"
    if run.get("early_wait_s") is not None:
        text += f"; steps 2-5 waited {run['early_wait_s']:.3f} s each"
        if run.get("steady_wait_s") is not None:
            text += f" (steady: {run['steady_wait_s']:.3f} s)"
    started = s.get("preprocess_node_start_s") or {}
    if started:
        text += (f"; every preprocessing node ({len(started)}) at work "
                 + (f"by {max(started.values()):.1f} s after the first batch" if max(started.values()) > 0
                    else "by the first batch"))
    return text


def autopilot_text(report: dict) -> str:
    held = [p["preprocess_nodes"] for p in report["timeline"]] or [0]
    mean = report["mean_wait_share"]
    return (f"steered {report['node_type']} between {min(held)} and {max(held)} node(s) "
            f"({report['min_nodes']}-{report['max_nodes']} allowed), {len(report['changes'])} change(s); "
            f"trainers waited {'?' if mean is None else f'{mean:.0%}'} of each step on average "
            f"(target {report['target_wait_share']:.0%})"
            + (f"; {report['given_up']} node(s) never joined" if report["given_up"] else ""))


def bill_text(node_seconds: dict, run_bill: dict | None) -> str:
    held = ", ".join(f"{kind} {seconds:.0f} s" for kind, seconds in node_seconds.items()) or "no node seen"
    if run_bill is None:
        return (f"not priced (node time: {held}): the kit passed no prices (a local cluster "
                "without prices_as, or an instance type scripts/catalog.py does not price)")
    if run_bill["usd"] is None:
        return f"not priced: no price for {', '.join(run_bill['unpriced'])} (node time: {held})"
    return (f"${run_bill['usd']:.4f} for the nodes' time while the job ran ({held}; {run_bill['priced_as']}); "
            "not in it: `make up`, the wait for workers, idle minutes before autostop")
