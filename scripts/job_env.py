"""What a job run on a mix learns from the kit, through its environment: its nodes' prices
and bandwidth (the summary bills the run with them, the verdict weighs the network), the
autopilot's settings, and the stall limit. Each name and JSON shape is defined, and parsed
on the job's side, once: jobs/raykit/contract.py. `make submit`, `make run` and the
benches pass job_env(built); `make validate` builds it too, so that a ceiling the mix
cannot be held under is refused before anything launches."""

import json

from jobs.raykit import contract, placement
from scripts.build import Built
from scripts.core import roles
from scripts.core.errors import KitError
from scripts.core.inputs import values_shown
from scripts.pricing.cost import mix_prices, node_hour_prices, node_network_gbps


def job_env(built: Built) -> dict[str, str]:
    """What a job run on this mix learns from its environment: its nodes' prices (the
    summary bills the run with them) and the autopilot's settings, the prices read from
    the catalog once for both; and the stall limit (jobs/raykit/stall.py), since a stalled
    job bills too."""
    mix = mix_prices(built)  # once: a local mix's prices_as is built for it
    priced = node_hour_prices(built, mix)
    stall_s = built.values["stall_minutes"] * 60
    return (price_env(priced, node_network_gbps(built, mix)) | autopilot_env(built, priced)
            | ({contract.STALL_ENV: f"{stall_s:g}"} if stall_s else {}))


def price_env(priced: tuple[dict[str, float], str] | None,
              network: dict[str, float] | None = None) -> dict[str, str]:
    """The job's environment entry carrying node_hour_prices and each type's baseline
    bandwidth (node_network_gbps; the verdict's network term) ({} where there are no prices)."""
    if not priced:
        return {}
    return {contract.NODE_PRICES_ENV: contract.node_prices_json(priced[0], priced[1], network or {})}


# The job learns the autopilot's settings from its environment (jobs/raykit/autopilot.py
# reads them); while it steers, Ray Data's own cluster autoscaler, which scales up on
# resource utilization above 50% (ray/data/_internal/cluster_autoscaler/), is switched off
# by thresholds it can never reach: both would ask Ray's autoscaler for nodes.
RAY_DATA_AUTOSCALER_OFF = {f"RAY_DATA_DEFAULT_CLUSTER_SCALING_UP_{kind}_UTIL_THRESHOLD": "2"
                           for kind in ("CPU", "GPU", "MEMORY", "OBJECT_STORE_MEMORY")}


def base_usd_per_hour(values: dict, prices: dict[str, float], kind: str) -> float:
    """The cluster's $/h but for the steered type `kind`: the head and every other type at
    its min_workers."""
    return prices["head"] + sum(prices.get(name, 0.0) * w["min_workers"]
                                for name, w in values["workers"].items() if name != kind)


def usd_per_hour_at_min(values: dict, prices: dict[str, float]) -> float:
    """The mix's $/h with every type at min_workers: the least the autopilot's ceiling may
    be, and the ceiling that holds it there (make bench-autopilot's held row)."""
    (kind,) = roles.preprocess_types(values)
    return base_usd_per_hour(values, prices, kind) + prices.get(kind, 0.0) * values["workers"][kind]["min_workers"]


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
        node_usd, base_usd = priced[0].get(kind), base_usd_per_hour(values, priced[0], kind)
    ceiling = pilot["max_usd_per_hour"]
    if ceiling is not None:
        where = f"{values_shown(built.cluster)}: autopilot.max_usd_per_hour"
        if node_usd is None:
            raise KitError(f"{where}: this mix has no prices to hold under a ceiling (a local mix needs "
                           "prices_as); set max_usd_per_hour: null")
        least = usd_per_hour_at_min(values, priced[0])
        if ceiling < least:
            raise KitError(f"{where}: ${ceiling:g}/h is below what the mix costs at min_workers "
                           f"(${least:.2f}/h); raise it or lower min_workers")
    # one bundle per node: its type's own resource, no CPUs (the autopilot's reservation at
    # Ray Data's AutoscalingCoordinator would take them out of Ray Data's budget)
    settings = {"node_type": kind, "node_bundle": {placement.type_resource(kind): 1},
                "min_nodes": worker["min_workers"], "max_nodes": worker["max_workers"],
                "target_wait_share": pilot["target_wait_share"], "cooldown_s": pilot["cooldown_s"],
                "join_timeout_s": pilot["join_timeout_s"],
                "node_usd_per_hour": node_usd, "base_usd_per_hour": base_usd or 0.0,
                "max_usd_per_hour": ceiling}
    return {contract.AUTOPILOT_ENV: json.dumps(settings)} | RAY_DATA_AUTOSCALER_OFF
