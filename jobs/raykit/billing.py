"""The run's bill: each node type's seconds in Ray's node table while the job ran
(ray_state.node_seconds), priced at the $/h the kit passes the job (contract.NodePrices:
the values file's instance types, or the AWS mix a local one stands for)."""

from raykit.contract import NodePrices


def bill(node_seconds: dict[str, float], prices: NodePrices | None) -> dict | None:
    """What the run's nodes cost: each type's node-seconds at its $/h (None where the kit
    passed no prices: a local cluster without prices_as). A type without a price is listed
    unpriced, and then no total is claimed."""
    if prices is None:
        return None
    usd = prices.usd_per_hour
    by_type = {kind: {"node_seconds": seconds, "usd_per_hour": usd.get(kind),
                      "usd": None if kind not in usd else seconds / 3600 * usd[kind]}
               for kind, seconds in node_seconds.items()}
    unpriced = sorted(kind for kind, row in by_type.items() if row["usd"] is None)
    return {"usd": None if unpriced or not by_type else sum(r["usd"] for r in by_type.values()),
            "by_type": by_type, "priced_as": prices.basis, "unpriced": unpriced}
