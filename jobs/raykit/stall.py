"""A job that makes no progress is stopped, not billed for ever.

Where the kit sets RAYKIT_STALL_S (the values file's `stall_minutes`), every job it submits
is watched from its driver: the kit's entrypoint (entry.py) starts the job's step log and
this watch as soon as the job connects to Ray, without a line in the job. Two rules:

- steps: a job whose trainers record steps (raykit's measure.TrainProfile) stalls once its
  trainers, inside their loop, have made no step for the limit (a hung collective, a dead
  data source, a deadlock). Not judged: the time before the first batch is asked for
  (start-up) or after the loop ends (an evaluation, a save).
- GPUs: a job that records no step (a script of its own) stalls once every GPU a process
  holds on its GPU nodes has been idle (NVML utilization at most IDLE_PERCENT) for the
  limit, sampled every poll on each GPU node by a tiny task there. Every held GPU, not one:
  a job may leave some idle on purpose. Only held ones: before a process opens a CUDA
  context (the job installing its packages on a GPU node, up to 30 minutes the first time,
  or starting) nothing is judged. NVML cannot see a hang inside a kernel: a collective
  stuck in NCCL keeps its GPU 100% busy. On a cluster without a GPU node this rule does
  not apply, and the watch says so when it starts.

A stalled job prints one `error:` line and the job's RESULT with `"status": "stalled"` and
its last step, and exits with STALLED_EXIT: Ray ends the job's workers with its driver,
`make submit` says the job stalled, the job's logs stay in Ray's job log (`make logs`), and
the cluster, now without a job, is idle for autostop."""

import json
import os
import sys
import threading
import time

from raykit import contract

STALL_ENV = contract.STALL_ENV  # set by the kit (scripts/job_env.py's job_env)
STALLED_EXIT = 3               # the job's exit code when stopped as stalled
IDLE_PERCENT = 2               # a GPU this busy or less (NVML's utilization) is idle


def limit_from_env(text: str | None = None) -> float | None:
    """The stall limit in seconds from the kit's RAYKIT_STALL_S; None where it is unset or 0
    (off). Anything else in it stops the job with one line: the kit writes it."""
    text = os.environ.get(STALL_ENV, "") if text is None else text
    if not text:
        return None
    try:
        limit = float(text)
    except ValueError:
        limit = -1.0
    if not 0 <= limit < 1e9:  # NaN, inf, negative
        raise SystemExit(f"error: {STALL_ENV}={text[:40]!r} is not a number of seconds >= 0; "
                         "run the job through `make submit`")
    return limit or None


def stalled(progress: tuple[bool, float | None, int], now: float, limit_s: float) -> str | None:
    """What to say where the trainers stalled, else None. progress: StepLog.progress(),
    (a rank is in its loop, the last step's end or loop's start, steps so far)."""
    in_loop, last, steps = progress
    if not in_loop or last is None or now - last < limit_s:
        return None
    since = "their loop began" if steps == 0 else f"step {steps}"
    return f"the trainers made no step for {(now - last) / 60:.1f} min since {since} (stall_minutes: {limit_s / 60:g})"


def gpus_idle(busy: dict[str, list[tuple[int, bool]]], idle_since: float | None, now: float,
              limit_s: float) -> tuple[float | None, str | None]:
    """(since when every held GPU has been idle, or None; what to say where that is the
    limit or longer, else None). busy: each GPU node's GPUs sampled now, (utilization in
    percent, whether a process holds it)."""
    samples = [u for node in busy.values() for u, held in node if held]
    if not samples or max(samples) > IDLE_PERCENT:  # none held yet (start-up), or at work
        return None, None
    idle_since = now if idle_since is None else idle_since
    if now - idle_since < limit_s:
        return idle_since, None
    nodes = ", ".join(sorted(busy))
    return idle_since, (f"the job recorded no step, and every GPU it held on {nodes} was idle "
                        f"for {(now - idle_since) / 60:.1f} min (NVML, at most {IDLE_PERCENT}%; "
                        f"stall_minutes: {limit_s / 60:g})")


def gpu_utilization() -> list[tuple[int, bool]]:
    """This host's GPUs: (utilization in percent, whether a process holds a CUDA context on
    it), by NVML: nvidia-ml-py where installed, else the copy Ray ships
    (ray._private.thirdparty.pynvml); [] without a driver."""
    try:
        import pynvml
    except ImportError:
        import ray._private.thirdparty.pynvml as pynvml
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 (no driver: nothing to read)
        return []
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            held = bool(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
            found.append((int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu), held))
        return found
    finally:
        pynvml.nvmlShutdown()


def gpu_nodes() -> dict[str, str]:
    """The cluster's live nodes with GPUs: {ip: node id}."""
    import ray

    return {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes()
            if n["Alive"] and n["Resources"].get("GPU", 0) > 0}


def sample_gpus(nodes: dict[str, str], timeout_s: float = 30) -> dict[str, list[int]]:
    """Each GPU node's GPUs' utilization, read there (a task asking for no resource, pinned
    to the node); a node that does not answer in time is left out."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(gpu_utilization)
    refs = {probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(): ip
            for ip, node in nodes.items()}
    done, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    for ref in late:
        ray.cancel(ref, force=True)
    return {refs[ref]: ray.get(ref) for ref in done}


class Watch(threading.Thread):
    """The driver's watch: reads the step log (and, for a job that records no step, its GPU
    nodes' utilization) every poll; on a stall, reports and exits."""

    def __init__(self, limit_s: float, log, exit=os._exit, sample=sample_gpus):
        super().__init__(name="raykit-stall-watch", daemon=True)
        self.limit_s, self.log, self.exit, self.sample = limit_s, log, exit, sample
        self.poll_s = min(30.0, max(0.5, limit_s / 10))
        self._halt = threading.Event()
        self.gpu_nodes: dict[str, str] | None = None  # looked up at the first poll
        self.idle_since: float | None = None

    def check(self) -> bool:
        """True (after reporting, and exiting unless exit was replaced) where stalled."""
        import ray

        progress = ray.get(self.log.progress.remote(), timeout=30)
        now = time.time()
        message = stalled(tuple(progress), now, self.limit_s)
        in_loop, _, steps = progress
        if message is None and not in_loop and steps == 0:  # no step recorded: the GPUs tell
            if self.gpu_nodes is None:
                self.gpu_nodes = gpu_nodes()
                if not self.gpu_nodes:
                    print("stall watch: this cluster has no GPU node, so a job that records no "
                          "steps (raykit's measure) is not watched; one that does is", flush=True)
            if self.gpu_nodes:
                self.idle_since, message = gpus_idle(self.sample(self.gpu_nodes), self.idle_since,
                                                     now, self.limit_s)
        if message is None:
            return False
        print(f"error: stalled: {message}; the job is stopped, its logs kept (make logs)", flush=True)
        print("RESULT " + json.dumps({"status": "stalled", "reason": message, "steps": steps,
                                      "stall_minutes": self.limit_s / 60}), flush=True)
        sys.stderr.flush()
        self.exit(STALLED_EXIT)  # the driver: Ray ends the job's workers and actors with it
        return True

    def run(self) -> None:
        while not self._halt.wait(self.poll_s):
            try:
                if self.check():
                    return
            except Exception:  # noqa: BLE001 (a missed look: the next one tries again)
                continue

    def stop(self) -> None:
        self._halt.set()
