"""The run's priced verdict, in one place: how much of each step the trainers stalled, why
(data, the pipeline, the network, compute), the CPU workers it would take to remove it,
and the $ per million images now and with that mix. Pure arithmetic on the summary's
figures (the diagnosis, the nodes, the bytes per image) and on what the kit passed the job
(each node type's $/h and baseline network bandwidth, RAYKIT_NODE_PRICES): no Grafana.

The network is the cause where the images the CPU workers preprocessed reach the train
nodes at NETWORK_BOUND_SHARE or more of the train nodes' baseline bandwidth: more CPUs
then add nothing (`make plan` caps them there too)."""

from raykit import contract

NETWORK_BOUND_SHARE = 0.8  # of the baseline: past it the link, not the CPUs, sets the pace
CAUSES = {"data-bound": "data", "data-bound-unmeasured": "data", "pipeline-bound": "pipeline",
          "compute-bound": "compute", "trainer-host-bound": "compute", "not-data-bound": "compute"}


def given(prices_json: str) -> tuple[dict[str, float], dict[str, float]]:
    """({type: $/h}, {type: baseline Gbit/s}) from the kit's RAYKIT_NODE_PRICES ({} each
    where it passed none, or something else)."""
    try:
        found = contract.node_prices(prices_json)
    except ValueError:
        return {}, {}
    return (found.usd_per_hour, found.network_gbps) if found else ({}, {})


def per_million(usd_per_hour: float | None, images_per_s: float) -> float | None:
    if usd_per_hour is None or images_per_s <= 0:
        return None
    return usd_per_hour / 3600 / images_per_s * 1e6


def priced_verdict(diagnosis: dict, images_per_s: float, node_types: dict[str, str],
                   trainer_nodes: list[str], preprocessed: dict[str, int],
                   bytes_per_image: float | None, prices_json: str) -> dict:
    """node_types: {node ip: its type}, the nodes up; trainer_nodes: the ips that train;
    preprocessed: {node ip: images it preprocessed}."""
    prices, network = given(prices_json)
    cause = CAUSES.get(diagnosis["verdict"], "compute")
    stall = diagnosis["data_wait_fraction"]
    total = sum(preprocessed.values())
    remote = sum(n for ip, n in preprocessed.items() if ip not in trainer_nodes) / total if total else 0.0
    link = sum(network.get(node_types.get(ip, ""), 0.0) for ip in trainer_nodes)
    carried = (link * 1e9 / 8 / bytes_per_image) if link and bytes_per_image else None
    if cause in ("data", "pipeline") and carried and images_per_s * remote >= NETWORK_BOUND_SHARE * carried:
        cause = "network"
    add = diagnosis["add_worker_nodes"] if cause == "data" else 0
    hourly = sum(prices.get(kind, float("nan")) for kind in node_types.values()) if prices else None
    if hourly is not None and hourly != hourly:  # a type without a price: no figure claimed
        hourly = None
    worker_price = prices.get(diagnosis["worker_type"])
    with_mix_hourly = hourly + add * worker_price if hourly is not None and worker_price is not None else None
    supply = (diagnosis["preprocess_cpus"] + diagnosis["add_cpus"]) * diagnosis["preprocess_images_per_s_per_cpu"]
    with_mix_rate = min(diagnosis["trainer_images_per_s"], supply) if add else images_per_s
    return {"stall_share": stall, "cause": cause, "add_worker_nodes": add,
            "worker_type": diagnosis["worker_type"],
            "usd_per_million_images": per_million(hourly, images_per_s),
            "usd_per_million_images_with_mix": per_million(with_mix_hourly, with_mix_rate),
            "network_images_per_s": carried}


def verdict_text(v: dict) -> str:
    now, then = v["usd_per_million_images"], v["usd_per_million_images_with_mix"]
    price = f"${now:.2f} per million images now" if now is not None else "not priced"
    if v["cause"] == "network":
        because = (f"the network: the train nodes' link carries ~{v['network_images_per_s']:.0f} "
                   "images/s from the workers, more CPUs add nothing")
    else:
        because = {"data": "too few preprocessing CPUs", "pipeline": "the pipeline delivers late",
                   "compute": "the trainers' own compute (no stall to remove)"}[v["cause"]]
    text = f"stalled {v['stall_share']:.0%} of each step, because of {because}; {price}"
    if v["add_worker_nodes"]:
        text += (f"; {v['add_worker_nodes']} more '{v['worker_type']}' node(s) would remove it"
                 + (f", at ${then:.2f} per million images" if then is not None else ""))
    return text
