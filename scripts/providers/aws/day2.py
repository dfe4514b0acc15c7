"""Day 2 on AWS: whether the recorded cluster still runs, `ray status`/`dashboard`/`attach`/
`monitor` through its config, and the dashboard tunnel jobs are submitted through."""

import subprocess
from contextlib import contextmanager

from scripts.core import state, tunnel
from scripts.core.errors import KitError
from scripts.core.ray_cli import ray_cli, ray_env
from scripts.providers.aws.cli import run_ray
from scripts.providers.aws.names import NAME
from scripts.providers.aws.teardown import cluster_instances


def same_cluster(values: dict, record: dict) -> bool:
    """One cluster_name is one cluster to AWS in every region: its tag, its security
    group's name and its IAM roles (global) are named after it."""
    return record["provider"] == NAME and values["cluster_name"] == record["cluster_name"]


def status(record: dict) -> int:
    stopped = stopped_note(record)
    if stopped:
        print(stopped, flush=True)
    return run_ray(["exec", str(state.config_path(record["cluster"])), "ray status"])


def stopped_note(record: dict) -> str | None:
    """The line for instances of the cluster that EC2 or someone stopped (a retirement, a
    console stop): no safeguard runs on a stopped node, and its disks bill until `make
    down`. None when there are none, or when the account cannot be asked (`ray status`
    then says what it can)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        ec2 = boto3.client("ec2", region_name=record["region"])
        stopped = cluster_instances(ec2, record, ["stopping", "stopped"])
    except (BotoCoreError, ClientError):
        return None
    if not stopped:
        return None
    return (f"warning: {len(stopped)} instance(s) of '{record['cluster']}' are stopped "
            f"({', '.join(stopped[:5])}): nothing runs on them and no safeguard ends them, and "
            f"their disks bill until `make down CLUSTER={record['cluster']}`")


def dashboard(record: dict) -> int:
    with job_address(record) as (address, _, _):
        return tunnel.hold_open(record["cluster"], address, "an SSH tunnel to the head")


def attach(record: dict) -> int:
    # in this terminal's session: the remote shell needs it
    return subprocess.call([ray_cli(), "attach", str(state.config_path(record["cluster"]))],
                           env=ray_env())


def monitor(record: dict, follow: bool) -> int:
    config = str(state.config_path(record["cluster"]))
    if follow:
        return run_ray(["monitor", config])
    return run_ray(["exec", config, "tail -n 100 /tmp/ray/session_latest/logs/monitor.log"])


def is_running(record: dict) -> bool:
    """Whether any instance of the recorded cluster may still bill: its tag on an instance
    in any state but terminated. A record whose cluster autostopped, or whose launch failed
    before an instance started, is stale. Where the account cannot be asked (credentials,
    network), the record stands: never assume billing has stopped."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        ec2 = boto3.client("ec2", region_name=record["region"])
        return bool(cluster_instances(ec2, record, ["pending", "running", "stopping", "stopped",
                                                    "shutting-down"]))
    except (BotoCoreError, ClientError):
        return True


def rays_ssh_master(cluster_name: str):
    """Whether a process is the OpenSSH master Ray's SSH to this cluster runs. Ray's SSH runs
    with ControlMaster=auto and ControlPersist=10s (its command_runner.py): OpenSSH binds
    `ray dashboard`'s -L listener and then forks a detached master (`ssh: <ControlPath>
    [mux]`, parent pid 1), or an earlier Ray SSH command's master binds it for the new
    client. Either way the listener is outside the tunnel's process tree, and still its
    own. The ControlPath's folder is Ray's own runner's, for this cluster and this user;
    with ExitOnForwardFailure=yes (Ray's too), a port another program took makes the
    forward fail, never land on that program."""
    import psutil
    from ray.autoscaler._private.command_runner import SSHCommandRunner

    control_dir = SSHCommandRunner(log_prefix="", node_id=None, provider=None, auth_config={"ssh_user": ""},
                                   cluster_name=cluster_name, process_runner=None,
                                   use_internal_ip=False).ssh_control_path

    def is_master(process) -> bool:
        try:
            title = " ".join(process.cmdline()).strip()
        except psutil.Error:
            return False
        return bool(control_dir) and title.startswith(f"ssh: {control_dir}/") and title.endswith("[mux]")
    return is_master


@contextmanager
def job_address(record: dict):
    """`ray dashboard` keeps an SSH port-forward to the head's dashboard open while we
    submit; the dashboard itself listens on the head's 127.0.0.1 only."""
    def command(port: int) -> list[str]:
        return [ray_cli(), "dashboard", "--port", str(port), str(state.config_path(record["cluster"]))]

    with tunnel.forwarded(command, "ray dashboard", "is the cluster up (`make status`) and "
                          "your SSH key in place?", env=ray_env(),
                          also_ours=rays_ssh_master(record["cluster_name"])) as port:
        yield f"http://127.0.0.1:{port}", "python", None


def fetch_folder(record: dict, folder: str, dest) -> None:
    """`ray rsync-down` of the run's folder from the head (out of its container)."""
    dest.mkdir(parents=True, exist_ok=True)
    code = run_ray(["rsync-down", str(state.config_path(record["cluster"])), folder.rstrip("/") + "/", f"{dest}/"])
    if code:
        raise KitError(f"`ray rsync-down` of {folder} from '{record['cluster']}''s head failed (exit {code}); "
                       "`make status` shows whether the head is up")
