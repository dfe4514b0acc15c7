"""A run's bill: node-seconds per node type from Ray's node table (nodes that joined or
left during the run included), priced with what the kit passes the job, and the prices the
kit passes for each kind of values file. The real run's bill is asserted in
test_vit_synthetic.py (the local cluster, priced as its prices_as)."""

import json
import sys
from types import SimpleNamespace

import pytest

from conftest import REPO
from scripts.build import build
from scripts.pricing import cost
from scripts.job_env import job_env

sys.path.insert(0, str(REPO / "jobs"))  # as a job imports it: `raykit`, shipped with every job
from raykit import contract  # noqa: E402
from raykit.billing import bill  # noqa: E402
from raykit.ray_state import node_seconds  # noqa: E402
from raykit.report import bill_text  # noqa: E402


def node(labels, start, end=None):
    return SimpleNamespace(labels=labels, start_time_ms=start * 1000, end_time_ms=(end or 0) * 1000)


def test_node_time_counts_only_the_run_and_nodes_that_came_and_went():
    nodes = [node({"raykit-node-type": "head"}, 1),                # up before the run: from its start
             node({"raykit-node-type": "cpu_worker"}, 50),         # joined at 150 s - 100
             node({"raykit-node-type": "cpu_worker"}, 120, 160),   # joined and left during it
             node({"raykit-node-type": "cpu_worker"}, 10, 90),     # gone before it began
             node({}, 150)]                                         # someone's node without a label
    held = node_seconds(since_s=100, now_s=200, nodes=nodes)
    assert held == {"head": 100.0, "cpu_worker": 100.0 + 40.0, "unlabelled": 50.0}


def test_the_bill_prices_each_type_and_claims_no_total_with_one_unpriced():
    prices = contract.NodePrices({"head": 1.0, "cpu_worker": 0.5}, "as hetero")
    run = bill({"head": 3600.0, "cpu_worker": 7200.0}, prices)
    assert run["usd"] == pytest.approx(1.0 + 1.0) and run["unpriced"] == []
    assert bill_text({"head": 3600.0, "cpu_worker": 7200.0}, run).startswith(
        "$2.0000 for the nodes' time while the job ran (head 3600 s, cpu_worker 7200 s; as hetero); "
        "not in it: `make up`, the wait for workers, idle minutes before autostop")
    partial = bill({"head": 60.0, "gpu_worker": 60.0}, prices)
    assert partial["usd"] is None and partial["unpriced"] == ["gpu_worker"]
    assert "no price for gpu_worker" in bill_text({"head": 60.0}, partial)


@pytest.mark.parametrize("given", ["not json", '{"usd_per_hour": {"head": "a lot"}, "basis": "x"}',
                                   '["a list"]', '{"basis": "no prices"}'])
def test_prices_that_are_not_the_kits_give_no_bill_and_no_crash(given, monkeypatch, capsys):
    """Parsed once a run (summary.prices_passed): one line, then no bill and no verdict's price."""
    from raykit.summary import prices_passed

    monkeypatch.setenv(contract.NODE_PRICES_ENV, given)
    assert prices_passed() is None
    assert capsys.readouterr().out.startswith("job's cost unknown: ")
    monkeypatch.setenv(contract.NODE_PRICES_ENV, "")
    assert prices_passed() is None and capsys.readouterr().out == ""  # none passed: nothing to say
    assert bill({"head": 60.0}, None) is None
    assert "not priced" in bill_text({"head": 60.0}, None)


def test_the_kit_passes_each_mix_its_prices():
    aws, basis = cost.node_hour_prices(build("hetero"))
    assert aws["head"] == aws["ray.head.default"] > aws["cpu_worker"] > 0  # the head's label on AWS is Ray's
    assert basis == "on-demand list prices in us-east-1, EBS included"
    local, basis = cost.node_hour_prices(build("local_hetero"))
    assert basis.startswith("as hetero, ")  # prices_as: hetero; its one-core worker as 1 of 16 vCPUs
    assert local == aws | {"cpu_worker": pytest.approx(aws["cpu_worker"] / 16)}
    pods, basis = cost.node_hour_prices(build("k8s_hetero"))
    assert pods == {"head": 1.006, "cpu-worker": 0.68}  # one pod per node: the node's price
    assert json.loads(job_env(build("hetero"))[contract.NODE_PRICES_ENV])["usd_per_hour"] == aws
