"""The trainers' step records, in one place every part of the job can read: each rank's
TrainProfile (measure.py) publishes each step and each wait for a batch to a small named
actor, StepLog, on the driver's node; the stall watch (stall.py) and the autopilot
(autopilot.py) read it from the driver.

Who starts the log: the kit's entrypoint (entry.py) for every job it submits, as soon as
the job's driver connects to Ray, so that a job's steps are watched without a line in the
job; autopilot.steering() uses that log where there is one, and starts one otherwise (a
job run without the kit).
"""

import time

STEP_LOG = "raykit-step-log"  # the named actor every rank's steps go to
LOOKUP_AGAIN_S = 5.0          # a rank that found no log looks again after this long

_handle = None        # this process's handle on the StepLog actor
_looked_at = None     # when this process last looked for one and found none


def _log():
    """The StepLog actor of this job, else None. Never starts Ray: outside a Ray worker (a
    unit test) there is none. A rank that found none looks again every LOOKUP_AGAIN_S: a
    log started a moment after the rank's first look is found."""
    global _handle, _looked_at
    if _handle is not None:
        return _handle
    now = time.monotonic()
    if _looked_at is not None and now - _looked_at < LOOKUP_AGAIN_S:
        return None
    _looked_at = now
    import ray

    if not ray.is_initialized():
        return None
    try:
        _handle = ray.get_actor(STEP_LOG)
    except ValueError:  # none was started: nobody reads the steps
        return None
    return _handle


def publish_step(step_s: float, wait_s: float, images: int, rank: str = "",
                 nodes: tuple[str, ...] = ()) -> None:
    """A training step of `rank` (any id unique to the trainer), whose batch the nodes at
    addresses `nodes` preprocessed; it ends that rank's open wait. Fire and forget; nothing
    where no log runs."""
    if log := _log():
        log.record.remote(time.time(), step_s, wait_s, images, rank, nodes)


def publish_wait(rank: str, since: float | None) -> None:
    """`rank` has been blocked for its next batch since `since` (time.time()); None: it
    waits no more (its loop ended). Fire and forget; nothing where no log runs."""
    if log := _log():
        log.waiting.remote(rank, since)


class StepLog:
    """Every rank's steps: (end time, step s, waiting s, images), the last 10 minutes;
    since when each rank blocked for its next batch has been waiting; when a batch each
    preprocessing node made last reached a trainer (the autopilot counts a node it asked
    for from then, not from its join); and the progress the stall watch judges (stall.py):
    which ranks are inside their loop, and when the last step ended or loop began."""

    def __init__(self, publish: bool = False):
        """publish: set the kit's Ray gauges from the steps (gauges.py); the actor does."""
        from raykit.gauges import StepGauges

        self.gauges = StepGauges() if publish else None
        self.gauge_errors: list[str] = []
        self.steps: list[tuple[float, float, float, int]] = []
        self.open_waits: dict[str, float] = {}
        self.delivered: dict[str, float] = {}  # node address -> the last step its images fed
        self.in_loop: set[str] = set()
        self.progress_at: float | None = None
        self.count = 0

    def _progressed(self, t: float) -> None:
        self.progress_at = t if self.progress_at is None else max(self.progress_at, t)

    def record(self, end: float, step_s: float, wait_s: float, images: int, rank: str = "",
               nodes: tuple[str, ...] = ()) -> None:
        self.steps.append((end, step_s, wait_s, images))
        for node in nodes:
            self.delivered[node] = max(end, self.delivered.get(node, end))
        self.open_waits.pop(rank, None)
        self.count += 1
        self._progressed(end)
        if len(self.steps) > 10_000:
            self.steps = [s for s in self.steps if s[0] > end - 600]
        if self.gauges is not None:
            try:
                self.gauges.publish(self.steps)
            except Exception as e:  # noqa: BLE001 (metrics never fail a step; kept to be seen)
                self.gauge_errors = [*self.gauge_errors[-4:], f"{type(e).__name__}: {str(e)[:120]}"]

    def waiting(self, rank: str, since: float | None) -> None:
        if since is None:  # its loop ended
            self.open_waits.pop(rank, None)
            self.in_loop.discard(rank)
            return
        if rank not in self.in_loop:  # its loop began
            self.in_loop.add(rank)
            self._progressed(since)
        self.open_waits[rank] = since

    def progress(self) -> tuple[bool, float | None, int]:
        """(a rank is inside its loop, the last step's end or loop's start, steps so far)."""
        return bool(self.in_loop), self.progress_at, self.count

    def since(self, t: float) -> list[tuple[float, float, float, int]]:
        return [s for s in self.steps if s[0] >= t]

    def window(self, t: float) -> tuple[list[tuple[float, float, float, int]], list[float], dict[str, float]]:
        """(the steps that ended since t, the start of every open wait, when each node's
        images last fed a step)."""
        return self.since(t), list(self.open_waits.values()), dict(self.delivered)


def start_step_log(name: str | None = STEP_LOG):
    """The StepLog actor, on this process's node (the driver's: the head). Anywhere else it
    could land on a preprocess node, which then never goes idle: a node given back or on a
    spot notice would stay until its drain's deadline, and take the log with it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    # named: whoever comes first starts it (the kit's entrypoint or the job's autopilot),
    # the other gets the same actor
    options = {"scheduling_strategy": here} | ({"name": name, "get_if_exists": True} if name else {})
    return ray.remote(num_cpus=0)(StepLog).options(**options).remote(True)

