"""`make up` on AWS: what the kit makes before `ray up` (the SSH group, the placement group,
the roles), `ray up` itself (a zone without capacity said apart), the hung-head alarm, and the
wait until min_workers have joined (failing fast with what the head's autoscaler logged)."""

import re
import subprocess
import time

from scripts.core import state
from scripts.core.errors import CapacityRefused, KitError, short
from scripts.core.ray_cli import ray_cli, ray_env
from scripts.providers.aws.alarm import HUNG_MINUTES, set_head_alarm
from scripts.providers.aws.cli import READY_POLL_S, run_ray
from scripts.providers.aws.iam import ensure_head_role, ensure_role, wait_until_usable, worker_policy
from scripts.providers.aws.names import (
    KIT_TAG,
    NAME,
    TAG_CLUSTER,
    TAG_KIND,
    TAG_STATUS,
    TAG_USER_TYPE,
    UP_TO_DATE,
    UPDATE_FAILED,
    head_profile_name,
    placement_group_name,
    security_group_name,
    worker_profile_name,
)


# The error code EC2 answers RunInstances with when a zone has no capacity for the type
# right now (botocore's ClientError text, which `ray up` prints): another zone may have some.
CAPACITY_ERROR = "InsufficientInstanceCapacity"


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
              "output_buckets": values["aws"]["output_buckets"],
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
            ensure_role(iam, values, record["worker_role"], worker_policy(values), "the workers' S3 reads and writes")
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
            ours = {"Key": KIT_TAG, "Value": values["cluster_name"]} in group.get("Tags", [])
            # PURGE deletes only a group carrying the kit's tag: Ray's own (made by a bare
            # `ray up` or `ray down`) must go by hand
            fix = ("`make down CLUSTER=... PURGE=1`" if ours else
                   f"delete it (not the kit's: no {KIT_TAG} tag) in the EC2 console or with `aws ec2 "
                   f"delete-security-group --group-id {group['GroupId']}`")
            raise KitError(f"security group {name} ({group['GroupId']}) exists with SSH open to "
                           f"{', '.join(sorted(ssh_sources)) or 'nobody'}, not {aws['ssh_cidr']}; "
                           f"{fix}, then `make up` again")
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
