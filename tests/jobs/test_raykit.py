"""jobs/raykit, the library shipped with every job: the measuring (a process's warm-up left
out of the preprocessing cost), the diagnosis (every verdict with a remedy its own figures
give), the placement and the data settings."""

import sys
import time

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "jobs"))
from raykit import measure  # noqa: E402
from raykit.diagnosis import VERDICTS, Network, diagnose  # noqa: E402

BATCHES, ROWS = 10, 8
STAGES_MADE = []


def remedy_problems(d: dict) -> list[str]:
    """Where a diagnosis's remedy disagrees with its own figures (a test helper: every
    verdict a test meets goes through it)."""
    problems = []
    supply = d["preprocess_images_per_s_per_cpu"] * d["preprocess_cpus"]
    if d["verdict"] not in VERDICTS:
        problems.append(f"unknown verdict {d['verdict']}")
    beyond_host = d.get("host_cores") is not None and d["preprocess_cpus_needed"] > d["host_cores"]
    if d["verdict"] == "data-bound":
        if not (d["add_cpus"] > 0 and (d["add_worker_nodes"] > 0 or d["worker_type"] is None or beyond_host)):
            problems.append("data-bound, yet nothing to add")
        if beyond_host:  # a local cluster short of more cores than its machine has
            if d["add_worker_nodes"] or "min_workers" in d["text"] or \
                    f"more than this machine's {d['host_cores']} cores" not in d["text"]:
                problems.append("data-bound past the machine's cores, yet asks for local nodes")
        elif d["worker_type"] is None:  # a single mix: the node type to add, not one to raise
            if f"add {d['add_cpus']} CPUs on CPU-only nodes" not in d["text"] or " more '" in d["text"]:
                problems.append("data-bound text of a single mix does not say to add a CPU worker type")
        elif f"add {d['add_cpus']} CPUs, i.e. {d['add_worker_nodes']} more" not in d["text"]:
            problems.append("data-bound text does not name what to add")
        if supply >= d["trainer_images_per_s"]:
            problems.append("data-bound by CPU count, yet the CPUs suffice on paper")
    else:
        if d["add_cpus"] or d["add_worker_nodes"]:
            problems.append(f"{d['verdict']} asks for more CPUs")
        if " add " in d["text"] or "more '" in d["text"]:
            problems.append(f"{d['verdict']} text asks for more nodes")
    if d["verdict"] == "pipeline-bound" and supply < d["trainer_images_per_s"]:
        problems.append("pipeline-bound, yet the CPUs do not suffice")
    return problems


def images_accounted_for(summary: dict) -> int:
    """The images a summary's preprocessing cost rests on, plus those it left out as their
    process's warm-up; where every batch was a first one, it rests on them all (and says
    so): either way, every image the trainer saw."""
    if summary["preprocess_cost_includes_warmup"]:
        assert summary["preprocess_warmup_images"] == summary["preprocess_images_measured"]
        return summary["preprocess_images_measured"]
    return summary["preprocess_images_measured"] + summary["preprocess_warmup_images"]


# --- measuring: a worker process's warm-up --------------------------------------------------

def blur_rows(batch: dict) -> dict:
    """The steady per-batch work: a few numpy passes over each row."""
    images = np.random.default_rng(0).random((len(batch["id"]), 32, 32))
    for _ in range(20):
        images = (images + np.roll(images, 1, axis=1) + np.roll(images, 1, axis=2)) / 3
    return {"id": batch["id"], "image": images}


def make_slow_first_call():
    """The same work, with what a user's function does on its first call in a worker
    process: an import inside the function (here ~1 s of CPU, torch's order)."""
    imported = []

    def slow_first_call(batch: dict) -> dict:
        if not imported:
            deadline = __import__("time").thread_time() + 1.0
            while __import__("time").thread_time() < deadline:
                pass
            imported.append(True)
        return blur_rows(batch)
    # measured counts a stage's first call per process by its name: a fresh one per test
    slow_first_call.__qualname__ += f"_{len(STAGES_MADE)}"
    STAGES_MADE.append(slow_first_call)
    return slow_first_call


def profiled(fn) -> dict:
    """fn wrapped in measure.measured over BATCHES batches, fed through TrainProfile as the
    training loop would: its preprocessing figures."""
    import torch

    stage = measure.measured(fn)
    batches = [stage({"id": np.arange(i * ROWS, (i + 1) * ROWS)}) for i in range(BATCHES)]
    steps = measure.TrainProfile(torch.device("cpu"))
    for batch in steps.batches(batches):
        steps.step_done(batch)
    return {k: v for k, v in steps.metrics().items() if k.startswith("preprocess_")}


def test_the_bytes_per_image_are_what_reached_the_trainer_less_the_kits_columns():
    """What a CPU worker ships to the trainer, measured on the batches (the planner's
    network term): float32 CHW images are 4 bytes a value; the kit's columns do not count."""
    import torch

    def images(batch):
        return {"image": np.zeros((len(batch["id"]), 3, 32, 32), np.float32), "label": batch["id"]}

    stage = measure.measured(images)
    steps = measure.TrainProfile(torch.device("cpu"))
    for batch in steps.batches([stage({"id": np.arange(8)}) for _ in range(3)]):
        steps.step_done(batch)
    assert steps.metrics()["bytes_per_image"] == 3 * 32 * 32 * 4 + 8  # the image and its int64 label


def test_a_slow_first_call_leaves_the_per_image_cost_unchanged():
    steady = profiled(blur_rows)
    slow = profiled(make_slow_first_call())
    for figures in (steady, slow):
        assert figures["preprocess_images_measured"] == (BATCHES - 1) * ROWS  # what it rests on
        assert figures["preprocess_warmup_images"] == ROWS  # the process's first batch
        assert figures["preprocess_cost_includes_warmup"] is False
    # ~1 s of start-up over 80 images would be 12 ms each, some 100x the steady cost
    assert slow["preprocess_s_per_image"] == pytest.approx(steady["preprocess_s_per_image"], rel=1.0)
    assert slow["preprocess_s_per_image"] < 0.01
    all_rows = sum(slow["preprocess_cpu_s"].values()) / (BATCHES * ROWS)
    assert all_rows > 5 * slow["preprocess_s_per_image"]  # what counting every call gave


def test_warm_up_flags_carry_through_chained_stages_and_a_run_of_first_batches_says_so():
    first = measure.measured(make_slow_first_call())
    second = measure.measured(blur_rows)  # warmed up already in this process
    out = second(first({"id": np.arange(ROWS)}))
    assert out[measure.WARMUP_COLUMN].all()  # the first stage's warm-up marks the rows
    import torch

    steps = measure.TrainProfile(torch.device("cpu"))
    for batch in steps.batches([out]):
        steps.step_done(batch)
    figures = steps.metrics()
    # every batch was its process's first: the cost rests on them, and says it overstates
    assert figures["preprocess_cost_includes_warmup"] is True
    assert figures["preprocess_images_measured"] == ROWS


def test_a_raylet_is_lost_when_its_port_takes_no_connection():
    """raykit.ray_state asks each node's raylet port, where it once ran a task on each node
    (a worker process started on every node at each job's end)."""
    import socket

    from raykit.ray_state import raylet_listening

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert raylet_listening(listening.getsockname(), timeout_s=5)
        with socket.socket() as closed:  # bound, never listening: refused at once
            closed.bind(("127.0.0.1", 0))
            started = time.monotonic()
            assert not raylet_listening(closed.getsockname(), timeout_s=5)
            assert time.monotonic() - started < 4  # not the timeout


# --- the diagnosis ---------------------------------------------------------------------------

def test_diagnosis_data_bound_asks_for_more_cpu_workers():
    # trainer: 64 images in 0.1 s of compute -> 640 images/s; one CPU makes 20 images/s,
    # so 32 CPUs are needed; with 16, 16 more = 1 more c5.4xlarge-sized worker.
    d = diagnose(mean_step_s=0.2, mean_wait_s=0.1, mean_compute_s=0.1, images_per_step=64,
                 preprocess_s_per_image=0.05, preprocess_cpus=16,
                 worker_type="cpu_worker", cpus_per_worker=16)
    assert d["verdict"] == "data-bound"
    assert d["data_wait_fraction"] == pytest.approx(0.5)
    assert d["trainer_images_per_s"] == pytest.approx(640)
    assert (d["preprocess_cpus_needed"], d["add_cpus"], d["add_worker_nodes"]) == (32, 16, 1)
    assert "DATA-BOUND" in d["text"] and "1 more 'cpu_worker'" in d["text"]
    # min_workers above max_workers is refused (`make validate`): the remedy says to raise both
    assert "raise its min_workers in the values file, and max_workers to at least that" in d["text"]
    assert remedy_problems(d) == []


def test_diagnosis_of_a_single_mix_says_to_add_a_cpu_worker_type_not_to_raise_one():
    # local_gpu_single on a lent H100: a 4-CPU GPU head that preprocesses on 3, no worker
    # type. It once read "add 21 CPUs, i.e. 21 more 'CPU worker' node(s) of 1 CPUs (raise
    # its min_workers in the values file)": a type the values file does not have.
    d = diagnose(mean_step_s=0.393, mean_wait_s=0.342, mean_compute_s=0.051, images_per_step=16,
                 preprocess_s_per_image=0.0906, preprocess_cpus=3, worker_type=None,
                 cpus_per_worker=0, gpu_busy=0.12, on_gpu=True, steps=200)
    assert d["verdict"] == "data-bound"
    assert (d["preprocess_cpus_needed"], d["add_cpus"], d["add_worker_nodes"]) == (29, 26, 0)
    assert "no CPU worker node type, so add one" in d["text"] and "role: preprocess" in d["text"]
    assert "min_workers" not in d["text"]
    assert remedy_problems(d) == []


# local_gpu_hetero on the lent H200 (issue 43): 0.084 s a step, 0.034 of it waiting, 16
# images; 12 preprocessing CPUs at 12.8 images/s each, on a 16-core machine
GPU_HETERO_RUN = dict(mean_step_s=0.084, mean_wait_s=0.034, mean_compute_s=0.051, images_per_step=16,
                      preprocess_s_per_image=1 / 12.8, preprocess_cpus=12, worker_type="cpu_worker",
                      cpus_per_worker=12, gpu_busy=0.11, on_gpu=True, steps=400)


def test_a_local_cluster_short_of_more_cpus_than_its_machine_has_is_not_told_to_add_local_nodes():
    # It once read "add 13 CPUs, i.e. 2 more 'cpu_worker' node(s) of 12 CPUs": 36 CPUs of
    # nodes on a 16-core machine, where they would only share the same cores
    local = diagnose(**GPU_HETERO_RUN, host_cores=16)
    assert local["verdict"] == "data-bound" and (local["preprocess_cpus_needed"], local["add_cpus"]) == (25, 13)
    assert local["add_worker_nodes"] == 0 and local["host_cores"] == 16
    assert "more than this machine's 16 cores" in local["text"] and "make plan PROFILE=" in local["text"]
    assert "min_workers" not in local["text"]
    # the same figures on a cloud, or on a machine with the cores: nodes of the worker type
    for d in (diagnose(**GPU_HETERO_RUN), diagnose(**GPU_HETERO_RUN, host_cores=32)):
        assert d["add_worker_nodes"] == 2 and "2 more 'cpu_worker' node(s) of 12 CPUs" in d["text"]
        assert "this machine" not in d["text"]
    for d in (local, diagnose(**GPU_HETERO_RUN), diagnose(**GPU_HETERO_RUN, host_cores=32)):
        assert remedy_problems(d) == []


# The template job, run as its README says, before this verdict existed: "DATA-BOUND ...
# needs ~2 preprocessing CPUs (has 2): add 0 CPUs, i.e. 0 more 'cpu_worker' node(s)".
TEMPLATE_RUN = dict(mean_step_s=0.0181, mean_wait_s=0.0029, mean_compute_s=0.01516,
                    images_per_step=16, preprocess_s_per_image=1 / 580.8, preprocess_cpus=2,
                    worker_type="cpu_worker", cpus_per_worker=1)


@pytest.mark.parametrize("steps,max_wait_s,points_to", [
    (10, 0.01, "The run is short (10 measured steps)"),
    (100, 0.2, "one stall of 0.20 s"),
    (100, 0.004, "prefetch deeper"),
])
def test_diagnosis_waiting_while_the_cpus_suffice_points_at_the_pipeline_not_more_nodes(
        steps, max_wait_s, points_to):
    d = diagnose(**TEMPLATE_RUN, steps=steps, max_wait_s=max_wait_s)
    assert d["data_wait_fraction"] == pytest.approx(0.16, abs=0.01)
    assert d["preprocess_cpus_needed"] == 2  # it has 2: the count is not the problem
    assert d["verdict"] == "pipeline-bound" and (d["add_cpus"], d["add_worker_nodes"]) == (0, 0)
    assert "more CPU nodes would not help" in d["text"] and points_to in d["text"]
    assert remedy_problems(d) == []


def test_diagnosis_waiting_with_no_measured_stage_says_to_measure():
    d = diagnose(**dict(TEMPLATE_RUN, preprocess_s_per_image=0.0), steps=100, max_wait_s=0.01)
    assert d["verdict"] == "data-bound-unmeasured" and d["add_cpus"] == 0
    assert "measure.measured" in d["text"]
    assert remedy_problems(d) == []


def test_diagnosis_compute_bound():
    d = diagnose(mean_step_s=1.0, mean_wait_s=0.01, mean_compute_s=0.99, images_per_step=16,
                 preprocess_s_per_image=0.05, preprocess_cpus=4,
                 worker_type="cpu_worker", cpus_per_worker=16)
    assert d["verdict"] == "compute-bound" and d["add_cpus"] == 0
    assert "COMPUTE-BOUND" in d["text"]
    assert remedy_problems(d) == []


def test_surplus_preprocess_nodes_are_named_with_the_fix():
    """The README's demo: workers that could deliver twice what the trainer takes were
    only told 'more CPU workers would not help'. Whole worker nodes past the need (and a
    tenth to spare) are named, with the fix; a short run, or one near its need, names none."""
    args = dict(mean_step_s=0.1, mean_wait_s=0.001, mean_compute_s=0.099, images_per_step=8,
                preprocess_s_per_image=0.1, worker_type="cpu_worker", cpus_per_worker=1)
    # the trainer takes ~81 images/s, a CPU makes 10: 9 CPUs kept (with a tenth to spare)
    d = diagnose(**args, preprocess_cpus=20)
    assert d["verdict"] == "compute-bound" and d["surplus_worker_nodes"] == 11
    assert ("~9 would do: 11 'cpu_worker' node(s) of 1 CPUs are surplus (lower its min_workers by 11"
            in d["text"])
    assert diagnose(**args, preprocess_cpus=9)["surplus_worker_nodes"] == 0
    assert diagnose(**args, preprocess_cpus=20, steps_needed=40)["surplus_worker_nodes"] == 0
    assert "surplus" not in diagnose(**args, preprocess_cpus=9)["text"]


def test_diagnosis_a_gpu_seldom_busy_without_waiting_for_data_is_host_bound():
    # what a lent H200 showed: ViT-base, 64 images a step, no data wait, the GPU 19% busy
    args = dict(mean_step_s=0.185, mean_wait_s=0.001, mean_compute_s=0.184, images_per_step=64,
                preprocess_s_per_image=0.02, preprocess_cpus=14, worker_type="cpu_worker",
                cpus_per_worker=16)
    d = diagnose(**args, gpu_busy=0.19)
    assert d["verdict"] == "trainer-host-bound" and d["add_cpus"] == 0
    assert "GPU was busy only 19%" in d["text"] and "nor a faster GPU would help" in d["text"]
    assert diagnose(**args, gpu_busy=0.9)["verdict"] == "compute-bound"  # the GPU is the limit
    # waiting for data: never host-bound, whatever the GPU (14 CPUs x 50 images/s feed its
    # 348 images/s on paper: the pipeline, not the CPU count)
    waiting = dict(args, mean_wait_s=0.1)
    assert diagnose(**waiting, gpu_busy=0.19)["verdict"] == "pipeline-bound"


def test_a_compute_bound_mix_of_train_nodes_is_told_to_add_train_nodes_of_its_type():
    args = dict(mean_step_s=0.5, mean_wait_s=0.0, mean_compute_s=0.5, images_per_step=64,
                preprocess_s_per_image=0.01, preprocess_cpus=30, worker_type="cpu_worker",
                cpus_per_worker=15, gpu_busy=0.95, on_gpu=True)
    several = diagnose(**args, train_type="gpu_worker")
    assert several["verdict"] == "compute-bound" and several["add_cpus"] == 0
    assert "more 'gpu_worker' train nodes would (raise its min_workers" in several["text"]
    assert "--train-nodes N" in several["text"]
    assert "train nodes" not in diagnose(**args)["text"]  # a GPU head: a faster GPU, or more


def test_diagnosis_on_a_gpu_without_nvml_says_it_cannot_tell_instead_of_compute_bound():
    args = dict(mean_step_s=0.185, mean_wait_s=0.001, mean_compute_s=0.184, images_per_step=64,
                preprocess_s_per_image=0.02, preprocess_cpus=14, worker_type="cpu_worker",
                cpus_per_worker=16)
    d = diagnose(**args, gpu_busy=None, on_gpu=True)
    assert d["verdict"] == "not-data-bound" and d["add_cpus"] == 0
    assert "could not be read (NVML)" in d["text"] and "faster GPU would" not in d["text"]
    assert diagnose(**args, gpu_busy=None)["verdict"] == "compute-bound"  # a CPU trainer


# the train node's link carries 100 images/s, and every image crossed it at 1000 a second
FULL_LINK = Network(images_per_s=1000.0, remote_share=1.0, carried_images_per_s=100.0, bytes_per_image=1e6)


def test_no_verdict_disagrees_with_its_remedy_over_a_grid_of_figures():
    """Every combination of wait, compute, per-image cost, CPUs and GPU busy: each verdict
    is met, and none comes with a remedy its own figures contradict."""
    seen = set()
    for wait in (0.0, 0.01, 0.05, 0.3):
        for compute in (0.01, 0.1, 1.0):
            for per_image in (0.0, 0.001, 0.01, 0.1):
                for cpus in (1, 2, 16, 64):
                    for gpu in (None, 0.2, 0.9):
                        for steps, network in ((5, None), (200, None), (200, FULL_LINK)):
                            d = diagnose(mean_step_s=wait + compute, mean_wait_s=wait,
                                         mean_compute_s=compute, images_per_step=32,
                                         preprocess_s_per_image=per_image, preprocess_cpus=cpus,
                                         worker_type="w", cpus_per_worker=4, gpu_busy=gpu,
                                         on_gpu=gpu is not None or compute == 1.0,
                                         steps=steps, max_wait_s=wait, network=network)
                            assert remedy_problems(d) == [], d
                            seen.add(d["verdict"])
    assert seen == set(VERDICTS)


@pytest.mark.parametrize("gpus,resources", [(0, {"CPU": 1}), (2, {"CPU": 1, "GPU": 1})])
def test_each_training_worker_holds_the_cpu_the_kit_keeps_for_it(gpus, resources):
    """Ray Train's default gives a GPU worker no CPU, and Ray Data then took the CPU the kit
    keeps for each training worker (on a lent H100: 4 preprocessing tasks on a head whose
    summary counted 3). Ray schedules each worker with these resources."""
    from raykit import cluster

    selector = {"ray-subcluster": "train"}
    config = cluster.scaling_config({"gpus": gpus, "train_selector": selector}, 2)
    assert config._resources_per_worker_not_none == resources
    assert config.total_resources == {k: 2 * v for k, v in resources.items()}
    assert config.num_workers == 2 and config.use_gpu == (gpus > 0) and config.label_selector == selector


def test_a_dataset_made_before_configure_data_keeps_the_kits_data_settings():
    """raykit's calls in another natural order: the dataset first, configure_data() after
    (inside its DataConfig). A Dataset copies the DataContext when made: without the
    settings applied at raykit.cluster's import it kept progress bars on (~500 lines in
    `make run`) and no paced loop."""
    import subprocess
    import sys

    script = ("import ray.data\n"
              "from raykit import cluster, feed\n"
              "ds = ray.data.range(4)\n"
              "shape = {'data_selector': {'ray-subcluster': 'preprocess'}}\n"
              "options = cluster.configure_data(shape)\n"
              "ctx = ds.context\n"
              "print(ctx.enable_progress_bars, feed.PacedLoop in ctx.custom_execution_callback_classes,\n"
              "      options.label_selector)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(REPO / "jobs")})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[0] == "False True {'ray-subcluster': 'preprocess'}"


def test_the_gauges_figures_are_the_step_logs_window_and_the_nodes_prices():
    """raykit.gauges: the wait share, images/s and mean step of the steps that ended in the
    last 30 s (the same measures the autopilot reads), and the $/h of the alive nodes by
    their type label (None where one has no price)."""
    from raykit.gauges import step_figures, usd_per_hour
    from raykit.placement import NODE_TYPE

    steps = [(5.0, 1.0, 1.0, 16), (40.0, 1.0, 0.25, 16), (41.0, 1.0, 0.5, 16)]  # the first left the window
    assert step_figures(steps, now=41.0) == {"raykit_data_wait_share": 0.375, "raykit_images_per_second": 16.0,
                                             "raykit_step_seconds": 1.0}
    assert step_figures(steps, now=100.0) is None
    head = {"Alive": True, "Labels": {}, "Resources": {"node:__internal_head__": 1.0}}
    worker = {"Alive": True, "Labels": {NODE_TYPE: "cpu_worker"}, "Resources": {}}
    gone = worker | {"Alive": False}
    assert usd_per_hour([head, worker, worker, gone], {"head": 1.0, "cpu_worker": 0.5}) == 2.0
    assert usd_per_hour([head, worker], {"head": 1.0}) is None
