"""What a KubeRay mix bills: the nodes its pods need, of the instance types their node
selectors name, at KUBERNETES_PRICE_REGION's on-demand list prices (scripts/catalog.py).
The node groups bill them, not the kit; node disks and the control plane are not counted.
A pod's own price is its node's share (the node's price over the pods of its kind a node
holds): what the run's bill and the autopilot count per pod."""

from scripts import catalog
from scripts.providers.common import Prices
from scripts.core.tables import text_table
from scripts.providers.kuberay.values import instance_type_of, node_groups, pods_per_node

# A Kubernetes values file names no region: its node groups are priced as in the first
# priced region, and the table says so.
KUBERNETES_PRICE_REGION = catalog.PRICED_REGIONS[0]


def node_usd_per_hour(instance_type: str) -> float:
    """A node of the type, at KUBERNETES_PRICE_REGION's list price."""
    return catalog.INSTANCE_TYPES[instance_type].usd_per_hour[KUBERNETES_PRICE_REGION]


def hourly_cost(values: dict) -> tuple[float, float] | None:
    """$/h of the nodes the pods need, at min and at max workers; None where a group's
    selector names no instance type the catalog prices."""
    groups = node_groups(values)
    if any(g["instance_type"] is None for g in groups):
        return None
    return (sum(node_usd_per_hour(g["instance_type"]) * g["nodes"][0] for g in groups),
            sum(node_usd_per_hour(g["instance_type"]) * g["nodes"][1] for g in groups))


def cost_table(values: dict) -> list[str]:
    """Per group: its instance type, pods and the nodes they need at min..max, $/h a node,
    the group's $/h at min and at max; the totals, or what could not be priced."""
    rows = [("node group", "instance", "pods", "nodes", "$/h each", "$/h at min", "$/h at max")]
    unpriced = []
    span = lambda pair: str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}-{pair[1]}"  # noqa: E731
    for g in node_groups(values):
        if g["instance_type"] is None:
            unpriced.append(g["name"])
            rows.append((g["name"], "?", span(g["pods"]), "?", "-", "-", "-"))
            continue
        each = node_usd_per_hour(g["instance_type"])
        rows.append((g["name"], g["instance_type"], span(g["pods"]), span(g["nodes"]), f"{each:.4f}",
                     f"{each * g['nodes'][0]:.2f}", f"{each * g['nodes'][1]:.2f}"))
    lines = [f"'{values['cluster_name']}' on Kubernetes: the nodes its pods need, of the instance "
             f"types their node selectors name, at {KUBERNETES_PRICE_REGION} on-demand list prices "
             "(scripts/catalog.py, as of 2026-11); the node groups bill them, not the kit; node "
             "disks and the control plane (EKS: $0.10/h) are not counted"]
    cost = hourly_cost(values)
    if cost:
        rows.append(("total", "", "", "", "", f"{cost[0]:.2f}", f"{cost[1]:.2f}"))
    lines += text_table(rows, left=(0, 1))
    lines += [f"{name}: its node selector names no instance type the catalog prices "
              "(node.kubernetes.io/instance-type): not priced, so no total" for name in unpriced]
    return lines


def nodes_by_label(values: dict) -> list[tuple[str, dict]]:
    """(raykit-node-type label, group values): the head's pods carry "head"."""
    return [("head", values["head"])] + list(values["workers"].items())


def pod_hour_prices(values: dict) -> dict[str, float] | None:
    """$/h of one pod of each group, its node's share; None where a group's type is unknown."""
    prices = {}
    for name, node in nodes_by_label(values):
        kind = instance_type_of(node)
        if kind is None:
            return None
        prices[name] = node_usd_per_hour(kind) / pods_per_node(node["pod"], catalog.INSTANCE_TYPES[kind])
    return prices


def network_gbps(values: dict) -> dict[str, float]:
    """Each group's node's baseline bandwidth by label, where the catalog knows it."""
    found = {name: catalog.network_gbps(kind) for name, node in nodes_by_label(values)
             if (kind := instance_type_of(node))}
    return {name: gbps for name, gbps in found.items() if gbps is not None}


def node_prices(values: dict) -> Prices:
    return Prices(lines=cost_table(values), hourly=hourly_cost(values), node_hour=pod_hour_prices(values),
                  basis=f"pods as their node's share, {KUBERNETES_PRICE_REGION} list prices",
                  network_gbps=network_gbps(values),
                  bench_refusal=("it runs on Kubernetes node groups, which the kit cannot price; "
                                 "bench the AWS mix of its shape (e.g. hetero)"))
