"""The priced verdict (jobs/raykit/verdict.py): the stall, its cause (the diagnosis's, the
network included), the workers that would remove it, and $ per million images now and with
them; the figures the kit passes."""

import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "jobs"))  # as a job imports it
from raykit import contract  # noqa: E402
from raykit.diagnosis import VERDICTS, diagnose, network_of  # noqa: E402
from raykit.verdict import priced_verdict, verdict_text  # noqa: E402
from scripts.build import build  # noqa: E402
from scripts.job_env import job_env  # noqa: E402

PRICES = contract.NodePrices({"head": 1.0, "cpu_worker": 0.5}, "test", {"head": 2.5, "cpu_worker": 5.0})
NODES = {"10.0.0.1": "head", "10.0.0.2": "cpu_worker"}


def figures(wait_s: float, compute_s: float = 0.1, cpus: float = 4, s_per_image: float = 0.01,
            network=None):
    return diagnose(mean_step_s=wait_s + compute_s, mean_wait_s=wait_s, mean_compute_s=compute_s,
                    images_per_step=32, preprocess_s_per_image=s_per_image, preprocess_cpus=cpus,
                    worker_type="cpu_worker", cpus_per_worker=4, steps=100, max_wait_s=wait_s * 2,
                    network=network)


def test_a_data_bound_run_is_priced_now_and_with_the_workers_that_feed_it():
    network = network_of(80.0, NODES, ["10.0.0.1"], {"10.0.0.2": 800}, 1000, PRICES.network_gbps)
    d = figures(wait_s=0.3, cpus=1, network=network)  # 75% waiting: 320 images/s wanted, one CPU delivers 100
    v = priced_verdict(d, 80.0, NODES, PRICES)
    assert v["cause"] == "data" and v["stall_share"] == pytest.approx(0.75)
    assert v["add_worker_nodes"] == d["add_worker_nodes"] > 0
    assert v["usd_per_million_images"] == pytest.approx(1.5 / 3600 / 80 * 1e6)
    more = 1.5 + 0.5 * v["add_worker_nodes"]
    assert v["usd_per_million_images_with_mix"] == pytest.approx(more / 3600 / 320 * 1e6)
    text = verdict_text(v)
    assert text.startswith("stalled 75% of each step, because of too few preprocessing CPUs; $")
    assert f"{v['add_worker_nodes']} more 'cpu_worker' node(s) would remove it, at $" in text


def test_a_run_whose_workers_fill_the_train_nodes_link_is_network_bound():
    """602 kB images at 500 images/s from the workers: 2.4 Gbit/s of the head's 2.5. The
    diagnosis decides it (one judgement), and the verdict prices what it decided."""
    network = network_of(500.0, NODES, ["10.0.0.1"], {"10.0.0.2": 1000}, 602112, PRICES.network_gbps)
    d = figures(wait_s=0.3, cpus=1, network=network)
    assert d["verdict"] == "network-bound" and d["add_worker_nodes"] == d["add_cpus"] == 0
    assert d["text"].startswith("NETWORK-BOUND: the trainer waits for data 75% of each step")
    assert "more CPU workers would not help" in d["text"]
    v = priced_verdict(d, 500.0, NODES, PRICES)
    assert v["cause"] == "network" and v["add_worker_nodes"] == 0
    assert "because of the network: the train nodes' link carries ~519 images/s" in verdict_text(v)
    local = network_of(500.0, NODES, ["10.0.0.1"], {"10.0.0.1": 1000}, 602112, PRICES.network_gbps)
    assert figures(wait_s=0.3, cpus=1, network=local)["verdict"] == "data-bound"  # nothing crossed
    assert network_of(500.0, NODES, ["10.0.0.1"], {"10.0.0.2": 1}, None, PRICES.network_gbps) is None
    unmeasured = figures(wait_s=0.3, cpus=1, s_per_image=0.0, network=network)
    assert unmeasured["verdict"] == "network-bound"  # the link is full whatever the CPUs cost


def test_compute_and_pipeline_causes_and_a_run_without_prices():
    compute = priced_verdict(figures(wait_s=0.001), 300.0, NODES, PRICES)
    assert compute["cause"] == "compute" and compute["add_worker_nodes"] == 0
    assert "the trainers' own compute (no stall to remove)" in verdict_text(compute)
    pipeline = priced_verdict(figures(wait_s=0.3, cpus=64), 80.0, NODES, PRICES)
    assert pipeline["cause"] == "pipeline"
    unpriced = priced_verdict(figures(wait_s=0.3, cpus=1), 80.0, NODES, None)
    assert unpriced["usd_per_million_images"] is None and "not priced" in verdict_text(unpriced)


def test_every_verdict_the_diagnosis_can_give_has_a_cause():
    from raykit.verdict import CAUSES

    assert set(CAUSES) == set(VERDICTS)


def test_the_kit_passes_each_types_bandwidth_beside_its_price():
    passed = json.loads(job_env(build("hetero"))[contract.NODE_PRICES_ENV])
    assert passed["network_gbps"]["cpu_worker"] == 5.0  # c5.4xlarge's baseline
    assert passed["network_gbps"]["head"] == 2.5        # g5.xlarge's
    local = json.loads(job_env(build("local"))[contract.NODE_PRICES_ENV])  # priced as hetero
    assert local["network_gbps"]["cpu_worker"] == 5.0
