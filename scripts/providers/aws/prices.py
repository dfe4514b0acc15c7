"""What an AWS mix bills, node by node: each instance's on-demand list price (a spot
worker's: the spot price `make prices` read, with its date) plus its EBS volumes'
(scripts/catalog.py), times its `share` where a local node stands for part of one
(scripts/pricing/cost.py's stand_in_values, for a local mix's prices_as)."""

import datetime

from scripts import catalog
from scripts.providers.common import Prices
from scripts.core.tables import text_table
from scripts.providers.aws.names import HEAD_TYPE
from scripts.providers.aws.values import nodes_of

COST_TABLE_HEADER = ("node type", "instance", "count", "$/h each", "of it EBS", "$/h at min",
                     "$/h at max")
# The head's raykit-node-type label: Ray's own head type name on AWS, "head" on the local
# cluster that stands for an AWS mix: a summary's nodes carry one or the other
HEAD_LABELS = ("head", HEAD_TYPE)
ON_DEMAND = "on-demand list prices in {region}, EBS included"
# Spot prices read longer ago than this are said to be old where they price a figure
SPOT_STALE_DAYS = 7


def node_usd_per_hour(node: dict, aws: dict) -> float | None:
    """The instance's price (a spot worker's: its spot price in the mix's zone where read)
    plus its EBS volumes' (billed per GB-month); None where scripts/catalog.py lists no
    price for the region. aws: the values file's `aws` block."""
    disk = node["disk"]
    return catalog.node_usd_per_hour(node["instance_type"], aws["region"], disk["volume_type"],
                                     disk["root_gb"] + disk["data_gb"], spot=node.get("spot", False),
                                     zone=aws["availability_zone"])


def worker_usd_per_hour(node: dict, aws: dict) -> float | None:
    """One node's $/h, times its `share` where a local node stands for part of it."""
    price = node_usd_per_hour(node, aws)
    return None if price is None else price * node.get("share", 1.0)


def spot_priced(values: dict) -> list[str]:
    """The spot worker types of the mix priced at a spot price `make prices` read."""
    aws = values["aws"]
    return [name for name, w in values["workers"].items() if w["spot"] and catalog.spot_usd_per_hour(
        w["instance_type"], aws["region"], aws["availability_zone"]) is not None]


def unpriced(values: dict) -> list[str]:
    """The instance types of the mix its region has no price for (a price list fetched by
    `make prices` lists only what the region offers)."""
    return sorted({node["instance_type"] for node in nodes_of(values).values()
                   if node_usd_per_hour(node, values["aws"]) is None})


def hourly_cost(values: dict) -> tuple[float, float] | None:
    """$/h with min_workers and with max_workers; None where a node type has no price."""
    aws = values["aws"]
    if unpriced(values):
        return None
    low = high = node_usd_per_hour(values["head"], aws)
    for w in values["workers"].values():
        low += w["min_workers"] * worker_usd_per_hour(w, aws)
        high += w["max_workers"] * worker_usd_per_hour(w, aws)
    return low, high


def cost_table(values: dict) -> list[str]:
    """Per node type: instance, count at min..max, $/h each (EBS included, and shown), the
    type's $/h at min and at max workers; the totals; a note per spot type and per share."""
    aws = values["aws"]
    region = aws["region"]
    if region not in catalog.priced_regions():
        return [f"no list prices for {region}: scripts/catalog.py prices "
                f"{', '.join(catalog.priced_regions())}; `make prices CLUSTER={values['cluster_name']}` "
                "reads the region's from AWS's price list (your credentials, free)"]
    missing = unpriced(values)
    if missing:
        return [f"no list price in {region} for {', '.join(missing)} ({catalog.price_source(region)}): "
                "the region does not offer it, or its price list (or EBS volume type) is missing; "
                "pick a type the region offers"]
    rows = [COST_TABLE_HEADER]
    spot, shares = [], []
    for key, node in nodes_of(values).items():
        name = HEAD_TYPE if key == "head" else key.split(".", 1)[1]
        each = worker_usd_per_hour(node, aws)
        disk = node["disk"]
        ebs = catalog.ebs_usd_per_hour(region, disk["volume_type"], disk["root_gb"] + disk["data_gb"]) \
            * node.get("share", 1.0)
        least, most = (1, 1) if key == "head" else (node["min_workers"], node["max_workers"])
        rows.append((name, node["instance_type"], str(least) if least == most else f"{least}-{most}",
                     f"{each:.4f}", f"{ebs:.4f}", f"{least * each:.2f}", f"{most * each:.2f}"))
        if key != "head" and node["spot"]:
            spot.append(name)
        if node.get("share", 1.0) < 1.0:
            vcpus = catalog.INSTANCE_TYPES[node["instance_type"]].vcpus
            shares.append(f"{name}: a local node priced as {node['share']:.4g} of a {node['instance_type']} "
                          f"({node['share'] * vcpus:g} of its {vcpus} vCPUs: the cores it runs on)")
    low, high = hourly_cost(values)
    rows.append(("total", "", "", "", "", f"{low:.2f}", f"{high:.2f}"))
    lines = [f"'{values['cluster_name']}' on AWS: {ON_DEMAND.format(region=region)} "
             f"({catalog.price_source(region)}; not in it: public IPv4, $0.005/h a node that has one)"
             + spot_clause(values)]
    lines += text_table(rows, left=(0, 1, 2))
    return lines + [spot_note(name, values) for name in spot] + shares


def basis(values: dict) -> str:
    """What the mix's figures are priced at, as its tables and the run's bill say."""
    return ON_DEMAND.format(region=values["aws"]["region"]) + spot_clause(values)


def spot_clause(values: dict) -> str:
    """'; spot workers at the spot prices read <when>' where a spot worker type is priced
    at them; '' where none is."""
    region = values["aws"]["region"]
    return f"; spot workers at the {catalog.spot_source(region)}" if spot_priced(values) else ""


def spot_note(name: str, values: dict) -> str:
    """How a spot worker type is priced: at the spot price read, with when and where; at
    on-demand, its ceiling, where none was read."""
    aws, node = values["aws"], values["workers"][name]
    region, zone = aws["region"], aws["availability_zone"]
    on_demand = catalog.instance_usd_per_hour(node["instance_type"], region)
    spot = catalog.spot_usd_per_hour(node["instance_type"], region, zone)
    if spot is None:
        where = f"zone {zone}" if zone else region
        return (f"spot: {name} is priced at on-demand, its ceiling: no spot price of "
                f"{node['instance_type']} in {where} was read; `make prices "
                f"CLUSTER={values['cluster_name']}` reads the region's (it may be reclaimed)")
    fetched = catalog.fetched_spot_prices(region)["fetched"]
    age = (datetime.date.today() - datetime.date.fromisoformat(fetched[:10])).days
    return (f"spot: {name} is priced at ${spot:.4f}/h (on-demand ${on_demand:.4f}), "
            f"{'zone ' + zone if zone else 'the highest of the zones of ' + region}, in effect "
            f"{fetched}" + (f", {age} days ago: spot prices move, `make prices` reads them again"
                            if age > SPOT_STALE_DAYS else "") + "; it may be reclaimed")


def node_hour_prices(values: dict) -> dict[str, float] | None:
    """$/h of one node of each type by its raykit-node-type label; None for a region
    without prices."""
    aws = values["aws"]
    prices = {name: worker_usd_per_hour(node, aws) for name, node in values["workers"].items()}
    prices |= {head: node_usd_per_hour(values["head"], aws) for head in HEAD_LABELS}
    return None if None in prices.values() else prices


def network_gbps(values: dict) -> dict[str, float]:
    """Each node type's baseline bandwidth by its label, where the catalog knows it."""
    kinds = {name: node["instance_type"] for name, node in values["workers"].items()}
    kinds |= {head: values["head"]["instance_type"] for head in HEAD_LABELS}
    found = {name: catalog.network_gbps(kind) for name, kind in kinds.items()}
    return {name: gbps for name, gbps in found.items() if gbps is not None}


def node_prices(values: dict) -> Prices:
    region = values["aws"]["region"]
    hourly = hourly_cost(values)
    return Prices(lines=cost_table(values), hourly=hourly, node_hour=node_hour_prices(values),
                  basis=basis(values),
                  network_gbps=network_gbps(values),
                  bench_refusal="" if hourly else (f"region {region} has no prices; `make prices "
                                                   f"CLUSTER={values['cluster_name']}` reads them from AWS"))
