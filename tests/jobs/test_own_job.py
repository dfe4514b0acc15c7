"""A user's own job: the template copied as a user would, placed by node labels on the local
cluster and profiled for `make plan`; its requirements file; image files (JPEG/PNG) from a
path and from S3 (a moto server on 127.0.0.1); and autoscaler v2's label-driven scale-up."""

import json
import re
import shutil
import subprocess
import sys
import uuid

import pytest

from conftest import REPO, USER_JOBS, kept_summary, make
from scripts.build import build
from test_raykit import images_accounted_for, remedy_problems


@pytest.fixture
def cluster(shared_local_cluster):
    return shared_local_cluster[0]


@pytest.fixture
def copied_template():
    """jobs/template copied to a fresh name, as the README says (into the tests' jobs
    folder, RAYKIT_JOBS_DIR, not the checkout); removed after."""
    name = f"my_job_{uuid.uuid4().hex[:8]}"
    shutil.copytree(REPO / "jobs" / "template", USER_JOBS / name)
    try:
        yield name
    finally:
        shutil.rmtree(USER_JOBS / name, ignore_errors=True)


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("images")
    run = make("images", f"ARGS=--count 64 --size 48 --dir {directory}", timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return directory


def test_make_images_writes_decodable_jpegs_in_class_folders(image_dir):
    from PIL import Image

    files = sorted(image_dir.rglob("*.jpg"))
    assert len(files) == 64 and {f.parent.name for f in files} == {str(c) for c in range(10)}
    with Image.open(files[0]) as image:
        assert image.format == "JPEG" and image.size == (48, 48) and image.mode == "RGB"


@pytest.mark.parametrize("args,message", [
    ("--count 0", "--count 0 is out of range"),
    ("--size 5000", "--size 5000 is out of range"),
    ("--count many", "invalid int value"),
])
def test_make_images_refuses_bad_args(args, message, tmp_path):
    run = make("images", f"ARGS={args} --dir {tmp_path}/x", timeout=60)
    assert run.returncode == 2 and message in run.stdout + run.stderr
    assert not (tmp_path / "x").exists()


def test_make_images_never_writes_among_other_files(tmp_path, image_dir):
    (tmp_path / "notes.txt").write_text("mine")
    for target in (tmp_path, tmp_path / "notes.txt"):
        run = make("images", f"ARGS=--count 2 --dir {target}", timeout=60)
        assert run.returncode == 2 and "error: ARGS: --dir " in run.stderr, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    again = make("images", f"ARGS=--count 2 --size 48 --dir {image_dir}", timeout=60)
    assert again.returncode == 0, again.stderr  # a set it wrote: rewritten in place


def test_copied_template_trains_on_the_head_preprocesses_on_workers_and_plans(
        cluster, copied_template, image_dir, tmp_path):
    results = tmp_path / "summary.json"
    run = make("submit", "CLUSTER=local", f"JOB={copied_template}",
               f"ARGS=--data {image_dir} --steps 3 --batch-size 8 --checkpoint-every 2 "
               f"--storage {tmp_path / 'runs'} --results {results}",
               env=cluster, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    # the model is kept where --storage says, its classes the image folders' (0-9 here)
    import torch

    saved = re.search(r"model saved in (\S+/model\.pt) \(10 classes: 0, 1, 2", run.stdout)
    assert saved and saved.group(1).startswith(str(tmp_path / "runs")), run.stdout[-3000:]
    assert torch.load(saved.group(1))["4.weight"].shape[0] == 10
    summary = kept_summary(run.stdout)
    assert summary == json.loads(results.read_text())
    assert summary["trainer_node"] == "127.0.0.2"  # the train subcluster: the head
    assert set(summary["preprocess_nodes"]) <= {"127.0.0.3", "127.0.0.4"}  # decoded there
    assert sum(summary["preprocess_nodes"].values()) >= 3 * 8
    assert summary["preprocess_s_per_image"] > 0 and remedy_problems(summary["diagnosis"]) == []
    assert images_accounted_for(summary) == sum(summary["preprocess_nodes"].values())
    # quiet by default: no Ray INFO chatter, no deprecation warning, no internal error line
    for noise in (" INFO ", "deprecated", "PreemptionWatcher", "Running entrypoint"):
        assert noise not in run.stdout + run.stderr, noise
    plan = make("plan", f"PROFILE={results}", env=cluster, timeout=120)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert plan.stdout.startswith("profile: g5.xlarge trains ") and "\nchoice: " in plan.stdout
    # submitted again on the same --storage, a run of its own: it resumes nothing of the
    # first (one run name for all made the second load the first's final model and train
    # one step; with other classes it failed to load)
    again = make("submit", "CLUSTER=local", f"JOB={copied_template}",
                 f"ARGS=--data {image_dir} --steps 2 --batch-size 8 --storage {tmp_path / 'runs'}",
                 env=cluster, timeout=600)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-2000:]
    assert "resuming" not in again.stdout and kept_summary(again.stdout)["steps"] == 2
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    # each named by the copy, not "template": its folder's name
    assert len(runs) == 2 and all(re.fullmatch(re.escape(copied_template) + r"-[\d-]+_[\d-]+-[0-9a-f]{4}", r)
                                  for r in runs), runs
    assert summary["job"] == copied_template


def test_a_job_requirement_missing_from_the_local_venv_is_one_line_before_submitting(
        cluster, copied_template):
    (USER_JOBS / copied_template / "requirements.txt").write_text("surely-not-installed-pkg==1.0\n")
    run = make("submit", "CLUSTER=local", f"JOB={copied_template}", "ARGS=--data /x", env=cluster)
    assert run.returncode == 2
    assert (f"error: {USER_JOBS / copied_template}/requirements.txt: surely-not-installed-pkg==1.0 "
            "(it is not installed)") in run.stderr
    assert "job " not in run.stdout  # nothing was submitted


@pytest.mark.parametrize("line", ["-e .", "--index-url http://x", "pkg @ https://x/y.whl", "not a req!"])
def test_a_requirements_line_that_is_no_plain_requirement_is_refused(copied_template, line):
    from scripts.core.errors import KitError
    from scripts.core.inputs import job_requirements

    (USER_JOBS / copied_template / "requirements.txt").write_text(f"# ok\nnumpy>=1\n{line}\n")
    with pytest.raises(KitError, match=r"requirements.txt line 3: .* is not a requirement"):
        job_requirements(copied_template)


def test_on_aws_a_jobs_requirements_go_to_rays_pip_runtime_env(copied_template):
    """Built from the real providers' JOB_PACKAGES and JOB_FILES, as `make submit` does."""
    from scripts.core.submit import job_runtime_env
    from scripts.providers import aws, local

    job_dir = USER_JOBS / copied_template
    env = job_runtime_env(copied_template, ["pillow>=10"], aws.JOB_PACKAGES, aws.JOB_FILES,
                          verbose=False)
    assert env["pip"] == {"packages": ["pillow>=10"], "pip_check": False}
    assert env["working_dir"] == str(job_dir)  # Ray uploads it
    assert env["py_modules"] == [str(REPO / "jobs" / "raykit")]
    assert env["env_vars"]["RAY_DATA_LOG_LEVEL"] == "WARNING"
    here = job_runtime_env(copied_template, ["pillow>=10"], local.JOB_PACKAGES, local.JOB_FILES,
                           verbose=True)
    assert "pip" not in here and here["env_vars"]["RAYKIT_VERBOSE"] == "1"
    # the simulated nodes read the job where it is: no copy for their agents to replace
    assert here["working_dir"] == f"local://{job_dir}"
    assert here["py_modules"] == [str(REPO / "jobs" / "raykit")]


def test_image_files_are_read_from_s3(tmp_path, image_dir):
    """The ViT job's pipeline reads s3:// with pyarrow, which finds moto through
    AWS_ENDPOINT_URL like any AWS client; the images decode in Ray Data tasks."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)  # the OS's free port, race-free
    server.start()
    try:
        endpoint = "http://127.0.0.1:{}".format(server.get_host_and_port()[1])
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket="images")
        for path in sorted(image_dir.rglob("*.jpg"))[:24]:
            s3.upload_file(str(path), "images", f"train/{path.parent.name}/{path.name}")
        script = (
            "import json, sys, ray\n"
            f"sys.path[:0] = [{str(REPO / 'jobs' / 'vit_synthetic')!r}, {str(REPO / 'jobs')!r}]\n"
            "from pipeline import build_dataset, image_files\n"
            "ray.init(num_cpus=2, include_dashboard=False, logging_level='ERROR')\n"
            "ds = build_dataset(16, 8, 32, 1, 3, files=image_files('s3://images/train'))\n"
            "batches = list(ds.iter_batches(batch_size=8, batch_format='numpy'))\n"
            "print('OUT ' + json.dumps({'n': sum(len(b['label']) for b in batches),\n"
            "  'shape': list(batches[0]['image'].shape[1:]), 'labels': sorted({int(x) for b in batches for x in b['label']}),\n"
            "  'cpu': min(float(x) for b in batches for x in b['preprocess_cpu_s'])}))\n")
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                             env={**__import__("os").environ, "AWS_ENDPOINT_URL": endpoint,
                                  "PYTHONPATH": f"{REPO / 'jobs' / 'vit_synthetic'}:{REPO / 'jobs'}"})
    finally:
        server.stop()
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    out = json.loads(next(line[4:] for line in run.stdout.splitlines() if line.startswith("OUT ")))
    assert out["n"] == 16 and out["shape"] == [3, 32, 32]
    assert set(out["labels"]) <= set(range(10)) and out["cpu"] > 0  # decode + blur, measured


# --- autoscaler v2: a label demand scales the labelled node type up --------------------------

def v2_launches(config: dict, cpus: int, subcluster: str, bundle: dict | None = None) -> tuple[dict, int]:
    """What Ray's autoscaler v2 scheduler launches for `cpus` requests of `bundle` (a
    1-CPU task by default) that select ray-subcluster=<subcluster>, on `config` with no
    node running: ({type: count}, infeasible requests)."""
    from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig
    from ray.autoscaler.v2.scheduler import ResourceDemandScheduler, SchedulingRequest
    from ray.autoscaler.v2.utils import ResourceRequestUtil
    from ray.core.generated.autoscaler_pb2 import ResourceRequestByCount
    from ray.core.generated.common_pb2 import LabelSelectorOperator

    autoscaling = AutoscalingConfig(config, skip_content_hash=True)
    request = ResourceRequestUtil.make(bundle or {"CPU": 1}, label_selectors=[[
        ("ray-subcluster", LabelSelectorOperator.LABEL_OPERATOR_IN, [subcluster])]])
    reply = ResourceDemandScheduler(None).schedule(SchedulingRequest(
        disable_launch_config_check=True, node_type_configs=autoscaling.get_node_type_configs(),
        max_num_nodes=autoscaling.get_max_num_nodes(),
        resource_requests=[ResourceRequestByCount(request=request, count=cpus)]))
    launched = {}
    for launch in reply.to_launch:
        launched[launch.instance_type] = launched.get(launch.instance_type, 0) + launch.count
    return launched, len(reply.infeasible_resource_requests)


@pytest.mark.parametrize("cluster_name,worker_cpus", [("hetero", 15), ("local", 1)])
def test_autoscaler_v2_scales_the_preprocess_type_up_for_a_label_demand(cluster_name, worker_cpus):
    """The rendered config, with its CPU workers at min_workers 0: Ray Data's 1-CPU tasks
    selecting the preprocess subcluster bring up as many workers as they fill, up to
    max_workers; without the labels in the config, v2 finds no type for them."""
    config = build(cluster_name).config
    worker = config["available_node_types"]["cpu_worker"]
    worker["min_workers"] = 0
    launched, infeasible = v2_launches(config, cpus=2 * worker_cpus, subcluster="preprocess")
    assert launched == {"cpu_worker": 2} and infeasible == 0
    launched, _ = v2_launches(config, cpus=100 * worker_cpus, subcluster="preprocess")
    assert launched == {"cpu_worker": worker["max_workers"]}  # capped
    for node_type in config["available_node_types"].values():
        node_type.pop("labels")
    assert v2_launches(config, cpus=2, subcluster="preprocess") == ({}, 2)  # both infeasible


@pytest.mark.parametrize("cluster_name,bundle,per_node", [("multi_g5", {"GPU": 1}, 4),
                                                          ("local_multi", {"CPU": 1}, 1)])
def test_autoscaler_v2_brings_train_nodes_up_from_zero_for_ray_trains_workers(cluster_name, bundle, per_node):
    """A train type at min_workers 0: Ray Train's worker bundles selecting the train
    subcluster bring up one node per `per_node` workers (4 GPUs a g5.12xlarge), up to
    max_workers, and none lands on the coordinating head (it offers no CPU, no GPU)."""
    config = build(cluster_name).config
    for worker_type in ("gpu_worker", "cpu_worker"):  # none up: only the demand launches
        config["available_node_types"][worker_type]["min_workers"] = 0
    assert v2_launches(config, cpus=per_node, subcluster="train", bundle=bundle) == ({"gpu_worker": 1}, 0)
    assert v2_launches(config, cpus=2 * per_node, subcluster="train", bundle=bundle) == ({"gpu_worker": 2}, 0)
    launched, _ = v2_launches(config, cpus=5 * per_node, subcluster="train", bundle=bundle)
    assert launched == {"gpu_worker": 2}  # max_workers
    # a preprocessing task brings up a preprocess node, never a train node
    assert v2_launches(config, cpus=1, subcluster="preprocess") == ({"cpu_worker": 1}, 0)


def test_quiet_mode_drops_rays_chatter_and_keeps_warnings_errors_and_the_jobs_lines():
    from scripts.core.submit import noise

    sid = "vit_synthetic-0b1fe84f"
    dropped = [
        "2026-11-23 09:26:03,609\tINFO job_manager.py:581 -- Runtime env is setting up.",
        f"Running entrypoint for job {sid}: python main.py",
        "\x1b[36m(TrainController pid=21154)\x1b[0m [2026-11-23 09:26:27,537 E 21154 21194] core_worker.cc:2465: "
        "Actor with class name: 'PreemptionWatcher' and ID: '8c2d' has constructor arguments in the "
        "object store and max_restarts > 0",
        "\x1b[36m(RayTrainWorker pid=1)\x1b[0m Reporting training result 1: TrainingReport(checkpoint=None)",
        "\x1b[36m(SplitCoordinator pid=2)\x1b[0m Progress bars disabled. To enable, set `x`.",
        "\x1b[36m(Controller pid=3)\x1b[0m INFO:root:Waiting for up to 6000 seconds for nodes to be ready",
        "\x1b[36m(run_adaptdl pid=4)\x1b[0m INFO:adaptdl.torch.epoch:starting at epoch 0",
    ]
    kept = [
        "2026-11-23 09:26:03,609\tWARNING worker.py:1 -- something to look at",
        "2026-11-23 09:26:03,609\tERROR streaming_executor_state.py:745 -- An exception was raised",
        "\x1b[36m(RayTrainWorker pid=1)\x1b[0m [2026-11-23 09:26:27,537 E 1 2] core_worker.cc:9: a real error",
        "Traceback (most recent call last):",
        "\x1b[36m(RayTrainWorker pid=1)\x1b[0m step 2/6: mean step 0.041 s (data wait 0.000 s)",
        "RESULT {}", "Running entrypoint for job another-job: x",
        "\x1b[36m(run_adaptdl pid=4)\x1b[0m WARNING:adaptdl.reducer:Could not connect to root",
        "\x1b[36m(run_adaptdl pid=4)\x1b[0m [adaptdl_mnist] INFO:not a log record",
    ]
    assert [line for line in dropped if not noise(line, sid)] == []
    assert [line for line in kept if noise(line, sid)] == []


def test_a_person_sees_no_result_line_and_no_colour_where_none_is_wanted(monkeypatch):
    """The RESULT line is for the kit (kept in build/results/): shown only with VERBOSE=1.
    Ray's colour escapes reach the screen only on a terminal and never with NO_COLOR set;
    the job is then told not to colour its log (RAY_COLOR_PREFIX=0) at all."""
    import io

    from scripts.core import submit

    sid = "vit_synthetic-0b1fe84f"
    line = "\x1b[36m(RayTrainWorker pid=1)\x1b[0m step 2/6: mean step 0.041 s\n"
    assert submit.for_a_person("RESULT {}\n", sid, verbose=False, colour=False) == ""
    assert submit.for_a_person("RESULT {}\n", sid, verbose=True, colour=False) == "RESULT {}\n"
    assert submit.for_a_person(line, sid, verbose=False, colour=False) == "(RayTrainWorker pid=1) step 2/6: mean step 0.041 s\n"
    assert submit.for_a_person(line, sid, verbose=False, colour=True) == line

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert not submit.colour_wanted()  # a pipe or a file: no colour
    env = submit.job_runtime_env("smoke", [], submit.JobPackages.PIP, submit.JobFiles.UPLOAD, False)
    assert env["env_vars"]["RAY_COLOR_PREFIX"] == "0"
    monkeypatch.setattr("sys.stdout", Terminal())
    assert submit.colour_wanted()
    env = submit.job_runtime_env("smoke", [], submit.JobPackages.PIP, submit.JobFiles.UPLOAD, False)
    assert "RAY_COLOR_PREFIX" not in env["env_vars"]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not submit.colour_wanted()


def template_module():
    import importlib.util

    sys.path.insert(0, str(REPO / "jobs"))  # raykit, as a job imports it
    spec = importlib.util.spec_from_file_location("template_main", REPO / "jobs" / "template" / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_templates_classes_are_its_folders_names(tmp_path):
    """cat/ and dog/ trained as one class (only digit-named folders counted, 10 classes
    fixed): the classes are now the folders, sorted, each image labelled by its own."""
    from PIL import Image

    template = template_module()
    for folder, colour in (("dog", (200, 10, 10)), ("cat", (10, 200, 10)), ("owl", (10, 10, 200))):
        (tmp_path / folder).mkdir()
        Image.new("RGB", (20, 20), colour).save(tmp_path / folder / "a.jpg")
    (tmp_path / "notes.txt").write_text("not an image")
    classes = template.class_names(str(tmp_path))
    assert classes == ["cat", "dog", "owl"]
    data = [(tmp_path / f / "a.jpg").read_bytes() for f in ("owl", "cat")]
    out = template.decode_and_augment({"bytes": data, "path": [f"{tmp_path}/owl/a.jpg", f"{tmp_path}/cat/a.jpg"]},
                                      16, classes)
    assert out["label"].tolist() == [2, 0] and out["image"].shape == (2, 3, 16, 16)
    assert template.build_model(len(classes))[-1].out_features == 3


@pytest.mark.parametrize("args,message", [("--epochs 0", "--epochs must be at least 1"),
                                          ("--checkpoint-every -1", "--checkpoint-every must be 0 or more")])
def test_the_templates_new_flags_are_checked_before_ray(args, message, capsys):
    template = template_module()
    with pytest.raises(SystemExit) as exit:
        template.parse_args(["--data", "/x", *args.split()])
    assert exit.value.code == 2 and message in capsys.readouterr().err
