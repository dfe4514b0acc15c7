"""Helpers both providers use to drive Ray's command line and APIs from the kit."""

import contextlib
import os
import socket
import sys
from pathlib import Path

from scripts.core.paths import REPO


def ray_cli() -> str:
    """The `ray` executable of the kit's own environment (.venv), never one from PATH."""
    return str(Path(sys.executable).with_name("ray"))


def ray_env(auth_token: str | None = None, extra: dict | None = None) -> dict:
    """Environment for a Ray CLI call or a Ray process the kit starts. The auth mode is
    always explicit: a token left in ~/.ray by an earlier ray.init() must not switch it
    on or off behind the kit's back."""
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    if auth_token:
        env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": auth_token}
    else:
        env |= {"RAY_AUTH_MODE": "disabled"}
        env.pop("RAY_AUTH_TOKEN", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env | (extra or {})


def use_auth_in_this_process(auth_token: str | None) -> None:
    """Point Ray's Python clients in this process (job submission, state API) at a
    cluster's auth mode and token. Ray's C++ config reads them from the environment when
    ray._raylet is first imported (the build pass imports it), so after changing the
    environment both are re-read, as Ray's own authentication tests do."""
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        os.environ.pop(key, None)
    os.environ["RAY_AUTH_MODE"] = "token" if auth_token else "disabled"
    if auth_token:
        os.environ["RAY_AUTH_TOKEN"] = auth_token
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def free_port() -> int:
    return free_ports(1)[0]


# Starts of a server (a head, a tunnel) on fresh ports, where another program took a port
# the kit chose between choosing and binding it: free ports are free only when looked at.
PORT_TRIES = 3


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports on 127.0.0.1. Every socket stays bound until all are
    chosen: ports taken one after another can repeat (the OS may hand a just-released port
    back), and `ray start` refuses one port for two components."""
    with contextlib.ExitStack() as sockets:
        bound = [sockets.enter_context(socket.socket()) for _ in range(count)]
        for s in bound:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in bound]


def taken_by_others(ports: list[int], ours: list, also_ours=None) -> list[int]:
    """Those of `ports` that a process outside `ours` (psutil.Process objects) listens on,
    unless `also_ours(process)` says it is ours all the same (a process ours handed the
    port to: OpenSSH's ControlPersist master). A port free_ports() chose is free only until
    it returns: another program may bind it before ours does, and `ray start` still
    succeeds with its dashboard elsewhere (it logs "Failed to bind"), a tunnel's port
    would answer for another server. [] where this system shows other processes' sockets
    to root only (macOS)."""
    import psutil

    pids = {p.pid for p in ours}
    try:
        sockets = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return []

    def others(pid) -> bool:
        if pid in pids:
            return False
        try:
            return not (also_ours and pid is not None and also_ours(psutil.Process(pid)))
        except psutil.Error:  # gone since: it was not ours to keep
            return True
    return sorted({s.laddr.port for s in sockets if s.status == psutil.CONN_LISTEN
                   and s.laddr.port in ports and others(s.pid)})


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0
