"""The AWS cluster's rights, least privilege: the head's policy (launch, tag and terminate
only the cluster's own instances), the workers' (read the data buckets, write the output
prefixes), and the roles and
instance profiles `make up` makes for them and `make down PURGE=1` deletes."""

import json
import os
import time

from scripts.core.errors import KitError
from scripts.providers.aws.names import (KIT_TAG, head_alarm_name, head_profile_name, placement_group_name,
                                         worker_profile_name)

def head_policy(values: dict) -> dict:
    """A least-privilege IAM policy for the head's instance profile (aws.iam_instance_profile).
    The head's autoscaler describes, launches, tags, and terminates this cluster's workers
    and nothing else: launches must carry the cluster's tag on the instance and its volumes,
    be of one of the cluster's worker types and require IMDSv2 (as the kit's node config
    does), and only instances with that tag may be tagged or terminated. (No stop or start:
    the config sets cache_stopped_nodes: false, so Ray's provider never calls them.) Ray's default
    role (ray-autoscaler-v1) gets AmazonEC2FullAccess and AmazonS3FullAccess instead.
    Workers get no profile: they call no AWS API."""
    region, name = values["aws"]["region"], values["cluster_name"]
    arn = f"arn:aws:ec2:{region}"
    in_region = {"StringEquals": {"aws:RequestedRegion": region}}
    statements = [
        {"Sid": "ReadTheCluster", "Effect": "Allow", "Resource": "*", "Condition": in_region,
         "Action": ["ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeImages",
                    "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups"]},
        {"Sid": "LaunchOnlyTheClustersWorkers", "Effect": "Allow", "Action": "ec2:RunInstances",
         "Resource": f"{arn}:*:instance/*",
         "Condition": {"StringEquals": {f"aws:RequestTag/{KIT_TAG}": name,
                                        "ec2:InstanceType": worker_types(values),
                                        "ec2:MetadataHttpTokens": "required"}}},
        {"Sid": "LaunchOnlyTaggedVolumes", "Effect": "Allow", "Action": "ec2:RunInstances",
         "Resource": f"{arn}:*:volume/*",
         "Condition": {"StringEquals": {f"aws:RequestTag/{KIT_TAG}": name}}},
        {"Sid": "LaunchFromTheClustersNetworkAndImage", "Effect": "Allow",
         "Action": "ec2:RunInstances",
         "Resource": [f"{arn}::image/*", f"{arn}:*:subnet/*", f"{arn}:*:network-interface/*",
                      f"{arn}:*:security-group/*", f"{arn}:*:key-pair/*"]},
        {"Sid": "TagAtLaunch", "Effect": "Allow", "Action": "ec2:CreateTags",
         "Resource": [f"{arn}:*:instance/*", f"{arn}:*:volume/*"],
         "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}}},
        {"Sid": "ManageOnlyTheClustersNodes", "Effect": "Allow",
         "Action": ["ec2:CreateTags", "ec2:TerminateInstances"],
         "Resource": f"{arn}:*:instance/*",
         "Condition": {"StringEquals": {f"ec2:ResourceTag/{KIT_TAG}": name}}},
        # the watchdog's teardown ends the cluster's hung-head alarm with it
        {"Sid": "DeleteTheClustersHungHeadAlarm", "Effect": "Allow", "Action": "cloudwatch:DeleteAlarms",
         "Resource": f"arn:aws:cloudwatch:{region}:*:alarm:{head_alarm_name(name)}"},
    ]
    if placement_group_name(values):
        # Train workers launch into the cluster's placement group (aws.placement_group).
        statements.append({"Sid": "LaunchIntoTheClustersPlacementGroup", "Effect": "Allow",
                           "Action": "ec2:RunInstances",
                           "Resource": f"{arn}:*:placement-group/{placement_group_name(values)}"})
    # The driver lists the job's data files on the head, and the head trains (or its
    # Train controller keeps the run's state) in the run's folder.
    statements += bucket_statements(values)
    if worker_profile_name(values):
        # the head launches workers with their own profile, which it must be allowed to pass
        statements.append({"Sid": "PassTheWorkersRole", "Effect": "Allow", "Action": "iam:PassRole",
                           "Resource": f"arn:aws:iam::*:role/{worker_profile_name(values)}",
                           "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}})
    if values["aws"]["ebs_kms_key"]:
        # Encrypted volumes take the account's default EBS key; where that is customer-
        # managed, launching through EC2 needs these rights on it (AWS's "Required KMS key
        # policy for use with encrypted volumes"), through EC2 only.
        statements.append({"Sid": "EncryptTheNodesVolumes", "Effect": "Allow",
                           "Action": ["kms:CreateGrant", "kms:Decrypt", "kms:DescribeKey",
                                      "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*"],
                           "Resource": values["aws"]["ebs_kms_key"],
                           "Condition": {"StringEquals": {"kms:ViaService": f"ec2.{region}.amazonaws.com"}}})
    if any(w["spot"] for w in values["workers"].values()):
        # A RunInstances with InstanceMarketOptions (spot) also creates a spot instance
        # request, a resource of its own that the call must be allowed on (AWS's example
        # policies, "Work with Spot Instances"); Ray tags only instances and volumes, so it
        # carries no cluster tag to condition on.
        statements.append({"Sid": "LaunchSpotWorkers", "Effect": "Allow",
                           "Action": "ec2:RunInstances",
                           "Resource": f"{arn}:*:spot-instances-request/*"})
        # The first spot launch of an account creates EC2's spot service-linked role.
        statements.append({"Sid": "SpotServiceLinkedRole", "Effect": "Allow",
                           "Action": "iam:CreateServiceLinkedRole", "Resource": "*",
                           "Condition": {"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}}})
    return {"Version": "2012-10-17", "Statement": statements}


def worker_types(values: dict) -> list[str]:
    """The instance types the head's autoscaler may launch: the worker types' (a list in
    a StringEquals condition matches any of them)."""
    return sorted({w["instance_type"] for w in values["workers"].values()})


def data_read_statements(buckets: list[str]) -> list[dict]:
    """Read-only access to the data buckets: list them, read their objects."""
    return [
        {"Sid": "ListTheDataBuckets", "Effect": "Allow",
         "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
         "Resource": [f"arn:aws:s3:::{b}" for b in buckets]},
        {"Sid": "ReadTheDataBuckets", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": [f"arn:aws:s3:::{b}/*" for b in buckets]},
    ]


def output_statements(places: list[str]) -> list[dict]:
    """The output buckets (bucket or bucket/prefix): list, read, write and delete objects
    under each prefix, nothing else. Ray Train writes checkpoints (pyarrow: multipart
    uploads, folder markers), reads them on a restart and deletes those past
    num_to_keep."""
    def under(place: str) -> tuple[str, str]:
        bucket, _, prefix = place.partition("/")
        return bucket, prefix
    objects = sorted({f"arn:aws:s3:::{p}/*" for p in places}
                     | {f"arn:aws:s3:::{p}" for p in places if "/" in p})  # the prefix's own marker
    statements = [{"Sid": "WriteTheRunsUnderTheOutputPrefixes", "Effect": "Allow",
                   "Action": ["s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                   "Resource": objects}]
    for i, (bucket, prefix) in enumerate(sorted({under(p) for p in places})):
        listing = {"Sid": f"ListTheOutputPrefix{i}", "Effect": "Allow",
                   "Action": ["s3:ListBucket", "s3:GetBucketLocation"], "Resource": f"arn:aws:s3:::{bucket}"}
        if prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}
        statements.append(listing)
    return statements


def bucket_statements(values: dict) -> list[dict]:
    """What the nodes may do in S3: read the data buckets, write the output prefixes."""
    aws = values["aws"]
    return ((data_read_statements(aws["data_buckets"]) if aws["data_buckets"] else [])
            + (output_statements(aws["output_buckets"]) if aws["output_buckets"] else []))


def worker_policy(values: dict) -> dict:
    """The workers' policy: read the data buckets, write the output prefixes, nothing else.
    Ray Data's read tasks run on the workers (and train workers write checkpoints), and
    pyarrow ships no credentials from the driver to them: without a role of their own they
    could read nothing of an `s3://` data set."""
    return {"Version": "2012-10-17", "Statement": bucket_statements(values)}


EC2_TRUST = {"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}


# What the user running the kit needs beyond `ray up` and `ray down` (Ray's docs list
# theirs): every call the kit itself makes with boto3, by what it is for. docs/aws.md says
# the same in words; a test keeps the two equal.
USER_ACTIONS = {
    "the preflight (reads)": ["sts:GetCallerIdentity", "ssm:GetParameter", "servicequotas:GetServiceQuota",
                              "kms:DescribeKey", "ec2:GetEbsDefaultKmsKeyId",
                              "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeSubnets",
                              "ec2:DescribeRouteTables", "ec2:DescribeKeyPairs", "ec2:DescribeImages",
                              "ec2:DescribeInstances", "ec2:DescribeSecurityGroups",
                              "ec2:DescribePlacementGroups"],
    "make up": ["ec2:CreateSecurityGroup", "ec2:AuthorizeSecurityGroupIngress", "ec2:CreatePlacementGroup",
                "ec2:CreateTags", "ec2:RunInstances"],
    "the hung-head alarm": ["cloudwatch:PutMetricAlarm", "cloudwatch:TagResource", "cloudwatch:DescribeAlarms",
                            "cloudwatch:DeleteAlarms", "ec2:DescribeInstanceStatus", "ec2:TerminateInstances",
                            "iam:CreateServiceLinkedRole"],
    "make down PURGE=1": ["ec2:DeleteSecurityGroup", "ec2:DeletePlacementGroup"],
    "make prices": ["pricing:GetProducts", "ec2:DescribeSpotPriceHistory"],
}
ROLE_ACTIONS = ["iam:CreateRole", "iam:TagRole", "iam:PutRolePolicy", "iam:CreateInstanceProfile",
                "iam:TagInstanceProfile", "iam:AddRoleToInstanceProfile", "iam:GetRole",
                "iam:GetInstanceProfile", "iam:ListRoleTags", "iam:PassRole",
                "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile", "iam:ListRolePolicies",
                "iam:DeleteRolePolicy", "iam:DeleteRole"]


def user_policy() -> dict:
    """The user's IAM policy for the kit's own calls (`make render` writes it beside the
    config): the roles' rights only on the kit's `raykit-*` roles and profiles; add what
    `ray up` and `ray down` need (Ray's docs)."""
    statements = [{"Sid": "".join(w.capitalize() for w in why.replace("=1", "").split() if w.isalnum()),
                   "Effect": "Allow", "Action": sorted(set(actions)), "Resource": "*"}
                  for why, actions in USER_ACTIONS.items()]
    statements.append({"Sid": "TheKitsOwnRoles", "Effect": "Allow", "Action": ROLE_ACTIONS,
                       "Resource": ["arn:aws:iam::*:role/raykit-*", "arn:aws:iam::*:instance-profile/raykit-*"]})
    return {"Version": "2012-10-17", "Statement": statements}


IAM_PROPAGATION_S = 15  # a new instance profile is usable by RunInstances only after a while
USABLE_LIMIT_S = 120    # then EC2's dry runs are asked, every USABLE_POLL_S, up to this long
USABLE_POLL_S = 3


def ensure_head_role(iam, values: dict, wait_s: float | None = None) -> str:
    """The head's least-privilege role and instance profile (head_profile_name, head_policy)."""
    return ensure_role(iam, values, head_profile_name(values), head_policy(values),
                       "the head's autoscaler", wait_s)


def ensure_role(iam, values: dict, name: str, policy: dict, purpose: str,
                wait_s: float | None = None) -> str:
    """A role and instance profile, both `name`, with `policy`: made and tagged with the
    cluster on the first `make up`, reused (its policy brought up to date) after; a role of
    that name that is not this cluster's is refused. Returns the profile's name. Deleted
    by `make down PURGE=1` (delete_role)."""
    cluster = values["cluster_name"]
    tag = {"Key": KIT_TAG, "Value": cluster}
    try:
        role = iam.get_role(RoleName=name)["Role"]
    except iam.exceptions.NoSuchEntityException:
        role = None
    if role is not None:
        tags = iam.list_role_tags(RoleName=name)["Tags"]
        if tag not in tags:
            raise KitError(f"IAM role {name} exists but is not cluster '{cluster}''s (no tag "
                           f"{KIT_TAG}={cluster}); delete it, or rename the cluster")
    else:
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(EC2_TRUST),
                        Description=f"Ray cluster {cluster}: {purpose} (ray-kit)", Tags=[tag])
    iam.put_role_policy(RoleName=name, PolicyName="ray-kit", PolicyDocument=json.dumps(policy))
    try:
        profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    except iam.exceptions.NoSuchEntityException:
        profile = iam.create_instance_profile(InstanceProfileName=name, Tags=[tag])["InstanceProfile"]
    if name not in [r["RoleName"] for r in profile["Roles"]]:
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
        wait = (float(os.environ.get("RAYKIT_IAM_WAIT_S") or IAM_PROPAGATION_S)  # tests: 0
                if wait_s is None else wait_s)
        print(f"IAM role and instance profile {name} made (least privilege); waiting {wait:g} s "
              "for IAM to propagate", flush=True)
        time.sleep(wait)
    return name


def wait_until_usable(ec2, profile: str, values: dict, limit_s: float = USABLE_LIMIT_S,
                      poll_s: float = USABLE_POLL_S) -> bool:
    """After a new instance profile's first wait: EC2's dry run of the head's RunInstances
    with it, until EC2 takes it (DryRunOperation) or limit_s passes. Ray's head launch
    retries five times back to back (its node_provider.py), so a profile IAM has not yet
    propagated to EC2 failed `ray up` where a second `make up` worked. True where EC2 took
    it; False where the limit passed or EC2 refused for another reason (`ray up` then says
    what EC2 says)."""
    import botocore.exceptions

    aws, head = values["aws"], values["head"]
    launch = {"DryRun": True, "ImageId": aws["image_id"], "InstanceType": head["instance_type"],
              "MinCount": 1, "MaxCount": 1, "IamInstanceProfile": {"Name": profile}}
    subnet = aws["subnet_ids"][0] if aws["subnet_ids"] else subnet_of_groups(ec2, aws)
    if subnet:
        launch["SubnetId"] = subnet
    deadline = time.monotonic() + limit_s
    while True:
        try:
            ec2.run_instances(**launch)
            return True  # no dry run error: taken (an EC2 that ignores DryRun would launch: never here)
        except botocore.exceptions.ClientError as e:
            error = e.response.get("Error", {})
            if error.get("Code") == "DryRunOperation":
                return True
            if "instance profile" not in str(error.get("Message", "")).lower():
                return False  # not about the profile: `ray up` reports it as EC2 says it
        if time.monotonic() >= deadline:
            print(f"EC2 does not take instance profile {profile} yet after {limit_s:g} s; "
                  "`ray up` tries anyway", flush=True)
            return False
        time.sleep(poll_s)


def subnet_of_groups(ec2, aws: dict) -> str | None:
    """Where the values name security groups and no subnet: a subnet of the groups' VPC in
    the pinned zone, as Ray's launch picks one. Without it the dry run fails at once in an
    account with no default VPC (VPCIdNotSpecified), and never waits. None where no group
    is named (the kit's own group pins the subnet) or none is found."""
    import botocore.exceptions

    if not aws["security_group_ids"]:
        return None
    try:
        (group, *_) = ec2.describe_security_groups(GroupIds=aws["security_group_ids"][:1])["SecurityGroups"]
        subnets = ec2.describe_subnets(Filters=[
            {"Name": "vpc-id", "Values": [group["VpcId"]]},
            {"Name": "availability-zone", "Values": [aws["availability_zone"]]},
            {"Name": "state", "Values": ["available"]}])["Subnets"]
    except (botocore.exceptions.ClientError, ValueError, KeyError):
        return None
    return min((s["SubnetId"] for s in subnets), default=None)


def delete_role(iam, name: str) -> bool:
    """Remove a role and instance profile that `make up` made (the head's, the workers'); False if gone."""
    found = False
    try:
        for role in iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]:
            iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role["RoleName"])
        iam.delete_instance_profile(InstanceProfileName=name)
        found = True
    except iam.exceptions.NoSuchEntityException:
        pass
    try:
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=policy)
        iam.delete_role(RoleName=name)
        found = True
    except iam.exceptions.NoSuchEntityException:
        pass
    return found
