"""Start, inspect and stop the simulated multi-node cluster on this machine.

`up` starts a real Ray head with Ray's autoscaler reading the rendered config
(build/clusters/<cluster>.yaml); the autoscaler then starts every min_workers node through
scripts/local_provider.py, each a real raylet on its own loopback address. The cluster
lives in its own temp dir and ports, so it never touches another Ray on the host, and
`down` stops exactly its processes: those whose command line names its temp dir.
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from scripts.errors import KitError
from scripts.values import BUILD, REPO

STATE_DIR = BUILD / "local"
JOIN_TIMEOUT_S = float(os.environ.get("RAYKIT_JOIN_TIMEOUT_S", "180"))
MIB = 1024 * 1024
# Ray rewrites 127.0.0.1 to the host's network address; any other 127.x address stays on
# loopback. Workers take 127.0.0.3, 127.0.0.4, ... (scripts/local_provider.py).
HEAD_IP = "127.0.0.2"


def temp_dir(cluster: str) -> str:
    """Short (Unix socket paths are capped at 107 bytes) and unique per build dir."""
    digest = hashlib.sha1(f"{STATE_DIR}:{cluster}".encode()).hexdigest()[:8]
    return f"/tmp/raykit-{cluster}-{digest}"


def state_path(cluster: str) -> Path:
    return STATE_DIR / f"{cluster}.json"


def read_state(cluster: str) -> dict | None:
    path = state_path(cluster)
    return json.loads(path.read_text()) if path.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_env(extra: dict | None = None) -> dict:
    """Environment for every Ray CLI call on a local cluster. Auth is set explicitly: a
    token left in ~/.ray by an earlier ray.init() would otherwise switch it on."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env | (extra or {})


def ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def up(cluster: str, config_path: Path, values: dict) -> dict:
    """Start the cluster and wait for every min_workers node; return its state."""
    state = read_state(cluster)
    if state and cluster_processes(state["temp_dir"]):
        raise KitError(f"local cluster '{cluster}' is already up "
                       f"(dashboard {state['dashboard_url']}); run `make down CLUSTER={cluster}` first")
    tmp = temp_dir(cluster)
    leftovers = cluster_processes(tmp)
    if leftovers:  # a crashed earlier run of this same cluster: its processes are ours
        stop_processes(leftovers)

    head = values["head"]
    gcs_port, dashboard_port = free_port(), free_port()
    state = {
        "cluster": cluster,
        "provider": "local",
        "gcs_address": f"{HEAD_IP}:{gcs_port}",
        "dashboard_url": f"http://127.0.0.1:{dashboard_port}",
        "temp_dir": tmp,
        "python": sys.executable,
        "expected_nodes": 1 + sum(w["min_workers"] for w in values["workers"].values()),
    }
    head_resources = {"trainer": head["trainer_slots"]} if head["trainer_slots"] else {}
    if head.get("preprocess"):
        head_resources["preprocess"] = head["cpus"]
    command = [
        ray_cli(), "start", "--head",
        f"--node-ip-address={HEAD_IP}",
        f"--port={gcs_port}",
        f"--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
        f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--temp-dir={tmp}",
        f"--autoscaling-config={config_path}",
        f"--num-cpus={head['cpus']}", "--num-gpus=0",
        f"--resources={json.dumps(head_resources)}",
        f"--object-store-memory={head['object_store_mb'] * MIB}",
        f"--memory={head['memory_mb'] * MIB}",
        "--disable-usage-stats",
    ]
    env = ray_env({
        "RAY_FAKE_CLUSTER": "1",
        "RAYKIT_GCS_ADDRESS": state["gcs_address"],
        "RAYKIT_TEMP_DIR": tmp,
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",  # launch the workers within seconds
    })
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state_path(cluster).write_text(json.dumps(state, indent=2))
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise KitError(f"`ray start --head` failed for local cluster '{cluster}':\n"
                           f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
        wait_for_nodes(state)
    except BaseException:
        down(cluster)  # nothing half-started is left behind, Ctrl-C included
        raise
    return state


def alive_nodes(state: dict) -> list[dict]:
    from ray.util.state import list_nodes

    nodes = list_nodes(address=state["dashboard_url"], filters=[("state", "=", "ALIVE")],
                       raise_on_missing_output=False, _explain=False)
    return [n if isinstance(n, dict) else n.__dict__ for n in nodes]


def wait_for_nodes(state: dict) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    want, seen = state["expected_nodes"], -1
    while True:
        try:
            count = len(alive_nodes(state))
        except Exception:  # the dashboard is still starting
            count = 0
        if count != seen:
            print(f"  {count}/{want} nodes up", flush=True)
            seen = count
        if count >= want:
            return
        if time.monotonic() > deadline:
            raise KitError(f"only {count} of {want} nodes joined within {JOIN_TIMEOUT_S:.0f} s; "
                           f"see the autoscaler log: {state['temp_dir']}/session_latest/logs/monitor.*")
        time.sleep(1)


def status(cluster: str) -> str:
    state = require_state(cluster)
    result = subprocess.run([ray_cli(), "status", f"--address={state['gcs_address']}"],
                            env=ray_env(), capture_output=True, text=True, timeout=60)
    return result.stdout + result.stderr


def require_state(cluster: str) -> dict:
    state = read_state(cluster)
    if not state or not cluster_processes(state["temp_dir"]):
        raise KitError(f"local cluster '{cluster}' is not up; run `make up CLUSTER={cluster}`")
    return state


def cluster_processes(tmp: str) -> list[psutil.Process]:
    """Every process of the cluster, and nothing else. Ray renames many of its processes
    (ray::IDLE, ray::DashboardAgent), so the command line alone misses some: every process
    the cluster starts inherits RAYKIT_TEMP_DIR from `up`, and Ray's own name its temp dir
    on their command line; their children (workers, agents) belong to it too."""
    roots = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            marked = proc.environ().get("RAYKIT_TEMP_DIR") == tmp
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            marked = False
        if marked or any(tmp in arg for arg in proc.info["cmdline"] or []):
            roots.append(proc)
    found = {p.pid: p for p in roots}
    for proc in roots:
        try:
            found |= {c.pid: c for c in proc.children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
    found.pop(os.getpid(), None)
    return [p for p in found.values() if is_running(p)]


def is_running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (a container's PID 1 may never reap Ray's orphans)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_processes(procs: list[psutil.Process], grace_s: float = 10) -> None:
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def down(cluster: str) -> int:
    """Stop every process of this cluster and nothing else; return how many were stopped."""
    tmp = (read_state(cluster) or {}).get("temp_dir") or temp_dir(cluster)
    stopped = 0
    for _ in range(3):  # a dying autoscaler may still be starting a node: sweep again
        procs = cluster_processes(tmp)
        if not procs:
            break
        stop_processes(procs)
        stopped += len(procs)
    state_path(cluster).unlink(missing_ok=True)
    return stopped
