"""A job that makes no progress is stopped, not billed for ever.

Where the kit sets RAYKIT_STALL_S (the values file's `stall_minutes`), the job's driver
watches the trainers' progress in the step log every rank publishes to (autopilot.StepLog:
each step, and each loop's start). Once the trainers, inside their loop, have made no step
for that long (a hung collective, a dead data source, a deadlock), it prints one `error:`
line and the job's RESULT with `"status": "stalled"` and its last step, and exits with
STALLED_EXIT: Ray ends the job's workers with its driver, `make submit` says the job
stalled, the job's logs stay in Ray's job log (`make logs`), and the cluster, now without
a job, is idle for autostop.

Judged only inside the trainers' loop (measure.TrainProfile.batches): a job that reports
no step at all (a script of its own) is not judged, nor is the time before its first
batch is asked for (start-up) or after its loop ends (an evaluation, a save)."""

import json
import os
import sys
import threading
import time

STALL_ENV = "RAYKIT_STALL_S"  # set by the kit (scripts/pricing/cost.py's job_env)
STALLED_EXIT = 3               # the job's exit code when stopped as stalled


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


class Watch(threading.Thread):
    """The driver's watch: reads the step log every poll; on a stall, reports and exits."""

    def __init__(self, limit_s: float, log, exit=os._exit):
        super().__init__(name="raykit-stall-watch", daemon=True)
        self.limit_s, self.log, self.exit = limit_s, log, exit
        self.poll_s = min(30.0, max(0.5, limit_s / 10))
        self._halt = threading.Event()

    def check(self) -> bool:
        """True (after reporting, and exiting unless exit was replaced) where stalled."""
        import ray

        progress = ray.get(self.log.progress.remote(), timeout=30)
        message = stalled(tuple(progress), time.time(), self.limit_s)
        if message is None:
            return False
        print(f"error: stalled: {message}; the job is stopped, its logs kept (make logs)", flush=True)
        print("RESULT " + json.dumps({"status": "stalled", "reason": message, "steps": progress[2],
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
