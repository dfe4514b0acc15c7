"""The local provider: a simulated multi-node Ray cluster on this machine, no cloud.

`up` starts a real Ray head whose autoscaler reads the launched config
(build/launched/<cluster>.yaml) and starts every min_workers node through
loopback_node_provider.py, each a real raylet on its own loopback address. The cluster
has a private temp dir (mode 0700, random name), its own ports and Ray's token
authentication. Every process it starts carries RAYKIT_CLUSTER_ID in its environment, a
marker derived from this checkout's build dir and the cluster's name: `down` stops the
processes that carry it (and their children), and nothing else; it never runs `ray stop`.
With `pin_cpus` (the default), each node runs on cores of its own (cpu_sets.py); with a
node type's `cpu_quota`, on that fraction of a core's time (cpu_quota.py).

Its concerns, a module each in this package:
  loopback_node_provider.py  the node provider the head's autoscaler loads: one raylet a node
  cpu_sets.py                which cores each node is pinned to
  cpu_quota.py               how much CPU time a node may use (cgroups)
  gpus.py                    which of this machine's GPUs each node trains on
  autostop.py                the watchdog beside the head (autostop and job limits)
  __init__.py                the provider's face (the interface): values, up, down, day 2
"""

import hashlib
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from jobs.raykit import placement
from scripts.core import ray_config, roles, state
from scripts.core.errors import KitError, not_running
from scripts.core.paths import BUILD, REPO
from scripts.core.ray_cli import free_ports, ray_cli, ray_env, taken_by_others, use_auth_in_this_process
from scripts.core.submit import JobFiles, JobPackages
from scripts.node.autostop import duration
from scripts.providers.local import cpu_quota, cpu_sets, gpus

NAME = "local"
# Ray's fake multi-node provider, which loopback_node_provider.py extends, registers the
# head under this node type name; the rendered config must use the same one.
HEAD_TYPE = "ray.head.default"
DEFAULT_JOB_TIMEOUT_S = None  # it runs on this machine: no bill to cap
BILLS = False  # this machine's cores; `prices_as` prices it as the AWS mix it stands for
# A job's requirements.txt must already be satisfied in .venv, which every local node runs:
# Ray's pip runtime_env would clone that whole virtualenv (torch included, ~6 GB) per job.
JOB_PACKAGES = JobPackages.INSTALLED
# The job's folder as it is (a local:// URI). The simulated nodes share one session dir,
# where each node's agent unpacked an uploaded working_dir in turn, removing the copy
# before it: a process already running in it (the job's driver, a replica starting) lost
# its files and failed an import.
JOB_FILES = JobFiles.IN_PLACE
# A crashed run may leave processes without a readable record: they carry the cluster's
# marker, so `down` finds them anyway, and a corrupt record is skipped, not an error.
STOPS_WITHOUT_RECORD = True
PROVIDER_CLASS = "scripts.providers.local.loopback_node_provider.LoopbackNodeProvider"
# Ray rewrites 127.0.0.1 to the host's network address; any other 127.x address stays on
# loopback. Workers take 127.0.0.3, 127.0.0.4, ... (loopback_node_provider.py).
HEAD_IP = "127.0.0.2"
MARKER = "RAYKIT_CLUSTER_ID"
JOIN_TIMEOUT_S = 180  # RAYKIT_JOIN_TIMEOUT_S overrides it (tests)
PORT_TRIES = 3  # head starts, each on fresh ports, when another program took one first
MIB = 1024 * 1024

RECORD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cluster", "provider", "gcs_address", "dashboard_url", "temp_dir",
                 "auth_token", "expected_nodes"],
    "properties": {
        "cluster": {"type": "string"},
        "provider": {"const": NAME},
        "gcs_address": {"type": "string", "pattern": r"^127\.0\.0\.2:[0-9]{1,5}$"},
        "dashboard_url": {"type": "string", "pattern": r"^http://127\.0\.0\.1:[0-9]{1,5}$"},
        "temp_dir": {"type": "string", "pattern": r"^/tmp/raykit-[A-Za-z0-9_]{8}/ray$"},
        "auth_token": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "expected_nodes": {"type": "integer", "minimum": 1, "maximum": 1000},
        "up_at": {"type": "number", "minimum": 0},  # epoch seconds; autostop counts from it
        "autostop_minutes": {"type": "number", "minimum": 0, "maximum": 10080},
    },
}


# --- values -> config ---------------------------------------------------------------

def value_problems(values: dict) -> list[str]:
    head, workers = values["head"], values["workers"]
    problems = role_problems(values)
    if head["preprocess"] and head["trainer_slots"] and head["cpus"] <= head["trainer_slots"]:
        # each training worker holds a CPU: none would be left for a preprocessing task
        problems.append(f"head.cpus: a head that trains and preprocesses needs a CPU per "
                        f"trainer slot plus one; set cpus: {head['trainer_slots'] + 1} or more")
    # Simulated nodes all draw on this machine's RAM: more than it has would be killed
    # by the OOM killer mid-job instead of refused here.
    declared = head["memory_mb"] + head["object_store_mb"] + sum(
        w["max_workers"] * (w["memory_mb"] + w["object_store_mb"]) for w in workers.values())
    host = psutil.virtual_memory().total // MIB
    if declared > host:
        problems.append(f"workers: the nodes declare {declared} MiB of memory and object store "
                        f"at max_workers, more than this machine's {host} MiB; lower "
                        "memory_mb, object_store_mb or max_workers")
    cores = len(cpu_sets.host_cores())
    if values["pin_cpus"] and cores_needed(values) > cores:
        problems.append(f"pin_cpus: the nodes need {cores_needed(values)} cores of their own at "
                        f"max_workers, this machine has {cores}; lower cpus or max_workers, "
                        "or set pin_cpus: false (nodes then share cores)")
    return problems + quota_problems(values, cores) + gpus.problems(values, gpus.machine_gpus())


def quota_problems(values: dict, host_cores: int) -> list[str]:
    """A quota is a share of the node's own cores where it has them, and the quotas at
    max_workers fit this machine: beyond it, an added node adds no throughput."""
    problems, total = [], 0.0
    for where, node, count in [("head", values["head"], 1)] + [
            (f"workers.{n}", w, w["max_workers"]) for n, w in values["workers"].items()]:
        quota = node["cpu_quota"]
        if quota is None:
            continue
        total += quota * count
        if values["pin_cpus"] and quota > cores(node):
            problems.append(f"{where}.cpu_quota: {quota:g} cores of time on {cores(node)} pinned core(s); "
                            f"set at most {cores(node)}, or pin_cpus: false")
    if total > host_cores:
        problems.append(f"cpu_quota: the nodes' quotas at max_workers add up to {total:g} cores, more "
                        f"than this machine's {host_cores}: an added node would add no throughput; "
                        "lower cpu_quota or max_workers")
    return problems


def role_problems(values: dict) -> list[str]:
    """The roles' rules across node types (scripts/core/roles.py), and the trainer slots
    each role needs: one or more on a node that trains, none on one that does not."""
    head, workers = values["head"], values["workers"]
    problems = roles.role_problems(values)
    if head["role"] == "train" and head["trainer_slots"] < 1:
        problems.append("head.trainer_slots: a head with role train needs a trainer slot; set "
                        "trainer_slots: 1 (the stand-in for its GPU), or role: coordinate")
    if head["role"] == "coordinate" and head["trainer_slots"]:
        problems.append("head.trainer_slots: a coordinating head trains nothing; set trainer_slots: 0")
    for name, w in workers.items():
        if w["role"] == "train" and w["trainer_slots"] < 1:
            problems.append(f"workers.{name}.trainer_slots: a train worker needs a trainer slot "
                            "(the stand-in for a GPU); set trainer_slots: 1")
        if w["role"] == "train" and w["cpus"] < w["trainer_slots"]:
            problems.append(f"workers.{name}.cpus: each training worker holds a CPU; set cpus: "
                            f"{w['trainer_slots']} or more")
        if w["role"] == "preprocess" and w["trainer_slots"]:
            problems.append(f"workers.{name}.trainer_slots: a preprocess worker trains nothing; "
                            "set trainer_slots: 0, or role: train")
    return problems


def cores(node: dict) -> int:
    """The cores a node runs on with pin_cpus: `cores`, or as many as its `cpus`."""
    return node["cores"] or node["cpus"]


def cores_needed(values: dict) -> int:
    return cores(values["head"]) + sum(w["max_workers"] * cores(w)
                                       for w in values["workers"].values())


def core_sets(values: dict) -> tuple[list[int] | None, list[int]]:
    """(the head's cores, the cores its autoscaler hands to workers); (None, []) when the
    nodes share every core (pin_cpus: false)."""
    if not values["pin_cpus"]:
        return None, []
    host = cpu_sets.host_cores()
    head = cores(values["head"])
    return host[:head], host[head:cores_needed(values)]


def template_context(cluster: str, values: dict) -> dict:
    head = values["head"]
    given = gpus.per_node(values, len(gpus.machine_gpus()))
    return {
        "provider_class": PROVIDER_CLASS,
        # a coordinating head offers no CPU: Ray schedules no task or worker there (the
        # job's driver needs none)
        "head": {"name": HEAD_TYPE,
                 "resources": resources(head, given["head"])
                 | ({"CPU": 0} if head["role"] == "coordinate" else {}),
                 "labels": head_labels(values)},
        "workers": [
            {"name": name, "min_workers": w["min_workers"], "max_workers": w["max_workers"],
             "resources": resources(w, given[f"workers.{name}"]) | {placement.type_resource(name): 1},
             "labels": placement.node_labels(name, trainer_slots=w["trainer_slots"],
                                             preprocess=w["role"] == "preprocess"),
             # read by loopback_node_provider.py (Ray's schema leaves node_config alone)
             "node_config": {"cores": cores(w) if values["pin_cpus"] else None,
                             "cpu_quota": w["cpu_quota"], "gpus": given[f"workers.{name}"]}}
            for name, w in values["workers"].items()
        ],
    }


def resources(node: dict, gpu_count: int = 0) -> dict:
    """Logical resources of a simulated node: its CPUs, memory, and the GPUs it was given
    (gpus.py); no custom ones. Where work runs is the labels' business
    (jobs/raykit/placement.py)."""
    return {"CPU": node["cpus"], "memory": node["memory_mb"] * MIB,
            "object_store_memory": node["object_store_mb"] * MIB} | ({"GPU": gpu_count} if gpu_count else {})


def head_labels(values: dict) -> dict[str, str]:
    """The head's labels: a train node with `trainer_slots` stand-ins for GPUs, or a
    coordinating one (no slots), and with pin_cpus the cores it really has."""
    head = values["head"]
    labels = placement.node_labels("head", head["trainer_slots"], head["preprocess"])
    if values["pin_cpus"]:
        labels[placement.CORES] = str(cores(head))
    return labels


def config_problems(config: dict) -> list[str]:
    problems = ray_config.schema_problems(config)
    if config["provider"].get("module") != PROVIDER_CLASS:
        problems.append(f"provider.module: must be {PROVIDER_CLASS}")
    return problems


def companion_files(cluster: str, values: dict) -> dict[str, str]:
    return {}


def preflight(values: dict, avoid_zones: tuple = ()) -> tuple[dict, list[str]]:
    return values, []  # value_problems already checked this machine's memory


def plan(values: dict, config: dict) -> list[str]:
    head = values["head"]
    head_cores, worker_cores = core_sets(values)
    machine = gpus.machine_gpus()
    given = gpus.per_node(values, len(machine))
    lines = ["simulated on this machine (loopback addresses), $0/h; "
             + (f"head on cores {cpu_sets.to_text(head_cores)}, workers on cores "
                f"{cpu_sets.to_text(worker_cores) or '(none)'}" if head_cores is not None
                else "every node sharing every core (pin_cpus: false)"),
             f"  {HEAD_TYPE}: 1 x {head['cpus']} CPUs{on_cores(values, head)}, "
             + (f"{head['trainer_slots']} trainer slot(s){on_gpus(given['head'])}, " if head["role"] == "train"
                else "coordinates (no Ray CPUs for work), ")
             + f"{head['memory_mb']} MiB + {head['object_store_mb']} MiB object store"]
    for name, w in values["workers"].items():
        lines.append(f"  {name}: {w['min_workers']}-{w['max_workers']} x {w['cpus']} CPUs{on_cores(values, w)}, "
                     + (f"{w['trainer_slots']} trainer slot(s){on_gpus(given[f'workers.{name}'])}, "
                        if w["role"] == "train" else "")
                     + f"{w['memory_mb']} MiB + {w['object_store_mb']} MiB object store")
    return lines + gpu_plan(values, machine)


def on_gpus(count: int) -> str:
    return f" on {count} GPU(s)" if count else " on the CPU"


def gpu_plan(values: dict, machine: list[str]) -> list[str]:
    """Where `gpus: auto` left GPUs of this machine unused, why."""
    wanted = sum(node["trainer_slots"] * count for _, node, count in gpus.train_nodes(values)
                 if node["gpus"] == "auto")
    given = gpus.per_node(values, len(machine))
    if machine and wanted and not any(given[where] for where, _, _ in gpus.train_nodes(values)):
        return [f"  gpus: auto: the train nodes hold {wanted} trainer slot(s) at max_workers and this "
                f"machine has {len(machine)} GPU(s): they train on the CPU; set gpus: to split them"]
    return []


def on_cores(values: dict, node: dict) -> str:
    return ((f" on {cores(node)} core(s) of its own" if values["pin_cpus"] else "")
            + (f" limited to {node['cpu_quota']:g} core(s) of time" if node["cpu_quota"] else ""))


# --- lifecycle ----------------------------------------------------------------------

def cluster_id(cluster: str, build: Path = BUILD) -> str:
    """The marker of `cluster` as started from the build dir `build` (one per checkout)."""
    return hashlib.sha256(f"{build}\0{cluster}".encode()).hexdigest()[:24]


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


def start_head(cluster: str, config_text: str, values: dict) -> dict | None:
    """Start the head on six free ports and wait for every min_workers node; the record,
    or None (everything it started stopped) when another program took one of the ports
    first. On any failure, Ctrl-C included, everything it started is stopped."""
    head = values["head"]
    head_gpus, worker_gpus = gpus.head_and_pool(values, gpus.machine_gpus())
    ports = free_ports(6)
    gcs_port, dashboard_port, client_port, agent_port, metrics_port, runtime_env_port = ports
    record = {
        "cluster": cluster,
        "provider": NAME,
        "gcs_address": f"{HEAD_IP}:{gcs_port}",
        "dashboard_url": f"http://127.0.0.1:{dashboard_port}",
        # Ray opens its temp dir to everyone (mode 0777); inside a private (0700),
        # unpredictable parent, nobody else can reach it.
        "temp_dir": tempfile.mkdtemp(prefix="raykit-", dir="/tmp") + "/ray",
        "auth_token": secrets.token_hex(32),
        "expected_nodes": 1 + sum(w["min_workers"] for w in values["workers"].values()),
        "up_at": time.time(),
        "autostop_minutes": autostop_minutes(values),
    }
    command = [
        ray_cli(), "start", "--head", "--disable-usage-stats",
        f"--node-ip-address={HEAD_IP}", f"--port={gcs_port}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
        f"--ray-client-server-port={client_port}",
        f"--dashboard-agent-listen-port={agent_port}",
        f"--metrics-export-port={metrics_port}",
        f"--runtime-env-agent-port={runtime_env_port}",
        f"--temp-dir={record['temp_dir']}",
        f"--autoscaling-config={state.config_path(cluster)}",
        f"--num-cpus={head['cpus']}", f"--num-gpus={len(head_gpus)}",
        # ray start takes labels as key=value,...: the values are the kit's own names
        # and counts (placement.py), never a values file's free text
        "--labels=" + ",".join(f"{k}={v}" for k, v in head_labels(values).items()),
        f"--object-store-memory={head['object_store_mb'] * MIB}",
        f"--memory={head['memory_mb'] * MIB}",
    ]
    env = ray_env(record["auth_token"], {
        MARKER: cluster_id(cluster),
        "RAY_FAKE_CLUSTER": "1",
        "RAYKIT_GCS_ADDRESS": record["gcs_address"],
        "RAYKIT_TEMP_DIR": record["temp_dir"],
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",  # launch the workers within seconds
    })
    head_cores, worker_cores = core_sets(values)
    env[cpu_sets.WORKER_CORES_ENV] = cpu_sets.to_text(worker_cores)
    env[gpus.WORKER_GPUS_ENV] = gpus.to_text(worker_gpus)
    env[gpus.VISIBLE] = gpus.to_text(head_gpus)  # its own, or none: no CUDA context elsewhere
    group = quota_group(cluster, values)
    env[cpu_quota.GROUP_ENV] = str(group or "")
    state.save(cluster, record, config_text)
    try:
        head_group = group and head["cpu_quota"] and cpu_quota.node_group(group, "head", head["cpu_quota"])
        with cpu_sets.pinned_to(head_cores):
            result = subprocess.run(command, env=env, capture_output=True, text=True,
                                    timeout=120, start_new_session=True,  # the terminal's Ctrl-C is ours
                                    # Ray's head processes, and what they start, in its group
                                    preexec_fn=(lambda: cpu_quota.enter(head_group)) if head_group else None)
        taken = taken_by_others(ports, cluster_processes(cluster))
        if taken:  # Ray started anyway, its dashboard elsewhere: start again on other ports
            print(f"  port {taken[0]} was taken by another program; starting the head again", flush=True)
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


def job_problems(record: dict, job: str, args: list[str]) -> list[str]:
    """Every local node runs as this user, with this user's credentials and .venv: it
    reads what the job's driver reads, and require_installed checks the packages."""
    return []


@contextmanager
def job_address(record: dict):
    require_running(record)
    yield record["dashboard_url"], sys.executable, record["auth_token"]


def same_cluster(values: dict, record: dict) -> bool:
    """Never: a local cluster is its own processes, ports and temp dir, found by its
    CLUSTER; two values files with one cluster_name run apart."""
    return False


def forget_stale(cluster: str, record: dict) -> list[str]:
    """Nothing of a stopped cluster is left to delete: only its record."""
    state.forget(cluster)
    return []


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


def down(cluster: str, record: dict | None, purge: bool = False) -> str:
    """Stop every process that carries this cluster's marker, and their children."""
    stopped = 0
    for _ in range(3):  # a dying autoscaler may still be starting a node: sweep again
        procs = cluster_processes(cluster)
        if not procs:
            break
        stop_processes(procs)
        stopped += len(procs)
    group = cpu_quota.cluster_group(cluster_id(cluster))
    left = "" if cpu_quota.remove(group) else f"; its cgroup {group} still holds a process"
    state.forget(cluster)
    logs = f"; its logs stay in {record['temp_dir']}/session_latest/logs" if record else ""
    return f"local cluster '{cluster}': {stopped} processes stopped{logs}{left}"


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


def run_plan(built, job: str, args: list[str], timeout_s: float | None) -> None:
    """`make run` is up, submit and down here: its dry run is `up`'s."""
    return None


def images_to_bake(values: dict) -> dict[str, str]:
    raise KitError("`make image` builds the images a KubeRay values file names (images.job_packages: "
                   "baked, see k8s_hetero.yaml); the local cluster runs .venv, which has the jobs' packages")


def run_job(built, job: str, args: list[str], timeout_s: float | None, verbose: bool,
            env_vars: dict[str, str]) -> None:
    """None: this machine has no job manager of its own; `make run` is the kit's up, submit
    and down (down guaranteed)."""
    return None
