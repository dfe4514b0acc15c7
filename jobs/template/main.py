"""Your own job, on the kit's heterogeneous cluster: copy this folder to jobs/<name>/ and
replace the three marked parts (decode/augment, the model, the step). Then
`make submit JOB=<name> ARGS="--data /abs/dir"` (or s3://bucket/prefix).

What the kit gives it, and what the few raykit lines do:
- placement: Ray Data's tasks run on the preprocessing nodes, Ray Train's workers on the
  GPU node(s), by node label (raykit.cluster, over raykit.placement's labels)
- measuring: each preprocessing batch's CPU cost and node, each step's wait for data
  (raykit.measure)
- feeding: each batch reaches the trainer as soon as it is made, from the first one on,
  and the preprocessing processes start while Ray Train does (raykit.feed, cluster.warm_up)
- the summary, its diagnosis and the RESULT line that `make plan PROFILE=` reads
  (raykit.summary)

What it keeps: the labels are the images' folder names (cat/, dog/: one class each, as
many classes as folders); checkpoints every --checkpoint-every steps and the final model
(model.pt) go to --storage (an absolute directory every node can write, or s3://...; by
default Ray's ~/ray_results on the head), in a folder of each run's own, so that no run
resumes another's; a training worker that dies restarts from the last checkpoint (up to 3
times). `make submit` prints where the model is.
"""

import argparse
import io
import json
import sys
import time
import uuid

import numpy as np
from raykit import autopilot, cluster, feed, measure, summary


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True,
                   help="JPEG/PNG files: an absolute directory every node can read, or s3://...")
    p.add_argument("--epochs", type=int, default=1, help="passes over the images")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: run every epoch)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="steps between checkpoints a restarted worker resumes from (0: the final model only)")
    p.add_argument("--storage", default="",
                   help="where checkpoints and the final model go: an absolute directory every "
                        "node can write, or s3://bucket/prefix (default: ~/ray_results on the head)")
    p.add_argument("--batch-size", type=int, default=16, help="images per step per worker")
    p.add_argument("--image-size", type=int, default=64, help="images are resized to this square")
    p.add_argument("--results", default="",
                   help="also write the summary JSON to this path on the head (the kit "
                        "keeps a copy in build/results/ on every run)")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "image_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")  # exits 2, before Ray
    for name in ("steps", "checkpoint_every"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be 0 or more")
    # pyarrow refuses a path with no scheme, and the driver's working directory is a temp folder
    for name, value in (("data", args.data), ("storage", args.storage)):
        if value and not (value.startswith("/") or "://" in value):
            p.error(f"--{name} must be an absolute path or s3://... (got {value!r})")
    return args


# --- 1. preprocessing: runs on the CPU workers --------------------------------------------

def decode_and_augment(batch: dict, image_size: int, classes: list[str]) -> dict:
    """JPEG/PNG bytes -> uint8 CHW images, flipped at random; label = the index of the
    file's folder in `classes`. uint8 crosses the network to the trainer: a quarter of
    float32's bytes (it scales them)."""
    from PIL import Image

    images = []
    for data in batch["bytes"]:
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image.convert("RGB").resize((image_size, image_size)), np.uint8)
        if np.random.rand() < 0.5:
            pixels = pixels[:, ::-1]
        images.append(np.ascontiguousarray(pixels.transpose(2, 0, 1)))
    labels = [classes.index(path.split("/")[-2]) for path in batch["path"]]
    return {"image": np.stack(images), "label": np.array(labels, dtype=np.int64)}


# --- 2. the model ---------------------------------------------------------------------------

def class_names(data: str) -> list[str]:
    """The images' folder names, sorted: one class each (listed once, by the driver)."""
    import pyarrow.fs

    filesystem, root = pyarrow.fs.FileSystem.from_uri(data)
    found = filesystem.get_file_info(pyarrow.fs.FileSelector(root, recursive=True))
    return sorted({info.path.split("/")[-2] for info in found if info.type == pyarrow.fs.FileType.File
                   and info.path.lower().endswith((".jpg", ".jpeg", ".png"))})


def build_model(num_classes: int):
    import torch.nn as nn

    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                         nn.Flatten(), nn.Linear(16 * 16, num_classes))


# --- 3. the training loop: runs on the GPU node(s) ------------------------------------------

def train_loop(config: dict) -> None:
    import ray.train
    import ray.train.torch
    import torch

    steps = measure.TrainProfile()  # first: times the start-up, each wait for data and each step
    # the data starts flowing now, while the model is built (raykit/feed.py)
    batches = feed.Feed("train", batch_size=config["batch_size"])  # Train's "train" dataset
    model = ray.train.torch.prepare_model(build_model(len(config["classes"])))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    done, finished = resume(model, optimizer)  # after a restart: the last checkpoint's step, else 0
    if finished:  # restarted after the final report (a node lost just then): nothing to train
        measure.report(finished, saved(model, optimizer, done, final=True))
        return
    step = done
    for epoch in range(config["epochs"]):
        if epoch:  # each pass a new read of the shard
            batches = feed.Feed("train", batch_size=config["batch_size"])
        for batch in steps.batches(batches):
            # a copy (batches are read-only), scaled to [0, 1] here, on the trainer's device
            images = torch.tensor(batch["image"], device=steps.device).float().div_(255)
            labels = torch.tensor(batch["label"], device=steps.device)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps.step_done(batch)
            step = done + len(steps.steps_s)
            if config["checkpoint_every"] and step % config["checkpoint_every"] == 0:
                measure.report({"step": step}, saved(model, optimizer, step))
                steps.pause_done()  # the save is neither data wait nor a step
            if config["steps"] and step >= config["steps"]:
                break
        if config["steps"] and step >= config["steps"]:
            break
    metrics = steps.metrics(model, final_loss=float(loss.item()), resumed_from_step=done)
    # the final model, with the summary
    measure.report(metrics, saved(model, optimizer, step, final=True))


def saved(model, optimizer, step: int, final: bool = False):
    """What a checkpoint holds: the model's weights (model.pt, loadable without Ray), and
    the optimizer and step a restarted worker resumes from (state.pt; final: the run's
    end, its summary beside it)."""
    import torch

    def write(folder):
        weights = getattr(model, "module", model).state_dict()
        torch.save(weights, f"{folder}/model.pt")
        torch.save({"optimizer": optimizer.state_dict(), "step": step, "final": final},
                   f"{folder}/state.pt")
    return write


def resume(model, optimizer) -> tuple[int, dict | None]:
    """Load the run's last checkpoint where Ray Train restarted this worker: its step, and
    the run's summary where that checkpoint was the final one (else None)."""
    import ray.train
    import torch

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 0, None
    with checkpoint.as_directory() as folder:
        getattr(model, "module", model).load_state_dict(torch.load(f"{folder}/model.pt"))
        state = torch.load(f"{folder}/state.pt")
        finished = None
        if state.get("final"):
            with open(f"{folder}/metrics.json") as f:
                finished = json.load(f)
    optimizer.load_state_dict(state["optimizer"])
    print(f"resuming from the checkpoint of step {state['step']}"
          + (": the run had finished; its summary is reported again" if finished else ""), flush=True)
    return state["step"], finished


def run_name() -> str:
    """This run's folder under --storage: template-<date>_<time>-<4 hex>."""
    return f"template-{time.strftime('%Y-%m-%d_%H-%M-%S')}-{uuid.uuid4().hex[:4]}"


def main(argv=None) -> int:
    args = parse_args(argv)
    import ray
    from ray.train import DataConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    ray.init()
    shape = cluster.cluster_shape()  # the cluster's train and preprocess nodes, by label
    workers = shape["trainer_slots"]
    problem = cluster.check_shape(shape, workers)
    if problem:
        sys.exit(problem)
    data_options = cluster.configure_data(shape)  # Ray Data on the preprocessing nodes
    cluster.warm_up(shape, ["PIL.Image"])  # their processes start now, with what they import
    # each batch leaves its task as soon as it is made (its size: the images, about)
    feed.one_batch_blocks(args.batch_size * 3 * args.image_size ** 2)
    classes = class_names(args.data)
    if not classes:
        sys.exit(f"error: --data {args.data}: no .jpg, .jpeg or .png file under it")
    if len(classes) == 1:
        print(f"warning: every image is in one folder ({classes[0]}): one class; put each class's "
              "images in a folder of its own (cat/, dog/, ...)", flush=True)
    files = ray.data.read_binary_files(args.data, include_paths=True,
                                       file_extensions=["jpg", "jpeg", "png"])
    dataset = files.map_batches(
        measure.measured(decode_and_augment), fn_kwargs={"image_size": args.image_size, "classes": classes},
        batch_size=args.batch_size, num_cpus=1)
    trainer = TorchTrainer(
        train_loop, train_loop_config={"batch_size": args.batch_size, "steps": args.steps, "epochs": args.epochs,
                                       "checkpoint_every": args.checkpoint_every, "classes": classes},
        scaling_config=cluster.scaling_config(shape, workers),
        datasets={"train": dataset},
        dataset_config=DataConfig(execution_options=data_options),
        # a name of this run's own: one shared by every run would resume the last one's
        # final model (Ray Train restores a run from its folder), whatever its data
        run_config=RunConfig(name=run_name(), storage_path=args.storage or None,
                             failure_config=FailureConfig(max_failures=3),
                             logging_config=cluster.train_logging()))
    started = time.perf_counter()
    with autopilot.steering():  # where the values file turns it on (autopilot:), nothing else
        fitted = trainer.fit()
    metrics = fitted.metrics
    if fitted.checkpoint is not None:
        print(f"model saved in {fitted.checkpoint.path}/model.pt ({len(classes)} classes: "
              f"{', '.join(classes[:10])}{', ...' if len(classes) > 10 else ''})", flush=True)
    result = summary.summarize("template", metrics, shape, workers=workers,
                               batch_size=args.batch_size, wall_s=time.perf_counter() - started)
    summary.emit(result, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
