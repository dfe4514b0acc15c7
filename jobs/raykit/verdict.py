"""The run's priced verdict: how much of each step the trainers stalled, why (the
diagnosis's bottleneck: data, the pipeline, the network, compute), the CPU workers it would
take to remove it, and the $ per million images now and with that mix. Pure arithmetic on
the diagnosis (diagnosis.py decides the bottleneck, once) and on the prices the kit passed
the job (contract.NodePrices, parsed once a run by the summary): no Grafana."""

from raykit.contract import NodePrices

CAUSES = {"data-bound": "data", "data-bound-unmeasured": "data", "pipeline-bound": "pipeline",
          "network-bound": "network", "compute-bound": "compute", "trainer-host-bound": "compute",
          "not-data-bound": "compute"}


def per_million(usd_per_hour: float | None, images_per_s: float) -> float | None:
    if usd_per_hour is None or images_per_s <= 0:
        return None
    return usd_per_hour / 3600 / images_per_s * 1e6


def priced_verdict(diagnosis: dict, images_per_s: float, node_types: dict[str, str],
                   prices: NodePrices | None) -> dict:
    """node_types: {node ip: its type}, the nodes up; prices: what the kit passed (None: none)."""
    cause = CAUSES[diagnosis["verdict"]]
    add = diagnosis["add_worker_nodes"] if cause == "data" else 0
    usd = prices.usd_per_hour if prices else {}
    hourly = sum(usd.get(kind, float("nan")) for kind in node_types.values()) if usd else None
    if hourly is not None and hourly != hourly:  # a type without a price: no figure claimed
        hourly = None
    worker_price = usd.get(diagnosis["worker_type"])
    with_mix_hourly = hourly + add * worker_price if hourly is not None and worker_price is not None else None
    supply = (diagnosis["preprocess_cpus"] + diagnosis["add_cpus"]) * diagnosis["preprocess_images_per_s_per_cpu"]
    with_mix_rate = min(diagnosis["trainer_images_per_s"], supply) if add else images_per_s
    return {"stall_share": diagnosis["data_wait_fraction"], "cause": cause, "add_worker_nodes": add,
            "worker_type": diagnosis["worker_type"],
            "usd_per_million_images": per_million(hourly, images_per_s),
            "usd_per_million_images_with_mix": per_million(with_mix_hourly, with_mix_rate),
            "network_images_per_s": diagnosis["network_images_per_s"]}


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
