"""Checked AWS values -> everything cluster_templates/aws.yaml.j2 lays out: node types and
their resources, labels, volumes, images and setup, the start commands of the watchdog and
the spot watcher, and each host's dead-man switch."""

import base64
import shlex

from jobs.raykit import placement
from scripts.core.submit import JOB_START_ENV
from scripts import catalog
from scripts.core import node_packages
from scripts.core.paths import NODE_PROGRAMS
from scripts.core.restart_loop import RESTART_S, restart_loop
from scripts.providers.aws.names import (
    HEAD_TYPE,
    KIT_TAG,
    head_profile_name,
    placement_group_name,
    security_group_name,
    worker_profile_name,
)
from scripts.providers.aws.values import nodes_of

# Ports of the head's GCS and every node's object manager; the cluster's security group
# opens all traffic between its own nodes, so any fixed ports do.
GCS_PORT = 6379


OBJECT_MANAGER_PORT = 8076


# Ray's token authentication needs the token on every node; the kit does not distribute
# it yet, so auth stays off on AWS: the dashboard binds to the head's 127.0.0.1 (reached
# through an SSH tunnel) and the security group admits only SSH and the cluster's nodes.
AUTH_MODE = "disabled"


DASHBOARD_PORT = 8265  # Ray's default; the head binds it to 127.0.0.1


# The kit's node-side programs (scripts/node/, and nothing else of the kit) as Ray's
# file_mounts puts them in each node's container (Ray wants a directory, not a file):
# head_start_ray_commands starts the autostop watchdog (autostop.py) from there after Ray,
# worker_start_ray_commands the spot watcher (spot_watch.py); both standalone.
NODE_PROGRAMS_REMOTE_DIR = "~/raykit_node"


# Every node's dead-man switch (scripts/node/deadman.py, on the host): powered off, and so
# terminated, GRACE minutes after boot if Ray never ran (the GPU image's pull and the setup
# commands take 10-25 min), or IDLE minutes after Ray stopped running there.
DEADMAN_PROGRAM = NODE_PROGRAMS / "deadman.py"


DEADMAN_UNIT = "raykit-deadman"


DEADMAN_GRACE_MIN = 45


DEADMAN_IDLE_MIN = 10


# The head's watchdog (autostop.py) is restarted by a loop named WATCHDOG_LOOP_NAME (its
# $0); the head's dead-man switch powers off once its heartbeat is WATCHDOG_SILENT_MIN old
# while Ray runs (a dead loop, or a watchdog that fails every try).
WATCHDOG_RESTART_S = RESTART_S  # core/restart_loop.py's, the loop KubeRay's watchdog runs too
WATCHDOG_LOOP_NAME = "raykit-watchdog-loop"
WATCHDOG_HEARTBEAT = "/tmp/raykit-watchdog.heartbeat"
WATCHDOG_PID_FILE = "/tmp/raykit-watchdog.pid"
WATCHDOG_SILENT_MIN = 15


CONTAINER_USER = "1000:100"  # the `ray` user and `users` group of Ray's Docker images


def template_context(cluster: str, values: dict) -> dict:
    aws, docker, head = values["aws"], values["docker"], values["head"]
    data_volumes = sorted({n["disk"]["data_gb"] for n in nodes_of(values).values()} - {0})
    return {
        "region": aws["region"],
        "availability_zone": aws["availability_zone"],
        # `auto` until `make up` resolves it (the launched config records the id); a
        # rendered file keeps EC2's own SSM reference, which RunInstances resolves itself.
        "image_id": (f"resolve:ssm:{catalog.DLAMI_SSM_PARAMETER}" if aws["image_id"] == "auto"
                     else aws["image_id"]),
        "key_pair": aws["key_pair"],
        "ssh_private_key": f"~/.ssh/{aws['key_pair']}.pem" if aws["key_pair"] else None,
        "ssh_user": aws["ssh_user"],
        # Given groups replace the one Ray would create (it never adds rules to them).
        "security_group_name": None if aws["security_group_ids"] else security_group_name(values),
        "security_group_ids": aws["security_group_ids"],
        "subnet_ids": aws["subnet_ids"],
        "use_internal_ips": aws["use_internal_ips"],
        "tags": {KIT_TAG: values["cluster_name"]} | aws["tags"],
        "common_run_options": [f"-v {shlex.quote(v['host'])}:{shlex.quote(v['container'])}"
                               for v in docker["volumes"]]
        + ["--ulimit nofile=65536:65536"] + docker["extra_run_options"],
        # Only the head needs rights (its autoscaler launches and stops the workers).
        # the train nodes in the cluster placement group, where there is one: DDP's
        # gradients then cross the network at the lowest latency EC2 offers
        "head": aws_node(HEAD_TYPE, head, preprocess=head["preprocess"], spot=False,
                         root_device=aws["root_device"], coordinate=head["role"] == "coordinate")
        | {"iam_instance_profile": iam_profile(head_profile_name(values)),
           "placement_group": placement_group_name(values) if head["role"] == "train" else None,
           "user_data": deadman_user_data(head=True)},
        "workers": [aws_node(name, w, preprocess=w["role"] == "preprocess", spot=w["spot"],
                             root_device=aws["root_device"], worker=True)
                    | {"min_workers": w["min_workers"], "max_workers": w["max_workers"],
                       "placement_group": placement_group_name(values) if w["role"] == "train" else None,
                       "iam_instance_profile": iam_profile(worker_profile_name(values)),
                       "user_data": deadman_user_data()}
                    for name, w in values["workers"].items()],
        "initialization_commands": host_dir_commands(docker, data_volumes),
        "head_start_ray_command": (
            f"ulimit -n 65536; RAY_AUTH_MODE={AUTH_MODE} "
            + "".join(f"{k}={v} " for k, v in JOB_START_ENV.items())  # the kit's own numbers
            + f"ray start --head --port={GCS_PORT} "
            f"--object-manager-port={OBJECT_MANAGER_PORT} "
            "--autoscaling-config=~/ray_bootstrap_config.yaml "
            "--dashboard-host=127.0.0.1 --disable-usage-stats"),
        "file_mounts": {NODE_PROGRAMS_REMOTE_DIR: str(NODE_PROGRAMS)},  # the watchdog is always on
        "autostop_command": autostop_command(values),
        "worker_start_ray_command": (
            f"ulimit -n 65536; RAY_AUTH_MODE={AUTH_MODE} ray start "
            f"--address=$RAY_HEAD_IP:{GCS_PORT} --object-manager-port={OBJECT_MANAGER_PORT} "
            "--disable-usage-stats"),
        "spot_watch_command": spot_watch_command(values),
    }


def autostop_command(values: dict) -> str:
    """The head's watchdog, always: it stops a job past its time limit (recorded with the
    job), and after autostop_minutes with no job (0: never) it terminates every instance
    tagged with this cluster, its own head last (the head policy allows just that).

    A shell loop restarts it WATCHDOG_RESTART_S after any exit but its own teardown's (0):
    a crash or an out-of-memory kill costs seconds of watching, not the cluster's limits.
    Its idle clock restarts from Ray's job list, not from zero. A watchdog that keeps
    failing, or a loop that died, stops the heartbeat, and the head's dead-man switch
    powers it off (deadman_user_data). A second `ray up` first ends the loop it started."""
    watchdog = f"python {NODE_PROGRAMS_REMOTE_DIR}/autostop.py " + shlex.join([
        "--address", f"http://127.0.0.1:{DASHBOARD_PORT}",
        "--minutes", str(values["autostop_minutes"]),
        "--aws", values["cluster_name"], values["aws"]["region"],
        "--heartbeat", WATCHDOG_HEARTBEAT])
    loop = f"echo $$ > {WATCHDOG_PID_FILE}; " + restart_loop(watchdog)
    # the loop's own process group (setsid): ending it ends the watchdog it runs too; the
    # pid file is trusted only where that process is still the loop
    end_previous = (f"(pid=$(cat {WATCHDOG_PID_FILE} 2>/dev/null) && "
                    f"grep -qs {WATCHDOG_LOOP_NAME} /proc/$pid/cmdline && kill -- -$pid) || true")
    return (f"{end_previous}; setsid nohup bash -c {shlex.quote(loop)} {WATCHDOG_LOOP_NAME} "
            ">> /tmp/raykit-autostop.log 2>&1 &")


def spot_watch_command(values: dict) -> str | None:
    """Where a worker type is spot: each worker drains its Ray node on AWS's interruption
    notice (scripts/node/spot_watch.py; on an on-demand worker it exits at once). Ray's updater
    sets RAY_HEAD_IP for the start commands; nothing of the values file enters it."""
    if not any(w["spot"] for w in values["workers"].values()):
        return None
    return (f"nohup python {NODE_PROGRAMS_REMOTE_DIR}/spot_watch.py --gcs $RAY_HEAD_IP:{GCS_PORT} "
            "> /tmp/raykit-spot-watch.log 2>&1 &")


def iam_profile(name_or_arn: str | None) -> dict | None:
    """RunInstances' IamInstanceProfile: {"Arn": ...} for an ARN, else {"Name": ...}."""
    if not name_or_arn:
        return None
    return {"Arn": name_or_arn} if name_or_arn.startswith("arn:") else {"Name": name_or_arn}


def aws_node(name: str, node: dict, preprocess: bool, spot: bool, root_device: str,
             coordinate: bool = False, worker: bool = False) -> dict:
    spec = catalog.INSTANCE_TYPES[node["instance_type"]]
    disk = node["disk"]
    # Where work runs is the labels' business (placement.py); a worker type's one custom
    # resource is what the autopilot's requests name (placement.type_resource). A node
    # that preprocesses offers Ray the vCPUs the catalog leaves to it (one stays with
    # Ray's own processes), plus one per GPU for its training workers. A coordinating
    # head offers none (Ray's advice for larger clusters): the job's driver needs none.
    resources = {"CPU": (0 if coordinate else catalog.preprocess_vcpus(node["instance_type"]) + spec.gpus
                         if preprocess else spec.vcpus)}
    if spec.gpus:
        resources["GPU"] = spec.gpus
    if worker:
        resources[placement.type_resource(name)] = 1
    volumes = [{"device": root_device, "size_gb": disk["root_gb"], "type": disk["volume_type"]}]
    if disk["data_gb"]:
        volumes.append({"device": "/dev/sdf", "size_gb": disk["data_gb"],
                        "type": disk["volume_type"]})
    # /dev/shm holds Ray's object store inside the container: size it well above Ray's
    # default share (30% of RAM) so the store is never capped by Docker's 64 MB default.
    run_options = [f"--shm-size={max(1, int(spec.memory_gib * 0.4))}g"]
    if spec.gpus:
        run_options.append("--gpus all")
    return {
        "name": name,
        "instance_type": node["instance_type"],
        "resources": resources,
        "labels": placement.node_labels(name, trainer_slots=spec.gpus, preprocess=preprocess),
        "volumes": volumes,
        "market_type": "spot" if spot else None,  # the head is never spot: losing it ends the cluster
        "image": catalog.DOCKER_IMAGE["gpu" if spec.gpus else "cpu"],
        "run_options": run_options,
        "setup_commands": node_packages.install_commands(gpu=spec.gpus > 0),
    }


def deadman_user_data(head: bool = False) -> str:
    """Every node's EC2 user data: a script cloud-init runs as root at first boot, before
    SSH, Docker or Ray, that installs the node's dead-man switch (scripts/node/deadman.py)
    as an enabled systemd service, restarted if it dies and started again at every boot.
    A node on which Ray never starts (its setup failed, or SSH never reached it), has
    stopped, or does not come back after a reboot (Ray's container is --rm: maintenance,
    `sudo reboot` or a stop/start leaves the host up, its status checks passing, and no Ray)
    then powers itself off and, launched with InstanceInitiatedShutdownBehavior=terminate,
    is terminated. The program travels base64-encoded: its text never meets a shell; the
    unit's text is the kit's constants in a quoted heredoc. The head's also watches its
    watchdog's heartbeat (autostop_command)."""
    program = base64.b64encode(DEADMAN_PROGRAM.read_bytes()).decode()
    command = (f"/usr/bin/env python3 /opt/raykit/deadman.py --grace-minutes {DEADMAN_GRACE_MIN} "
               f"--idle-minutes {DEADMAN_IDLE_MIN}"
               + (f" --watchdog-minutes {WATCHDOG_SILENT_MIN} --heartbeat {WATCHDOG_HEARTBEAT}" if head else ""))
    return "\n".join([
        "#!/bin/bash",
        "# ray-kit: the node's dead-man switch (scripts/node/deadman.py), from every boot",
        "mkdir -p /opt/raykit",
        f"echo {program} | base64 -d > /opt/raykit/deadman.py",
        f"cat > /etc/systemd/system/{DEADMAN_UNIT}.service <<'UNIT'",
        "[Unit]",
        "Description=ray-kit dead-man switch: powers the node off when Ray has not run on it for a while",
        "[Service]",
        f"ExecStart={command}",
        "Restart=always",
        "RestartSec=5",
        "[Install]",
        "WantedBy=multi-user.target",
        "UNIT",
        "systemctl daemon-reload",
        f"systemctl enable --now {DEADMAN_UNIT}.service",
        ""])


def host_dir_commands(docker: dict, data_volume_sizes: list[int]) -> list[str]:
    """Host-side commands: create every mounted host dir, owned by the container's user
    (Ray's images run as uid 1000; a root-owned mount is read-only to the jobs); where a
    node has a data volume, format it once and mount it on the first volume's host dir.
    The volume is found by its exact size, since NVMe device names do not follow the
    BlockDeviceMapping's."""
    commands = [f"sudo mkdir -p {shlex.quote(v['host'])}" for v in docker["volumes"]]
    commands += [f"sudo chown {CONTAINER_USER} {shlex.quote(v['host'])}" for v in docker["volumes"]]
    if data_volume_sizes and docker["volumes"]:
        target = shlex.quote(docker["volumes"][0]["host"])
        for size_gb in data_volume_sizes:
            size_bytes = int(size_gb) * 1024**3
            commands.append(
                f"DEV=$(lsblk -bdnpo NAME,SIZE | awk '$2 == {size_bytes} {{print $1; exit}}'); "
                f"if [ -n \"$DEV\" ]; then (sudo blkid \"$DEV\" || sudo mkfs.ext4 -q \"$DEV\") "
                f"&& (mountpoint -q {target} || sudo mount \"$DEV\" {target}) "
                f"&& sudo chown {CONTAINER_USER} {target}; fi"
            )
    return commands
