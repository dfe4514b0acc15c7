"""ViT on synthetic images: Ray Train trains on the GPU node(s) while Ray Data preprocesses
on the CPU workers. `make submit JOB=vit_synthetic ARGS="--steps 50"`

The seed technique (a heterogeneous cluster feeding a GPU) on Ray 2.60's APIs: Dataset.
map_batches for preprocessing, ray.train.get_dataset_shard in the training loop, ray.train.
report for the results. Preprocessing tasks ask for the `preprocess` resource that only the
CPU workers (in a heterogeneous mix) declare, so they never take the trainer's CPUs.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from diagnosis import diagnose

MODEL_PRESETS = {
    # the seed's default: timm's VisionTransformer defaults, ViT-B/16 (86M parameters)
    "base": {"patch_size": 16, "embed_dim": 768, "depth": 12, "num_heads": 12},
    # small enough to train at a few steps/s on a CPU: the local stand-in
    "tiny": {"patch_size": 16, "embed_dim": 192, "depth": 4, "num_heads": 3},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12, help="training steps per worker")
    p.add_argument("--batch-size", type=int, default=16, help="images per step per worker")
    p.add_argument("--image-size", type=int, default=224, help="square images, multiple of 16")
    p.add_argument("--blur-count", type=int, default=10, help="GaussianBlur passes per image (0-50)")
    p.add_argument("--blur-kernel", type=int, default=11, help="GaussianBlur kernel size, odd")
    p.add_argument("--model", choices=[*MODEL_PRESETS, "auto"], default="auto",
                   help="ViT preset; auto: base on a GPU, tiny on CPU")
    p.add_argument("--workers", type=int, default=0,
                   help="training workers; 0: one per `trainer` slot of the cluster (one per GPU)")
    p.add_argument("--log-every", type=int, default=5, help="print the mean step time every N steps")
    p.add_argument("--prefetch-batches", type=int, default=4, help="batches buffered ahead of the trainer")
    p.add_argument("--preprocess-resource", default="preprocess",
                   help="custom resource preprocessing tasks need ('' lets them run anywhere)")
    p.add_argument("--checkpoint-every", type=int, default=50,
                   help="save model, optimizer and step every N steps (0: never); a "
                        "training worker that dies restarts from the last one")
    p.add_argument("--max-failures", type=int, default=2,
                   help="training-worker failures Ray Train recovers from before the job fails")
    p.add_argument("--storage-path", default="",
                   help="where Ray Train keeps the run's checkpoints; a path every training "
                        "node can reach (or s3://...); empty: a fresh private temp dir, removed "
                        "after the run")
    p.add_argument("--results", default="~/raykit-results/vit_synthetic.json",
                   help="where the summary JSON is written")
    args = p.parse_args(argv)
    problems = []
    for name in ("steps", "batch_size", "image_size", "blur_kernel", "log_every", "prefetch_batches"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    if args.image_size % 16:
        problems.append(f"--image-size must be a multiple of the ViT patch size 16 (got {args.image_size})")
    if args.blur_kernel % 2 == 0:
        problems.append(f"--blur-kernel must be odd (got {args.blur_kernel})")
    if not 0 <= args.blur_count <= 50:
        problems.append(f"--blur-count must be between 0 and 50 (got {args.blur_count})")
    if args.workers < 0:
        problems.append(f"--workers must be 0 (auto) or more (got {args.workers})")
    for name in ("checkpoint_every", "max_failures"):
        if getattr(args, name) < 0:
            problems.append(f"--{name.replace('_', '-')} must be 0 or more (got {getattr(args, name)})")
    if problems:
        p.error("; ".join(problems))  # exits 2 before Ray starts any work
    return args


def build_model(preset: str, image_size: int):
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=image_size, num_classes=1000, **MODEL_PRESETS[preset])


def train_loop(config: dict) -> None:
    """One Ray Train worker: pull preprocessed batches from its shard, train, report."""
    import numpy as np
    import ray.train
    import ray.train.torch
    import torch

    model = ray.train.torch.prepare_model(build_model(config["model"], config["image_size"]))
    device = ray.train.torch.get_device()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    rank = ray.train.get_context().get_world_rank()
    shard = ray.train.get_dataset_shard("train")
    resumed = load_checkpoint(model, optimizer)  # after a failure: the last checkpoint
    first_step = resumed["step"] if resumed else 0
    restarts = resumed["restarts"] + 1 if resumed else 0
    if rank == 0 and resumed:
        print(f"restart {restarts}: resuming from the checkpoint of step {first_step}", flush=True)

    # The trainer's compute per step had it the hardware to itself: wall time on a GPU;
    # on a CPU its thread's CPU time (torch runs one thread there), which a core shared
    # with preprocessing (a one-core local head) does not inflate.
    compute_clock = time.perf_counter if device.type == "cuda" else time.thread_time
    gpu_busy = GpuUtilization(device) if device.type == "cuda" else None
    waits, steps_s, computes_s, nodes, preprocess_cpu_s = [], [], [], {}, {}
    batches = shard.iter_batches(batch_size=config["batch_size"], batch_format="numpy",
                                 prefetch_batches=config["prefetch_batches"], drop_last=True)
    start = last = time.perf_counter()
    cpu_start = time.process_time()
    for batch in batches:
        got_data = time.perf_counter()
        compute_start = compute_clock()
        images = torch.from_numpy(batch["image"].copy()).to(device, non_blocking=True)
        labels = torch.from_numpy(batch["label"].copy()).to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        computes_s.append(compute_clock() - compute_start)
        done = time.perf_counter()
        waits.append(got_data - last)
        steps_s.append(done - last)
        last = done
        for node in np.unique(batch["node"]):
            here, ip = batch["node"] == node, str(node)
            nodes[ip] = nodes.get(ip, 0) + int(here.sum())
            preprocess_cpu_s[ip] = (preprocess_cpu_s.get(ip, 0.0)
                                    + float(batch["preprocess_cpu_s"][here].sum()))
        step = first_step + len(steps_s)
        if config["checkpoint_every"] and step % config["checkpoint_every"] == 0 \
                and step < config["steps"]:
            save_checkpoint(model, optimizer, step, restarts, rank)
            last = time.perf_counter()  # the save is neither data wait nor a step
        if rank == 0 and step % config["log_every"] == 0:
            recent = float(np.mean(steps_s[-config["log_every"]:]))
            print(f"step {step}/{config['steps']}: mean step {recent:.3f} s "
                  f"(data wait {np.mean(waits[-config['log_every']:]):.3f} s), "
                  f"{config['batch_size'] / recent:.1f} images/s, "
                  f"~{(config['steps'] - step) * recent:.0f} s left, loss {loss.item():.3f}",
                  flush=True)
        if step >= config["steps"]:  # after a restart the shard starts over: stop at the total
            break
    # The first step includes the pipeline's start-up: keep it out of the means.
    steady = slice(1, None) if len(steps_s) > 1 else slice(None)
    images_seen = int(sum(nodes.values()))
    metrics = {
        "steps": first_step + len(steps_s),
        "restarts": restarts,
        "resumed_from_step": first_step,
        "train_s": last - start,
        "trainer_cpu_s": time.process_time() - cpu_start,
        "gpu_utilization": gpu_busy.stop() if gpu_busy else None,
        "gpu_utilization_error": (gpu_busy.error or "no sample") if gpu_busy and not gpu_busy.samples else None,
        "warmup_s": steps_s[0] if steps_s else 0.0,
        "mean_step_s": float(np.mean(steps_s[steady])),
        "mean_data_wait_s": float(np.mean(waits[steady])),
        "max_data_wait_s": float(np.max(waits[steady])),
        "mean_trainer_compute_s": float(np.mean(computes_s[steady])),
        "images_seen": images_seen,
        "preprocess_s_per_image": sum(preprocess_cpu_s.values()) / max(1, images_seen),
        "preprocess_nodes": nodes,
        "preprocess_cpu_s": preprocess_cpu_s,
        "trainer_node": ray.util.get_node_ip_address(),
        "device": str(device),
        "final_loss": float(loss.item()),
    }
    # Train V2 keeps the metrics of reports that carry a checkpoint: this one holds just
    # the summary (no model weights).
    report(metrics, rank, lambda tmp: Path(tmp, "metrics.json").write_text(json.dumps(metrics)))


def report(metrics: dict, rank: int, write_files) -> None:
    """ray.train.report from every rank (Train V2's report is collective); rank 0 attaches
    a checkpoint of the files write_files(directory) puts in a fresh temp dir, which Ray
    Train copies into the run's storage."""
    import ray.train

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0:
            write_files(tmp)
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report(metrics, checkpoint=checkpoint)


def save_checkpoint(model, optimizer, step: int, restarts: int, rank: int) -> None:
    """Model, optimizer and step, for a restarted training worker (load_checkpoint)."""
    import torch

    report({"step": step}, rank, lambda tmp: torch.save(
        {"model": getattr(model, "module", model).state_dict(),
         "optimizer": optimizer.state_dict(), "step": step, "restarts": restarts},
        Path(tmp, "state.pt")))


def load_checkpoint(model, optimizer) -> dict | None:
    """The last checkpoint's step and restart count, with model and optimizer restored;
    None on a first start."""
    import ray.train
    import torch

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        path = Path(directory, "state.pt")
        if not path.exists():  # the summary-only checkpoint of a finished run
            return None
        state = torch.load(path, map_location="cpu", weights_only=True)
    getattr(model, "module", model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return {"step": state["step"], "restarts": state["restarts"]}


class GpuUtilization:
    """The GPU's mean utilization (NVML, as nvidia-smi shows it) while training: a thread
    samples it every 0.1 s. The one way to see a starved GPU from its own side. Where NVML
    cannot be read (nvidia-ml-py missing, no driver library), the first sample's error is
    kept in `error` and the figure is None: the summary warns instead of guessing."""

    def __init__(self, device):
        import threading

        import torch

        self.samples, self.stopped, self.error = [], threading.Event(), None

        def sample():
            while not self.stopped.wait(0.1):
                try:
                    self.samples.append(torch.cuda.utilization(device))
                except Exception as e:  # noqa: BLE001 (any failure: no figure, said once)
                    self.error = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                    return
        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()

    def stop(self) -> float | None:
        self.stopped.set()
        self.thread.join()
        return sum(self.samples) / len(self.samples) / 100 if self.samples else None


def cluster_shape(resource: str) -> dict:
    """What the cluster offers: trainer slots, GPUs, preprocessing CPUs and its nodes."""
    import ray

    total = ray.cluster_resources()
    nodes = {}  # ip -> what the summary needs of each node
    for n in ray.nodes():
        if not n["Alive"]:
            continue
        labels, res = n.get("Labels", {}), n["Resources"]
        # the local provider labels its nodes with their type; elsewhere, head or worker
        node_type = (labels.get("raykit-node-type") or labels.get("ray.io/node-group")
                     or ("head" if "node:__internal_head__" in res else "worker"))
        nodes[n["NodeManagerAddress"]] = {
            "id": n["NodeID"], "type": node_type, "cpus": res.get("CPU", 0), "trainer_slots": res.get("trainer", 0),
            "preprocess_cpus": res.get(resource, 0) if resource else res.get("CPU", 0),
            # a pinned local node's real cores, where Ray's CPU slots differ from them
            "cores": float(labels.get("raykit-cores") or res.get("CPU", 0))}
    workers = [n for n in nodes.values() if n["preprocess_cpus"] and not n["trainer_slots"]]
    return {
        "trainer_slots": int(total.get("trainer", 0)),
        "gpus": int(total.get("GPU", 0)),
        "preprocess_cpus": sum(n["preprocess_cpus"] for n in nodes.values()),
        # Where a node's trainers (one CPU each) and its preprocessing CPUs add up to more
        # than it has, they share cores: the planner's model, which counts preprocessing
        # CPUs as the trainers' suppliers, does not describe that mix.
        "preprocess_shares_trainer_cpus": any(
            n["trainer_slots"] + n["preprocess_cpus"] > n["cpus"] for n in nodes.values()
            if n["trainer_slots"] and n["preprocess_cpus"]),
        "cpus_per_worker": max((n["cpus"] for n in workers), default=0),
        "worker_type": workers[0]["type"] if workers else "CPU worker",
        "nodes": nodes,
    }


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
    """The nodes of the start that Ray drained for preemption (scripts/node/spot_watch.py, on a
    spot notice) and that have left since: they went on notice, not by surprise."""
    import ray
    from ray.core.generated.common_pb2 import NodeDeathInfo

    ips = {node["id"]: ip for ip, node in nodes.items()}
    return sorted(ips[n["NodeID"]] for n in ray.nodes() if n["NodeID"] in ips
                  and n.get("DeathReason") == NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED)


def retried_preprocessing(job_id: str) -> int | None:
    """Preprocessing tasks Ray ran more than once: retries of tasks whose worker or node
    died, and re-runs of those whose output was lost with its node (lineage
    reconstruction). Ray's task events keep one row per attempt; every attempt after a
    task's first is retried work. None where the state API does not answer."""
    from ray.util.state import list_tasks

    try:
        tasks = list_tasks(filters=[("job_id", "=", job_id)], limit=10_000,  # the API's most
                           timeout=30, raise_on_missing_output=False)
    except Exception as e:  # noqa: BLE001 (a summary without the count beats no summary)
        print(f"retried work unknown: Ray's state API failed ({type(e).__name__})", flush=True)
        return None
    return sum(1 for task in tasks if task.attempt_number > 0 and "Preprocess" in task.name)


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
        if ip == metrics["trainer_node"]:
            row["busy_cpu_s"] += metrics["trainer_cpu_s"]
    for row in out.values():
        window = row["cores"] * metrics["train_s"]
        row["utilization"] = min(1.0, row["busy_cpu_s"] / window) if window > 0 else 0.0
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    import ray
    from ray.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from pipeline import build_dataset

    ray.init()
    # Per-operator progress bars would swamp the job log that `make submit` streams.
    ray.data.DataContext.get_current().enable_progress_bars = False
    shape = cluster_shape(args.preprocess_resource)
    if shape["trainer_slots"] < 1:
        sys.exit("error: no node offers the `trainer` resource the training workers need; "
                 "start the cluster with the kit (`make up`), whose head declares it")
    if args.preprocess_resource and not shape["preprocess_cpus"]:
        sys.exit(f"error: no node offers the `{args.preprocess_resource}` resource for "
                 "preprocessing; add CPU workers, set `preprocess: true` on the head, or "
                 "pass --preprocess-resource ''")
    workers = args.workers or shape["trainer_slots"]
    if workers > shape["trainer_slots"]:
        sys.exit(f"error: --workers {workers} exceeds the cluster's {shape['trainer_slots']} "
                 "trainer slots (one per GPU); lower --workers or use a larger head")
    use_gpu = shape["gpus"] > 0
    model = args.model if args.model != "auto" else ("base" if use_gpu else "tiny")
    num_records = args.batch_size * args.steps * workers  # exactly what the steps need
    dataset = build_dataset(
        num_records, args.batch_size, args.image_size, args.blur_count, args.blur_kernel,
        resources={args.preprocess_resource: 1} if args.preprocess_resource else None)
    print(f"training ViT-{model} on {workers} worker(s) ({'GPU' if use_gpu else 'CPU'}), "
          f"{num_records} images of {args.image_size}px, {args.blur_count} blurs each, "
          f"preprocessed on {shape['preprocess_cpus']:g} CPUs", flush=True)

    resources = {"CPU": 1, "trainer": 1} | ({"GPU": 1} if use_gpu else {})
    # A fixed shared path (/tmp/raykit-train) would mix concurrent runs' checkpoints and
    # could be planted by another user; the default is this run's own, mode 0700.
    storage = args.storage_path or tempfile.mkdtemp(prefix="raykit-train-")
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"model": model, "image_size": args.image_size,
                           "batch_size": args.batch_size, "steps": args.steps,
                           "log_every": args.log_every, "prefetch_batches": args.prefetch_batches,
                           "checkpoint_every": args.checkpoint_every},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu,
                                     resources_per_worker=resources),
        datasets={"train": dataset},
        dataset_config=DataConfig(datasets_to_split=["train"]),
        run_config=RunConfig(name="vit_synthetic", storage_path=storage,
                             failure_config=FailureConfig(max_failures=args.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
    )
    started = time.perf_counter()
    try:
        metrics = trainer.fit().metrics
    finally:
        if not args.storage_path:  # the checkpoint holds only the summary, printed below
            shutil.rmtree(storage, ignore_errors=True)
    images_per_step = args.batch_size * workers
    preempted = preempted_nodes(shape["nodes"])
    summary = {
        "model": model, "workers": workers, "batch_size": args.batch_size,
        "image_size": args.image_size, "blur_count": args.blur_count,
        **{k: metrics[k] for k in ("steps", "restarts", "resumed_from_step", "device",
                                   "trainer_node", "warmup_s", "mean_step_s",
                                   "mean_data_wait_s", "max_data_wait_s", "preprocess_nodes",
                                   "final_loss")},
        "images_per_s": images_per_step / metrics["mean_step_s"],
        "mean_compute_s": metrics["mean_step_s"] - metrics["mean_data_wait_s"],
        "mean_trainer_compute_s": metrics["mean_trainer_compute_s"],
        "data_wait_fraction": metrics["mean_data_wait_s"] / metrics["mean_step_s"],
        # GPU utilization (NVML) where the trainer has a GPU; else the share of each step
        # it spent computing rather than waiting for data.
        "trainer_utilization": (metrics["gpu_utilization"] if metrics["gpu_utilization"] is not None
                                else 1 - metrics["mean_data_wait_s"] / metrics["mean_step_s"]),
        "trainer_utilization_source": "nvml" if metrics["gpu_utilization"] is not None else "busy share",
        "cpu_use_by_node_type": cpu_use_by_node_type(shape["nodes"], metrics),
        "preprocess_cpus": shape["preprocess_cpus"],
        "preprocess_shares_trainer_cpus": shape["preprocess_shares_trainer_cpus"],
        "wall_s": time.perf_counter() - started,
        # nodes that left during the run, drained on a spot notice or lost; Ray Data re-ran
        # the preprocessing they took with them elsewhere (the retried tasks)
        "preempted_nodes": preempted,
        "lost_nodes": lost_nodes({ip: node for ip, node in shape["nodes"].items()
                                  if ip not in preempted}),  # no need to probe those
        "retried_preprocessing_tasks": retried_preprocessing(ray.get_runtime_context().get_job_id()),
        "diagnosis": diagnose(
            mean_step_s=metrics["mean_step_s"], mean_wait_s=metrics["mean_data_wait_s"],
            mean_compute_s=metrics["mean_trainer_compute_s"], images_per_step=images_per_step,
            preprocess_s_per_image=metrics["preprocess_s_per_image"],
            preprocess_cpus=shape["preprocess_cpus"], worker_type=shape["worker_type"],
            cpus_per_worker=shape["cpus_per_worker"] or 1, gpu_busy=metrics["gpu_utilization"],
            on_gpu=metrics["device"].startswith("cuda")),
        "warnings": warnings_of(metrics),
    }
    print_summary(summary)
    path = Path(os.path.expanduser(args.results))
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = finite(summary)  # standard JSON: the kit refuses Infinity when it reads it back
    path.write_text(json.dumps(summary, indent=2))
    print(f"summary written to {path}")
    print("RESULT " + json.dumps(summary), flush=True)
    return 0


def finite(value):
    """The summary with each non-finite number (a rate over a time measured as zero, say)
    as None: JSON has no Infinity, and `make plan PROFILE=` reads the summary strictly.
    (The job runs on the cluster without the kit; the kit's json_text does the same.)"""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def warnings_of(metrics: dict) -> list[str]:
    """Figures the summary lacks, each in one line (printed, and kept in the summary)."""
    if metrics.get("gpu_utilization_error"):
        return [f"the GPU's utilization is missing: NVML could not be read "
                f"({metrics['gpu_utilization_error']}); trainer_utilization falls back to the busy "
                "share of each step, and the diagnosis cannot tell a busy GPU from a host-bound "
                "trainer. Install nvidia-ml-py (requirements.txt pins it) on the GPU node."]
    return []


def print_summary(s: dict) -> None:
    print("\n=== vit_synthetic summary ===")
    print(f"steps            {s['steps']} x {s['workers']} worker(s) x {s['batch_size']} images "
          f"(ViT-{s['model']} on {s['device']}, node {s['trainer_node']})")
    print(f"throughput       {s['images_per_s']:.1f} images/s")
    print(f"mean step        {s['mean_step_s']:.3f} s = {s['mean_data_wait_s']:.3f} s waiting "
          f"for data + {s['mean_compute_s']:.3f} s computing (first step {s['warmup_s']:.1f} s "
          "excluded)")
    print(f"trainer idle     {s['data_wait_fraction']:.0%} of each step "
          f"(longest wait {s['max_data_wait_s']:.2f} s)")
    nodes = ", ".join(f"{ip}: {n} images" for ip, n in sorted(s["preprocess_nodes"].items()))
    print(f"preprocessed on  {nodes}")
    if s["restarts"]:
        print(f"restarts         {s['restarts']} (the last resumed from the checkpoint of step "
              f"{s['resumed_from_step']}; its means cover the steps after it)")
    if s["preempted_nodes"]:
        print(f"preempted        {', '.join(s['preempted_nodes'])} (drained on a spot notice: "
              "no new work went there)")
    if s["lost_nodes"]:
        print(f"lost nodes       {', '.join(s['lost_nodes'])} (their preprocessing was re-run)")
    if s["retried_preprocessing_tasks"]:
        print(f"retried work     {s['retried_preprocessing_tasks']} preprocessing task(s) "
              f"of {s['batch_size']} images re-run")
    for warning in s["warnings"]:
        print(f"WARNING          {warning}")
    print(f"diagnosis        {s['diagnosis']['text']}\n")


if __name__ == "__main__":
    sys.exit(main())
