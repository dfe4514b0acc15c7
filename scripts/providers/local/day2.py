"""Day 2 locally: whether the cluster runs, `ray status` with the GPUs each node was given,
the dashboard, a shell aimed at the head, the autoscaler's log, and the job address."""

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from scripts.core import state
from scripts.core.errors import KitError, not_running
from scripts.core.ray_cli import ray_cli, ray_env
from scripts.providers.local import gpus
from scripts.providers.local.processes import cluster_processes


def status(record: dict) -> int:
    require_running(record)
    result = subprocess.run([ray_cli(), "status", f"--address={record['gcs_address']}"],
                            env=ray_env(record["auth_token"]), capture_output=True, text=True,
                            timeout=60)
    if result.returncode != 0:
        require_running(record)  # it died under the command: the kit's one line, not Ray's
    print(result.stdout + result.stderr, end="")
    print("\n".join(gpu_lines(record)))
    return result.returncode


def gpu_lines(record: dict) -> list[str]:
    """The GPUs each node was given: its raylet's CUDA_VISIBLE_DEVICES (gpus.py), read from
    the process itself, with NVML's names."""
    names = gpus.machine_gpu_names()
    rows = []
    for proc in cluster_processes(record["cluster"]):
        try:
            if proc.name() != "raylet":
                continue
            ip = next((a.split("=", 1)[1] for a in proc.cmdline() if a.startswith("--node_ip_address=")), "?")
            given = gpus.from_text(proc.environ().get(gpus.VISIBLE, ""))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        shown = ", ".join(f"{g} ({names[int(g)]})" if g.isdigit() and int(g) < len(names) else g
                          for g in given)
        rows.append((ip, f"  {ip}: " + (f"GPU {shown}" if given else "no GPU")))
    machine = "this machine has none" if not names else f"this machine has {len(names)}"
    return [f"GPUs per node ({machine}):"] + [line for _, line in sorted(rows)]


def dashboard(record: dict) -> int:
    require_running(record)
    print(f"dashboard of '{record['cluster']}': {record['dashboard_url']} (token auth: the "
          f"token is auth_token in {state.record_path(record['cluster'])})")
    return 0


def attach(record: dict) -> int:
    """The head runs on this machine: a shell whose Ray CLI and scripts reach the cluster
    (the kit's `ray` and `python` first on PATH, RAY_ADDRESS and its token set), in the
    directory of its logs."""
    require_running(record)
    print(f"a shell aimed at local cluster '{record['cluster']}' (RAY_ADDRESS="
          f"{record['gcs_address']}, the kit's ray and python on PATH); `exit` leaves it, "
          "the cluster keeps running", flush=True)
    env = ray_env(record["auth_token"], {"RAY_ADDRESS": record["gcs_address"]})
    env["PATH"] = os.pathsep.join(filter(None, [os.path.dirname(sys.executable), env.get("PATH")]))
    return subprocess.call([os.environ.get("SHELL") or "/bin/sh"], env=env,
                           cwd=Path(record["temp_dir"]) / "session_latest" / "logs")


def monitor(record: dict, follow: bool) -> int:
    require_running(record)
    log = Path(record["temp_dir"]) / "session_latest" / "logs" / "monitor.log"
    with open(log, errors="replace") as f:
        print("".join(f.readlines()[-100:]), end="", flush=True)
        while follow:  # like tail -f, until Ctrl-C or the cluster stops
            line = f.readline()
            if line:
                print(line, end="", flush=True)
            elif not is_running(record):
                return 0
            else:
                time.sleep(0.5)
    return 0


@contextmanager
def job_address(record: dict):
    require_running(record)
    yield record["dashboard_url"], sys.executable, record["auth_token"]


def same_cluster(values: dict, record: dict) -> bool:
    """Never: a local cluster is its own processes, ports and temp dir, found by its
    CLUSTER; two values files with one cluster_name run apart."""
    return False


def is_running(record: dict) -> bool:
    """The cluster answers while its head's GCS runs: without it no command reaches the
    cluster, whatever else of it is left (a worker's raylet, the dashboard, the watchdog)."""
    for proc in cluster_processes(record["cluster"]):
        try:
            if proc.name() == "gcs_server":
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return False


def require_running(record: dict) -> None:
    if not is_running(record):
        raise KitError(not_running(record["cluster"]))


def fetch_folder(record: dict, folder: str, dest) -> None:
    """The run's folder is on this machine (every node is): a copy of it."""
    import shutil

    source = Path(folder)
    if not source.is_dir():
        raise KitError(f"{folder}: no such folder on this machine (removed since the run?)")
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
