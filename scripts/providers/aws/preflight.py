"""The AWS provider's preflight: what a fresh account trips on, checked before anything is
created or billed. Every call here only reads (STS, EC2 Describe*). It is the first step of
`make up` on AWS and runs alone as `make preflight`.

Without it these failures surface late: a type the zone does not offer, or a subnet that
gives no public IP, fails inside the head's autoscaler after `ray up` said success, visible
only in its logs. With no zone set, the head and the workers could land in different
zones, and Ray Data's images would then cross zones at a per-GB charge: the preflight
picks one zone that offers every instance type and a usable subnet, and `make up` pins it.
The vCPU quotas of a new account are often 0 for G and P instances: the preflight counts
the vCPUs the mix needs, plus what already runs, against each quota: an error below
min_workers (the cluster could not come up), a note below max_workers (it could not scale
that far).
The AMI: `image_id: auto` is resolved from AWS's public SSM parameter; a resolved or
pinned id must exist in the region, be x86_64, and (for a Deep Learning Base AMI, whose
name dates the release) ship a driver that the GPU software needs.
"""

import os
from pathlib import Path

import botocore.exceptions

from scripts import catalog
from scripts.core.errors import KitError, NoAccount, short
from scripts.core.values import joined

NO_CREDENTIALS = "no AWS credentials found; run `aws configure` (or set AWS_PROFILE), then try again"

# EC2's vCPU quotas (Service Quotas, service code "ec2") by instance family and market.
VCPU_QUOTAS = {
    ("standard", "on-demand"): ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("g", "on-demand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("p", "on-demand"): ("L-417A185B", "Running On-Demand P instances"),
    ("standard", "spot"): ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    ("g", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("p", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
}


# AWS's own service answering with the caller's public IPv4 address, as plain text.
CHECKIP_URL = "https://checkip.amazonaws.com"
CHECKIP_TIMEOUT_S = 10
# Addresses no SSH from the internet comes from: private (RFC 1918) and carrier-grade NAT.
NOT_ON_THE_INTERNET = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")


def family(instance_type: str) -> str | None:
    """The quota family of an instance type: standard, g (G and VT), p; None if other."""
    name = instance_type.split(".")[0]
    if name.startswith(("g", "vt")):
        return "g"
    if name.startswith("p"):
        return "p"
    return "standard" if name[0] in "acdhimrtz" else None


def preflight(values: dict, ec2=None, sts=None, quotas=None, ssm=None, kms=None,
              avoid_zones: tuple = ()) -> dict:
    """Check the account for `values`; return {"account", "availability_zone", "subnet",
    "image_id", "image_name", "notes"} or raise one KitError listing every problem with its
    fix. avoid_zones: zones that just refused capacity for the head (`make up` tries the
    next zone offering every type; a zone the values file names is never swapped)."""
    import boto3

    aws = values["aws"]
    ec2 = ec2 or boto3.client("ec2", region_name=aws["region"])
    sts = sts or boto3.client("sts", region_name=aws["region"])
    quotas = quotas or boto3.client("service-quotas", region_name=aws["region"])
    ssm = ssm or boto3.client("ssm", region_name=aws["region"])
    account = caller_account(sts)
    types = sorted({values["head"]["instance_type"]}
                   | {w["instance_type"] for w in values["workers"].values()})
    problems = cluster_name_problems(ec2, values["cluster_name"], aws["region"])
    zones = offered_zones(ec2, types)
    common = sorted(set.intersection(*(zones[t] for t in types)))
    wanted = aws["availability_zone"]
    if wanted:
        missing = [t for t in types if wanted not in zones[t]]
        if missing:
            problems.append(f"aws.availability_zone: {wanted} does not offer {', '.join(missing)}; "
                            f"zones that offer every type: {', '.join(common) or 'none'}")
        if wanted in avoid_zones:
            problems.append(f"aws.availability_zone: {wanted} has no capacity for the head now; "
                            "try again later, or set availability_zone: null to let `make up` "
                            "try the other zones that offer every type")
        candidates = [wanted]
    elif not common:
        problems.append("no zone of the region offers all of " + ", ".join(
            f"{t} ({', '.join(sorted(zones[t])) or 'none'})" for t in types)
            + "; change an instance type or the region")
        candidates = []
    else:
        candidates = [zone for zone in common if zone not in avoid_zones]
        if not candidates:
            problems.append(f"every zone that offers all the types ({', '.join(common)}) refused "
                            "capacity for the head; try again later, or another head type")
    zone, subnet = pick_subnet(ec2, aws, candidates, problems)
    if aws["key_pair"]:
        problems += key_pair_problems(ec2, aws["key_pair"], aws["region"])
    notes = []
    image_id, image_name, root_device = ami(ec2, ssm, aws, problems, notes)
    problems += quota_problems(ec2, quotas, values, notes)
    kms_key = customer_ebs_key(ec2, kms or boto3.client("kms", region_name=aws["region"]), notes)
    ssh_cidr = aws["ssh_cidr"]
    if ssh_cidr == "auto" and not aws["security_group_ids"]:
        ssh_cidr = own_address_range(problems)
    if problems:
        raise KitError(joined(f"AWS preflight ({aws['region']}, account {account})", problems))
    return {"account": account, "availability_zone": zone, "subnet": subnet,
            "image_id": image_id, "image_name": image_name, "root_device": root_device,
            "ssh_cidr": ssh_cidr, "ebs_kms_key": kms_key, "notes": notes}


def customer_ebs_key(ec2, kms, notes: list[str]) -> str | None:
    """The ARN of the account's default EBS key where it is customer-managed: the nodes'
    volumes are encrypted with it, so the head, which launches the workers, needs KMS rights
    on it (head_policy). None for AWS's own aws/ebs key, which needs none."""
    try:
        key_id = ec2.get_ebs_default_kms_key_id()["KmsKeyId"]
        if key_id.split(":")[-1].startswith("alias/aws/"):  # AWS's own aws/ebs
            return None
        key = kms.describe_key(KeyId=key_id)["KeyMetadata"]
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
        notes.append(f"the account's default EBS key could not be read ({short(str(e), 100)[1:-1]}); "
                     "if it is a customer-managed key, the head's role needs KMS rights on it "
                     "(kms:CreateGrant, Decrypt, DescribeKey, GenerateDataKeyWithoutPlaintext, "
                     "ReEncrypt*)")
        return None
    return key["Arn"] if key.get("KeyManager") == "CUSTOMER" else None


PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


def own_address_range(problems: list[str]) -> str | None:
    """This machine's public IPv4 address as AWS sees it, as a /32: the one source SSH is
    opened to by default (ssh_cidr: auto). Asked of AWS's own checkip service
    (RAYKIT_CHECKIP_URL overrides it: the tests' stand-in on 127.0.0.1). Refused behind a
    proxy, which the lookup would go through and SSH would not. (A NAT with a pool of
    egress addresses cannot be seen from here: docs/aws.md says to set ssh_cidr there.)"""
    import ipaddress
    import urllib.request

    url = os.environ.get("RAYKIT_CHECKIP_URL") or CHECKIP_URL
    proxy = next((name for name in PROXY_VARIABLES if os.environ.get(name)), None)
    if proxy and not os.environ.get("RAYKIT_CHECKIP_URL"):
        # the lookup goes through the proxy (urllib honours it) and would see the proxy's
        # address; `ray up`'s SSH does not go through it: SSH would time out, silently
        problems.append(f"aws.ssh_cidr: auto would look up this machine's address through the "
                        f"proxy in {proxy}, and find the proxy's, not the one SSH comes from; set "
                        "ssh_cidr to the range SSH reaches AWS from, e.g. 203.0.113.7/32")
        return None
    try:
        with urllib.request.urlopen(url, timeout=CHECKIP_TIMEOUT_S) as answer:
            text = answer.read(64).decode("ascii", "replace").strip()
        address = ipaddress.IPv4Address(text)
    except (OSError, ValueError) as e:
        problems.append(f"aws.ssh_cidr: auto could not find the address this machine reaches "
                        f"AWS from ({type(e).__name__}: {short(str(e), 80)[1:-1]}); set ssh_cidr "
                        "to your address range, e.g. 203.0.113.7/32 (0.0.0.0/0 opens SSH to "
                        "everyone)")
        return None
    if address.is_loopback or address.is_link_local or address.is_unspecified or any(
            address in ipaddress.ip_network(block) for block in NOT_ON_THE_INTERNET):
        problems.append(f"aws.ssh_cidr: auto found {address}, which is no public address; set "
                        "ssh_cidr to the range you reach AWS from, e.g. 203.0.113.7/32")
        return None
    return f"{address}/32"


def ami(ec2, ssm, aws: dict, problems: list[str], notes: list[str]) -> tuple:
    """(image id, name, root device): `auto` resolved from the public SSM parameter, then
    checked to exist in the region with a driver the GPU software needs; the AMI's root
    device name (the volume the kit sizes must be that device, or EC2 adds it as a second,
    empty volume and leaves the root at the AMI's size), the values' own where the AMI
    could not be read."""
    image_id = aws["image_id"]
    if image_id == "auto":
        try:
            image_id = ssm.get_parameter(Name=catalog.DLAMI_SSM_PARAMETER)["Parameter"]["Value"]
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            problems.append(f"aws.image_id: auto could not read {catalog.DLAMI_SSM_PARAMETER} "
                            f"({short(str(e), 120)[1:-1]}); allow ssm:GetParameter, or pin an "
                            "AMI id in aws.image_id")
            return None, None, aws["root_device"]
    try:
        images = ec2.describe_images(ImageIds=[image_id])["Images"]
    except botocore.exceptions.ClientError:
        images = []
    if not images:
        problems.append(f"aws.image_id: AMI {image_id} does not exist in {aws['region']} (or is "
                        "not shared with this account); set image_id: auto, or an AMI of the region")
        return image_id, None, aws["root_device"]
    image = images[0]
    name = image.get("Name", "")
    if image.get("Architecture", "x86_64") != "x86_64":
        problems.append(f"aws.image_id: {image_id} ({name}) is {image['Architecture']}; the kit's "
                        "instance types and images are x86_64: use an x86_64 AMI")
    problems += driver_problems(image_id, name)
    if catalog.dlami_driver(name) is None:
        need, why = catalog.gpu_driver_needed()
        notes.append(f"AMI {image_id} ({short(name, 80)[1:-1]}) is not a Deep Learning Base AMI: its "
                     f"NVIDIA driver is not checked; the GPU nodes need >= {need} ({why})")
    return image_id, name, image.get("RootDeviceName") or aws["root_device"]


def vcpus_needed(values: dict, workers: str = "max_workers") -> dict[tuple, int]:
    """vCPUs per (family, market) with the head and `workers` (min_workers or max_workers)
    of every worker type."""
    need: dict[tuple, int] = {}
    nodes = [(values["head"], 1, False)] + [(w, w[workers], w["spot"])
                                            for w in values["workers"].values()]
    for node, count, spot in nodes:
        key = (family(node["instance_type"]), "spot" if spot else "on-demand")
        if key[0] and count:
            need[key] = need.get(key, 0) + count * catalog.INSTANCE_TYPES[node["instance_type"]].vcpus
    return need


def vcpus_running(ec2) -> dict[tuple, int]:
    """vCPUs per (family, market) of the instances already running in the region."""
    running: dict[tuple, int] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                cpu = instance.get("CpuOptions", {})
                vcpus = cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 1) or getattr(
                    catalog.INSTANCE_TYPES.get(instance["InstanceType"]), "vcpus", 0)
                key = (family(instance["InstanceType"]),
                       "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand")
                running[key] = running.get(key, 0) + vcpus
    return running


def quota_problems(ec2, quotas, values: dict, notes: list[str]) -> list[str]:
    """A quota that cannot hold the head and min_workers (plus what already runs) is an
    error: `make up` would wait for workers that can never launch. One that holds them but
    not max_workers is a note: the cluster comes up, and the autoscaler scales only as far
    as the quota lets it."""
    problems = []
    running = vcpus_running(ec2)
    at_least, at_most = vcpus_needed(values, "min_workers"), vcpus_needed(values, "max_workers")
    for key, most in sorted(at_most.items()):
        code, name = VCPU_QUOTAS[key]
        try:
            limit = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            # No servicequotas:GetServiceQuota right, say: warn, do not block the launch.
            notes.append(f"quota {code} ({name}) not checked: {short(str(e), 100)[1:-1]}")
            continue
        have, least = running.get(key, 0), at_least.get(key, 0)
        if have + least > limit:
            problems.append(
                f"vCPU quota '{name}' ({code}) is {limit:g}; the mix needs {least} at min_workers and "
                f"{have} already run: request at least {have + least:g} in the Service Quotas console "
                f"(Amazon EC2, {code}), or lower min_workers")
        elif have + most > limit:
            notes.append(
                f"vCPU quota '{name}' ({code}) is {limit:g}: it holds min_workers, but max_workers "
                f"needs {most} with {have} already running, so the autoscaler cannot scale that far; "
                f"request {have + most:g} in the Service Quotas console (Amazon EC2, {code}) to let it")
    return problems


def caller_account(sts) -> str:
    try:
        return sts.get_caller_identity()["Account"]
    except botocore.exceptions.NoCredentialsError:
        raise NoAccount(NO_CREDENTIALS) from None
    except botocore.exceptions.EndpointConnectionError as e:
        raise KitError(f"could not reach AWS ({short(str(e), 160)[1:-1]}); check your "
                       "network and AWS_ENDPOINT_URL") from None
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
        # expired SSO (TokenRetrievalError, UnauthorizedSSOTokenError), a bad or old key
        raise NoAccount(f"AWS rejected the credentials ({short(str(e), 160)[1:-1]}); check "
                        "`aws sts get-caller-identity` (SSO: `aws sso login`)") from None


def cluster_name_problems(ec2, cluster_name: str, region: str) -> list[str]:
    """Ray knows a cluster by its name alone (the tag ray-cluster-name): launching a second
    values file under the name of a cluster that runs would reconfigure that cluster, and
    `make down` of the second file would terminate it."""
    filters = [{"Name": "tag:ray-cluster-name", "Values": [cluster_name]},
               {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
    ids = [i["InstanceId"] for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
           for r in page["Reservations"] for i in r["Instances"]]
    if not ids:
        return []
    return [f"cluster_name: '{cluster_name}' is in use in {region}: {len(ids)} instance(s) carry "
            f"its tag ({', '.join(sorted(ids)[:3])}{', ...' if len(ids) > 3 else ''}); launching "
            "would take that cluster over. Pick another cluster_name, or `make down` the values "
            "file that launched it first"]


def offered_zones(ec2, types: list[str]) -> dict[str, set[str]]:
    zones = {t: set() for t in types}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": types}])
    for page in pages:
        for offering in page["InstanceTypeOfferings"]:
            zones[offering["InstanceType"]].add(offering["Location"])
    return zones


def pick_subnet(ec2, aws: dict, zones: list[str], problems: list[str]) -> tuple:
    """The first zone (in order) with a subnet Ray can use: one that assigns public IPs
    on launch, or any with use_internal_ips. Named subnets must be such subnets."""
    if not zones:
        return None, None
    try:
        if aws["subnet_ids"]:
            subnets = ec2.describe_subnets(SubnetIds=aws["subnet_ids"])["Subnets"]
        else:
            subnets = ec2.describe_subnets(Filters=[
                {"Name": "availability-zone", "Values": zones},
                {"Name": "state", "Values": ["available"]}])["Subnets"]
    except botocore.exceptions.ClientError as e:
        problems.append(f"aws.subnet_ids: {short(str(e), 160)[1:-1]}; list yours with "
                        "`aws ec2 describe-subnets`")
        return None, None
    usable = [s for s in subnets if s["MapPublicIpOnLaunch"] or aws["use_internal_ips"]]
    if aws["use_internal_ips"]:
        # Private IPs reach the nodes from inside the VPC, but every node still pulls the
        # Docker image and pip packages from the internet: without a route out it fails
        # its setup, and the autoscaler relaunches it in a loop.
        routed = [s for s in usable if route_out(ec2, s)]
        if usable and not routed:
            problems.append(f"aws.use_internal_ips: no route out of {', '.join(s['SubnetId'] for s in usable)} "
                            "(no 0.0.0.0/0 route through a NAT gateway, a transit gateway, or an "
                            "internet gateway with public IPs); the nodes could pull no image: "
                            "add a NAT gateway to the subnet's route table, or set aws.subnet_ids "
                            "to subnets that have one")
            return None, None
        usable = routed
    for zone in zones:
        for subnet in sorted(usable, key=lambda s: s["SubnetId"]):
            if subnet["AvailabilityZone"] == zone:
                return zone, subnet["SubnetId"]
    where = f"zone {zones[0]}" if len(zones) == 1 else f"zones {', '.join(zones)}"
    named = "the subnets in aws.subnet_ids" if aws["subnet_ids"] else "no subnet"
    problems.append(f"{named} in {where} assign(s) public IPs on launch; set aws.subnet_ids to "
                    "one that does, or aws.use_internal_ips: true (reaching the nodes from inside "
                    "the VPC)")
    return None, None


def route_out(ec2, subnet: dict) -> bool:
    """Whether a subnet's nodes reach the internet: its route table (its own, or else the
    VPC's main one) sends 0.0.0.0/0 through a NAT gateway, a transit gateway, a NAT
    instance or interface, or an internet gateway where the subnet maps public IPs."""
    own = ec2.describe_route_tables(Filters=[
        {"Name": "association.subnet-id", "Values": [subnet["SubnetId"]]}])["RouteTables"]
    tables = own or ec2.describe_route_tables(Filters=[
        {"Name": "vpc-id", "Values": [subnet["VpcId"]]},
        {"Name": "association.main", "Values": ["true"]}])["RouteTables"]
    for table in tables:
        for route in table.get("Routes", []):
            if route.get("DestinationCidrBlock") != "0.0.0.0/0" or route.get("State") == "blackhole":
                continue
            if any(route.get(k) for k in ("NatGatewayId", "TransitGatewayId", "InstanceId",
                                          "NetworkInterfaceId")):
                return True
            if str(route.get("GatewayId", "")).startswith("igw-") and subnet["MapPublicIpOnLaunch"]:
                return True
    return False


def key_pair_problems(ec2, name: str, region: str) -> list[str]:
    problems = []
    try:
        ec2.describe_key_pairs(KeyNames=[name])
    except botocore.exceptions.ClientError:
        problems.append(f"aws.key_pair: no key pair '{name}' in {region}; create it "
                        f"(`aws ec2 create-key-pair --key-name {name}`) or set key_pair: null")
    if not (Path.home() / ".ssh" / f"{name}.pem").is_file():
        problems.append(f"aws.key_pair: its private key ~/.ssh/{name}.pem is missing; put it there")
    return problems


def driver_problems(image_id: str, ami_name: str) -> list[str]:
    """The AMI's NVIDIA driver must serve every CUDA on the GPU nodes (scripts/catalog.py)."""
    driver = catalog.dlami_driver(ami_name)
    need, why = catalog.gpu_driver_needed()
    if driver is None or driver >= need:
        return []
    return [f"aws.image_id: {image_id} (DLAMI {ami_name[len(catalog.DLAMI_NAME):]}) has NVIDIA "
            f"driver {driver}; {why}: set image_id: auto or pin a newer release"]
