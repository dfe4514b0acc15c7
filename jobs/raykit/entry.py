"""The kit's entrypoint for every job it submits: `python -m raykit.entry main.py ARGS`.

It runs the job's main.py as `python main.py ARGS` would (as __main__, with its argv, its
folder first on sys.path, its exit code), and watches it without a line in the job: as
soon as the job's driver connects to Ray, it starts the job's step log (steps.py, which
raykit's measure.TrainProfile publishes to from every rank) and the stall watch
(stall.py) with the kit's RAYKIT_STALL_S as it is then. A job's own autopilot.steering()
reads the same log. A job that never connects to Ray is left alone.
"""

import os
import runpy
import sys
import threading
import time

from raykit import stall, steps

CONNECT_POLL_S = 0.2


def watch_once_connected() -> None:
    """Wait for the driver's ray.init(), then start the step log and the stall watch."""
    import ray

    while not ray.is_initialized():
        time.sleep(CONNECT_POLL_S)
    try:
        limit = stall.limit_from_env()
    except SystemExit as e:  # the kit's variable spoilt: say so, leave the job running
        print(e, file=sys.stderr, flush=True)
        return
    if limit is None:
        return
    stall.Watch(limit, steps.start_step_log()).start()


def main(argv: list[str] | None = None) -> None:
    script, *args = sys.argv[1:] if argv is None else argv
    os.environ[stall.WATCHED_BY_ENTRY] = "1"  # the job's autopilot leaves the watch to us
    threading.Thread(target=watch_once_connected, name="raykit-entry", daemon=True).start()
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
