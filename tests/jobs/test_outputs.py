"""A run's outputs outlive the cluster, and its signals reach Ray's metrics: a job copied
from the template runs on a local cluster whose nodes reach S3 (a moto server on
127.0.0.1 standing in, found through AWS_ENDPOINT_URL as an instance role's credentials
would be), writes its checkpoints and final model under the writable prefix, and
`make fetch` brings the run's folder home; while it runs, the head's metrics endpoint
serves the kit's raykit_ gauges; TensorBoard event files hold its figures."""

import json
import re
import shutil
import struct
import subprocess
import threading
import time
import urllib.request
import uuid

import pytest

from conftest import REPO, USER_JOBS, kept_summary, local_cluster_up, make

@pytest.fixture
def s3_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        yield "http://127.0.0.1:{}".format(server.get_host_and_port()[1])
    finally:
        server.stop()


def scrape(temp_dir: str) -> str:
    """Every node's metrics endpoint, as Ray's Prometheus service discovery file lists them."""
    found = json.loads(next(iter(__import__("pathlib").Path(temp_dir).glob("prom_metrics_service_discovery.json"))).read_text())
    text = ""
    for group in found:
        for target in group["targets"]:
            try:
                text += urllib.request.urlopen(f"http://{target}/metrics", timeout=5).read().decode()
            except OSError:
                pass
    return text


def tensorboard_scalars(folder) -> dict[str, list[float]]:
    """The scalar values in TensorBoard event files (TFRecord frames of Event protos)."""
    from tensorboardX.proto import event_pb2

    values: dict[str, list[float]] = {}
    for path in folder.rglob("events.out.tfevents.*"):
        data = path.read_bytes()
        at = 0
        while at + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                values.setdefault(value.tag, []).append(value.simple_value)
    return values


@pytest.mark.slow
@pytest.mark.alone  # a cluster of its own, with S3 settings
def test_copied_template_keeps_its_model_in_s3_serves_gauges_and_make_fetch_brings_it_home(
        tmp_path, s3_server):
    import boto3
    import torch

    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    s3.create_bucket(Bucket="team-runs")
    aws = {"AWS_ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "RAY_metrics_report_interval_ms": "1000"}
    images = tmp_path / "images"
    assert make("images", f"ARGS=--count 48 --size 32 --dir {images}", timeout=120).returncode == 0
    job = f"my_job_{uuid.uuid4().hex[:8]}"
    shutil.copytree(REPO / "jobs" / "template", USER_JOBS / job)
    board = tmp_path / "board"
    try:
        with local_cluster_up(tmp_path / "build", env_extra=aws) as (env, record):
            args = (f"--data {images} --epochs 40 --batch-size 8 --image-size 32 --checkpoint-every 20 "
                    f"--log-every 20 --storage s3://team-runs/runs --name first --eval-data {images} "
                    f"--tensorboard {board}")
            scraped, done = [], threading.Event()

            def watch():  # the gauges, while the job runs
                while not done.wait(1):
                    try:
                        text = scrape(record["temp_dir"])
                    except (StopIteration, OSError, ValueError):
                        continue
                    if "raykit_data_wait_share{" in text and "raykit_images_per_second{" in text:
                        scraped.append(text)
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            try:
                run = make("submit", f"JOB={job}", f"ARGS={args}", env=env, timeout=600)
            finally:
                done.set()
                watcher.join(10)
            assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
            summary = kept_summary(run.stdout)
            # the run's name is the copy's own, its folder under the writable prefix
            assert summary["job"] == job
            assert summary["outputs"]["run_folder"] == "s3://team-runs/runs/first"
            assert summary["outputs"]["model"].startswith("s3://team-runs/runs/first/checkpoint_")
            assert f"model saved in {summary['outputs']['model']}" in run.stdout
            assert 0 <= summary["evaluation"]["eval_accuracy"] <= 1
            assert re.search(r"\) step 20: mean step [0-9.]+ s \(data wait ", run.stdout), run.stdout[-3000:]
            keys = [o["Key"] for o in s3.list_objects_v2(Bucket="team-runs", Prefix="runs/first/")["Contents"]]
            assert any(k.endswith("/state.pt") for k in keys)  # a checkpoint a restart resumes from
            assert any(k.endswith("/model.pt") for k in keys)
            # the gauges, at the head's metrics endpoint during the run
            assert scraped, "no raykit_ gauge reached a metrics endpoint during the run"
            # (Ray exports an application's metrics in its "ray" namespace: ray_raykit_...)
            ours = "\n".join(line for line in scraped[-1].splitlines() if line.startswith("ray_raykit_"))
            share = re.search(r'^ray_raykit_data_wait_share\{[^}]*job="%s"[^}]*\} ([0-9.e+-]+)$' % job, ours, re.M)
            assert share and 0 <= float(share.group(1)) <= 1, ours
            cost = re.search(r'^ray_raykit_usd_per_million_images\{[^}]*\} ([0-9.e+-]+)$', ours, re.M)
            assert cost and float(cost.group(1)) > 0, ours
            # TensorBoard event files on the trainer's node (this machine)
            scalars = tensorboard_scalars(board)
            assert {"train/loss", "train/images_per_s", "train/data_wait_share", "eval/accuracy"} <= set(scalars)

            # submitted again on the same folder: the finished run reports again, trains nothing
            again = make("submit", f"JOB={job}", f"ARGS={args}", env=env, timeout=600)
            assert again.returncode == 0, again.stdout[-4000:]
            assert "the run had finished" in again.stdout and kept_summary(again.stdout)["restarts"] == 1
            submission = re.search(r"^summary kept in \S+/(\S+)\.json$", run.stdout, re.M).group(1)
        # the cluster is gone; the model is not: make fetch copies the folder home
        fetched = make("fetch", f"ID={submission}", env={**env, **aws}, timeout=120)
        assert fetched.returncode == 0, fetched.stdout + fetched.stderr
        home = tmp_path / "build" / "runs" / submission
        (model,) = [p for p in home.rglob("model.pt") if p.parent.name == summary["outputs"]["model"].split("/")[-2]]
        weights = torch.load(model, weights_only=True)
        assert weights["4.weight"].shape[0] == 10  # one class per image folder
        assert "the model: " in fetched.stdout
    finally:
        shutil.rmtree(USER_JOBS / job, ignore_errors=True)


def test_make_fetch_refuses_what_is_not_a_run_folder(tmp_path):
    env = dict(__import__("os").environ, RAYKIT_BUILD_DIR=str(tmp_path))
    (tmp_path / "results").mkdir()
    for name, result in (("a-1", {"outputs": {"run_folder": "../../etc"}}), ("b-2", {"steps": 3})):
        (tmp_path / "results" / f"{name}.json").write_text(json.dumps({"result": result, "cluster": "local"}))
        run = make("fetch", f"ID={name}", env=env, timeout=60)
        assert run.returncode == 2 and run.stderr.startswith(f"error: job {name} kept no run folder"), run.stderr
    missing = make("fetch", "ID=c-3", env=env, timeout=60)
    assert missing.returncode == 2 and "ID=c-3: no summary in" in missing.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_runs_left_on_a_head_are_named_before_down_and_after_submit(tmp_path, monkeypatch):
    """make down (and make submit, for autostop) name each kept run of the cluster whose
    folder is a path on its head and not fetched yet; S3 runs, fetched runs, other
    clusters' and the local cluster's (this machine) are not named."""
    from scripts.commands import outputs

    monkeypatch.setattr(outputs, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(outputs, "RUNS", tmp_path / "runs")
    (tmp_path / "results").mkdir()
    (tmp_path / "runs" / "fetched-3").mkdir(parents=True)
    for name, cluster, folder in (("head-1", "hetero", "/home/ray/ray_results/a"), ("s3-2", "hetero", "s3://b/runs/a"),
                                  ("fetched-3", "hetero", "/home/ray/ray_results/c"),
                                  ("other-4", "single", "/home/ray/ray_results/d")):
        (tmp_path / "results" / f"{name}.json").write_text(json.dumps(
            {"cluster": cluster, "result": {"outputs": {"run_folder": folder}}}))
    from scripts.providers import PROVIDERS

    (said,) = outputs.head_only_warnings("hetero", PROVIDERS["aws"])
    assert said.startswith("warning: job head-1's model and checkpoints are only on the head "
                           "('/home/ray/ray_results/a'): `make fetch ID=head-1 CLUSTER=hetero` before `make down`")
    assert outputs.head_only_warnings("hetero", PROVIDERS["local"]) == []  # its head is this machine
    assert outputs.head_only_warnings("hetero", PROVIDERS["aws"], kept_since=time.time() + 60) == []
