"""jobs/vit_synthetic: units (data, transform, diagnosis, flags) and a real run."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, kept_summary, make

sys.path[:0] = [str(REPO / "jobs" / "vit_synthetic"), str(REPO / "jobs")]
from raykit.diagnosis import DATA_BOUND_WAIT_FRACTION  # noqa: E402
from main import parse_args  # noqa: E402
from pipeline import Preprocess, build_transform, decode_images, make_images  # noqa: E402
from raykit.measure import GpuUtilization, measured  # noqa: E402
from raykit.summary import warnings_of  # noqa: E402
from test_raykit import images_accounted_for, remedy_problems  # noqa: E402
from scripts.benchmarks.bench_data import group_of  # noqa: E402


def test_synthetic_images_shape_dtype_and_reproducibility():
    batch = make_images({"id": np.arange(8, 12)}, image_size=64)
    assert batch["image"].shape == (4, 64, 64, 3) and batch["image"].dtype == np.uint8
    assert batch["label"].shape == (4,) and batch["label"].dtype == np.int64
    assert 0 <= batch["label"].min() and batch["label"].max() < 1000
    again = make_images({"id": np.arange(8, 12)}, image_size=64)
    assert np.array_equal(batch["image"], again["image"])


def test_transform_gives_chw_float_and_blurs():
    image = make_images({"id": np.arange(1)}, image_size=32)["image"][0]
    plain = build_transform(0, 11)(image)
    blurred = build_transform(3, 11)(image)
    assert plain.shape == blurred.shape == (3, 32, 32)
    assert str(blurred.dtype) == "torch.float32" and 0 <= float(blurred.min()) <= float(blurred.max()) <= 1
    assert float(blurred.std()) < float(plain.std())  # blurring smooths random noise


def test_the_images_ship_as_uint8_and_a_load_that_drops_mid_run_lightens_later_records():
    """The job ships uint8 (a quarter of float32's bytes) and the trainer scales it back;
    with light_from, records from it on get one blur pass instead of blur_count."""
    import torch

    from pipeline import normalize_on_device

    batch = make_images({"id": np.arange(0, 4)}, image_size=32)
    heavy = Preprocess(4, 11, ship="float32")

    def run(stage):  # GaussianBlur draws its sigma at random: the same draws for each
        torch.manual_seed(0)
        return stage(dict(batch))["image"]

    changing = run(Preprocess(4, 11, ship="float32", heavy=((0, 2),)))
    assert np.array_equal(changing[:2], run(heavy)[:2])  # records 0-1: the heavy load
    assert changing[2:].std() > run(heavy)[2:].std()     # after them: one pass, less smoothed
    middle = run(Preprocess(4, 11, ship="float32", heavy=((1, 3),)))  # light, heavy, heavy, light
    assert max(middle[1].std(), middle[2].std()) < min(middle[0].std(), middle[3].std())  # 4 passes smooth more
    shipped = run(Preprocess(4, 11))
    assert shipped.dtype == np.uint8 and shipped.nbytes * 4 == run(heavy).nbytes
    scaled = normalize_on_device(torch.from_numpy(shipped))
    assert scaled.dtype == torch.float32
    assert float((scaled - torch.from_numpy(run(heavy))).abs().max()) <= 0.5 / 255 + 1e-6  # rounding only


def test_measured_stages_record_node_and_add_up_their_cpu_time():
    images = measured(make_images)({"id": np.arange(3)}, image_size=32)
    out = measured(Preprocess(blur_count=1, blur_kernel=3))(images)
    assert out["image"].shape == (3, 3, 32, 32) and out["image"].dtype == np.uint8  # shipped as uint8
    assert len(out["node"]) == 3 and len(out["label"]) == 3
    assert (images["preprocess_cpu_s"] > 0).all()  # generating counts as reading
    assert (out["preprocess_cpu_s"] > images["preprocess_cpu_s"]).all()  # plus the transforms


def test_image_files_decode_to_rgb_at_the_model_size_with_labels_from_their_folder():
    import io

    from PIL import Image

    def encoded(fmt: str, mode: str, size: int) -> bytes:
        out = io.BytesIO()
        Image.new(mode, (size, size), 128).save(out, fmt)
        return out.getvalue()

    batch = {"bytes": [encoded("JPEG", "RGB", 40), encoded("PNG", "L", 32), encoded("PNG", "RGBA", 32)],
             "path": ["/d/7/a.jpg", "bucket/cats/b.png", "/d/1007/c.png"]}
    out = decode_images(batch, image_size=32)
    assert out["image"].shape == (3, 32, 32, 3) and out["image"].dtype == np.uint8
    assert out["label"][0] == 7 and out["label"][2] == 7  # class folders, modulo 1000
    assert 0 <= out["label"][1] < 1000


def test_a_gpu_utilization_that_cannot_be_read_is_a_warning_not_a_dead_thread():
    """On this machine NVML has no GPU to read: the sampler keeps the error, stops, and the
    summary carries one warning line naming it and the fix."""
    import torch

    sampler = GpuUtilization(torch.device("cuda:0"))
    sampler.thread.join(timeout=10)
    assert not sampler.thread.is_alive() and sampler.error
    assert sampler.stop() is None
    (warning,) = warnings_of({"gpu_utilization_error": sampler.error})
    assert "GPU's utilization is missing" in warning and "nvidia-ml-py" in warning
    assert warnings_of({"gpu_utilization_error": None}) == []


def test_phases_set_the_steps_and_the_heavy_steps():
    args = parse_args(["--phases", "light:30,heavy:60,light:30"])
    assert args.steps == 120 and args.heavy == ((30, 90),)
    assert parse_args(["--light-after-steps", "40"]).heavy == ((0, 40),)
    assert parse_args([]).heavy is None


@pytest.mark.parametrize("flags,message", [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--image-size", "100"], "--image-size must be a multiple of the ViT patch size 16"),
    (["--blur-kernel", "4"], "--blur-kernel must be odd"),
    (["--blur-count", "99"], "--blur-count must be between 0 and 50"),
    (["--workers", "-1"], "--workers must be 0 (auto) or more"),
    (["--checkpoint-every", "-5"], "--checkpoint-every must be 0 or more"),
    (["--max-failures", "-1"], "--max-failures must be 0 or more"),
    (["--model", "huge"], "invalid choice: 'huge'"),
    (["--light-after-steps", "-1"], "--light-after-steps must be 0 (off) or a step of a synthetic run"),
    (["--light-after-steps", "5", "--data", "/tmp/images"], "(got 5 with --data)"),
    (["--phases", "light:10,medium:5"], "--phases must be light:N or heavy:N parts"),
    (["--phases", "heavy:0"], "--phases must be light:N or heavy:N parts"),
    (["--phases", "light:5,heavy:5", "--light-after-steps", "3"], "--phases goes alone with synthetic images"),
])
def test_bad_flags_are_refused_before_ray_starts(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(flags)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.fixture
def cluster(shared_local_cluster):
    return shared_local_cluster[0]


@pytest.mark.alone  # both workers at work within 5 s of the job's start
def test_job_trains_on_head_and_preprocesses_on_workers(shared_local_cluster, tmp_path):
    cluster, record = shared_local_cluster
    results, storage = tmp_path / "summary.json", tmp_path / "storage"
    args = f"--steps 6 --batch-size 8 --image-size 64 --log-every 2 --storage-path {storage} --name demo"
    run = make("submit", "CLUSTER=local", "JOB=vit_synthetic", f"ARGS={args} --results {results}",
               env=cluster, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:]
    summary = json.loads(results.read_text())
    printed = kept_summary(run.stdout)
    assert printed == summary
    assert summary["steps"] == 6 and summary["workers"] == 1
    assert summary["trainer_node"] == "127.0.0.2"  # the head, holder of the trainer slot
    # the CPU workers preprocess, never the head. Which of them: the run's 2 tasks take
    # ~0.1 s each and wait for the CPUs the warm-up holds; a worker whose warm-up ends a
    # moment sooner may take both (seen on fresh clusters, before and after 2026-11-29)
    assert set(summary["preprocess_nodes"]) <= {"127.0.0.3", "127.0.0.4"} and summary["preprocess_nodes"]
    assert sum(summary["preprocess_nodes"].values()) == 6 * 8
    # the data path (issue 43): the workers at work by the first batch; the start-up
    # timed from the training function; 6 steps are too few for a steady state, said so
    assert set(summary["preprocess_node_start_s"]) == set(summary["preprocess_nodes"])
    assert max(summary["preprocess_node_start_s"].values()) <= 5
    run_ = summary["steady"]
    assert 0 < summary["first_step_s"] == run_["first_step_s"] < summary["first_step_after_fit_s"]
    assert not run_["steady"] and run_["steps_needed"] >= 1 + 2 * 10 and summary["ramp_s"] is None
    assert run_["wait_p50_s"] <= run_["wait_p95_s"] <= summary["max_data_wait_s"]
    assert f"run at least {run_['steps_needed']} steps (--steps)" in run.stdout.replace("\n" + " " * 17, " ")
    # Ray Data's first tasks ran in the processes the job warmed while Train started, and
    # Ray's AutoscalingCoordinator was up before Train's controller asked it
    tasks = job_tasks(record, summary_id(run.stdout))
    assert warmed_and_used(tasks)
    assert len({t.node_id for t in tasks if t.name == "_warm"}) == 2  # both workers warmed at the start
    assert coordinator_ready_before_train_asked(record, tasks)
    assert stats_actor_started_before_the_pipeline(record, tasks)
    # no node lost, and asking each raylet at the end started no task (a probe task pinned
    # to each node started a worker process on every node)
    assert summary["lost_nodes"] == [] and summary["preempted_nodes"] == []
    assert not [t.name for t in tasks if t.name == "here"]
    assert 0 < summary["mean_data_wait_s"] <= summary["mean_step_s"]
    assert summary["images_per_s"] == pytest.approx(8 / summary["mean_step_s"])
    assert 0 <= summary["data_wait_fraction"] < 1
    # the verdict follows from the job's own measured figures, its remedy too
    assert (summary["diagnosis"]["verdict"] in ("data-bound", "pipeline-bound")) == (
        summary["data_wait_fraction"] > DATA_BOUND_WAIT_FRACTION)
    assert remedy_problems(summary["diagnosis"]) == []
    # the per-image cost rests on the images after each worker process's first batch
    assert images_accounted_for(summary) == 6 * 8
    assert "ms CPU per image over" in run.stdout
    assert "=== vit_synthetic summary ===" in run.stdout
    # quiet: the job's lines and the kit's; no Ray INFO line, no deprecation warning
    # (placement is by label: no exclude_resources), no internal core_worker line
    for noise in (" INFO ", "deprecated", "core_worker.cc", "Running entrypoint"):
        assert noise not in run.stdout + run.stderr, noise
    # progress: steps done, rate and time left, each line once (Ray Train printed it twice)
    progress = [line for line in run.stdout.splitlines() if "step 4/6:" in line]
    assert len(progress) == 1 and " images/s, ~" in progress[0] and " s left, loss " in progress[0]
    # CPU use per node type: the head trains, the two workers preprocess
    use = summary["cpu_use_by_node_type"]
    assert {t: row["nodes"] for t, row in use.items()} == {"head": 1, "cpu_worker": 2}
    assert use["cpu_worker"]["busy_cpu_s"] > 0 and use["head"]["busy_cpu_s"] > 0
    assert all(0 < row["utilization"] <= 1 for row in use.values())
    assert summary["trainer_utilization_source"] == "busy share"  # no GPU here
    assert summary["trainer_utilization"] == pytest.approx(1 - summary["data_wait_fraction"])
    assert summary["preprocess_shares_trainer_cpus"] is False
    assert summary["host_cores"] == os.cpu_count()  # a local cluster: every node on this machine
    # the run's bill: every node's time while it ran, priced as local.yaml's prices_as (hetero)
    held = summary["node_seconds"]
    assert set(held) == {"head", "cpu_worker"}
    assert held["cpu_worker"] == pytest.approx(2 * held["head"], rel=0.2)  # two workers, one head
    assert held["head"] <= summary["wall_s"] + 1
    bill = summary["bill"]
    assert bill["priced_as"].startswith("as hetero, on-demand list prices") and bill["unpriced"] == []
    assert bill["usd"] == pytest.approx(sum(row["node_seconds"] / 3600 * row["usd_per_hour"]
                                            for row in bill["by_type"].values()))
    shown = run.stdout.replace("\n" + " " * 17, " ")  # the table's wrapped rows, joined
    assert (f"job's cost       ${bill['usd']:.4f} for the nodes' time while the job ran (cpu_worker "
            f"{held['cpu_worker']:.0f} s, head {held['head']:.0f} s; as hetero, ") in shown

    # the final model is kept in the run's folder, <storage>/<name>
    import torch

    assert summary["outputs"]["run_folder"] == f"{storage}/demo"
    assert set(torch.load(summary["outputs"]["model"], weights_only=True)) >= {"cls_token", "pos_embed"}
    # submitted again on its --storage-path and --name, the finished run trains nothing: Ray Train
    # hands the workers its last checkpoint, the summary, and the job reports it again
    # (as after a train node lost between the last report and the run's end)
    again = tmp_path / "again.json"
    rerun = make("submit", "CLUSTER=local", "JOB=vit_synthetic", f"ARGS={args} --results {again}",
                 env=cluster, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert ("restart 1: the run had finished (step 6); its summary is reported again, "
            "nothing trained") in rerun.stdout
    assert not re.search(r"step \d/6:", rerun.stdout), rerun.stdout[-4000:]
    second = json.loads(again.read_text())
    assert second["restarts"] == 1 and second["first_step_after_fit_s"] is None
    measured = ("steps", "images_per_s", "mean_step_s", "preprocess_nodes", "final_loss")
    assert {k: second[k] for k in measured} == {k: summary[k] for k in measured}


def summary_id(output: str) -> str:
    (found,) = re.findall(r"^summary kept in \S+/(\S+)\.json$", output, re.M)
    return found


def job_tasks(record: dict, submission_id: str) -> list:
    """The job's tasks and actor creations in Ray's task table, with their events."""
    from ray.util.state import list_jobs, list_tasks

    from scripts.core.ray_cli import use_auth_in_this_process

    use_auth_in_this_process(record["auth_token"])
    (job,) = [j for j in list_jobs(address=record["dashboard_url"]) if j.submission_id == submission_id]
    return list_tasks(address=record["dashboard_url"], filters=[("job_id", "=", job.job_id)],
                      detail=True, limit=10_000, raise_on_missing_output=False)


def coordinator_ready_before_train_asked(record: dict, tasks: list) -> bool:
    """Where this job created Ray's AutoscalingCoordinator (a detached actor: on the shared
    cluster only the first job does), it was up before Ray Train's controller sent its first
    resource request (raykit.cluster.start_autoscaling_coordinator); Train's own creation
    of it left the request waiting on the actor's start, 5 s at most, then given up. (An
    actor's tasks count in the job that created the actor, so a coordinator an earlier job
    started shows none of this job's requests: nothing to check then. Run alone, or first
    on the cluster, as `make test-changed` does, the test checks it.)"""
    from ray.util.state import list_actors

    def at(task, state):
        return min(e["created_ms"] for e in task.events if e["state"] == state)

    (actor,) = list_actors(address=record["dashboard_url"],
                           filters=[("class_name", "=", "_AutoscalingCoordinatorActor")])
    if actor.job_id != tasks[0].job_id:
        return True  # an earlier job on this cluster started it
    asks = [t for t in tasks if t.name.endswith("_AutoscalingCoordinatorActor.request_resources")]
    assert asks, "Ray Train's controller sent no resource request"
    (init,) = [t for t in tasks if t.name.endswith("_AutoscalingCoordinatorActor.__init__")]
    return at(init, "FINISHED") <= min(at(t, "PENDING_ARGS_AVAIL") for t in asks)


def stats_actor_started_before_the_pipeline(record: dict, tasks: list) -> bool:
    """Where this job created Ray Data's stats actor (detached, as the coordinator above),
    the job's driver created it (raykit.cluster.start_data_stats_actor) before Ray Data's
    SplitCoordinator began the pipeline's first epoch, whose executor created it otherwise."""
    from ray.util.state import list_actors

    (actor,) = list_actors(address=record["dashboard_url"], filters=[("class_name", "=", "_StatsActor")])
    if actor.job_id != tasks[0].job_id:
        return True  # an earlier job on this cluster started it
    (init,) = [t for t in tasks if t.name.endswith("_StatsActor.__init__")]
    (epoch,) = [t for t in tasks if t.name.endswith("SplitCoordinator.start_epoch")]
    created = min(e["created_ms"] for e in init.events)
    return created < min(e["created_ms"] for e in epoch.events)


def warmed_and_used(tasks: list) -> bool:
    """Every preprocessing task of the job ran in a worker process a warm-up task
    (raykit.cluster.warm_up) started, by Ray's task table."""
    warmed = {t.worker_pid for t in tasks if t.name == "_warm"}
    used = {t.worker_pid for t in tasks if "MapBatches" in t.name}
    assert warmed and used, (warmed, used)
    return used <= warmed


def test_a_bad_flag_is_refused_before_the_job_is_submitted(cluster):
    """The job's own parser runs on this machine first: nothing is uploaded or started."""
    run = make("submit", "CLUSTER=local", "JOB=vit_synthetic", "ARGS=--blur-kernel 4",
               env=cluster, timeout=300)
    assert run.returncode == 2
    assert run.stderr.startswith("error: ARGS: main.py: error: ") and "--blur-kernel must be odd" in run.stderr
    assert "job vit_synthetic-" not in run.stdout  # never submitted


def test_bench_wait_uses_the_running_cluster_and_reports_both_cases(cluster):
    from scripts.benchmarks.bench_wait import TARGET_MAX_WAIT_S, TARGET_WAIT_FRACTION

    run = subprocess.run([sys.executable, "-m", "scripts.benchmarks.bench_wait", "--cluster", "local",
                          "--steps", "4"], cwd=REPO, env=cluster, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:]
    assert "tearing down" not in run.stdout and "processes stopped" not in run.stdout
    rows = {m.group(1): m for m in re.finditer(
        r"^  (\S+) +step [\d.]+ s, waiting [\d.]+ s = ([\d.]+)%, longest wait ([\d.]+) s, "
        r"[\d.]+ images/s  (met|NOT met)$", run.stdout, re.M)}
    assert set(rows) == {"224px", "64px"}, run.stdout[-2000:]
    for row in rows.values():  # the verdict printed is the one its own figures give...
        below = [side_of(float(row.group(2)) / 100, TARGET_WAIT_FRACTION, 0.0005),
                 side_of(float(row.group(3)), TARGET_MAX_WAIT_S, 0.0005)]
        if False in below:
            assert row.group(4) == "NOT met", row.group(0)
        elif all(below):
            assert row.group(4) == "met", row.group(0)
        # ...unless a figure rounds onto its target, where either verdict is right
    assert make("status", "CLUSTER=local", env=cluster, timeout=120).returncode == 0  # still up


def side_of(printed: float, target: float, half_unit: float):
    """True if a figure printed to within half_unit was below target, False if it was not,
    None if its rounding hides which."""
    if printed + half_unit < target:
        return True
    if printed - half_unit >= target:
        return False
    return None


def test_side_of_a_rounded_figure():
    assert side_of(0.012, 0.05, 0.0005) is True and side_of(0.061, 0.05, 0.0005) is False
    assert side_of(0.050, 0.05, 0.0005) is None and side_of(1.000, 1.0, 0.0005) is None


def test_bench_data_counts_only_the_pipelines_workers_as_workers():
    """Ray titles its agents and Ray Data's actors ray::... as it does the workers: they
    once counted as the transform's share of the cores (titles as psutil reads them)."""
    assert group_of(["ray::IDLE", "", ""]) == "workers"
    assert group_of(["ray::ReadRange->MapBatches(make_images+Preprocess)"]) == "workers"
    for title in ("ray::_StatsActor.update_execution_metrics", "ray::_AutoscalingCoordinatorActor",
                  "ray::DashboardAgent", "ray::RuntimeEnvAgent", "/venv/bin/python", ""):
        assert group_of([title]) == "daemons", title
    assert group_of([]) == "daemons"


def test_make_bench_data_takes_its_flags_from_args():
    """`make bench-data ARGS=...` reaches the bench's flags (it once ran its defaults, ~10
    minutes at 16 cores, whatever ARGS said); a bad value is refused before anything runs."""
    run = make("bench-data", "ARGS=--rounds 0", timeout=120)
    assert run.returncode == 2 and run.stderr.startswith("error: ARGS: --rounds must be at least 1 (got 0)\n"), run.stderr
    run = make("bench-data", "ARGS=--help", timeout=120)
    assert run.returncode == 0 and "--waves WAVES" in run.stdout
    run = make("bench-data", "ARGS=--rounds '3", timeout=120)
    assert run.returncode == 2 and run.stderr.startswith("error: ARGS=") and "Traceback" not in run.stderr


@pytest.mark.parametrize("flags,said", [
    (["--batch-size", "0"], "--batch-size must be at least 1 (got 0)"),
    (["--image-size", "0"], "--image-size must be at least 1 (got 0)"),
    (["--image-size", "100000"], "--image-size must be a multiple of the ViT patch size 16, at most 1024"),
    (["--blur-kernel", "4"], "--blur-kernel must be odd (got 4)"),
    (["--blur-count", "-1"], "--blur-count must be between 0 and 50 (got -1)"),
    (["--images", "17"], "--images must be 0 (by --waves) or a positive multiple of --batch-size"),
    (["--rounds", "x"], "argument --rounds: invalid int value: 'x'; see `make bench-data ARGS=--help`"),
    (["--round", "3", "--wat"], "unrecognized arguments: --wat"),
])
def test_bench_data_refuses_what_the_job_refuses_in_one_line(capsys, flags, said):
    """Before anything starts: argparse's usage dump, a ZeroDivisionError and pipelines
    the ViT job itself would refuse all reached the bench."""
    from scripts.benchmarks import bench_data

    assert bench_data.main(flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ARGS: ") and err.count("\n") == 1 and said in err, err


def test_bench_data_prints_all_three_rates_both_ratios_and_the_bytes_before_and_after():
    run = subprocess.run([sys.executable, "-m", "scripts.benchmarks.bench_data", "--images", "32",
                          "--rounds", "2", "--image-size", "32", "--blur-count", "1",
                          "--batches-per-task", "2"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    rates = [float(m) for m in re.findall(r"^\([abc]\) .* ([\d.]+) images/s \(median of the warm rounds\)$",
                                          run.stdout, re.M)]
    assert len(rates) == 3 and all(rate > 0 for rate in rates)
    assert len([line for line in run.stdout.splitlines() if line.startswith("round ")]) == 2
    (cold,) = re.findall(r"^cold round: a ([\d.]+)  b ([\d.]+)  c ([\d.]+)  d ([\d.]+)  \(fresh", run.stdout, re.M)
    assert all(float(rate) > 0 for rate in cold)  # the cold round apart, before the two warm ones
    assert re.search(r"^b/a = [\d.]+ \(target >= 0\.97\)   b/c = [\d.]+ \(target >= 1\.00\)   cold: "
                     r"b/a = [\d.]+, b/c = [\d.]+$", run.stdout, re.M), run.stdout[-2000:]
    # before/after in one run: float32 images, then the uint8 the job ships (and its int64 label)
    (shipped,) = re.findall(r"^bytes per image the trainer receives: \(d\) float32 before ([\d,]+), "
                            r"\(b\) uint8 after ([\d,]+) \(([\d.]+)x fewer\); images/s \(d\) ([\d.]+), "
                            r"\(b\) ([\d.]+) \(b/d = ([\d.]+)\)$", run.stdout, re.M)
    assert shipped[:3] == ("12,296", "3,080", "4.0") and float(shipped[3]) > 0 and float(shipped[4]) > 0
    (tasks,) = re.findall(r"^Ray Data tasks: (\d+) of 32 images, mean ([\d.]+) s CPU each$",
                          run.stdout, re.M)
    assert int(tasks[0]) == 2 * 32 // 32 and float(tasks[1]) > 0  # 2 rounds of 32 images
    (shares,) = re.findall(r"^the cores' time during \(b\): Ray workers ([\d.]+)%, driver "
                           r"([\d.]+)%, Ray daemons and actors ([\d.]+)%, idle ([\d.]+)%$", run.stdout, re.M)
    shares = [float(share) for share in shares]
    # the workers and the driver were seen working; Ray's daemons may take under one clock
    # tick (10 ms) of CPU in so short a run, so 0.0% is a measure, not a missing group
    assert shares[0] > 0 and shares[1] > 0 and shares[2] >= 0 and sum(shares) >= 99
    assert 99 <= sum(shares) <= 101 or shares[3] == 0  # the four add up (idle is what is left)
    assert re.search(r"^b/a on the \d+% of the cores Ray's own processes leave = [\d.]+$",
                     run.stdout, re.M)
