"""A local port forwarded to a cluster's dashboard by a child process (`ray dashboard`'s
SSH on AWS, `kubectl port-forward` on KubeRay): started, waited for, held open until
Ctrl-C, and stopped with everything it started."""

import os
import signal
import subprocess
import time
from contextlib import contextmanager

import psutil

from scripts.core.errors import KitError, short
from scripts.core.ray_cli import PORT_TRIES, free_port, port_open, taken_by_others

MAX_WAIT_S = 60


@contextmanager
def forwarded(command_for, what: str, hint: str, env: dict | None = None, also_ours=None):
    """Run `command_for(port)`, which forwards 127.0.0.1:`port`, in a session of its own;
    yield the port once the command listens on it; stop its whole process group after.
    `what` names it in errors, `hint` says what to check when it exits. A port another
    program took between choosing and binding (the command then fails, or is slower to
    bind) is given up for a fresh one: the dashboard must never be another server's.
    `also_ours(process)`: whether a listener outside the command's process tree is the
    command's all the same (`ray dashboard`'s SSH hands its port to a ControlPersist
    master that leaves the tree; aws/day2.py)."""
    for _ in range(PORT_TRIES):
        port = free_port()
        # no input: `ray dashboard`'s `ssh -tt` would otherwise read this terminal (or, under
        # a test runner's worker, the runner's own channel)
        tunnel = subprocess.Popen(command_for(port), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            ours = listening(tunnel, port, what, hint, also_ours)
        except BaseException:
            stop_group(tunnel)
            raise
        if ours:
            break
        stop_group(tunnel)
    else:
        raise KitError(f"`{what}`: another program took each of {PORT_TRIES} free local ports "
                       "before it could listen; try again")
    try:
        yield port
    finally:
        # `ray dashboard` runs ssh as its child: stop the whole process group, or the ssh
        # holding the forwarded port would outlive it.
        stop_group(tunnel)


def listening(tunnel: subprocess.Popen, port: int, what: str, hint: str, also_ours=None) -> bool:
    """Wait until `port` answers: True when the tunnel (or its child: `ray dashboard`'s
    ssh, or a process `also_ours` claims) listens there, False when another program does."""
    deadline = time.monotonic() + MAX_WAIT_S
    while not port_open(port):
        if tunnel.poll() is not None:
            last = (tunnel.stderr.read().strip().splitlines() or ["no output"])[-1]
            if port_open(port):  # it could not bind: another program has the port
                return False
            raise KitError(f"`{what}` exited: {short(last, 200)}; {hint}")
        if time.monotonic() > deadline:
            raise KitError(f"`{what}` did not open the dashboard's port within {MAX_WAIT_S} s")
        time.sleep(0.2)
    try:
        group = [psutil.Process(tunnel.pid), *psutil.Process(tunnel.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return False  # it exited while another program answered on its port
    return not taken_by_others([port], group, also_ours)


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
