"""Measuring a Ray Train job: where its preprocessing ran and what it cost, and how long
each training step waited for data. The first part of the kit's profile (cluster.py places
the work, summary.py turns these figures into the job's summary and diagnosis):

    # preprocessing: each batch records the node that ran it and its CPU seconds
    ds = ds.map_batches(measure.measured(my_preprocess), ...)

    # the training loop, on each Ray Train worker
    steps = measure.TrainProfile()
    for batch in steps.batches(shard.iter_batches(batch_size=32)):
        ...                               # the step: forward, backward, optimizer
        steps.step_done(batch)
    measure.report(steps.metrics())       # ray.train.report, from every rank

Figures, not guesses: CPU seconds come from the threads that did the work, the GPU's
utilization from NVML. Start-up is kept out of the means on both sides: the trainer's first
step (the pipeline filling), and each preprocessing process's first batch of a stage
(imports, a model or lookup table loaded on first use: 1.7 s of CPU for `import torch`,
against 0.3 ms an image after it).
"""

import json
import os
import tempfile
import time
from pathlib import Path

from raykit import steps as step_log
from raykit.contract import finite
from raykit.steady import steady_state, stock_steps

NODE_COLUMN = "node"
CPU_COLUMN = "preprocess_cpu_s"
# True on the rows of a batch that was its worker process's first through a measured
# stage: their CPU seconds hold that process's warm-up, and stay out of the per-image cost.
WARMUP_COLUMN = "preprocess_warmup"
DONE_AT_COLUMN = "preprocess_done_at"        # when the batch was done (epoch seconds)
STARTED_AT_COLUMN = "preprocess_started_at"  # when the stage's call (its task) began
KIT_COLUMNS = (NODE_COLUMN, CPU_COLUMN, WARMUP_COLUMN, DONE_AT_COLUMN, STARTED_AT_COLUMN)
_warmed_up: set[str] = set()  # the measured stages this process has already run once


# --- preprocessing side ----------------------------------------------------------------

def measured(fn):
    """Wrap a map_batches function (dict of numpy arrays in and out, or a generator of such
    dicts, each a batch of the input's rows in order): each output batch gains the node
    that ran it, the CPU seconds per row this stage spent added to what earlier measured
    stages counted (thread time: a core shared with other work does not inflate it), when
    it was done (DONE_AT_COLUMN: the trainer tells the start-up's stock from the steady
    flow by it), and whether it was this process's first output of the stage (its
    warm-up: imports, left out of the per-image cost). Keep torch at one thread in fn:
    one Ray CPU per task."""
    import inspect

    stage = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__name__)}"

    def run(batch: dict, **kwargs):
        began, start = time.time(), time.thread_time()
        out = fn(batch, **kwargs)
        if not inspect.isgenerator(out):
            return _marked(out, batch, 0, time.thread_time() - start, stage, began)
        return _marked_each(out, batch, start, stage, began)

    run.__name__ = getattr(fn, "__name__", type(fn).__name__)  # Ray Data names the stage by it
    return run


def _marked_each(outputs, batch: dict, start: float, stage: str, began: float):
    """A generator stage's batches, each marked as it is yielded: its CPU seconds are the
    thread's since the last one (the generator runs only while asked for its next)."""
    offset = 0
    for out in outputs:
        seconds = time.thread_time() - start
        marked = _marked(out, batch, offset, seconds, stage, began)
        offset += len(next(iter(out.values())))
        yield marked
        start = time.thread_time()


def _marked(out: dict, batch: dict, offset: int, seconds: float, stage: str, began: float) -> dict:
    """`out` with the kit's columns; its rows are the input's from `offset` on."""
    import numpy as np
    import ray

    first = stage not in _warmed_up
    _warmed_up.add(stage)
    rows = len(next(iter(out.values())))
    earlier = _rows_of(batch, CPU_COLUMN, offset, rows)
    earlier = np.zeros(rows) if earlier is None else earlier
    earlier_warmup = _rows_of(batch, WARMUP_COLUMN, offset, rows)
    earlier_warmup = np.zeros(rows, dtype=bool) if earlier_warmup is None else earlier_warmup
    out[CPU_COLUMN] = earlier + seconds / max(1, rows)
    out[WARMUP_COLUMN] = earlier_warmup | first
    out[NODE_COLUMN] = np.array([ray.util.get_node_ip_address()] * rows)
    out[DONE_AT_COLUMN] = np.full(rows, time.time())
    earlier_start = _rows_of(batch, STARTED_AT_COLUMN, offset, rows)  # the first stage's start
    out[STARTED_AT_COLUMN] = np.full(rows, began) if earlier_start is None else earlier_start
    return out


def _rows_of(batch, column: str, offset: int, rows: int):
    """The input's `column` for the output's rows, where the input has it for them."""
    values = batch.get(column) if isinstance(batch, dict) else None
    if values is None or len(values) < offset + rows:
        return None
    return values[offset:offset + rows]


# --- the training loop ---------------------------------------------------------------------

class TrainProfile:
    """Times a Ray Train worker's loop: the wait for each batch, the step's compute, and
    which nodes preprocessed the images it trained on. Make it first thing in the training
    function: the first step is timed from then (first_step_s: the start-up a user waits
    through, the model's build included)."""

    def __init__(self, device=None):
        import ray.train.torch

        self._born, self._born_epoch = time.perf_counter(), time.time()
        self.device = device if device is not None else ray.train.torch.get_device()
        on_gpu = self.device.type == "cuda"
        # The trainer's compute per step had it the hardware to itself: wall time on a GPU;
        # on a CPU its thread's CPU time (torch runs one thread there), which a core shared
        # with preprocessing (a one-core local head) does not inflate.
        self._compute_clock = time.perf_counter if on_gpu else time.thread_time
        self._gpu = GpuUtilization(self.device) if on_gpu else None
        self.waits, self.steps_s, self.computes_s = [], [], []
        # each step's end (s from the profile's making), and when its batch was done
        # (the same clock; None where the batch carries no time): steady.py reads them
        self.ends_s, self.made_s = [], []
        self.rows = 0  # images in this worker's last batch
        self.nodes, self.cpu_s = {}, {}  # per node: images, and their preprocessing CPU s
        self.node_started = {}  # per node: when its first task that fed this trainer began
        # the images the per-image cost rests on: every one but the warm-up rows
        self.steady_images, self.steady_cpu_s = 0, 0.0
        self.received_bytes, self.received_images = 0, 0  # what reached the trainer, measured
        self._start = self._last = None
        self._cpu_start = time.process_time()
        self._rank = f"{os.getpid()}-{id(self)}"  # this trainer, in the job's step log (steps.py)

    def batches(self, iterable):
        """The batches of `iterable`, each timed from the end of the last step. Each wait is
        published to the job's step log as it starts (a trainer blocked for long shows at
        once: the stall watch, the autopilot), and its end with the step (step_done) or
        the loop's."""
        self._start = self._last = time.perf_counter()
        batches = iter(iterable)
        try:
            while True:
                step_log.publish_wait(self._rank, time.time())
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                self._got = time.perf_counter()
                self._compute_start = self._compute_clock()
                yield batch
        finally:
            step_log.publish_wait(self._rank, None)

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
        self.ends_s.append(done - self._born)
        made = batch.get(DONE_AT_COLUMN) if isinstance(batch, dict) else None
        self.made_s.append(float(np.max(made)) - self._born_epoch if made is not None and len(made) else None)
        rows = len(next(iter(batch.values()))) if isinstance(batch, dict) and batch else 0
        self.rows = rows or self.rows
        if rows and isinstance(batch, dict):  # the batch's arrays as they arrived, less the kit's columns
            self.received_bytes += sum(int(getattr(v, "nbytes", 0)) for k, v in batch.items()
                                       if k not in KIT_COLUMNS)
            self.received_images += rows
        fed_by = np.unique(batch[NODE_COLUMN]) if NODE_COLUMN in batch else ()  # the nodes that made it
        step_log.publish_step(self.steps_s[-1], self.waits[-1], rows, self._rank,
                              tuple(str(node) for node in fed_by))  # where one steers
        for node in fed_by:
            here, ip = batch[NODE_COLUMN] == node, str(node)
            self.nodes[ip] = self.nodes.get(ip, 0) + int(here.sum())
            if CPU_COLUMN in batch:
                self.cpu_s[ip] = self.cpu_s.get(ip, 0.0) + float(batch[CPU_COLUMN][here].sum())
            if STARTED_AT_COLUMN in batch:
                began = float(batch[STARTED_AT_COLUMN][here].min())
                self.node_started[ip] = min(began, self.node_started.get(ip, began))
        if CPU_COLUMN in batch:
            steady = ~np.asarray(batch.get(WARMUP_COLUMN, np.zeros(len(batch[CPU_COLUMN]), bool)), bool)
            self.steady_images += int(steady.sum())
            self.steady_cpu_s += float(batch[CPU_COLUMN][steady].sum())

    def pause_done(self) -> None:
        """After work that is neither data wait nor a step (a checkpoint save)."""
        self._last = time.perf_counter()

    def recent(self, n: int) -> tuple[float, float]:
        """(mean step s, mean data wait s) of the last n steps, the first step (the
        start-up) never among them: for progress lines. (A window holding it read as a
        half-minute at one CPU's rate on an H200, where the steps after it waited 0.03 s.)"""
        steps, waits = self.steps_s[1:][-n:] or self.steps_s, self.waits[1:][-n:] or self.waits
        return sum(steps) / len(steps), sum(waits) / len(waits)

    def progress(self, step: int, total: int, every: int, batch_size: int, loss: float | None = None) -> str:
        """A progress line for every `every` steps: the mean step and data wait of the
        last ones, images/s, the time left where `total` is known, the loss."""
        step_s, wait_s = self.recent(every)
        left = f", ~{(total - step) * step_s:.0f} s left" if total else ""
        return (f"step {step}{f'/{total}' if total else ''}: mean step {step_s:.3f} s (data wait "
                f"{wait_s:.3f} s), {batch_size / step_s:.1f} images/s{left}"
                + (f", loss {loss:.3f}" if loss is not None else ""))

    def metrics(self, model=None, **extra) -> dict:
        """The figures for ray.train.report; call it on every rank (it is collective where
        several workers train). The first step (the pipeline's start-up) stays out of the
        means. Rank 0's figures are its own steps' plus `ranks`: each worker's node, steps,
        wait and, given the model, a digest of its parameters (DDP keeps them identical on
        every rank); the preprocessing figures count the images of every rank's shard."""
        import ray

        steady = slice(1, None) if len(self.steps_s) > 1 else slice(None)
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        gpu_busy = self._gpu.stop() if self._gpu else None
        train_s = (self._last - self._start) if self._start is not None else 0.0
        own = {
            "trainer_node": ray.util.get_node_ip_address(),
            "steps": len(self.steps_s),
            "mean_step_s": mean(self.steps_s[steady]),
            "mean_data_wait_s": mean(self.waits[steady]),
            "max_data_wait_s": max(self.waits[steady], default=0.0),
            "trainer_cpu_s": time.process_time() - self._cpu_start,
            "params_digest": params_digest(model) if model is not None else None,
            "preprocess_nodes": self.nodes, "preprocess_cpu_s": self.cpu_s,
            "steady_images": self.steady_images, "steady_cpu_s": self.steady_cpu_s,
            "received_bytes": self.received_bytes, "received_images": self.received_images,
            "node_started": self.node_started,
            "first_batch_done": (self.made_s[0] + self._born_epoch
                                 if self.made_s and self.made_s[0] is not None else None),
        }
        ranks = all_ranks(own)
        first_end = self.ends_s[0] if self.ends_s else 0.0
        run = steady_state(self.ends_s, self.waits, self.rows * len(ranks),
                           stock_steps(self.made_s, first_end))
        nodes, cpu_s = {}, {}
        for r in ranks:
            for ip, n in r["preprocess_nodes"].items():
                nodes[ip] = nodes.get(ip, 0) + n
            for ip, c in r["preprocess_cpu_s"].items():
                cpu_s[ip] = cpu_s.get(ip, 0.0) + c
        images = int(sum(nodes.values()))
        started = {}
        for r in ranks:
            for ip, at in r["node_started"].items():
                started[ip] = min(at, started.get(ip, at))
        first_batches = [r["first_batch_done"] for r in ranks if r["first_batch_done"] is not None]
        steady_images = sum(r["steady_images"] for r in ranks)
        steady_cpu_s = sum(r["steady_cpu_s"] for r in ranks)
        measured = steady_images if steady_images else images
        return {
            **{k: own[k] for k in ("steps", "trainer_cpu_s", "mean_step_s", "mean_data_wait_s",
                                   "max_data_wait_s", "trainer_node")},
            "train_s": train_s,
            "gpu_utilization": gpu_busy,
            "gpu_utilization_error": ((self._gpu.error or "no sample")
                                      if self._gpu and gpu_busy is None else None),
            "warmup_s": self.steps_s[0] if self.steps_s else 0.0,
            "first_step_at": self._born_epoch + first_end,  # epoch seconds
            # the start-up, the stock, the steady flow (steady.py): rank 0's steps
            "steady": run,
            "mean_trainer_compute_s": mean(self.computes_s[steady]),
            "images_seen": images,
            # CPU seconds per image over the steady images (warm-up rows left out), and how
            # many images that rests on; where every image was a warm-up one (each process
            # ran one batch), over all of them, said as such
            "preprocess_s_per_image": ((steady_cpu_s if steady_images else sum(cpu_s.values()))
                                       / max(1, measured)),
            "preprocess_images_measured": measured,
            "preprocess_warmup_images": images - steady_images,
            "preprocess_cost_includes_warmup": not steady_images and images > 0,
            "preprocess_nodes": nodes,
            "preprocess_cpu_s": cpu_s,
            # each preprocessing node's first task's start, in seconds after the trainers'
            # first batch was done (negative: before): full width from the first batch
            "preprocess_node_start_s": ({ip: at - min(first_batches) for ip, at in sorted(started.items())}
                                        if first_batches else {}),
            # bytes per image as the trainers received it (its arrays, every rank's): what
            # crosses the network from a CPU worker, for the planner's network term
            "bytes_per_image": (sum(r["received_bytes"] for r in ranks) / received
                                if (received := sum(r["received_images"] for r in ranks)) else None),
            "ranks": [{k: r[k] for k in ("trainer_node", "steps", "mean_step_s", "mean_data_wait_s",
                                         "max_data_wait_s", "trainer_cpu_s", "params_digest")}
                      | {"images": int(sum(r["preprocess_nodes"].values()))} for r in ranks],
            "device": str(self.device),
            # the GPU's model (NVIDIA's name): `make plan` warns when it plans for another
            "gpu_model": _gpu_name(self.device),
        } | extra


def all_ranks(own: dict) -> list[dict]:
    """Every training worker's `own`, in rank order: torch.distributed's all_gather_object
    where Ray Train started a process group of several workers, else [own]."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return [own]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, own)
    return gathered


def params_digest(model) -> str:
    """A digest of the model's parameters (the DDP wrapper's module's), bit for bit: equal
    on every rank exactly when DDP kept the replicas in sync."""
    import hashlib

    module = getattr(model, "module", model)
    digest = hashlib.sha256()
    for name, param in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


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


def _gpu_name(device) -> str | None:
    if device.type != "cuda":
        return None
    import torch

    try:
        return torch.cuda.get_device_name(device)
    except Exception:  # noqa: BLE001 (no name: the plan cannot compare it, and says nothing)
        return None


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
