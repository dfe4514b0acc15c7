"""The priced verdict (jobs/raykit/verdict.py): the stall, its cause, the workers that
would remove it, and $ per million images now and with them; the figures the kit passes."""

import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "jobs"))  # as a job imports it
from raykit import contract  # noqa: E402
from raykit.diagnosis import diagnose  # noqa: E402
from raykit.verdict import priced_verdict, verdict_text  # noqa: E402
from scripts.build import build  # noqa: E402
from scripts.job_env import job_env  # noqa: E402

PRICES = json.dumps({"usd_per_hour": {"head": 1.0, "cpu_worker": 0.5}, "basis": "test",
                     "network_gbps": {"head": 2.5, "cpu_worker": 5.0}})
NODES = {"10.0.0.1": "head", "10.0.0.2": "cpu_worker"}


def figures(wait_s: float, compute_s: float = 0.1, cpus: float = 4, s_per_image: float = 0.01):
    return diagnose(mean_step_s=wait_s + compute_s, mean_wait_s=wait_s, mean_compute_s=compute_s,
                    images_per_step=32, preprocess_s_per_image=s_per_image, preprocess_cpus=cpus,
                    worker_type="cpu_worker", cpus_per_worker=4, steps=100, max_wait_s=wait_s * 2)


def test_a_data_bound_run_is_priced_now_and_with_the_workers_that_feed_it():
    d = figures(wait_s=0.3, cpus=1)  # 75% waiting: 320 images/s wanted, one CPU delivers 100
    v = priced_verdict(d, 80.0, NODES, ["10.0.0.1"], {"10.0.0.2": 800}, 1000, PRICES)
    assert v["cause"] == "data" and v["stall_share"] == pytest.approx(0.75)
    assert v["add_worker_nodes"] == d["add_worker_nodes"] > 0
    assert v["usd_per_million_images"] == pytest.approx(1.5 / 3600 / 80 * 1e6)
    more = 1.5 + 0.5 * v["add_worker_nodes"]
    assert v["usd_per_million_images_with_mix"] == pytest.approx(more / 3600 / 320 * 1e6)
    text = verdict_text(v)
    assert text.startswith("stalled 75% of each step, because of too few preprocessing CPUs; $")
    assert f"{v['add_worker_nodes']} more 'cpu_worker' node(s) would remove it, at $" in text


def test_a_run_whose_workers_fill_the_train_nodes_link_is_network_bound():
    """602 kB images at 500 images/s from the workers: 2.4 Gbit/s of the head's 2.5."""
    d = figures(wait_s=0.3, cpus=1)
    v = priced_verdict(d, 500.0, NODES, ["10.0.0.1"], {"10.0.0.2": 1000}, 602112, PRICES)
    assert v["cause"] == "network" and v["add_worker_nodes"] == 0
    assert "because of the network: the train nodes' link carries ~519 images/s" in verdict_text(v)
    local = priced_verdict(d, 500.0, NODES, ["10.0.0.1"], {"10.0.0.1": 1000}, 602112, PRICES)
    assert local["cause"] == "data"  # preprocessed on the train node itself: nothing crossed


def test_compute_and_pipeline_causes_and_a_run_without_prices():
    compute = priced_verdict(figures(wait_s=0.001), 300.0, NODES, ["10.0.0.1"], {}, None, PRICES)
    assert compute["cause"] == "compute" and compute["add_worker_nodes"] == 0
    assert "the trainers' own compute (no stall to remove)" in verdict_text(compute)
    pipeline = priced_verdict(figures(wait_s=0.3, cpus=64), 80.0, NODES, ["10.0.0.1"], {}, None, PRICES)
    assert pipeline["cause"] == "pipeline"
    unpriced = priced_verdict(figures(wait_s=0.3, cpus=1), 80.0, NODES, ["10.0.0.1"], {}, None, "")
    assert unpriced["usd_per_million_images"] is None and "not priced" in verdict_text(unpriced)


def test_the_kit_passes_each_types_bandwidth_beside_its_price():
    passed = json.loads(job_env(build("hetero"))[contract.NODE_PRICES_ENV])
    assert passed["network_gbps"]["cpu_worker"] == 5.0  # c5.4xlarge's baseline
    assert passed["network_gbps"]["head"] == 2.5        # g5.xlarge's
    local = json.loads(job_env(build("local"))[contract.NODE_PRICES_ENV])  # priced as hetero
    assert local["network_gbps"]["cpu_worker"] == 5.0


def test_a_network_bound_run_is_diagnosed_as_such_and_asks_for_no_cpus(monkeypatch):
    """The diagnosis row and the verdict row say the same: no CPUs where the link is full."""
    from raykit import summary

    monkeypatch.setenv(contract.NODE_PRICES_ENV, PRICES)
    d = figures(wait_s=0.3, cpus=1)
    s = summary.with_verdict({"diagnosis": d, "images_per_s": 500.0, "node_types": NODES,
                              "train_nodes": {}, "trainer_node": "10.0.0.1",
                              "preprocess_nodes": {"10.0.0.2": 1000}, "bytes_per_image": 602112})
    assert s["verdict"]["cause"] == "network"
    assert s["diagnosis"]["verdict"] == "network-bound" and s["diagnosis"]["add_worker_nodes"] == 0
    assert s["diagnosis"]["text"].startswith("NETWORK-BOUND: the trainer waits for data 75% of each step")
    assert "more CPU workers would not help" in s["diagnosis"]["text"]
