"""A profile any Ray Train job can emit: is it data-bound, and how many CPU workers would
feed it. A few lines in the job (jobs/template/main.py shows them all):

    # preprocessing: each batch records the node that ran it and its CPU seconds
    ds = ds.map_batches(profile.measured(my_preprocess), ...)

    # the training loop, on each Ray Train worker
    steps = profile.TrainProfile()
    for batch in steps.batches(shard.iter_batches(batch_size=32)):
        ...                               # the step: forward, backward, optimizer
        steps.step_done(batch)
    profile.report(steps.metrics())       # ray.train.report, from every rank

    # the driver, after trainer.fit()
    summary = profile.summarize("my_job", result.metrics, shape, batch_size=32)
    profile.emit(summary, "~/raykit-results/my_job.json")   # prints it, the RESULT line

The summary holds the data wait, the trainer's images/s when fed, the preprocessing CPU
seconds per image and the diagnosis (diagnosis.py): what `make plan PROFILE=` and
`make bench` read. Figures, not guesses: CPU seconds come from the threads that did the
work, the GPU's utilization from NVML.
"""

import json
import math
import os
import tempfile
import time
from pathlib import Path

from raykit import placement
from raykit.diagnosis import diagnose

NODE_COLUMN = "node"
CPU_COLUMN = "preprocess_cpu_s"


# --- preprocessing side ----------------------------------------------------------------

def measured(fn):
    """Wrap a map_batches function (dict of numpy arrays in and out): each output batch
    gains the node that ran it and, added to what earlier measured stages counted, the CPU
    seconds per row this stage spent (thread time: a core shared with other work does not
    inflate it). Keep torch at one thread in fn: one Ray CPU per task."""
    import numpy as np

    def run(batch: dict, **kwargs) -> dict:
        import ray

        start = time.thread_time()
        out = fn(batch, **kwargs)
        seconds = time.thread_time() - start
        rows = len(next(iter(out.values())))
        earlier = batch.get(CPU_COLUMN) if isinstance(batch, dict) else None
        if earlier is None or len(earlier) != rows:
            earlier = np.zeros(rows)
        out[CPU_COLUMN] = earlier + seconds / max(1, rows)
        out[NODE_COLUMN] = np.array([ray.util.get_node_ip_address()] * rows)
        return out

    run.__name__ = getattr(fn, "__name__", type(fn).__name__)  # Ray Data names the stage by it
    return run


# --- the training loop ---------------------------------------------------------------------

class TrainProfile:
    """Times a Ray Train worker's loop: the wait for each batch, the step's compute, and
    which nodes preprocessed the images it trained on."""

    def __init__(self, device=None):
        import ray.train.torch

        self.device = device if device is not None else ray.train.torch.get_device()
        on_gpu = self.device.type == "cuda"
        # The trainer's compute per step had it the hardware to itself: wall time on a GPU;
        # on a CPU its thread's CPU time (torch runs one thread there), which a core shared
        # with preprocessing (a one-core local head) does not inflate.
        self._compute_clock = time.perf_counter if on_gpu else time.thread_time
        self._gpu = GpuUtilization(self.device) if on_gpu else None
        self.waits, self.steps_s, self.computes_s = [], [], []
        self.nodes, self.cpu_s = {}, {}
        self._start = self._last = None
        self._cpu_start = time.process_time()

    def batches(self, iterable):
        """The batches of `iterable`, each timed from the end of the last step."""
        self._start = self._last = time.perf_counter()
        for batch in iterable:
            self._got = time.perf_counter()
            self._compute_start = self._compute_clock()
            yield batch

    def step_done(self, batch: dict) -> None:
        """Call after the step's optimizer.step(): it waits for the GPU's work first."""
        import numpy as np

        if self.device.type == "cuda":
            import torch
            torch.cuda.synchronize()
        self.computes_s.append(self._compute_clock() - self._compute_start)
        done = time.perf_counter()
        self.waits.append(self._got - self._last)
        self.steps_s.append(done - self._last)
        self._last = done
        if NODE_COLUMN in batch:
            for node in np.unique(batch[NODE_COLUMN]):
                here, ip = batch[NODE_COLUMN] == node, str(node)
                self.nodes[ip] = self.nodes.get(ip, 0) + int(here.sum())
                if CPU_COLUMN in batch:
                    self.cpu_s[ip] = self.cpu_s.get(ip, 0.0) + float(batch[CPU_COLUMN][here].sum())

    def pause_done(self) -> None:
        """After work that is neither data wait nor a step (a checkpoint save)."""
        self._last = time.perf_counter()

    def recent(self, n: int) -> tuple[float, float]:
        """(mean step s, mean data wait s) of the last n steps: for progress lines."""
        return (sum(self.steps_s[-n:]) / len(self.steps_s[-n:]),
                sum(self.waits[-n:]) / len(self.waits[-n:]))

    def metrics(self, **extra) -> dict:
        """The worker's figures, for ray.train.report; the first step (the pipeline's
        start-up) stays out of the means."""
        import ray

        steady = slice(1, None) if len(self.steps_s) > 1 else slice(None)
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        images = int(sum(self.nodes.values()))
        gpu_busy = self._gpu.stop() if self._gpu else None
        return {
            "steps": len(self.steps_s),
            "train_s": (self._last - self._start) if self._start is not None else 0.0,
            "trainer_cpu_s": time.process_time() - self._cpu_start,
            "gpu_utilization": gpu_busy,
            "gpu_utilization_error": ((self._gpu.error or "no sample")
                                      if self._gpu and gpu_busy is None else None),
            "warmup_s": self.steps_s[0] if self.steps_s else 0.0,
            "mean_step_s": mean(self.steps_s[steady]),
            "mean_data_wait_s": mean(self.waits[steady]),
            "max_data_wait_s": max(self.waits[steady], default=0.0),
            "mean_trainer_compute_s": mean(self.computes_s[steady]),
            "images_seen": images,
            "preprocess_s_per_image": sum(self.cpu_s.values()) / max(1, images),
            "preprocess_nodes": self.nodes,
            "preprocess_cpu_s": self.cpu_s,
            "trainer_node": ray.util.get_node_ip_address(),
            "device": str(self.device),
        } | extra


def report(metrics: dict, write_files=None) -> None:
    """ray.train.report from every rank (Train V2's report is collective). Train V2 keeps
    the metrics of reports that carry a checkpoint: rank 0 attaches one holding the metrics
    (and what write_files(directory) adds), which Ray Train copies into the run's storage."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0:
            Path(tmp, "metrics.json").write_text(json.dumps(finite(metrics)))
            if write_files:
                write_files(tmp)
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report(metrics, checkpoint=checkpoint)


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


# --- the driver ----------------------------------------------------------------------------

def cluster_shape() -> dict:
    """What the cluster offers, read from its nodes' labels (placement.py): trainer slots,
    GPUs, preprocessing CPUs, its nodes, and the selectors a job places its work with."""
    import ray

    alive = [n for n in ray.nodes() if n["Alive"]]
    nodes = {}  # ip -> what the summary needs of each node
    for n in alive:
        labels, res = n.get("Labels", {}), n["Resources"]
        slots = placement.trainer_slots(labels)
        nodes[n["NodeManagerAddress"]] = {
            "id": n["NodeID"], "cpus": res.get("CPU", 0), "trainer_slots": slots,
            "type": labels.get(placement.NODE_TYPE) or ("head" if "node:__internal_head__" in res else "worker"),
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
                "trainer slots (one per GPU); lower --workers or use a larger head")
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


def summarize(job: str, metrics: dict, shape: dict, *, workers: int, batch_size: int,
              wall_s: float, extra: dict | None = None) -> dict:
    """The job's summary from rank 0's metrics (TrainProfile.metrics) and the cluster's
    shape: what print_summary prints and `make plan PROFILE=` reads."""
    import ray

    images_per_step = batch_size * workers
    preempted = preempted_nodes(shape["nodes"])
    mean_step = metrics["mean_step_s"] or float("nan")
    return {
        "job": job, "workers": workers, "batch_size": batch_size, **(extra or {}),
        **{k: metrics.get(k) for k in ("steps", "restarts", "resumed_from_step", "device",
                                       "trainer_node", "warmup_s", "mean_step_s",
                                       "mean_data_wait_s", "max_data_wait_s",
                                       "preprocess_nodes", "final_loss")},
        "images_per_s": images_per_step / mean_step,
        "mean_compute_s": metrics["mean_step_s"] - metrics["mean_data_wait_s"],
        "mean_trainer_compute_s": metrics["mean_trainer_compute_s"],
        "data_wait_fraction": metrics["mean_data_wait_s"] / mean_step,
        "preprocess_s_per_image": metrics["preprocess_s_per_image"],
        # GPU utilization (NVML) where the trainer has a GPU; else the share of each step
        # it spent computing rather than waiting for data.
        "trainer_utilization": (metrics["gpu_utilization"] if metrics["gpu_utilization"] is not None
                                else 1 - metrics["mean_data_wait_s"] / mean_step),
        "trainer_utilization_source": "nvml" if metrics["gpu_utilization"] is not None else "busy share",
        "cpu_use_by_node_type": cpu_use_by_node_type(shape["nodes"], metrics),
        "preprocess_cpus": shape["preprocess_cpus"],
        "preprocess_shares_trainer_cpus": shape["preprocess_shares_trainer_cpus"],
        "wall_s": wall_s,
        # nodes that left during the run, drained on a spot notice or lost; Ray Data re-ran
        # the preprocessing they took with them elsewhere (the retried tasks)
        "preempted_nodes": preempted,
        "lost_nodes": lost_nodes({ip: node for ip, node in shape["nodes"].items()
                                  if ip not in preempted}),  # no need to probe those
        "retried_preprocessing_tasks": retried_tasks(ray.get_runtime_context().get_job_id()),
        "diagnosis": diagnose(
            mean_step_s=metrics["mean_step_s"], mean_wait_s=metrics["mean_data_wait_s"],
            mean_compute_s=metrics["mean_trainer_compute_s"], images_per_step=images_per_step,
            preprocess_s_per_image=metrics["preprocess_s_per_image"],
            preprocess_cpus=shape["preprocess_cpus"], worker_type=shape["worker_type"],
            cpus_per_worker=shape["cpus_per_worker"] or 1, gpu_busy=metrics["gpu_utilization"],
            on_gpu=str(metrics["device"]).startswith("cuda")),
        "warnings": warnings_of(metrics),
    }


def emit(summary: dict, results: str, headline: str = "") -> dict:
    """Print the summary, write it as JSON to `results`, print the RESULT line (what
    `make submit` keeps in build/results/). Returns the summary as written."""
    print_summary(summary, headline)
    path = Path(os.path.expanduser(results))
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = finite(summary)  # standard JSON: the kit refuses Infinity when it reads it back
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


def print_summary(s: dict, headline: str = "") -> None:
    print(f"\n=== {s['job']} summary ===")
    print(f"steps            {s['steps']} x {s['workers']} worker(s) x {s['batch_size']} images "
          f"({headline + ' on ' if headline else ''}{s['device']}, node {s['trainer_node']})")
    print(f"throughput       {s['images_per_s']:.1f} images/s")
    print(f"mean step        {s['mean_step_s']:.3f} s = {s['mean_data_wait_s']:.3f} s waiting "
          f"for data + {s['mean_compute_s']:.3f} s computing (first step {s['warmup_s']:.1f} s "
          "excluded)")
    print(f"trainer idle     {s['data_wait_fraction']:.0%} of each step "
          f"(longest wait {s['max_data_wait_s']:.2f} s)")
    nodes = ", ".join(f"{ip}: {n} images" for ip, n in sorted(s["preprocess_nodes"].items()))
    print(f"preprocessed on  {nodes or '(no measured stage: wrap it in profile.measured)'}")
    if s.get("restarts"):
        print(f"restarts         {s['restarts']} (the last resumed from the checkpoint of step "
              f"{s['resumed_from_step']}; its means cover the steps after it)")
    if s["preempted_nodes"]:
        print(f"preempted        {', '.join(s['preempted_nodes'])} (drained on a spot notice: "
              "no new work went there)")
    if s["lost_nodes"]:
        print(f"lost nodes       {', '.join(s['lost_nodes'])} (their preprocessing was re-run)")
    if s["retried_preprocessing_tasks"]:
        print(f"retried work     {s['retried_preprocessing_tasks']} preprocessing task(s) re-run")
    for warning in s["warnings"]:
        print(f"WARNING          {warning}")
    print(f"diagnosis        {s['diagnosis']['text']}\n")
