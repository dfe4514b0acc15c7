"""The AWS provider: `ray up`/`ray down` of a cluster of EC2 instances, and what the kit
makes for it (its security group and IAM roles), behind the Provider interface.

Its concerns, a module each in this package:
  names.py       the names of what it makes: node type, tags, group, roles
  values.py      the rules on values files and on the rendered config
  render.py      checked values -> the template's context (cluster_templates/aws.yaml.j2)
  iam.py         the head's and the workers' least-privilege policies and roles
  preflight.py   read-only checks of the account before anything is created
  __init__.py    the provider's face (the interface): preflight, plan, up (and what up
                 makes), wait, down, day 2
"""

import copy
import json
import re
import signal
import stat
import subprocess
import time
from contextlib import contextmanager

import yaml

from scripts import catalog
from scripts.core import state, tunnel
from scripts.core.errors import CapacityRefused, KitError, NoAccount, short
from scripts.core.ray_cli import ray_cli, ray_env
from scripts.core.submit import JobFiles, JobPackages
from scripts.providers.aws.alarm import HUNG_MINUTES, delete_head_alarm, set_head_alarm
from scripts.providers.aws.iam import (
    delete_role,
    ensure_head_role,
    ensure_role,
    head_policy,
    user_policy,
    wait_until_usable,
    worker_policy,
)
from scripts.providers.aws.names import (
    HEAD_TYPE,
    KIT_TAG,
    TAG_CLUSTER,
    TAG_KIND,
    TAG_STATUS,
    TAG_USER_TYPE,
    UP_TO_DATE,
    UPDATE_FAILED,
    head_alarm_name,
    head_profile_name,
    placement_group_name,
    security_group_name,
    worker_profile_name,
)
from scripts.providers.aws.preflight import NO_CREDENTIALS
from scripts.providers.aws.preflight import preflight as check_account
from scripts.providers.aws.render import template_context  # noqa: F401 (the interface's)
from scripts.providers.aws.values import config_problems, nodes_of, value_problems  # noqa: F401 (the interface's)

NAME = "aws"
DEFAULT_JOB_TIMEOUT_S = 6 * 3600.0  # TIMEOUT= overrides it (up to 7 days)
JOB_PACKAGES = JobPackages.PIP  # a job's requirements.txt: Ray's pip runtime_env, over the image's packages
JOB_FILES = JobFiles.UPLOAD  # each node unpacks its own copy of the job's folder
BILLS = True  # its nodes are EC2 instances, priced from scripts/catalog.py
STOPS_WITHOUT_RECORD = False  # the record names what was launched: without it, nothing is touched
READY_POLL_S = 10


RECORD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cluster", "provider", "cluster_name", "region", "min_workers",
                 "ready_timeout_s", "security_group", "ray_key_pair", "ray_role"],
    "properties": {
        "cluster": {"type": "string"},
        "provider": {"const": NAME},
        "cluster_name": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,39}$"},
        "region": {"type": "string", "pattern": "^[a-z]{2}(-gov)?-[a-z]+-[0-9]$"},
        "min_workers": {"type": "object", "maxProperties": 10,
                        "propertyNames": {"pattern": "^[a-z][a-z0-9_-]{0,39}$"},
                        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 100}},
        "ready_timeout_s": {"type": "integer", "minimum": 60, "maximum": 14400},
        # What Ray creates for this cluster when the values name none of their own.
        "security_group": {"type": ["string", "null"], "pattern": "^ray-[a-z][a-z0-9_-]{0,39}$"},
        "ray_key_pair": {"type": "boolean"},
        "ray_role": {"type": "boolean"},
        # the head's role and instance profile `make up` made (iam_instance_profile: auto)
        "head_role": {"type": ["string", "null"], "pattern": "^raykit-[a-z][a-z0-9_-]{0,39}-head$"},
        # the workers' role, made where the values name data buckets; the buckets
        "worker_role": {"type": ["string", "null"], "pattern": "^raykit-[a-z][a-z0-9_-]{0,39}-worker$"},
        # the train nodes' cluster placement group `make up` made (aws.placement_group)
        "placement_group": {"type": ["string", "null"], "pattern": "^raykit-[a-z][a-z0-9_-]{0,39}$"},
        "data_buckets": {"type": "array", "maxItems": 20, "items": {"type": "string",
                                                                   "pattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"}},
        "up_at": {"type": "number", "minimum": 0},  # epoch seconds; autostop counts from it
        "autostop_minutes": {"type": "integer", "minimum": 0, "maximum": 10080},
    },
}


# --- values -> config ---------------------------------------------------------------


# --- checks on the rendered config --------------------------------------------------


def node_usd_per_hour(node: dict, region: str) -> float | None:
    """The instance's on-demand price plus its EBS volumes' (billed per GB-month); None
    where scripts/catalog.py lists no price for the region."""
    disk = node["disk"]
    return catalog.node_usd_per_hour(node["instance_type"], region, disk["volume_type"],
                                     disk["root_gb"] + disk["data_gb"])


def preflight(values: dict, avoid_zones: tuple = ()) -> tuple[dict, list[str]]:
    found = check_account(values, avoid_zones=avoid_zones)
    pinned = copy.deepcopy(values)
    pinned["aws"]["availability_zone"] = found["availability_zone"]
    pinned["aws"]["image_id"] = found["image_id"]
    pinned["aws"]["root_device"] = found["root_device"]  # the AMI's
    pinned["aws"]["ebs_kms_key"] = found["ebs_kms_key"]  # the account's default, if a customer's
    pinned["aws"]["ssh_cidr"] = found["ssh_cidr"]  # auto: this machine's address, /32
    if kit_creates_ssh_group(pinned) and not values["aws"]["subnet_ids"]:
        # the kit creates the SSH group in this subnet's VPC: Ray must launch there too
        pinned["aws"]["subnet_ids"] = [found["subnet"]]
    how = "as set" if values["aws"]["availability_zone"] else "picked: it offers every instance type"
    summary = (f"preflight: account {found['account']}, zone {found['availability_zone']} ({how}), "
               f"subnet {found['subnet']} usable"
               + f", AMI {found['image_id']} ({found['image_name']}"
               + (", the current Deep Learning Base AMI)" if values["aws"]["image_id"] == "auto" else ")")
               + (f", key pair {values['aws']['key_pair']} found" if values["aws"]["key_pair"] else "")
               + (f", SSH open to {found['ssh_cidr']} only" if kit_creates_ssh_group(pinned) else "")
               + ("" if found["notes"] else ", vCPU quotas suffice"))
    return pinned, [summary] + [f"preflight: {note}" for note in found["notes"]]


def plan(values: dict, config: dict) -> list[str]:
    aws = values["aws"]
    node_types = config["available_node_types"]
    lines = [f"AWS {aws['region']}, zone {aws['availability_zone'] or 'any (Ray picks)'}, "
             f"AMI {config['available_node_types'][HEAD_TYPE]['node_config']['ImageId']}"]
    for key, node in nodes_of(values).items():
        name = HEAD_TYPE if key == "head" else key.split(".", 1)[1]
        count = "1" if key == "head" else f"{node['min_workers']}-{node['max_workers']}"
        disk = node["disk"]
        volumes = f"{disk['root_gb']} GB" + (f" + {disk['data_gb']} GB" if disk["data_gb"] else "")
        image = config["docker"]["image"] if key == "head" else \
            node_types[name]["docker"]["worker_image"]
        lines.append(f"  {name}: {count} x {node['instance_type']}"
                     f"{' (spot)' if key != 'head' and node['spot'] else ''}, {volumes} {disk['volume_type']}, "
                     f"{image}, {usd(node_usd_per_hour(node, aws['region']), '~$%.2f/h each')}")
    return lines


def usd(value: float | None, form: str = "~$%.2f/h") -> str:
    return form % value if value is not None else "no list price in scripts/catalog.py"


def companion_files(cluster: str, values: dict) -> dict[str, str]:
    return {"head-policy.json": json.dumps(head_policy(values), indent=2) + "\n",
            "user-policy.json": json.dumps(user_policy(), indent=2) + "\n"}


S3_URI = re.compile(r"s3://([^/\s]+)")


def job_problems(record: dict, job: str, args: list[str]) -> list[str]:
    """Every node's setup installs the jobs' packages (adaptdl's too). The S3 buckets a job's ARGS name that the cluster's nodes cannot read: only those in
    aws.data_buckets are readable (read-only) by its workers, where preprocessing reads."""
    readable = set(record.get("data_buckets") or [])
    named = sorted({m.group(1) for arg in args for m in S3_URI.finditer(arg)})
    return [f"ARGS: s3://{bucket}: the nodes of '{record['cluster']}' cannot read bucket {bucket} "
            f"(aws.data_buckets: {sorted(readable) or '[]'}); add it to aws.data_buckets in the "
            "values file and `make up` again (its nodes get read-only access)"
            for bucket in named if bucket not in readable]


# --- lifecycle ----------------------------------------------------------------------

# The error code EC2 answers RunInstances with when a zone has no capacity for the type
# right now (botocore's ClientError text, which `ray up` prints): another zone may have some.
CAPACITY_ERROR = "InsufficientInstanceCapacity"

def require_credentials() -> None:
    """Fail with one line before `ray up`/`ray down` would fail with a traceback."""
    import boto3
    import botocore.exceptions

    try:
        found = boto3.Session().get_credentials()
    except botocore.exceptions.BotoCoreError as e:
        raise KitError(f"AWS credentials: {short(str(e), 120)}; fix your AWS configuration") from None
    if found is None:
        raise NoAccount(NO_CREDENTIALS)


def run_ray(args: list[str], keep_output: bool = False):
    """A `ray` command in a session of its own: the terminal's Ctrl-C reaches the kit,
    which decides (an interrupted `ray up` is stopped; `ray down` is let finish). Its exit
    code; with keep_output, (code, its output), echoed as it comes."""
    proc = subprocess.Popen([ray_cli(), *args], env=ray_env(), start_new_session=True,
                            **({"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT,
                                "text": True} if keep_output else {}))
    try:
        if not keep_output:
            return proc.wait()
        lines = []
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines = (lines + [line])[-500:]  # the tail is where `ray up` says why it failed
        return proc.wait(), "".join(lines)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def up(cluster: str, config_text: str, values: dict) -> dict:
    record = {"cluster": cluster, "provider": NAME, "cluster_name": values["cluster_name"],
              "region": values["aws"]["region"],
              "min_workers": {name: w["min_workers"] for name, w in values["workers"].items()},
              "ready_timeout_s": values["ready_timeout_minutes"] * 60,
              "security_group": None if values["aws"]["security_group_ids"]
              else security_group_name(values),
              "ray_key_pair": values["aws"]["key_pair"] is None,
              "ray_role": values["aws"]["iam_instance_profile"] is None,
              "head_role": (head_profile_name(values)
                            if values["aws"]["iam_instance_profile"] == "auto" else None),
              "worker_role": worker_profile_name(values),
              "placement_group": placement_group_name(values),
              "data_buckets": values["aws"]["data_buckets"],
              "up_at": time.time(), "autostop_minutes": values["autostop_minutes"]}
    state.save(cluster, record, config_text)  # from here on, `make down` can stop it
    stop_hint = f"instances of '{cluster}' may be running: `make down CLUSTER={cluster}` stops them"
    if kit_creates_ssh_group(values):
        import boto3

        create_ssh_group(boto3.client("ec2", region_name=record["region"]), values)
    if record["placement_group"]:
        import boto3

        ensure_placement_group(boto3.client("ec2", region_name=record["region"]), values)
    if record["head_role"] or record["worker_role"]:
        import boto3

        iam = boto3.client("iam")
        if record["worker_role"]:  # first: the head's policy passes it
            ensure_role(iam, values, record["worker_role"], worker_policy(values), "the workers' data reads")
        if record["head_role"]:
            # Ray's head launch retries back to back: EC2 must take the profile first
            wait_until_usable(boto3.client("ec2", region_name=record["region"]),
                              ensure_head_role(iam, values), values)
    try:
        code, output = run_ray(["up", "-y", "--no-config-cache", "--disable-usage-stats",
                                str(state.config_path(cluster))], keep_output=True)
    except KeyboardInterrupt:
        print(f"interrupted: {stop_hint}", flush=True)
        raise
    if code != 0 and CAPACITY_ERROR in output and not head_launched(record):
        zone = values["aws"]["availability_zone"]
        raise CapacityRefused(zone, f"zone {zone} has no {values['head']['instance_type']} "
                              f"capacity now ({CAPACITY_ERROR}); no head was launched")
    if code != 0:
        raise KitError(f"`ray up` failed (exit {code}); {stop_hint}")
    watch_for_a_hung_head(record)
    wait_until_ready(record)
    return record


def heads(record: dict) -> list[str]:
    """The ids of this cluster's heads that are pending or running."""
    import boto3

    ec2 = boto3.client("ec2", region_name=record["region"])
    found = ec2.describe_instances(Filters=[
        {"Name": f"tag:{KIT_TAG}", "Values": [record["cluster_name"]]},
        {"Name": f"tag:{TAG_KIND}", "Values": ["head"]},  # Ray's tag (ray.autoscaler.tags)
        {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return [i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]]


def same_cluster(values: dict, record: dict) -> bool:
    """One cluster_name is one cluster to AWS in every region: its tag, its security
    group's name and its IAM roles (global) are named after it."""
    return record["provider"] == NAME and values["cluster_name"] == record["cluster_name"]


def head_launched(record: dict) -> bool:
    """Whether a head of this cluster is pending or running: one of the tries of Ray's
    head launch may have got one after another was refused capacity. Then `make up` must
    not say that none was launched, nor try another zone beside it."""
    return bool(heads(record))


def watch_for_a_hung_head(record: dict) -> None:
    """The hung-head alarm on the head `ray up` launched (aws/alarm.py). Refused (a user
    without CloudWatch rights), the cluster runs on with its other safeguards: one warning."""
    import boto3

    found = heads(record)
    why = (set_head_alarm(boto3.client("cloudwatch", region_name=record["region"]),
                          record["cluster_name"], record["region"], found[0])
           if len(found) == 1 else f"{len(found)} heads found")
    if why:
        print(f"warning: no hung-head alarm ({why}): a head whose host hangs is not terminated "
              "by CloudWatch; docs/aws.md lists the rights it needs", flush=True)
    else:
        print(f"hung-head alarm: CloudWatch terminates the head after {HUNG_MINUTES} min of "
              "failed status checks", flush=True)


def joined_workers(record: dict, status: str = UP_TO_DATE) -> dict[str, int]:
    """{worker type: running instances in `status`}, from the tags the head's autoscaler
    sets: up-to-date (joined), or update-failed (its setup failed; the autoscaler
    terminates and relaunches it, each one billed)."""
    import boto3

    ec2 = boto3.client("ec2", region_name=record["region"])
    filters = [{"Name": f"tag:{TAG_CLUSTER}", "Values": [record["cluster_name"]]},
               {"Name": f"tag:{TAG_KIND}", "Values": ["worker"]},
               {"Name": f"tag:{TAG_STATUS}", "Values": [status]},
               {"Name": "instance-state-name", "Values": ["running"]}]
    counts: dict[str, int] = {}
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                node_type = tags.get(TAG_USER_TYPE, "?")
                counts[node_type] = counts.get(node_type, 0) + 1
    return counts


def kit_creates_ssh_group(values: dict) -> bool:
    """The kit makes the cluster's security group (SSH from ssh_cidr alone) unless the
    values name groups of their own; `auto` is resolved at preflight, before `up`."""
    if values["aws"]["security_group_ids"]:
        return False
    if values["aws"]["ssh_cidr"] == "auto":
        raise KitError("aws.ssh_cidr: auto is resolved by the preflight; run `make up`, "
                       "which runs it first")
    return True


def ensure_placement_group(ec2, values: dict) -> str:
    """The train nodes' cluster placement group (aws.placement_group: cluster), tagged with
    the cluster: made on the first `make up`, reused after; one of that name that is not
    this cluster's is refused. Free; `make down PURGE=1` deletes it."""
    import botocore.exceptions

    name, cluster = placement_group_name(values), values["cluster_name"]
    try:
        found = ec2.describe_placement_groups(GroupNames=[name])["PlacementGroups"]
    except botocore.exceptions.ClientError as e:
        if e.response["Error"]["Code"] not in ("InvalidPlacementGroup.Unknown", "InvalidGroup.NotFound"):
            raise
        found = []
    if found:
        group = found[0]
        tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
        if tags.get(KIT_TAG) != cluster or group["Strategy"] != "cluster":
            raise KitError(f"aws.placement_group: a placement group {name} exists and is not this "
                           f"cluster's ({KIT_TAG}={tags.get(KIT_TAG)}, strategy {group['Strategy']}); "
                           "delete it, or rename cluster_name")
        return name
    ec2.create_placement_group(GroupName=name, Strategy="cluster", TagSpecifications=[{
        "ResourceType": "placement-group", "Tags": [{"Key": KIT_TAG, "Value": cluster}]}])
    return name


def create_ssh_group(ec2, values: dict) -> str:
    """The cluster's security group with SSH from aws.ssh_cidr only, plus all traffic
    between the cluster's own nodes. Ray adds its default rules (SSH from anywhere) only to
    a group that has none, so it leaves this one as it is. Purged by `make down PURGE=1`."""
    aws, name = values["aws"], security_group_name(values)
    vpc = ec2.describe_subnets(SubnetIds=aws["subnet_ids"][:1])["Subnets"][0]["VpcId"]
    ssh = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
           "IpRanges": [{"CidrIp": aws["ssh_cidr"], "Description": "SSH (aws.ssh_cidr)"}]}
    found = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]},
                                                  {"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]
    if found:
        group = found[0]
        ssh_sources = {r["CidrIp"] for p in group["IpPermissions"] if p.get("FromPort") == 22
                       for r in p.get("IpRanges", [])}
        if ssh_sources != {aws["ssh_cidr"]}:
            raise KitError(f"security group {name} ({group['GroupId']}) exists with SSH open to "
                           f"{', '.join(sorted(ssh_sources)) or 'nobody'}, not {aws['ssh_cidr']}; "
                           f"`make down CLUSTER=... PURGE=1` (or delete it), then `make up` again")
        return group["GroupId"]
    group_id = ec2.create_security_group(
        GroupName=name, VpcId=vpc, Description=f"Ray cluster {values['cluster_name']} (ray-kit)",
        TagSpecifications=[{"ResourceType": "security-group", "Tags": [
            {"Key": KIT_TAG, "Value": values["cluster_name"]}]}])["GroupId"]
    own_nodes = {"IpProtocol": "-1", "UserIdGroupPairs": [
        {"GroupId": group_id, "Description": "the cluster's own nodes"}]}
    ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[ssh, own_nodes])
    return group_id


def wait_until_ready(record: dict, joined=joined_workers, poll_s: float = READY_POLL_S) -> None:
    """`ray up` returns once the head is ready; the head's autoscaler then launches the
    workers, and each boots, pulls its image and installs packages. Wait until min_workers
    of every worker type joined, printing a line whenever the count changes."""
    want = {name: n for name, n in record["min_workers"].items() if n}
    start, shown = time.monotonic(), None
    while want:
        have = joined(record)
        elapsed = time.monotonic() - start
        line = ", ".join(f"{name} {min(have.get(name, 0), n)}/{n}" for name, n in want.items())
        if line != shown:
            print(f"  workers joined: {line} after {elapsed:.0f} s", flush=True)
            shown = line
        missing = {name: n - have.get(name, 0) for name, n in want.items() if have.get(name, 0) < n}
        if not missing:
            return
        if elapsed > record["ready_timeout_s"]:
            failed = joined(record, UPDATE_FAILED)
            raise KitError(
                f"after {elapsed / 60:.0f} min still missing: "
                + ", ".join(f"{n} x {name}" for name, n in missing.items())
                + "".join(f"; {n} x {name} launched but its setup failed (tagged {UPDATE_FAILED}: "
                          "the autoscaler relaunches it, each one billed)"
                          for name, n in failed.items() if name in missing)
                + f"; the head's autoscaler says: {launch_errors(record)}; the cluster is left "
                f"as it is: `make status CLUSTER={record['cluster']}` shows it, "
                f"`make down CLUSTER={record['cluster']}` stops it")
        time.sleep(poll_s)


# What the head's autoscaler (v2, `ray up`'s default) logs when a worker cannot be had,
# as Ray 2.60 writes it (tests/aws/test_aws_moto.py reads each from Ray's installed source):
#   v2 node_provider   "Failed to launch {count} nodes of type {node_type}: {e}"   (EC2 refused)
#   v2 ray installer   "Ray installation failed on instance {cloud_instance_id}: {e}", each
#                      of its attempts (the instance is terminated after the last, so its
#                      update-failed tag is seldom there at the time-out)
#   updater            "Setup command `{}` failed with exit code {}. stderr: {}" (no login
#                      shell), or "Error message: {}" ("SSH command failed." with one)
AUTOSCALER_FAILURES = ("Failed to launch", "Ray installation failed on instance",
                       "failed with exit code", "Error message: ")
INSTALL_FAILED = re.compile(r"Ray installation failed on instance (i-[0-9a-f]+): (.*)")


def launch_errors(record: dict) -> str:
    """The head autoscaler's last launch and setup failures, read over SSH from its log,
    each failed instance named with its worker type."""
    command = ("grep -h -e 'Failed to launch' -e 'Ray installation failed on instance' "
               "-e 'failed with exit code' -e 'Error message: ' "
               "/tmp/ray/session_latest/logs/monitor.* 2>/dev/null | tail -n 12")
    try:
        result = subprocess.run([ray_cli(), "exec", str(state.config_path(record["cluster"])),
                                 command], env=ray_env(), capture_output=True, text=True,
                                timeout=120, start_new_session=True)
    except subprocess.TimeoutExpired:
        return "(its log could not be read within 120 s)"
    import boto3

    return autoscaler_failures(result.stdout, instance_types(
        boto3.client("ec2", region_name=record["region"]), record))


def instance_types(ec2, record: dict) -> dict[str, str]:
    """{instance id: worker type} of the cluster's instances, terminated ones too (Ray's
    v2 installer terminates a worker after its last failed attempt)."""
    try:
        filters = [{"Name": f"tag:{TAG_CLUSTER}", "Values": [record["cluster_name"]]}]
        return {i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(TAG_USER_TYPE, "?")
                for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
                for r in page["Reservations"] for i in r["Instances"]}
    except Exception:  # noqa: BLE001 (the failure lines still say what they can)
        return {}


def autoscaler_failures(log_text: str, types: dict[str, str] | None = None) -> str:
    """The failure lines of the autoscaler's log, last ones last, in one line; an instance
    whose Ray installation failed is named with its worker type (`types`: instance ->
    type): '<type> (<instance>) failed its setup: <error>'."""
    found = []
    for line in log_text.splitlines():
        if not any(f in line for f in AUTOSCALER_FAILURES):
            continue
        install = INSTALL_FAILED.search(line)
        if install:
            instance, error = install.groups()
            line = f"{(types or {}).get(instance, 'a worker')} ({instance}) failed its setup: {error}"
        found.append(line.strip())
    return (" | ".join(short(line, 200)[1:-1] for line in found[-3:])
            or "(no launch or setup failure in its log)")


def down(cluster: str, record: dict | None, purge: bool = False) -> str:
    """`ray down`, then check that no instance of the cluster is left, and say what Ray
    left behind; with purge, delete the cluster's own security group too."""
    if record is None:
        return (f"AWS cluster '{cluster}' was not launched from this checkout "
                f"(no {state.record_path(cluster)}); nothing to stop")
    if not state.config_path(cluster).is_file():
        raise KitError(f"{state.config_path(cluster)} is missing; stop '{cluster}' from the EC2 "
                       f"console (instances tagged {TAG_CLUSTER}={record['cluster_name']}), "
                       f"then delete {state.record_path(cluster)}")
    require_own_names(cluster, record)
    require_credentials()
    code = run_ray(["down", "-y", str(state.config_path(cluster))])
    if code != 0:
        raise KitError(f"`ray down` failed (exit {code}); the record is kept: run "
                       f"`make down CLUSTER={cluster}` again")
    import boto3

    ec2 = boto3.client("ec2", region_name=record["region"])
    # `ray down` terminates pending and running nodes only: a node someone stopped (its
    # disks bill) would be left, and `make down` fail on every rerun. The record's
    # names were checked as this cluster's own above.
    stopped = cluster_instances(ec2, record, states=["stopping", "stopped"])
    if stopped:
        ec2.terminate_instances(InstanceIds=stopped)
        print(f"terminated {len(stopped)} stopped instance(s) `ray down` leaves: {', '.join(stopped[:5])}",
              flush=True)
    left = cluster_instances(ec2, record, states=["pending", "running", "stopping", "stopped"])
    if left:
        raise KitError(f"`ray down` returned, but {len(left)} instance(s) tagged "
                       f"{TAG_CLUSTER}={record['cluster_name']} still run ({', '.join(left[:5])}); "
                       f"run `make down CLUSTER={cluster}` again, or terminate them in the EC2 console")
    # the hung-head alarm is the cluster's own ($0.10 a month): deleted with it, always
    alarm_left = delete_head_alarm(boto3.client("cloudwatch", region_name=record["region"]),
                                   record["cluster_name"])
    behind = [alarm_left] * bool(alarm_left) + left_behind(ec2, record, purge)
    state.forget(cluster)
    return (f"AWS cluster '{cluster}': every instance terminated"
            + (f"; left behind: {'; '.join(behind)}" if behind else ""))


MAX_CONFIG_BYTES = 1 << 20


def require_own_names(cluster: str, record: dict) -> None:
    """`down` (and PURGE) act on what the record and the launched config name: each must be
    what this record's cluster_name makes (make up writes nothing else), so an edited or
    planted file never steers `ray down` or a deletion onto another cluster's instances,
    group, roles or placement group."""
    name = record["cluster_name"]
    own = {"security_group": f"ray-{name}", "head_role": f"raykit-{name}-head",
           "worker_role": f"raykit-{name}-worker", "placement_group": f"raykit-{name}"}
    stray = [f"{key}: {short(record[key])}" for key, expected in own.items()
             if record.get(key) not in (None, expected)]
    path = state.config_path(cluster)
    try:
        kind = path.lstat()
        if not stat.S_ISREG(kind.st_mode) or kind.st_size > MAX_CONFIG_BYTES:
            raise ValueError("not a regular file of at most 1 MiB")
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        names = (config["cluster_name"], config["provider"]["region"])
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError) as e:
        raise KitError(f"{path} is not the config `make up` launched ({short(str(e), 60)[1:-1]}); stop "
                       f"'{cluster}' from the EC2 console (instances tagged {TAG_CLUSTER}={name}), "
                       f"then delete {state.record_path(cluster)}") from None
    if names != (name, record["region"]):
        stray.append(f"{path.name}: cluster {short(names[0])} in {short(names[1])}")
    if stray:
        raise KitError(f"{state.record_path(cluster)} names what is not cluster {name}'s ("
                       f"{'; '.join(stray)[:200]}); nothing was stopped: move the files away and "
                       f"stop '{cluster}' from the EC2 console (instances tagged {TAG_CLUSTER}={name})")


def cluster_instances(ec2, record: dict, states: list[str]) -> list[str]:
    filters = [{"Name": f"tag:{TAG_CLUSTER}", "Values": [record["cluster_name"]]},
               {"Name": "instance-state-name", "Values": states}]
    return [i["InstanceId"] for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
            for r in page["Reservations"] for i in r["Instances"]]


DEPENDENCY_WAIT_S = 180  # a terminated instance's network interface lingers a while


def when_free(delete, what: str, limit_s: float = DEPENDENCY_WAIT_S, poll_s: float = READY_POLL_S) -> None:
    """Run `delete` (an EC2 deletion), again while EC2 answers DependencyViolation: the
    network interfaces of instances just terminated detach a while after. Past limit_s, one
    line saying to run `make down PURGE=1` again."""
    import botocore.exceptions

    deadline = time.monotonic() + limit_s
    while True:
        try:
            return delete()
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") != "DependencyViolation":
                raise
            if time.monotonic() >= deadline:
                raise KitError(f"{what} is still in use after {limit_s:g} s (DependencyViolation: "
                               f"{short(e.response['Error'].get('Message', ''), 120)[1:-1]}); every "
                               "instance is terminated: run `make down PURGE=1` again in a few minutes") from None
        time.sleep(poll_s)


def left_behind(ec2, record: dict, purge: bool) -> list[str]:
    """What Ray created and `ray down` keeps: the cluster's security group (free, deleted
    with purge), and the key pair and IAM role Ray shares between all its clusters in the
    region (never deleted here: another cluster may use them)."""
    import botocore.exceptions

    notes = []
    group = record["security_group"]
    # the one `make up` made, by its tag: a group of that name in another VPC is not this cluster's
    found = ec2.describe_security_groups(Filters=[
        {"Name": "group-name", "Values": [group]},
        {"Name": f"tag:{KIT_TAG}", "Values": [record["cluster_name"]]}])["SecurityGroups"] if group else []
    for g in found:
        if purge:
            # A group cannot be deleted while an instance, even a terminating one, uses it.
            deadline = time.monotonic() + 600
            while cluster_instances(ec2, record, ["shutting-down"]) and time.monotonic() < deadline:
                time.sleep(READY_POLL_S)
            when_free(lambda: ec2.delete_security_group(GroupId=g["GroupId"]), f"security group {group}")
            notes.append(f"nothing of security group {group} (deleted)")
        else:
            notes.append(f"security group {group} ({g['GroupId']}; free, "
                         "`make down PURGE=1` deletes it)")
    placement = record.get("placement_group")
    if placement and purge:
        # like a security group, it cannot be deleted while an instance is in it
        deadline = time.monotonic() + 600
        while cluster_instances(ec2, record, ["shutting-down"]) and time.monotonic() < deadline:
            time.sleep(READY_POLL_S)
        try:
            ec2.delete_placement_group(GroupName=placement)
        except botocore.exceptions.ClientError as e:
            # a first `make up` that failed before making it: nothing to delete
            if e.response.get("Error", {}).get("Code") != "InvalidPlacementGroup.Unknown":
                raise
        notes.append(f"nothing of placement group {placement} (deleted)")
    elif placement:
        notes.append(f"placement group {placement} (free, `make down PURGE=1` deletes it)")
    if record["ray_key_pair"]:
        notes.append(f"key pair ray-autoscaler_{record['region']} (shared by Ray's clusters "
                     "in the region; free)")
    if record["ray_role"]:
        notes.append("IAM role and instance profile ray-autoscaler-v1 (EC2 and S3 full access, "
                     "shared by Ray's clusters; free)")
    for role in (record.get("head_role"), record.get("worker_role")):
        if role and purge:
            import boto3

            delete_role(boto3.client("iam"), role)
            notes.append(f"nothing of IAM role and instance profile {role} (deleted)")
        elif role:
            notes.append(f"IAM role and instance profile {role} (least privilege; free, "
                         "`make down PURGE=1` deletes it)")
    return notes


def status(record: dict) -> int:
    return run_ray(["exec", str(state.config_path(record["cluster"])), "ray status"])


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


def forget_stale(cluster: str, record: dict) -> list[str]:
    """The hung-head alarm of a cluster that ended itself goes with its record (it is
    re-made by the next `make up`); its group and roles stay, the next launch's own."""
    import boto3

    left = delete_head_alarm(boto3.client("cloudwatch", region_name=record["region"]), record["cluster_name"])
    state.forget(cluster)
    return [f"left behind: {left}"] if left else [
        f"no hung-head alarm of it is left ({head_alarm_name(record['cluster_name'])})"]


@contextmanager
def job_address(record: dict):
    """`ray dashboard` keeps an SSH port-forward to the head's dashboard open while we
    submit; the dashboard itself listens on the head's 127.0.0.1 only."""
    def command(port: int) -> list[str]:
        return [ray_cli(), "dashboard", "--port", str(port), str(state.config_path(record["cluster"]))]

    with tunnel.forwarded(command, "ray dashboard", "is the cluster up (`make status`) and "
                          "your SSH key in place?", env=ray_env()) as port:
        yield f"http://127.0.0.1:{port}", "python", None


def run_plan(built, job: str, args: list[str], timeout_s: float | None) -> None:
    """`make run` is up, submit and down here: its dry run is `up`'s."""
    return None


def images_to_bake(values: dict) -> dict[str, str]:
    raise KitError("`make image` builds the images a KubeRay values file names (images.job_packages: "
                   "baked, see k8s_hetero.yaml); AWS nodes install the jobs' packages at setup (node_packages.install_commands)")


def run_job(built, job: str, args: list[str], timeout_s: float | None, verbose: bool,
            env_vars: dict[str, str]) -> None:
    """None: EC2 has no job that ends its own instances; `make run` is the kit's up, submit
    and down (down guaranteed)."""
    return None
