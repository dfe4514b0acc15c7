"""The kit's entrypoint for every job it submits: `python -m raykit.entry main.py ARGS`.

It runs the job's main.py as `python main.py ARGS` would (as __main__, with its argv, its
folder first on sys.path, its exit code), and watches it without a line in the job: as
soon as the job's driver connects to Ray, it starts the job's step log (steps.py, which
raykit's measure.TrainProfile publishes to from every rank, and which sets the kit's Ray
gauges, gauges.py) and the stall watch
(stall.py) with the kit's RAYKIT_STALL_S as it is then. A job's own autopilot.steering()
reads the same log. A job that never connects to Ray is left alone.

The watch stops before the driver disconnects (ray.shutdown(), or the interpreter's exit,
where Ray's own exit hook shuts it down): a thread of this process that calls Ray after
its shutdown makes Ray end the process with exit code 1, failing a job that succeeded.
"""

import atexit
import os
import runpy
import sys
import threading
import time

from raykit import contract, stall, steps

CONNECT_POLL_S = 0.2


class Watching:
    """The job's stall watch, started once its driver is connected, stopped for good
    before it disconnects; one lock orders the two."""

    def __init__(self):
        self.lock = threading.Lock()
        self.watch: stall.Watch | None = None
        self.closed = False

    def start_once_connected(self) -> None:
        """Wait for the driver's ray.init(), then start the step log and the stall watch."""
        import ray

        while True:
            with self.lock:
                if self.closed:
                    return
                if ray.is_initialized():
                    self.start()
                    return
            time.sleep(CONNECT_POLL_S)

    def start(self) -> None:
        try:
            limit = stall.limit_from_env()
        except SystemExit as e:  # the kit's variable spoilt: say so, leave the job running
            print(e, file=sys.stderr, flush=True)
            return
        log = steps.start_step_log()  # every job's: the kit's gauges come from it (gauges.py)
        if limit is not None:
            self.watch = stall.Watch(limit, log)
            self.watch.start()

    def stop(self) -> None:
        """Before Ray shuts down: the watch ends its look and calls Ray no more."""
        with self.lock:
            self.closed = True
            if self.watch is not None:
                self.watch.stop()
                self.watch.join(timeout=40)  # its look is bounded (30 s)
                self.watch = None


def main(argv: list[str] | None = None) -> None:
    import ray  # registers Ray's exit hook (shutdown) now: ours, registered after, runs first

    script, *args = sys.argv[1:] if argv is None else argv
    os.environ[contract.ENTRY_WATCHES_ENV] = "1"  # the job's autopilot leaves the watch to us
    watching = Watching()
    real_shutdown = ray.shutdown

    def shutdown(*a, **kw):
        watching.stop()
        return real_shutdown(*a, **kw)

    ray.shutdown = shutdown
    atexit.register(watching.stop)
    threading.Thread(target=watching.start_once_connected, name="raykit-entry", daemon=True).start()
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
