"""A local cluster's processes: found by the marker each carries (never by name: another
Ray on this machine is not ours), and stopped, children first seen, with a grace."""

import signal
import time
from pathlib import Path

import psutil

from scripts.core.paths import BUILD
from scripts.providers.local.names import MARKER, cluster_id


def cluster_processes(cluster: str, build: Path = BUILD) -> list[psutil.Process]:
    """The processes this kit started for `cluster` (they carry the marker) and their
    children; never this process or its parents. Ray renames many of its processes
    (ray::IDLE, ray::DashboardAgent), but none can drop the environment it inherited."""
    marker = cluster_id(cluster, build)
    me = psutil.Process()
    exclude = {me.pid, *(p.pid for p in me.parents())}
    roots = []
    for proc in psutil.process_iter():
        if proc.pid in exclude:
            continue
        try:
            if proc.environ().get(MARKER) == marker:
                roots.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    found = {p.pid: p for p in roots}
    for proc in roots:
        try:
            found |= {c.pid: c for c in proc.children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
    return [p for pid, p in found.items() if pid not in exclude and alive(p)]


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a container's PID 1 may never reap Ray's orphans)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_processes(procs: list[psutil.Process], grace_s: float = 3) -> None:
    """SIGTERM, then SIGKILL what is left after grace_s. On SIGTERM Ray's GCS and raylets
    flush their event recorders to agents that are stopping too, and hang there for 10 s
    or more: a short grace, since a local cluster has nothing else to save."""
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, still = psutil.wait_procs(procs, timeout=grace_s)
    for proc in still:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(still, timeout=5)


STOP_LIMIT_S = 60  # a loaded machine: Ray's processes may take a while to start dying


def stop_cluster(cluster: str, build: Path = BUILD, limit_s: float = STOP_LIMIT_S) -> tuple[int, list[str]]:
    """Stop every process of `cluster`, looking again until none is left: one started
    while the others stopped (a worker a raylet was forking, the dashboard's ServeHead
    actor) is not in the first look, and on a busy machine a killed process can outlive
    a short wait. (How many were stopped, "pid name" of each still alive at limit_s.)"""
    stopped, deadline = set(), time.monotonic() + limit_s
    while procs := cluster_processes(cluster, build):
        if time.monotonic() > deadline:
            return len(stopped), [describe(p) for p in procs]
        stopped |= {p.pid for p in procs}
        stop_processes(procs)
    return len(stopped), []


def describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {proc.name()}"
    except psutil.Error:
        return str(proc.pid)
