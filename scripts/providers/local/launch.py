"""`make up` locally: the head (on fresh ports where another program took one), its
autostop watchdog, and the wait until every min_workers node has joined."""

import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import astuple, dataclass
from pathlib import Path

import psutil

from scripts.core import state
from scripts.core.errors import KitError
from scripts.core.paths import REPO
from scripts.core.ray_cli import (
    PORT_TRIES,
    free_ports,
    ray_cli,
    ray_env,
    taken_by_others,
    use_auth_in_this_process,
)
from scripts.node.autostop import duration
from scripts.providers.local import cpu_quota, cpu_sets, gpus, priority
from scripts.providers.local.names import HEAD_IP, MARKER, MIB, NAME, cluster_id
from scripts.providers.local.processes import alive, cluster_processes, stop_processes
from scripts.providers.local.render import head_labels
from scripts.providers.local.teardown import down
from scripts.providers.local.values import core_sets


JOIN_TIMEOUT_S = 180  # RAYKIT_JOIN_TIMEOUT_S overrides it (tests)


def up(cluster: str, config_text: str, values: dict) -> dict:
    """Start the head, save the record, wait for every min_workers node. On any failure,
    Ctrl-C included, everything this started is stopped before the error goes on."""
    leftovers = cluster_processes(cluster)
    if leftovers:  # a crashed earlier run of this very cluster: they carry our marker
        stop_processes(leftovers)
    for _ in range(PORT_TRIES):
        record = start_head(cluster, config_text, values)
        if record:
            break
    else:
        raise KitError(f"local cluster '{cluster}': another program took one of the head's ports "
                       f"before Ray could bind it, {PORT_TRIES} times; try again")
    print(f"dashboard {record['dashboard_url']} (token auth: `make` reads the token from "
          f"{state.record_path(cluster)}), logs {record['temp_dir']}/session_latest/logs", flush=True)
    return record


@dataclass(frozen=True)
class Ports:
    """The head's ports, each picked free (free_ports): Ray's defaults are the same for
    every Ray on the machine."""
    gcs: int
    dashboard: int
    client: int
    agent: int
    metrics: int
    runtime_env: int
    dashboard_metrics: int
    autoscaler_metrics: int


def head_record(cluster: str, values: dict, ports: Ports) -> dict:
    """The record `make down` and `make submit` find the cluster by."""
    return {
        "cluster": cluster,
        "provider": NAME,
        "gcs_address": f"{HEAD_IP}:{ports.gcs}",
        "dashboard_url": f"http://127.0.0.1:{ports.dashboard}",
        # Ray opens its temp dir to everyone (mode 0777); inside a private (0700),
        # unpredictable parent, nobody else can reach it.
        "temp_dir": tempfile.mkdtemp(prefix="raykit-", dir="/tmp") + "/ray",
        "auth_token": secrets.token_hex(32),
        "expected_nodes": 1 + sum(w["min_workers"] for w in values["workers"].values()),
        "up_at": time.time(),
        "autostop_minutes": autostop_minutes(values),
    }


def head_command(cluster: str, values: dict, record: dict, ports: Ports, gpu_count: int) -> list[str]:
    """`ray start --head` for the cluster: its ports, its resources, its labels."""
    head = values["head"]
    return [
        ray_cli(), "start", "--head", "--disable-usage-stats",
        f"--node-ip-address={HEAD_IP}", f"--port={ports.gcs}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={ports.dashboard}",
        f"--ray-client-server-port={ports.client}",
        f"--dashboard-agent-listen-port={ports.agent}",
        f"--metrics-export-port={ports.metrics}",
        f"--runtime-env-agent-port={ports.runtime_env}",
        # its workers on ports the OS picks, as the worker nodes' (loopback_node_provider.py):
        # Ray's default range (10002-19999) is the same for every head on 127.0.0.2
        "--min-worker-port=0", "--max-worker-port=0",
        f"--temp-dir={record['temp_dir']}",
        f"--autoscaling-config={state.config_path(cluster)}",
        f"--num-cpus={head['cpus']}", f"--num-gpus={gpu_count}",
        # ray start takes labels as key=value,...: the values are the kit's own names
        # and counts (placement.py), never a values file's free text
        "--labels=" + ",".join(f"{k}={v}" for k, v in head_labels(values).items()),
        f"--object-store-memory={head['object_store_mb'] * MIB}",
        f"--memory={head['memory_mb'] * MIB}",
    ]


def head_env(cluster: str, values: dict, record: dict, ports: Ports) -> dict[str, str]:
    """The environment the head's processes start in (and the autoscaler's nodes inherit)."""
    return ray_env(record["auth_token"], {
        MARKER: cluster_id(cluster),
        "RAY_FAKE_CLUSTER": "1",
        "RAYKIT_GCS_ADDRESS": record["gcs_address"],
        "RAYKIT_TEMP_DIR": record["temp_dir"],
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",  # launch the workers within seconds
        # The dashboard's and the autoscaler's metrics servers, which `ray start` takes no
        # flag for: Ray's fixed defaults (44227, 44217) are the same for every Ray on the
        # machine, and the second to start logs "Address already in use"
        "DASHBOARD_METRIC_PORT": str(ports.dashboard_metrics),
        "AUTOSCALER_METRIC_PORT": str(ports.autoscaler_metrics),
        # Ray Train's PreemptionWatcher restarts training early when a node holding a
        # training worker is drained for preemption; here none ever is (the kit's spot watch
        # and the autopilot drain preprocess nodes), and the watcher, a 0-CPU actor Ray
        # places off a busy head, took seconds of a quarter-core preprocess node's start
        # (its warming came 5-8 s after the other node's). Its processes inherit this.
        "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    } | priority.env(priority.worker_niceness(values["head"]["role"])))  # the autoscaler's nodes set their own


def start_head(cluster: str, config_text: str, values: dict) -> dict | None:
    """Start the head on eight free ports and wait for every min_workers node; the record,
    or None (everything it started stopped) when another program took one of the ports
    first. On any failure, Ctrl-C included, everything it started is stopped."""
    head = values["head"]
    head_gpus, worker_gpus = gpus.head_and_pool(values, gpus.machine_gpus())
    head_cores, worker_cores = core_sets(values)
    ports = Ports(*free_ports(8))
    record = head_record(cluster, values, ports)
    command = head_command(cluster, values, record, ports, len(head_gpus))
    group = quota_group(cluster, values)  # the cgroup the nodes' quotas live in (made now)
    env = head_env(cluster, values, record, ports) | {
        # what the autoscaler's nodes take from (loopback_node_provider.py): the cores and
        # GPUs left to the workers, the quota group; the head sees its own GPUs, or none
        cpu_sets.WORKER_CORES_ENV: cpu_sets.to_text(worker_cores),
        gpus.WORKER_GPUS_ENV: gpus.to_text(worker_gpus), gpus.VISIBLE: gpus.to_text(head_gpus),
        cpu_quota.GROUP_ENV: str(group or "")}
    state.save(cluster, record, config_text)
    try:
        head_group = group and head["cpu_quota"] and cpu_quota.node_group(group, "head", head["cpu_quota"])
        with cpu_sets.pinned_to(head_cores):
            result, agent_died = ray_start(
                command, env, cluster, record["temp_dir"],
                # Ray's head processes, and what they start, in its group
                preexec_fn=(lambda: cpu_quota.enter(head_group)) if head_group else None)
        # A port another program took between free_ports() and Ray's bind: one it listens
        # on (Ray started anyway, its dashboard elsewhere), or one it holds without listening
        # (a connection's ephemeral port: an agent died of it, and the raylet with it, seen
        # once in a fresh clone's make test). Either way, start again on other ports.
        taken = taken_by_others(list(astuple(ports)), cluster_processes(cluster))
        clash = (f"port {taken[0]} was taken by another program" if taken else
                 "a port was taken by another program as Ray started (its agent died of it)"
                 if agent_died else
                 "a port was taken by another program as Ray started"
                 if result.returncode != 0 and port_clash_logged(record["temp_dir"]) else "")
        if clash:
            print(f"  {clash}; starting the head again", flush=True)
            down(cluster, record)
            shutil.rmtree(Path(record["temp_dir"]).parent, ignore_errors=True)
            return None
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no output"]
            raise KitError(f"`ray start --head` failed for local cluster '{cluster}': {tail[0]} "
                           f"(logs: {record['temp_dir']}/session_latest/logs)")
        wait_until_ready(record)
        if values["autostop_minutes"]:
            with cpu_sets.pinned_to(head_cores):
                start_autostop(record, env)
    except BaseException:
        down(cluster, record)
        raise
    return record


def quota_group(cluster: str, values: dict):
    """The cluster's cgroup where a node type has a cpu_quota; None (said in one line)
    where the machine refuses it: the nodes then run without quotas."""
    if not any(n["cpu_quota"] for n in [values["head"], *values["workers"].values()]):
        return None
    group, why = cpu_quota.make_cluster_group(cluster_id(cluster))
    if group is None:
        print(f"cpu_quota: {why}; the nodes run without quotas, sharing this machine's cores", flush=True)
    return group


def autostop_minutes(values: dict) -> float:
    """The values file's autostop_minutes; where it is on, RAYKIT_AUTOSTOP_S (tests) sets the
    limit in seconds instead, so a test of the clock need not wait whole minutes."""
    seconds = os.environ.get("RAYKIT_AUTOSTOP_S")
    if not values["autostop_minutes"] or not seconds:
        return values["autostop_minutes"]
    try:
        limit_s = float(seconds)
    except ValueError:
        limit_s = math.nan
    if not 1 <= limit_s <= 10080 * 60:  # nan fails it too
        raise KitError(f"RAYKIT_AUTOSTOP_S={seconds[:40]!r} is not a number of seconds from 1 "
                       "to 604800; unset it to use autostop_minutes")
    return limit_s / 60


def start_autostop(record: dict, env: dict) -> None:
    """The watchdog (autostop.py) beside the head: it carries the cluster's marker,
    so `down` stops it with the rest; its log sits beside Ray's."""
    log = Path(record["temp_dir"]).parent / "autostop.log"
    with open(log, "w") as out:
        subprocess.Popen([sys.executable, "-m", "scripts.providers.local.autostop",
                          "--cluster", record["cluster"],
                          "--address", record["dashboard_url"],
                          "--minutes", str(record["autostop_minutes"])],
                         env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    print(f"autostop: the cluster stops after {duration(record['autostop_minutes'])} with no job "
          f"(log {log})", flush=True)


def alive_nodes(record: dict) -> int:
    from ray.util.state import list_nodes

    use_auth_in_this_process(record["auth_token"])
    return len(list_nodes(address=record["dashboard_url"], filters=[("state", "=", "ALIVE")],
                          raise_on_missing_output=False, _explain=False))


def join_timeout_s() -> float:
    text = os.environ.get("RAYKIT_JOIN_TIMEOUT_S", "")
    try:
        seconds = float(text) if text else JOIN_TIMEOUT_S
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 24 * 3600:
        raise KitError(f"RAYKIT_JOIN_TIMEOUT_S={text!r} is not a number of seconds up to a day")
    return seconds


def wait_until_ready(record: dict) -> None:
    limit_s = join_timeout_s()
    start = time.monotonic()
    want, seen = record["expected_nodes"], -1
    while True:
        try:
            count = alive_nodes(record)
        except Exception:  # the dashboard is still starting
            count = 0
        elapsed = time.monotonic() - start
        if count != seen:
            print(f"  {count}/{want} nodes joined after {elapsed:.0f} s", flush=True)
            seen = count
        if count >= want:
            return
        if elapsed > limit_s:
            raise KitError(f"only {count} of {want} nodes joined within {limit_s:.0f} s; "
                           f"see the autoscaler log {record['temp_dir']}/session_latest/logs/monitor.log")
        time.sleep(1)


RAY_START_TIMEOUT_S = 120
AGENT_SCRIPTS = ("dashboard/agent.py", "runtime_env/agent/main.py")  # the head's two agents


def ray_start(command: list[str], env: dict, cluster: str, temp_dir: str,
              preexec_fn=None) -> tuple[subprocess.CompletedProcess, bool]:
    """`ray start --head`, and whether it was given up because a port clash killed one of
    the head's agents. The raylet dies with its agent some 15 s later, and `ray start` waits
    a fixed 30 s for it all the same (ray/_private/node.py, raylet_start_wait_time_s): ~40 s
    for a start that was lost at ~10. Watching the agents, the kit gives it up at once."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec_fn,
                            start_new_session=True)  # the terminal's Ctrl-C is ours
    deadline, agents = time.monotonic() + RAY_START_TIMEOUT_S, {}  # pid -> every agent seen
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=0.5)
                return subprocess.CompletedProcess(command, proc.returncode, out, err), False
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    raise
            seen = {p.pid: p for p in cluster_processes(cluster) if is_agent(p)}
            # an agent came and went: gone, not just missed by this look (a process whose
            # environment could not be read while many start)
            if any(not alive(agents[pid]) for pid in agents.keys() - seen.keys()) \
                    and port_clash_logged(temp_dir):
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                return subprocess.CompletedProcess(command, proc.returncode, out, err), True
            agents |= seen
    finally:
        if proc.poll() is None:  # a timeout, Ctrl-C: the caller stops what it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def is_agent(proc) -> bool:
    try:
        return any(script in part for part in proc.cmdline() for script in AGENT_SCRIPTS)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def port_clash_logged(temp_dir: str) -> bool:
    """Whether a head process that failed to start logged a port another program held
    ("Address already in use": the dashboard agent's metrics port, a component's gRPC port)."""
    logs = Path(temp_dir) / "session_latest" / "logs"
    for log in sorted(logs.glob("*.log")) + sorted(logs.glob("*.err")) + sorted(logs.glob("*.out")):
        try:
            if "Address already in use" in log.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False
