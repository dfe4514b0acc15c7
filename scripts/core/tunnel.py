"""A local port forwarded to a cluster's dashboard by a child process (`ray dashboard`'s
SSH on AWS, `kubectl port-forward` on KubeRay): started, waited for, held open until
Ctrl-C, and stopped with everything it started."""

import os
import signal
import subprocess
import time
from contextlib import contextmanager

from scripts.core.errors import KitError, short
from scripts.core.ray_cli import port_open

MAX_WAIT_S = 60


@contextmanager
def forwarded(command: list[str], port: int, what: str, hint: str, env: dict | None = None):
    """Run `command`, which forwards 127.0.0.1:`port`, in a session of its own; return
    once the port answers; stop its whole process group after. `what` names it in errors,
    `hint` says what to check when it exits."""
    tunnel = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + MAX_WAIT_S
        while not port_open(port):
            if tunnel.poll() is not None:
                last = (tunnel.stderr.read().strip().splitlines() or ["no output"])[-1]
                raise KitError(f"`{what}` exited: {short(last, 200)}; {hint}")
            if time.monotonic() > deadline:
                raise KitError(f"`{what}` did not open the dashboard's port within {MAX_WAIT_S} s")
            time.sleep(0.2)
        yield
    finally:
        # `ray dashboard` runs ssh as its child: stop the whole process group, or the ssh
        # holding the forwarded port would outlive it.
        stop_group(tunnel)


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started with start_new_session=True, and everything it started."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue


def hold_open(cluster: str, address: str, how: str) -> int:
    """`make dashboard`: say where the dashboard is, keep the tunnel until Ctrl-C."""
    print(f"dashboard of '{cluster}': {address} ({how}; Ctrl-C closes it)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
