"""The job's summary (jobs/raykit/summary.py) assembled from the run's figures alone:
summary.assemble takes the measured metrics, the cluster's shape, Ray's facts about the
run (ray_state.RunFacts, read once after fit()), the prices the kit passed (parsed once)
and the autopilot's report (handed over by steering(), no module global). No Ray here:
the module `ray` is made unimportable while it runs."""

import json
import subprocess
import sys

from conftest import REPO

NOW = 1_800_000_000.0
PRICES = {"usd_per_hour": {"head": 1.0, "cpu_worker": 0.5}, "basis": "as hetero",
          "network_gbps": {"head": 2.5, "cpu_worker": 5.0}}


def metrics(wait: float, bytes_per_image: float) -> dict:
    """A two-worker run on one GPU head, its images preprocessed mostly on a CPU worker."""
    ranks = [{"trainer_node": "10.0.0.1", "mean_step_s": 0.2 + wait, "mean_data_wait_s": wait,
              "params_digest": "ab", "trainer_cpu_s": 30.0} for _ in range(2)]
    return {"steps": 200, "trainer_cpu_s": 30.0, "mean_step_s": 0.2 + wait, "mean_data_wait_s": wait,
            "max_data_wait_s": wait * 3, "trainer_node": "10.0.0.1", "train_s": 60.0, "gpu_utilization": 0.8,
            "gpu_utilization_error": None, "warmup_s": 5.0, "first_step_at": NOW - 50,
            "steady": {"steady": True, "steady_step_s": 0.2 + wait, "steady_wait_s": wait, "first_step_s": 5.0,
                       "ramp_s": 3.0, "steady_images_per_s": 32 / (0.2 + wait), "steps_needed": None,
                       "stock_steps": 4, "wait_p50_s": wait, "wait_p95_s": wait * 2, "early_wait_s": wait,
                       "steady_from_step": 7, "steady_steps": 190, "steady_wait_share": wait / (0.2 + wait)},
            "mean_trainer_compute_s": 0.2, "images_seen": 6400, "preprocess_s_per_image": 0.01,
            "preprocess_images_measured": 6000, "preprocess_warmup_images": 400,
            "preprocess_cost_includes_warmup": False, "preprocess_nodes": {"10.0.0.2": 6000, "10.0.0.1": 400},
            "preprocess_cpu_s": {"10.0.0.2": 60.0, "10.0.0.1": 4.0}, "bytes_per_image": bytes_per_image,
            "ranks": ranks, "device": "cuda:0", "gpu_model": "NVIDIA A10G", "restarts": 0,
            "resumed_from_step": None, "final_loss": 0.5, "preprocess_node_start_s": {"10.0.0.2": 4.2}}


SHAPE = {"nodes": {"10.0.0.1": {"type": "head", "cores": 4, "preprocess_cpus": 0},
                   "10.0.0.2": {"type": "cpu_worker", "cores": 4, "preprocess_cpus": 3}},
         "preprocess_cpus": 1, "preprocess_shares_trainer_cpus": False, "host_cores": None,
         "worker_type": "cpu_worker", "cpus_per_worker": 3, "train_type": None}
FACTS = {"node_types": {"10.0.0.1": "head", "10.0.0.2": "cpu_worker"},
         "node_seconds": {"cpu_worker": 60.0, "head": 60.0}, "preempted_nodes": [],
         "lost_nodes": [], "retried_preprocessing_tasks": 0}
PILOT = {"node_type": "cpu_worker", "target_wait_share": 0.1, "window_s": 30, "min_nodes": 1, "max_nodes": 3,
         "mean_wait_share": 0.3, "changes": ["20: 2 node(s): x"], "given_up": 0, "drained": [], "price_holds": 0,
         "budget_refreshes": [], "timeline": [{"preprocess_nodes": 1}, {"preprocess_nodes": 2}], "errors": []}

ASSEMBLE = f'''import json, sys
sys.modules["ray"] = None  # any Ray call or import fails
sys.path.insert(0, {str(REPO / "jobs")!r})
from raykit import contract, summary
from raykit.ray_state import RunFacts
cases = json.loads(sys.stdin.read())
out = {{}}
for name, (m, pilot) in cases.items():
    out[name] = summary.assemble(m, {SHAPE!r}, RunFacts(**{FACTS!r}), contract.NodePrices(**{PRICES!r}),
                                 pilot, job="vit", workers=2, batch_size=16, wall_s=60.0,
                                 fit_began={NOW - 60.0!r}, extra={{"model": "b16"}})
print(json.dumps(out))
'''


def assembled(cases: dict) -> dict:
    run = subprocess.run([sys.executable, "-c", ASSEMBLE], input=json.dumps(cases), capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_the_summary_is_assembled_from_the_runs_figures_without_ray():
    out = assembled({"data": (metrics(0.3, 1000), PILOT), "network": (metrics(0.3, 6_021_120), None),
                     "compute": (metrics(0.001, 1000), None)})
    data, network, compute = out["data"], out["network"], out["compute"]
    # one judgement: the diagnosis decides, the verdict prices what it decided
    assert data["diagnosis"]["verdict"] == "data-bound" and data["verdict"]["cause"] == "data"
    assert data["verdict"]["add_worker_nodes"] == data["diagnosis"]["add_worker_nodes"] == 1
    assert network["diagnosis"]["verdict"] == "network-bound" and network["verdict"]["cause"] == "network"
    assert network["diagnosis"]["add_worker_nodes"] == network["verdict"]["add_worker_nodes"] == 0
    assert compute["diagnosis"]["verdict"] == "compute-bound" and compute["verdict"]["cause"] == "compute"
    # the prices, parsed once, bill the facts' node-seconds and price the verdict
    assert data["bill"] == {"usd": 60 / 3600 * 1.5, "priced_as": "as hetero", "unpriced": [], "by_type": {
        "cpu_worker": {"node_seconds": 60.0, "usd_per_hour": 0.5, "usd": 60 / 3600 * 0.5},
        "head": {"node_seconds": 60.0, "usd_per_hour": 1.0, "usd": 60 / 3600 * 1.0}}}
    assert data["verdict"]["usd_per_million_images"] == 1.5 / 3600 / 64.0 * 1e6
    # the autopilot's report is the one handed in; none where none steered
    assert data["autopilot"] == PILOT and network["autopilot"] is None
    assert data["node_types"] == FACTS["node_types"] and data["retried_preprocessing_tasks"] == 0
    assert data["train_nodes"] == {"10.0.0.1": {"type": "head", "workers": 2, "mean_step_s": 0.5,
                                                "mean_data_wait_s": 0.3, "images_per_s": 64.0}}
    assert data["first_step_after_fit_s"] == 10.0 and data["images_per_s"] == 64.0


def test_the_kit_reads_the_summary_back_through_one_typed_loader():
    """contract.run_summary: the RESULT line's shape, versioned; the kit's benches, planner
    and `make submit` read a summary's figures from it, never by key."""
    sys.path.insert(0, str(REPO / "jobs"))
    from raykit.contract import SUMMARY_VERSION, RunSummary, run_summary

    written = assembled({"data": (metrics(0.3, 1000), PILOT)})["data"]
    s = run_summary({"submission_id": "raysubmit_1", "result": written})  # as build/results/ keeps it
    assert s.version == SUMMARY_VERSION == written["summary_version"]
    assert (s.steps, s.workers, s.batch_size, s.images) == (200, 2, 16, 6400)
    assert s.mean_step_s == 0.5 and s.data_wait_fraction == 0.6 and s.usd == written["bill"]["usd"]
    assert s.reached_steady and s.steady_images_per_s == 64.0 and s.trainer_images_per_s == 160.0
    assert s.autopilot == PILOT and s.cpu_use_by_node_type == written["cpu_use_by_node_type"]
    older = {k: v for k, v in written.items() if k != "summary_version"}
    assert run_summary(older).version == 0 and run_summary(older).steps == 200  # an older job's line
    assert run_summary({"status": "stalled", "reason": "no step for 30 min", "steps": 3}).status == "stalled"
    assert run_summary({}) == RunSummary()
    for bad, said in (({"summary_version": SUMMARY_VERSION + 1}, "newer than this kit reads"),
                      ({"steps": "many"}, "steps: \"many\" is not a whole number"),
                      ({"mean_step_s": True}, "mean_step_s: true is not a number"),
                      ({"autopilot": [1]}, "autopilot: [1] is not an object"), ([], "a JSON object")):
        try:
            run_summary(bad)
        except ValueError as e:
            assert said in str(e), (bad, e)
        else:
            raise AssertionError(f"{bad} was read")
