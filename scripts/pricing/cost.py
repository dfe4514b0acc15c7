"""What a cluster costs per hour: the one place that turns built values into dollars.

An AWS values file is priced node by node from scripts/catalog.py (on-demand list price
plus the node's EBS volumes). A KubeRay values file is priced by the nodes its pods need
of the instance types its node selectors name (the node groups bill them, not the kit;
their disks and the control plane are not counted). A local values file costs nothing to run; with `prices_as`
it stands for an AWS values file with its own node counts (each local worker type priced
as the AWS worker type of the same name), which is how `make cost` and `make bench` price
a local mix. A local preprocess node is priced as its share of the type it stands for: a
quarter-core node as a quarter of one of the type's vCPUs, not the whole instance (its
train nodes and head stand for the GPU instance whole: a trainer slot is the GPU). `make up` and `make up DRY_RUN=1` announce hourly_cost; `make cost` prints
cost_table; `make bench` prices each row with priced().
"""

import copy
import json

from jobs.raykit import contract, placement
from scripts import catalog
from scripts.build import Built, build
from scripts.core import roles
from scripts.core.errors import KitError
from scripts.core.inputs import values_shown
from scripts.core.values import joined
from scripts.pricing.output import text_table
from scripts.providers import aws, kuberay

COST_TABLE_HEADER = ("node type", "instance", "count", "$/h each", "of it EBS", "$/h at min",
                     "$/h at max")


def worker_usd_per_hour(node: dict, region: str) -> float | None:
    """One node's $/h: an AWS node's list price and EBS, times its `share` where a local
    node stands for part of it (stand_in_values)."""
    price = aws.node_usd_per_hour(node, region)
    return None if price is None else price * node.get("share", 1.0)


def aws_hourly_cost(values: dict) -> tuple[float, float] | None:
    """$/h of AWS values with min_workers and with max_workers; None for a region without
    prices."""
    region = values["aws"]["region"]
    head = aws.node_usd_per_hour(values["head"], region)
    if head is None:
        return None
    low = high = head
    for w in values["workers"].values():
        low += w["min_workers"] * worker_usd_per_hour(w, region)
        high += w["max_workers"] * worker_usd_per_hour(w, region)
    return low, high


# A Kubernetes values file names no region: its node groups are priced as in the first
# priced region, and the table says so.
KUBERNETES_PRICE_REGION = catalog.PRICED_REGIONS[0]


def node_usd_per_hour(group: dict) -> float:
    """A KubeRay group's node, at KUBERNETES_PRICE_REGION's list price."""
    return catalog.INSTANCE_TYPES[group["instance_type"]].usd_per_hour[KUBERNETES_PRICE_REGION]


def kuberay_hourly_cost(values: dict) -> tuple[float, float] | None:
    """$/h of the nodes a KubeRay values file's pods need, at min and at max workers; None
    where a group's selector names no instance type the catalog prices."""
    groups = kuberay.node_groups(values)
    if any(g["instance_type"] is None for g in groups):
        return None
    return (sum(node_usd_per_hour(g) * g["nodes"][0] for g in groups),
            sum(node_usd_per_hour(g) * g["nodes"][1] for g in groups))


def hourly_cost(built: Built) -> tuple[float, float] | None:
    """What running the cluster bills per hour, with min_workers and with max_workers:
    (0, 0) for a local cluster (it runs on this machine), the node groups' nodes for a
    KubeRay cluster, None for an unpriced region or instance type."""
    if not built.provider.BILLS:
        if "prices_as" in built.values:
            return (0.0, 0.0)
        return kuberay_hourly_cost(built.values)
    return aws_hourly_cost(built.values)


def check_prices_as(built: Built) -> Built | None:
    """A mix that does not bill, priced through its `prices_as`: that file must be an AWS
    values file that validates and has a worker type of each of this mix's names. Returns
    that AWS mix (None where there is none to check); raises KitError naming every problem
    (`make validate` and every pricing command check it)."""
    name, where = built.values.get("prices_as"), values_shown(built.cluster)
    if built.provider.BILLS or not name:
        return None
    try:
        theirs = build(name)
    except KitError as e:
        raise KitError(f"{where}: prices_as: {name} does not validate: {e}; fix that file or "
                       "name another") from None
    if not theirs.provider.BILLS:
        raise KitError(f"{where}: prices_as: {values_shown(name)} is not an AWS values "
                       "file; name one such as hetero")
    problems = [f"workers.{worker}: {name}.yaml has no worker type '{worker}' to price it as; "
                f"name the local worker types as in {name}.yaml"
                for worker in built.values["workers"] if worker not in theirs.values["workers"]]
    # a name alone is no match: a node is priced as the node of the same role it stands for
    # (a train node as a GPU instance, a preprocess node as a CPU one)
    pairs = [("head", built.values["head"], theirs.values["head"])] + [
        (f"workers.{worker}", w, theirs.values["workers"][worker])
        for worker, w in built.values["workers"].items() if worker in theirs.values["workers"]]
    problems += [f"{where_}.role: {ours['role']} here, but {name}.yaml's is {other['role']}: it would be "
                 f"priced as the other kind of node; give both the same role, or name another prices_as"
                 for where_, ours, other in pairs if ours["role"] != other["role"]]
    if problems:
        raise KitError(joined(where, problems))
    return theirs


def stand_in_values(values: dict, aws_mix: Built) -> dict:
    """The AWS values a local cluster stands for: `prices_as`'s mix (checked by
    check_prices_as) with this file's node counts, each local worker type priced as the AWS
    worker type of the same name; a preprocess type carries its `share` of that type
    (local_share), a train type stands for its instance whole."""
    aws_values = copy.deepcopy(aws_mix.values)
    aws_values["workers"] = {
        name: dict(aws_values["workers"][name], min_workers=w["min_workers"],
                   max_workers=w["max_workers"])
        | ({"share": local_share(values, w, aws_values["workers"][name]["instance_type"])}
           if w["role"] == "preprocess" else {})
        for name, w in values["workers"].items()}
    return aws_values


def local_share(values: dict, node: dict, instance_type: str) -> float:
    """The part of `instance_type` a local preprocess node stands for: the cores of time it
    runs on (its cpu_quota; else, pinned, its cores; else its CPUs) over the type's vCPUs,
    at most the whole instance."""
    cores = node["cpu_quota"] or ((node["cores"] or node["cpus"]) if values["pin_cpus"] else node["cpus"])
    return min(1.0, cores / catalog.INSTANCE_TYPES[instance_type].vcpus)


def cost_table(built: Built) -> list[str]:
    """`make cost`: an AWS mix's table; a local cluster costs nothing, or, with
    `prices_as`, the table of the AWS mix it stands for."""
    values = built.values
    aws_mix = check_prices_as(built)
    if built.provider.BILLS:
        return aws_cost_table(values)
    if "prices_as" not in values:  # KubeRay: no prices_as (its group names are not AWS's)
        return kuberay_cost_table(values)
    if not values["prices_as"]:
        return [f"'{values['cluster_name']}' runs on this machine: no cloud cost "
                "(set prices_as to price it like an AWS values file)"]
    return [f"'{values['cluster_name']}' runs on this machine; it stands for "
            f"{values_shown(values['prices_as'])}'s node types with its own counts, "
            "priced:"] + aws_cost_table(stand_in_values(values, aws_mix))


def aws_cost_table(values: dict) -> list[str]:
    """Per node type: instance, count at min..max, $/h each (EBS included, and shown), the
    type's $/h at min and at max workers; the totals; a note per spot type."""
    region = values["aws"]["region"]
    if aws.node_usd_per_hour(values["head"], region) is None:
        return [f"no list prices for {region} in scripts/catalog.py (it prices "
                f"{', '.join(catalog.PRICED_REGIONS)}); add the region's prices there"]
    rows = [COST_TABLE_HEADER]
    spot, shares = [], []
    for key, node in aws.nodes_of(values).items():
        name = aws.HEAD_TYPE if key == "head" else key.split(".", 1)[1]
        each = worker_usd_per_hour(node, region)
        ebs = (aws.node_usd_per_hour(node, region)
               - catalog.INSTANCE_TYPES[node["instance_type"]].usd_per_hour[region]) * node.get("share", 1.0)
        least, most = (1, 1) if key == "head" else (node["min_workers"], node["max_workers"])
        rows.append((name, node["instance_type"], str(least) if least == most else f"{least}-{most}",
                     f"{each:.4f}", f"{ebs:.4f}", f"{least * each:.2f}", f"{most * each:.2f}"))
        if key != "head" and node["spot"]:
            spot.append(name)
        if node.get("share", 1.0) < 1.0:
            shares.append(f"{name}: a local node priced as {node['share']:.4g} of a {node['instance_type']} "
                          f"({node['share'] * catalog.INSTANCE_TYPES[node['instance_type']].vcpus:g} of its "
                          f"{catalog.INSTANCE_TYPES[node['instance_type']].vcpus} vCPUs: the cores it runs on)")
    low, high = aws_hourly_cost(values)
    rows.append(("total", "", "", "", "", f"{low:.2f}", f"{high:.2f}"))
    lines = [f"'{values['cluster_name']}' on AWS {region}: on-demand list prices and EBS "
             "(scripts/catalog.py, as of 2026-11; not in it: public IPv4, $0.005/h a node that has one)"]
    lines += text_table(rows, left=(0, 1, 2))
    lines += [f"spot: {name} is billed at the spot price (varies, often well below on-demand; "
              "not in the catalog) and may be reclaimed: the figures above are its on-demand "
              "ceiling" for name in spot]
    return lines + shares


def kuberay_cost_table(values: dict) -> list[str]:
    """Per group: its instance type, pods and the nodes they need at min..max, $/h a node,
    the group's $/h at min and at max; the totals, or what could not be priced."""
    rows = [("node group", "instance", "pods", "nodes", "$/h each", "$/h at min", "$/h at max")]
    unpriced = []
    span = lambda pair: str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}-{pair[1]}"  # noqa: E731
    for g in kuberay.node_groups(values):
        if g["instance_type"] is None:
            unpriced.append(g["name"])
            rows.append((g["name"], "?", span(g["pods"]), "?", "-", "-", "-"))
            continue
        each = node_usd_per_hour(g)
        rows.append((g["name"], g["instance_type"], span(g["pods"]), span(g["nodes"]), f"{each:.4f}",
                     f"{each * g['nodes'][0]:.2f}", f"{each * g['nodes'][1]:.2f}"))
    lines = [f"'{values['cluster_name']}' on Kubernetes: the nodes its pods need, of the instance "
             f"types their node selectors name, at {KUBERNETES_PRICE_REGION} on-demand list prices "
             "(scripts/catalog.py, as of 2026-11); the node groups bill them, not the kit; node "
             "disks and the control plane (EKS: $0.10/h) are not counted"]
    cost = kuberay_hourly_cost(values)
    if cost:
        rows.append(("total", "", "", "", "", f"{cost[0]:.2f}", f"{cost[1]:.2f}"))
    lines += text_table(rows, left=(0, 1))
    lines += [f"{name}: its node selector names no instance type the catalog prices "
              "(node.kubernetes.io/instance-type): not priced, so no total" for name in unpriced]
    return lines


def priced(built: Built) -> tuple[str, float]:
    """A bench row's name and $/h: an AWS mix at its own prices; a local one as the AWS
    mix its `prices_as` names, with its own node counts (what it stands for)."""
    values, name = built.values, built.cluster
    aws_mix = check_prices_as(built)
    if not built.provider.BILLS:
        if "prices_as" not in values:  # KubeRay: the node groups bill, at prices the kit cannot see
            raise KitError(f"CLUSTERS: {values_shown(name)} runs on Kubernetes node groups, "
                           "which the kit cannot price; bench the AWS mix of its shape (e.g. hetero)")
        if not values["prices_as"]:
            raise KitError(f"CLUSTERS: {values_shown(name)} sets no prices_as; set it "
                           "to the AWS values file it stands for, e.g. prices_as: hetero")
        name = f"{name} as {values['prices_as']}"
        values = stand_in_values(values, aws_mix)
    cost = aws_hourly_cost(values)
    if cost is None:
        raise KitError(f"CLUSTERS: {built.cluster}: region {values['aws']['region']} has no "
                       "prices in scripts/catalog.py; bench in a region it lists")
    return name, cost[0]


# The head's raykit-node-type label: AWS's is Ray's own head type name, the local and
# KubeRay heads' is "head"
HEAD_LABELS = ("head", aws.HEAD_TYPE)


# What a job learns from the kit: the names and shapes are jobs/raykit/contract.py's


def job_env(built: Built) -> dict[str, str]:
    """What a job run on this mix learns from its environment: its nodes' prices (the
    summary bills the run with them) and the autopilot's settings, the prices read from
    the catalog once for both; and the stall limit (jobs/raykit/stall.py), since a stalled
    job bills too."""
    priced = node_hour_prices(built)
    stall_s = built.values["stall_minutes"] * 60
    return (price_env(priced, node_network_gbps(built)) | autopilot_env(built, priced)
            | ({contract.STALL_ENV: f"{stall_s:g}"} if stall_s else {}))


def price_env(priced: tuple[dict[str, float], str] | None,
              network: dict[str, float] | None = None) -> dict[str, str]:
    """The job's environment entry carrying node_hour_prices and each type's baseline
    bandwidth (node_network_gbps; the verdict's network term) ({} where there are no prices)."""
    if not priced:
        return {}
    return {contract.NODE_PRICES_ENV: contract.node_prices_json(priced[0], priced[1], network or {})}


def node_network_gbps(built: Built) -> dict[str, float]:
    """Each node type's baseline bandwidth, Gbit/s, by its raykit-node-type label, as
    priced (a local mix's as its prices_as; a KubeRay pod's as its node's); {} where the
    instance types are unknown."""
    values = built.values
    if not built.provider.BILLS and "prices_as" not in values:  # KubeRay
        kinds = {name: kuberay.instance_type_of(node)
                 for name, node in [("head", values["head"])] + list(values["workers"].items())}
    else:
        if not built.provider.BILLS:
            aws_mix = check_prices_as(built)
            if aws_mix is None:
                return {}
            values = stand_in_values(values, aws_mix)
        kinds = {name: node["instance_type"] for name, node in values["workers"].items()}
        kinds |= {head: values["head"]["instance_type"] for head in HEAD_LABELS}
    found = {name: catalog.network_gbps(kind) for name, kind in kinds.items() if kind}
    return {name: gbps for name, gbps in found.items() if gbps is not None}


def node_hour_prices(built: Built) -> tuple[dict[str, float], str] | None:
    """$ per hour of one node of each type, keyed by the raykit-node-type label its nodes
    carry, and what they are priced as; None where the mix cannot be priced (a local mix
    without prices_as, an unpriced region or instance type). A KubeRay pod is its node's
    share (the node's price over the pods of its kind a node holds)."""
    values, label = built.values, ""
    if not built.provider.BILLS and "prices_as" not in values:  # KubeRay
        prices = {}
        for name, node in [("head", values["head"])] + list(values["workers"].items()):
            kind = kuberay.instance_type_of(node)
            if kind is None:
                return None
            spec = catalog.INSTANCE_TYPES[kind]
            prices[name] = node_usd_per_hour({"instance_type": kind}) / kuberay.pods_per_node(node["pod"], spec)
        return prices, f"pods as their node's share, {KUBERNETES_PRICE_REGION} list prices"
    if not built.provider.BILLS:
        aws_mix = check_prices_as(built)
        if aws_mix is None:
            return None
        values, label = stand_in_values(values, aws_mix), f"as {built.values['prices_as']}, "
    region = values["aws"]["region"]
    prices = {name: worker_usd_per_hour(node, region) for name, node in values["workers"].items()}
    prices |= {head: aws.node_usd_per_hour(values["head"], region) for head in HEAD_LABELS}
    if None in prices.values():
        return None
    return prices, f"{label}on-demand list prices in {region}, EBS included"


# The job learns the autopilot's settings from its environment (jobs/raykit/autopilot.py
# reads them); while it steers, Ray Data's own cluster autoscaler, which scales up on
# resource utilization above 50% (ray/data/_internal/cluster_autoscaler/), is switched off
# by thresholds it can never reach: both would ask Ray's autoscaler for nodes.
RAY_DATA_AUTOSCALER_OFF = {f"RAY_DATA_DEFAULT_CLUSTER_SCALING_UP_{kind}_UTIL_THRESHOLD": "2"
                           for kind in ("CPU", "GPU", "MEMORY", "OBJECT_STORE_MEMORY")}


def autopilot_env(built: Built, priced: tuple[dict[str, float], str] | None) -> dict[str, str]:
    """The job's environment entries for the values' autopilot ({} when it is off): the
    preprocess worker type it steers, its bounds and one node's CPUs and $/h, the rest of
    the cluster's $/h at min_workers, the ceiling. A ceiling the mix cannot be held under
    even at min_workers, or on a mix without prices, is refused here (`make validate`)."""
    values = built.values
    pilot = values["autopilot"]
    if not pilot["enabled"]:
        return {}
    (kind,) = roles.preprocess_types(values)  # value_problems allows exactly one
    worker = values["workers"][kind]
    node_usd = base_usd = None
    if priced:
        prices = priced[0]
        node_usd = prices.get(kind)
        base_usd = prices["head"] + sum(prices.get(name, 0.0) * w["min_workers"]
                                        for name, w in values["workers"].items() if name != kind)
    ceiling = pilot["max_usd_per_hour"]
    if ceiling is not None:
        where = f"{values_shown(built.cluster)}: autopilot.max_usd_per_hour"
        if node_usd is None:
            raise KitError(f"{where}: this mix has no prices to hold under a ceiling (a local mix needs "
                           "prices_as); set max_usd_per_hour: null")
        least = base_usd + node_usd * worker["min_workers"]
        if ceiling < least:
            raise KitError(f"{where}: ${ceiling:g}/h is below what the mix costs at min_workers "
                           f"(${least:.2f}/h); raise it or lower min_workers")
    # one bundle per node: its type's own resource, no CPUs (the autopilot's reservation at
    # Ray Data's AutoscalingCoordinator would take them out of Ray Data's budget)
    settings = {"node_type": kind, "node_bundle": {placement.type_resource(kind): 1},
                "min_nodes": worker["min_workers"], "max_nodes": worker["max_workers"],
                "target_wait_share": pilot["target_wait_share"], "cooldown_s": pilot["cooldown_s"],
                "node_usd_per_hour": node_usd, "base_usd_per_hour": base_usd or 0.0,
                "max_usd_per_hour": ceiling}
    return {contract.AUTOPILOT_ENV: json.dumps(settings)} | RAY_DATA_AUTOSCALER_OFF
