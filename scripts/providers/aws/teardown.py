"""`make down` on AWS: `ray down`, then a sweep until no instance of the cluster is left, and
what the kit made for it (group, roles, alarm) deleted where it is the cluster's own."""

import stat
import time

import yaml

from scripts.core import state
from scripts.core.errors import KitError, short
from scripts.providers.aws.alarm import delete_head_alarm
from scripts.providers.aws.cli import READY_POLL_S, require_credentials, run_ray
from scripts.providers.aws.iam import delete_role
from scripts.providers.aws.names import KIT_TAG, TAG_CLUSTER, head_alarm_name


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
    import boto3

    ec2 = boto3.client("ec2", region_name=record["region"])
    # `ray down` bootstraps the config again, and so creates Ray's own security group
    # (SSH open to the world, without the kit's tag) where `make up` was refused before
    # making one: with no instance to end, it is not run at all.
    if cluster_instances(ec2, record, states=BILLING):
        code = run_ray(["down", "-y", str(state.config_path(cluster))])
        if code != 0:
            raise KitError(f"`ray down` failed (exit {code}); the record is kept: run "
                           f"`make down CLUSTER={cluster}` again")
    else:
        print(f"no instance tagged {TAG_CLUSTER}={record['cluster_name']} runs or is stopped: "
              "`ray down` is not needed", flush=True)
    # `ray down` terminates pending and running nodes only: a node someone stopped (its
    # disks bill) would be left, and `make down` fail on every rerun. The record's
    # names were checked as this cluster's own above.
    stopped = cluster_instances(ec2, record, states=["stopping", "stopped"])
    if stopped:
        ec2.terminate_instances(InstanceIds=stopped)
        print(f"terminated {len(stopped)} stopped instance(s) `ray down` leaves: {', '.join(stopped[:5])}",
              flush=True)
    # DescribeInstances is eventually consistent: an instance just terminated may still
    # read as stopped for a moment, and is no longer one to name
    left = [i for i in cluster_instances(ec2, record, states=BILLING) if i not in stopped]
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


# the states in which an instance (or its disks) bills and `make down` must end it
BILLING = ["pending", "running", "stopping", "stopped"]


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


def forget_stale(cluster: str, record: dict) -> list[str]:
    """The hung-head alarm of a cluster that ended itself goes with its record (it is
    re-made by the next `make up`); its group and roles stay, the next launch's own."""
    import boto3

    left = delete_head_alarm(boto3.client("cloudwatch", region_name=record["region"]), record["cluster_name"])
    state.forget(cluster)
    return [f"left behind: {left}"] if left else [
        f"no hung-head alarm of it is left ({head_alarm_name(record['cluster_name'])})"]
