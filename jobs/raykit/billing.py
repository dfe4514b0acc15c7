"""The run's bill: each node type's seconds in Ray's node table while the job ran, priced
at the $/h the kit passes the job (contract.NODE_PRICES: the values file's instance types,
or the AWS mix a local one stands for)."""

import time

from raykit import contract


def node_seconds(since_s: float, now_s: float | None = None, nodes=None) -> dict[str, float]:
    """Seconds each node type's nodes were up between since_s and now, nodes that joined
    or left meanwhile included: what the run held, node by node, as Ray's state API lists
    them (it keeps dead nodes, with their end time). By the node's raykit-node-type label."""
    from raykit.placement import NODE_TYPE

    now_s = now_s or time.time()
    if nodes is None:
        from ray.util.state import list_nodes
        try:
            nodes = list_nodes(detail=True, limit=10_000, raise_on_missing_output=False)
        except Exception as e:  # noqa: BLE001 (a summary without the bill beats no summary)
            print(f"node time unknown: Ray's state API failed ({type(e).__name__})", flush=True)
            return {}
    totals: dict[str, float] = {}
    for node in nodes:
        start = (node.start_time_ms or 0) / 1000
        end = (node.end_time_ms or 0) / 1000 or now_s  # 0: still alive
        held = min(end, now_s) - max(start, since_s)
        if start and held > 0:
            kind = (node.labels or {}).get(NODE_TYPE) or "unlabelled"
            totals[kind] = totals.get(kind, 0.0) + held
    return {k: round(v, 1) for k, v in sorted(totals.items())}


def bill(node_seconds: dict[str, float], prices_json: str) -> dict | None:
    """What the run's nodes cost: each type's node-seconds at its $/h, from the prices the
    kit passed (None where it passed none: a local cluster without prices_as). A type
    without a price is listed unpriced, and then no total is claimed."""
    try:
        given = contract.node_prices(prices_json)
    except ValueError as e:
        print(f"job's cost unknown: {e}", flush=True)
        return None
    if given is None:
        return None
    prices, basis = given.usd_per_hour, given.basis
    by_type = {kind: {"node_seconds": seconds, "usd_per_hour": prices.get(kind),
                      "usd": None if kind not in prices else seconds / 3600 * prices[kind]}
               for kind, seconds in node_seconds.items()}
    unpriced = sorted(kind for kind, row in by_type.items() if row["usd"] is None)
    return {"usd": None if unpriced or not by_type else sum(r["usd"] for r in by_type.values()),
            "by_type": by_type, "priced_as": basis, "unpriced": unpriced}
