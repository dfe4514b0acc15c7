"""Price-performance: the published figures, `make cost` for every values file, and the
planner (`make plan`) on explicit profiles and on a job's saved summary."""

import json
import os
from pathlib import Path

import pytest
import yaml

from conftest import REPO, USER_VALUES, make
from scripts import catalog
from scripts.pricing import planner
from scripts.providers.aws import prices as aws_prices
from scripts.providers.kuberay import prices as kuberay_prices
from scripts.providers.kuberay import values as kuberay
from scripts.pricing.formulas import cost_change, usd_per_100_steps, usd_per_million_images


# --- the formulas reproduce the published rows -------------------------------------------

def test_the_published_tensorflow_row_exactly():
    """p4d.24xlarge alone at $37.688/h and 192 ms/step, vs + 2 x c5.18xlarge at $45.032/h
    and 86 ms: $0.201 and $0.108 per 100 steps, 46% cheaper."""
    alone, mixed = usd_per_100_steps(37.688, 0.192), usd_per_100_steps(45.032, 0.086)
    assert f"{alone:.3f}" == "0.201" and f"{mixed:.3f}" == "0.108"
    assert f"{cost_change(mixed, alone):.0%}" == "46%"


def test_cost_per_million_images_is_cost_per_second_over_throughput():
    assert usd_per_million_images(3.6, 100) == pytest.approx(10.0)  # $0.001/s at 100 images/s


# --- make cost ----------------------------------------------------------------------------

VALUES_FILES = sorted(p.stem for p in (REPO / "cluster_templates").glob("*.yaml"))


@pytest.mark.parametrize("cluster", VALUES_FILES)
def test_make_cost_for_every_values_file(cluster, tmp_path):
    run = make("cost", f"CLUSTER={cluster}", env=dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path)))
    assert run.returncode == 0, run.stderr
    total = [line for line in run.stdout.splitlines() if line.startswith("total")]
    if "no cloud cost" in run.stdout or "runs on a Kubernetes cluster's nodes" in run.stdout:
        assert not total
        return
    (line,) = total
    low, high = map(float, line.split()[-2:])
    assert 0 < low <= high


def test_a_kuberay_mix_is_priced_by_the_nodes_its_pods_need():
    """`make cost CLUSTER=k8s_hetero`: one node per pod where a pod fills its node (the
    head's g5.xlarge, each c5.4xlarge), two pods a node where two fit; a group whose
    selector names no known instance type is shown unpriced, and then no total is given."""
    import copy

    from scripts.build import build

    values = build("k8s_hetero").values
    lines = kuberay_prices.cost_table(values)
    assert lines[1].split() == ["node", "group", "instance", "pods", "nodes", "$/h", "each",
                                "$/h", "at", "min", "$/h", "at", "max"]
    assert lines[3].split() == ["cpu-worker", "c5.4xlarge", "2-4", "2-4", "0.6800", "1.36", "2.72"]
    assert lines[4].split() == ["total", "2.37", "3.73"]  # 1.006 + 2 x 0.68, 1.006 + 4 x 0.68
    halves = copy.deepcopy(values)
    halves["workers"]["cpu-worker"]["pod"] |= {"cpus": 7, "memory_gb": 13, "shm_gb": 4}
    assert [g["nodes"] for g in kuberay.node_groups(halves)] == [(1, 1), (1, 2)]  # 2-4 pods, 2 a node
    unknown = copy.deepcopy(values)
    unknown["workers"]["cpu-worker"]["node_selector"] = {"eks.amazonaws.com/nodegroup": "cpu"}
    lines = kuberay_prices.cost_table(unknown)
    assert not any(line.startswith("total") for line in lines) and kuberay_prices.hourly_cost(unknown) is None
    assert lines[-1].startswith("cpu-worker: its node selector names no instance type the catalog prices")


def test_cost_table_adds_ebs_and_counts_min_and_max_workers(hetero_values):
    lines = aws_prices.cost_table(hetero_values | {"aws": hetero_values["aws"] | {"region": "us-east-1"}})
    head = next(line.split() for line in lines if line.startswith("ray.head.default"))
    worker = next(line.split() for line in lines if line.startswith("cpu_worker"))
    # g5.xlarge $1.006 + 150 GB gp3 at $0.08/GB-month / 730 h
    assert float(head[3]) == pytest.approx(1.006 + 150 * 0.08 / 730, abs=1e-4)
    assert worker[2] == "2-4" and float(worker[5]) == pytest.approx(2 * float(worker[3]), abs=0.01)
    assert float(worker[6]) == pytest.approx(4 * float(worker[3]), abs=0.01)


def test_cost_notes_spot_workers_and_regions_without_prices(hetero_values):
    hetero_values["workers"]["cpu_worker"]["spot"] = True
    assert any(line.startswith("spot: cpu_worker is priced at on-demand, its ceiling")
               for line in aws_prices.cost_table(hetero_values))
    hetero_values["aws"]["region"] = "eu-west-1"
    assert aws_prices.cost_table(hetero_values)[0].startswith("no list prices for eu-west-1")


def test_the_catalog_covers_the_families_with_a_price_in_each_listed_region():
    families = {t.split(".")[0] for t in catalog.INSTANCE_TYPES}
    assert {"g5", "g6", "p3", "p4d", "p5", "c5", "c6i", "c7i", "c6a", "m6i"} <= families
    for name, spec in catalog.INSTANCE_TYPES.items():
        assert set(spec.usd_per_hour) == set(catalog.PRICED_REGIONS), name
        assert (spec.gpus > 0) == (spec.gpu_model is not None), name
        assert spec.vcpus > 0 and spec.memory_gib > 0 and min(spec.usd_per_hour.values()) > 0


# --- the planner ---------------------------------------------------------------------------

def plan(gpu="g5.xlarge", trainer=300.0, cpu=12.0):
    profile = planner.Profile(gpu, trainer, cpu)
    ranked, alone = planner.options(profile, "us-east-1")
    return profile, ranked, alone


def test_a_profile_the_gpu_instance_feeds_alone_adds_no_workers():
    # g5.xlarge preprocesses on 2 vCPUs: 2 x 50 = 100 images/s feeds a 90 images/s trainer
    _, ranked, alone = plan(trainer=90, cpu=50)
    assert ranked[0].head == "g5.xlarge" and ranked[0].workers == []
    assert ranked[0] == alone and ranked[0].data_wait == 0


@pytest.mark.parametrize("trainer,cpu", [(300, 12), (1000, 7.5), (150, 40), (2000, 3)])
def test_a_profile_needing_more_vcpus_gets_them_and_not_a_whole_node_more(trainer, cpu):
    profile, ranked, _ = plan(trainer=trainer, cpu=cpu)
    need = planner.vcpus_to_feed(trainer, cpu)
    assert (1 - planner.MAX_DATA_WAIT) * trainer < need * cpu  # the wait is under 5% ...
    assert (need - 1) * cpu <= (1 - planner.MAX_DATA_WAIT) * trainer  # ... with no fewer vCPUs
    for o in ranked:
        assert o.preprocess_vcpus >= need and o.data_wait < planner.MAX_DATA_WAIT
        for w in o.workers:  # one node fewer of its type would not cover the missing vCPUs
            head_vcpus = catalog.preprocess_vcpus(o.head)
            fewer = head_vcpus + (w["count"] - 1) * catalog.preprocess_vcpus(w["instance_type"])
            assert fewer < need, o.name
    assert ranked == sorted(ranked, key=lambda o: (o.usd_per_million_images, o.usd_per_hour, o.name))


def test_a_larger_instance_with_the_same_gpu_wins_when_it_is_cheaper_than_workers():
    # g6.xlarge keeps 2 of its 4 vCPUs; 6 are needed. g6.2xlarge (+$0.17/h) has 6 to
    # spare, while the workers that add 4 vCPUs cost more: c6a.2xlarge (7 usable) $0.31/h
    _, ranked, _ = plan(gpu="g6.xlarge", trainer=300, cpu=50)
    assert ranked[0].head == "g6.2xlarge" and ranked[0].workers == []
    with_workers = [o for o in ranked if o.head == "g6.xlarge"]
    assert with_workers and all(o.usd_per_hour > ranked[0].usd_per_hour for o in with_workers)


def test_only_instances_with_the_same_gpus_are_weighed():
    _, ranked, _ = plan(gpu="g5.xlarge", trainer=3000, cpu=10)
    heads = {o.head for o in ranked}
    assert heads <= {"g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.16xlarge"}


def test_a_mix_of_worker_types_is_offered_only_when_cheaper():
    profile, ranked, _ = plan(trainer=300, cpu=12)
    mix = planner.cheaper_mix_of_types(ranked[0], profile, "us-east-1")
    assert mix is not None and len(mix.workers) == 2
    assert mix.usd_per_hour < ranked[0].usd_per_hour and mix.data_wait < planner.MAX_DATA_WAIT


def test_several_train_nodes_need_preprocessing_for_all_and_write_a_coordinated_mix():
    """From one g5.xlarge's profile, two train nodes need twice the preprocessing vCPUs,
    all on CPU workers (the train nodes' stay with their trainers), beside a coordinating
    head; the written values file has multi_g5's shape and validates."""
    one, _ = planner.options(planner.Profile("g5.xlarge", 300, 12), "us-east-1")
    ranked, alone = planner.options(planner.Profile("g5.xlarge", 300, 12, train_nodes=2), "us-east-1")
    need = planner.vcpus_to_feed(600, 12)
    chosen = ranked[0]
    assert chosen.train_nodes == 2 and chosen.coordinator == planner.COORDINATOR
    assert chosen.name.startswith(f"{planner.COORDINATOR} + 2 x {chosen.head} + ")
    assert need >= 2 * planner.vcpus_to_feed(300, 12) - 1 and chosen.preprocess_vcpus >= need
    # one node's plan counts its head's spare vCPUs; two train nodes' keep theirs
    assert one[0].preprocess_vcpus >= catalog.preprocess_vcpus(one[0].head) > 0
    assert sum(w["count"] * catalog.preprocess_vcpus(w["instance_type"]) for w in chosen.workers) \
        == chosen.preprocess_vcpus
    assert chosen.data_wait < planner.MAX_DATA_WAIT and 0.95 * 600 < chosen.images_per_s <= 600
    assert chosen.usd_per_hour == pytest.approx(
        planner.node_usd(planner.COORDINATOR, "us-east-1") + 2 * planner.node_usd(chosen.head, "us-east-1")
        + sum(w["count"] * planner.node_usd(w["instance_type"], "us-east-1") for w in chosen.workers))
    # the baseline: the two GPU nodes alone, each preprocessing on its own spare vCPUs
    assert alone.name == "2 x g5.xlarge"
    assert alone.images_per_s == pytest.approx(2 * catalog.preprocess_vcpus("g5.xlarge") * 12)
    from scripts.build import build_text

    values = build_text("planned", yaml.safe_dump(planner.values_for("planned", chosen, "us-east-1")).encode()).values
    assert values["head"] | {"disk": None} == {"role": "coordinate", "instance_type": planner.COORDINATOR,
                                               "preprocess": False, "disk": None}
    train = values["workers"]["gpu_worker"]
    assert (train["role"], train["instance_type"], train["min_workers"], train["max_workers"]) == (
        "train", chosen.head, 2, 2)
    assert [(w["role"], w["instance_type"], w["min_workers"]) for n, w in values["workers"].items()
            if n != "gpu_worker"] == [("preprocess", w["instance_type"], w["count"]) for w in chosen.workers]


def test_make_plan_json_has_the_documented_shape():
    run = make("plan", "ARGS=--gpu-instance g5.xlarge --trainer-images-per-s 300 --cpu-images-per-s 12 --json")
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    chosen = found["chosen"]
    assert {"head", "workers", "usd_per_hour", "preprocess_vcpus", "images_per_s"} <= chosen.keys()
    assert all(set(w) == {"instance_type", "count", "spot"} for w in chosen["workers"])
    assert found["options"][0] == chosen and len(found["options"]) > 10


def test_make_plan_writes_a_values_file_that_validates(tmp_path):
    name = "plan-test-written"
    path = USER_VALUES / f"{name}.yaml"
    try:
        run = make("plan", "ARGS=--trainer-images-per-s 300 --cpu-images-per-s 12 --write " + name,
                   env=dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path)))
        assert run.returncode == 0, run.stderr
        assert f"wrote {path} (it validates)" in run.stdout
        check = make("validate", f"CLUSTER={name}", env=dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path)))
        assert check.returncode == 0, check.stderr
        chosen = json.loads(make("plan", "ARGS=--trainer-images-per-s 300 --cpu-images-per-s 12 "
                                 "--json").stdout)["chosen"]
        from scripts.build import build

        values = build(name).values
        assert values["head"]["instance_type"] == chosen["head"]
        assert [(w["instance_type"], w["min_workers"]) for w in values["workers"].values()] == \
            [(w["instance_type"], w["count"]) for w in chosen["workers"]]
        again = make("plan", "ARGS=--trainer-images-per-s 300 --cpu-images-per-s 12 --write " + name)
        assert again.returncode == 2 and "exists; pick another name" in again.stderr
    finally:
        path.unlink(missing_ok=True)


def summary(tmp_path: Path, body) -> str:
    path = tmp_path / "summary.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return str(path)


def test_make_plan_reads_a_saved_job_summary(tmp_path):
    saved = {"submission_id": "x", "result": {"diagnosis": {
        "trainer_images_per_s": 90.0, "preprocess_images_per_s_per_cpu": 50.0}}}
    run = make("plan", f"PROFILE={summary(tmp_path, saved)}")
    assert run.returncode == 0, run.stderr
    assert "profile: g5.xlarge trains 90 images/s when fed; one vCPU preprocesses 50 images/s" in run.stdout
    assert run.stdout.splitlines()[1].startswith("choice: g5.xlarge: $")


BAD_PROFILES = [
    ("missing field", {"trainer_images_per_s": 90}, "no trainer_images_per_s and preprocess_images_per_s_per_cpu"),
    ("zero rate", {"trainer_images_per_s": 0, "preprocess_images_per_s_per_cpu": 5}, "trainer images/s: 0 is not a number of images/s"),
    ("negative rate", {"trainer_images_per_s": 9, "preprocess_images_per_s_per_cpu": -5}, "CPU images/s per vCPU: -5 is not a number of images/s"),
    ("string rate", {"trainer_images_per_s": "9", "preprocess_images_per_s_per_cpu": 5}, "trainer images/s: '9' is not a number of images/s"),
    ("boolean rate", {"trainer_images_per_s": True, "preprocess_images_per_s_per_cpu": 5}, "trainer images/s: True is not a number of images/s"),
    ("infinite rate", '{"trainer_images_per_s": Infinity, "preprocess_images_per_s_per_cpu": 5}', "not JSON"),
    ("not JSON", "trainer: 5", "not JSON"),
    ("a list", "[1, 2]", "no trainer_images_per_s"),
]


@pytest.mark.parametrize("name,body,message", BAD_PROFILES, ids=[c[0] for c in BAD_PROFILES])
def test_bad_profiles_get_one_line_errors(tmp_path, name, body, message):
    run = make("plan", f"PROFILE={summary(tmp_path, body)}")
    assert run.returncode == 2 and run.stdout == ""
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert message in line and "Traceback" not in run.stderr


BAD_ARGS = [
    ("unknown type", "--gpu-instance g9.huge --trainer-images-per-s 9 --cpu-images-per-s 1", "not a GPU type"),
    ("a CPU type as the GPU", "--gpu-instance c5.4xlarge --trainer-images-per-s 9 --cpu-images-per-s 1", "not a GPU type"),
    ("negative figure", "--trainer-images-per-s -3 --cpu-images-per-s 1", "-3.0 is not a number of images/s"),
    ("NaN figure", "--trainer-images-per-s nan --cpu-images-per-s 1", "nan is not a number of images/s"),
    ("not a number", "--trainer-images-per-s lots --cpu-images-per-s 1", "invalid float value: 'lots'"),
    ("no figures at all", "", "plan needs a profile"),
    ("unknown flag", "--gpus 4", "unrecognized arguments: --gpus 4"),
    ("unpriced region", "--region eu-west-1 --trainer-images-per-s 9 --cpu-images-per-s 1", "has no prices"),
    ("bad write name", "--trainer-images-per-s 9 --cpu-images-per-s 1 --write ../x", "--write"),
    ("no train node", "--trainer-images-per-s 9 --cpu-images-per-s 1 --train-nodes 0",
     "--train-nodes must be from 1 to 100 (got 0)"),
    ("train nodes not a count", "--trainer-images-per-s 9 --cpu-images-per-s 1 --train-nodes 2.5",
     "invalid int value: '2.5'"),
]


@pytest.mark.parametrize("name,args,message", BAD_ARGS, ids=[c[0] for c in BAD_ARGS])
def test_bad_plan_args_get_one_line_errors(name, args, message):
    run = make("plan", f"ARGS={args}")
    assert run.returncode == 2, run.stdout
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert message in line and "Traceback" not in run.stderr and "usage:" not in run.stderr


def test_missing_profile_file_is_one_line():
    run = make("plan", "PROFILE=/nonexistent/summary.json")
    assert run.returncode == 2 and "PROFILE='/nonexistent/summary.json': no such file" in run.stderr


# --- where more CPUs stop paying: the network and the measured curve ------------------

def test_the_catalogs_bandwidth_is_awss_own_figure_for_every_type():
    """scripts/catalog.py's NETWORK_GBPS against its source: AWS's DescribeInstanceTypes
    answer as moto ships it, in its units (Gbit/s, baseline and peak, summed over cards)."""
    import gzip

    import moto

    source = json.load(gzip.open(Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"))
    for name in catalog.INSTANCE_TYPES:
        if name.startswith("p3."):  # not in the capture: unknown, and refused for training anyway
            assert catalog.network_gbps(name) is None
            continue
        cards = source[name]["NetworkInfo"]["NetworkCards"]
        assert catalog.NETWORK_GBPS[name] == (sum(c["BaselineBandwidthInGbps"] for c in cards),
                                              sum(c["PeakBandwidthInGbps"] for c in cards)), name
    assert catalog.network_gbps("g5.xlarge") == 2.5  # "up to 10": 2.5 sustained


VIT_224_FLOAT32 = 3 * 224 * 224 * 4  # 602112 bytes: a normalized float32 CHW image


def test_the_network_caps_what_the_workers_deliver_and_no_cpu_is_bought_beyond_it():
    """A g5.xlarge's 2.5 Gbit/s carries ~519 such images/s from its workers: a trainer
    needing 2000 is fed on a head with the bandwidth, never by more workers on this one."""
    linear = planner.Profile("g5.xlarge", 2000, 100)
    priced = planner.Profile("g5.xlarge", 2000, 100, bytes_per_image=VIT_224_FLOAT32)
    assert planner.option(priced, "g5.xlarge", [{"instance_type": "c5.4xlarge", "count": 2}],
                          "us-east-1").network_images_per_s == pytest.approx(2.5e9 / 8 / VIT_224_FLOAT32)
    ranked, _ = planner.options(priced, "us-east-1")
    chosen = ranked[0]
    blind = planner.options(linear, "us-east-1")[0][0]  # the line alone: blind to the network
    from_workers = blind.images_per_s - linear.delivered(catalog.preprocess_vcpus(blind.head))
    assert from_workers > catalog.network_gbps(blind.head) * 1e9 / 8 / VIT_224_FLOAT32  # undeliverable
    assert chosen.name != blind.name and planner.feeds(chosen)
    for o in ranked:  # what crosses the network never exceeds what it carries
        own = planner.Profile("g5.xlarge", 2000, 100).delivered(catalog.preprocess_vcpus(o.head))
        assert o.images_per_s <= own + (o.network_images_per_s or 0) + 1e-6, o.name  # none: no workers


def test_a_mix_the_network_holds_below_the_trainers_says_so_and_stops_buying():
    """20000 images/s of 602 kB is 96 Gbit/s: no single-GPU A10G node has it. The choice
    is network-bound, and one more worker would add cost and no images."""
    profile = planner.Profile("g5.xlarge", 20000, 100, bytes_per_image=VIT_224_FLOAT32)
    ranked, _ = planner.options(profile, "us-east-1")
    chosen = ranked[0]
    assert chosen.limit == "network" and not planner.feeds(chosen)
    assert "held by the network" in planner.limit_text(chosen, profile)
    (worker,) = chosen.workers
    more = planner.option(profile, chosen.head, [dict(worker, count=worker["count"] + 1)], "us-east-1")
    assert more.images_per_s <= chosen.images_per_s + 1e-6 and more.usd_per_hour > chosen.usd_per_hour


def test_the_fit_recovers_a_synthetic_ceiling_and_a_line_has_none():
    import math

    points = [(v, 1000 - 800 * math.exp(-0.1 * v)) for v in (0, 5, 10, 20, 40)]
    curve = planner.fit_curve(points)
    assert curve.ceiling == pytest.approx(1000, rel=0.02) and curve.k == pytest.approx(0.1, rel=0.1)
    assert curve.knee() == pytest.approx(math.log(800 / 50) / 0.1, rel=0.1)  # 95% of the ceiling
    line = planner.fit_curve([(0, 100), (10, 300), (20, 500)])
    assert line.ceiling is None and line.rate(30) == pytest.approx(700)
    assert planner.fit_curve([(0, 100), (10, 300)]).ceiling is None  # two points: a slope alone


# ray-project/ray#42318 (open): 0, 1, 5 and 10 extra CPU nodes gave 753, 1233, 1711 and 1764
# images/s; here as preprocess vCPUs, a g5.12xlarge's own 43 plus 15 per c5.4xlarge.
PUBLISHED_42318 = [(43 + 15 * n, rate) for n, rate in ((0, 753), (1, 1233), (5, 1711), (10, 1764))]


def test_the_published_points_flatten_and_the_planner_buys_no_more_than_five_nodes_worth(tmp_path):
    curve = planner.fit_curve(PUBLISHED_42318)
    assert 1700 < curve.ceiling < 1850
    assert 3 <= (curve.knee() - 43) / 15 <= 5  # the knee: 3 to 5 extra nodes
    points = tmp_path / "points.json"
    points.write_text(json.dumps([{"preprocess_vcpus": v, "images_per_s": r} for v, r in PUBLISHED_42318]))
    run = make("plan", "ARGS=--gpu-instance g5.12xlarge --trainer-images-per-s 5000 "
               f"--cpu-images-per-s 17.5 --points {points} --json")
    assert run.returncode == 0, run.stderr
    chosen = json.loads(run.stdout)["chosen"]
    assert chosen["limit"] == "curve"
    assert chosen["preprocess_vcpus"] - 43 <= 5 * 15  # at most about 5 extra nodes' worth
    linear = planner.options(planner.Profile("g5.12xlarge", 5000, 17.5), "us-east-1")[0][0]
    assert linear.preprocess_vcpus - 43 > 10 * 15  # the line alone buys past every measured point


def test_a_summary_gives_the_planner_its_bytes_per_image(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"result": {"bytes_per_image": VIT_224_FLOAT32, "diagnosis": {
        "trainer_images_per_s": 2000, "preprocess_images_per_s_per_cpu": 100}}}))
    profile, _ = planner.profile_from([], str(path))
    assert profile.bytes_per_image == VIT_224_FLOAT32


def autopilot_summary(timeline: list[tuple[float, int, float, float | None]]) -> dict:
    """A job summary as build/results/ keeps it, with the autopilot's timeline of (t,
    preprocess nodes, wait share, images/s); its cpu_worker nodes have 4 CPUs each."""
    return {"submission_id": "raysubmit_x", "result": {
        "cpu_use_by_node_type": {"head": {"nodes": 1, "cores": 2.0},
                                 "cpu_worker": {"nodes": 3, "cores": 12.0}},
        "autopilot": {"node_type": "cpu_worker", "window_s": 10.0, "timeline": [
            {"t": t, "preprocess_nodes": n, "asked": n, "wait_share": w, "images_per_s": r}
            for t, n, w, r in timeline]}}}


def test_an_autopilot_runs_timeline_is_read_as_measured_points(tmp_path):
    timeline = [(0, 1, None, None), (5, 1, 0.9, 20.0),    # start-up: no window has passed
                (10, 1, 0.8, 95.0), (15, 1, 0.8, 100.0), (20, 1, 0.8, 105.0),
                (25, 2, 0.7, 130.0),                       # 2 nodes, not yet a whole window
                (35, 2, 0.4, 170.0), (40, 2, 0.4, 180.0), (45, 2, 0.4, 175.0),
                (50, 3, 0.3, 190.0), (60, 3, 0.2, 198.0), (65, 3, 0.2, 202.0), (70, 3, 0.2, 200.0),
                (80, 3, 0.01, 260.0),                      # fed: the trainers set that rate
                (85, 2, 0.3, 120.0)]                       # given back: its window still mixes counts
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(autopilot_summary(timeline)))
    assert planner.read_points(str(path)) == [(4.0, 100.0), (8.0, 175.0), (12.0, 200.0)]  # medians
    run = make("plan", f"ARGS=--trainer-images-per-s 900 --cpu-images-per-s 25 --points {path} --json")
    assert run.returncode == 0, run.stderr
    chosen = json.loads(run.stdout)["chosen"]
    assert chosen["limit"] == "curve" and chosen["images_per_s"] < 230  # the ceiling, not 900


BAD_POINTS = [
    ("a negative rate", [{"preprocess_vcpus": 2, "images_per_s": -5}, {"preprocess_vcpus": 4, "images_per_s": 9}],
     "points[0].images_per_s: -5 is not a number of images/s"),
    ("a rate as text", [{"preprocess_vcpus": 2, "images_per_s": "9"}, {"preprocess_vcpus": 4, "images_per_s": 9}],
     "points[0].images_per_s: '9'"),
    ("one point", [{"preprocess_vcpus": 2, "images_per_s": 9}], "not a list of 2 to 50 points (one point has no slope)"),
    ("points that go down", [{"preprocess_vcpus": 2, "images_per_s": 90}, {"preprocess_vcpus": 4, "images_per_s": 80}],
     "images/s fall from 90 at 2 vCPUs to 80 at 4"),
    ("two at one vCPU count", [{"preprocess_vcpus": 2, "images_per_s": 9}, {"preprocess_vcpus": 2, "images_per_s": 10}],
     "two points with the same preprocess_vcpus"),
    ("negative vCPUs", [{"preprocess_vcpus": -1, "images_per_s": 9}, {"preprocess_vcpus": 2, "images_per_s": 10}],
     "points[0].preprocess_vcpus: -1"),
    ("an unknown field", [{"preprocess_vcpus": 1, "images_per_s": 9, "x": 1}, {"preprocess_vcpus": 2, "images_per_s": 10}],
     "points[0]: not an object of preprocess_vcpus and images_per_s alone"),
    ("not a list", "points", "not a list of 2 to 50 points"),
    ("a summary with no autopilot", {"result": {"job": "vit_synthetic"}}, "a summary with no autopilot timeline"),
    ("a timeline of one node count", {"result": {
        "cpu_use_by_node_type": {"cpu": {"nodes": 1, "cores": 4}},
        "autopilot": {"node_type": "cpu", "window_s": 10, "timeline": [
            {"t": t, "preprocess_nodes": 1, "wait_share": 0.5, "images_per_s": 40} for t in (0, 10, 20)]}}},
     "steady windows for 1 node count(s) (1), and a curve needs 2"),
    ("a timeline not as a job writes it", {"result": {
        "cpu_use_by_node_type": {"cpu": {"nodes": 1, "cores": 4}},
        "autopilot": {"node_type": "cpu", "timeline": [{"t": "soon"}]}}},
     "not what a raykit job writes"),
    ("cores of another type", {"result": {
        "cpu_use_by_node_type": {"head": {"nodes": 1, "cores": 4}},
        "autopilot": {"node_type": "cpu", "timeline": []}}},
     "not what a raykit job writes"),
]


@pytest.mark.parametrize("name,data,message", BAD_POINTS, ids=[c[0] for c in BAD_POINTS])
def test_bad_points_are_one_error_line(tmp_path, capsys, name, data, message):
    from scripts import kit

    path = tmp_path / "points.json"
    path.write_text(json.dumps(data))
    code = kit.main(["plan", "--args", f"--trainer-images-per-s 900 --cpu-images-per-s 10 --points {path}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ARGS: --points"), err
    assert message in err


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "2e9"])
def test_bad_bytes_per_image_is_one_error_line(capsys, value):
    from scripts import kit

    code = kit.main(["plan", "--args", f"--trainer-images-per-s 900 --cpu-images-per-s 10 --bytes-per-image {value}"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: bytes per image:"), err


@pytest.mark.parametrize("summary,warned", [
    ({"device": "cpu", "model": "tiny"}, "warning: the profile's trainer ran on cpu (tiny), not a A10G GPU"),
    ({"device": "cuda:0", "gpu_model": "NVIDIA H100 80GB HBM3"},
     "warning: the profile's trainer ran on a NVIDIA H100 80GB HBM3, not g5.xlarge's A10G"),
    ({"device": "cuda:0", "gpu_model": "NVIDIA A10G"}, None),
    ({}, None),  # an older summary says nothing of its device: nothing to compare
])
def test_plan_warns_when_the_profile_ran_on_another_device_than_it_plans_for(tmp_path, capsys, summary, warned):
    """`make plan PROFILE=` of the demo's summary (ViT-tiny on a CPU) priced a g5.xlarge mix
    on a CPU's rate without a word."""
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"result": summary | {"diagnosis": {
        "trainer_images_per_s": 30.0, "preprocess_images_per_s_per_cpu": 10.0}}}))
    profile, _ = planner.profile_from([], str(path))
    err = capsys.readouterr().err
    assert profile.trainer_images_per_s == 30.0
    assert (err.startswith(warned) if warned else err == ""), err
    planner.profile_from(["--trainer-images-per-s", "300"], str(path))  # a rate given by hand: no warning
    assert capsys.readouterr().err == ""
