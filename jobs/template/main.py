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
"""

import argparse
import io
import sys
import time

import numpy as np
from raykit import autopilot, cluster, feed, measure, summary


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True,
                   help="JPEG/PNG files: an absolute directory every node can read, or s3://...")
    p.add_argument("--steps", type=int, default=10, help="training steps per worker")
    p.add_argument("--batch-size", type=int, default=16, help="images per step per worker")
    p.add_argument("--image-size", type=int, default=64, help="images are resized to this square")
    p.add_argument("--results", default="",
                   help="also write the summary JSON to this path on the head (the kit "
                        "keeps a copy in build/results/ on every run)")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "image_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")  # exits 2, before Ray
    return args


# --- 1. preprocessing: runs on the CPU workers --------------------------------------------

def decode_and_augment(batch: dict, image_size: int) -> dict:
    """JPEG/PNG bytes -> uint8 CHW images, flipped at random; label = the file's folder.
    uint8 crosses the network to the trainer: a quarter of float32's bytes (it scales them)."""
    from PIL import Image

    images = []
    for data in batch["bytes"]:
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image.convert("RGB").resize((image_size, image_size)), np.uint8)
        if np.random.rand() < 0.5:
            pixels = pixels[:, ::-1]
        images.append(np.ascontiguousarray(pixels.transpose(2, 0, 1)))
    labels = [int(path.split("/")[-2]) if path.split("/")[-2].isdigit() else 0 for path in batch["path"]]
    return {"image": np.stack(images), "label": np.array(labels, dtype=np.int64)}


# --- 2. the model ---------------------------------------------------------------------------

def build_model(num_classes: int = 10):
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
    model = ray.train.torch.prepare_model(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch in steps.batches(batches):
        # a copy (batches are read-only), scaled to [0, 1] here, on the trainer's device
        images = torch.tensor(batch["image"], device=steps.device).float().div_(255)
        labels = torch.tensor(batch["label"], device=steps.device)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps.step_done(batch)
        if len(steps.steps_s) >= config["steps"]:
            break
    measure.report(steps.metrics(model, final_loss=float(loss.item())))


def main(argv=None) -> int:
    args = parse_args(argv)
    import ray
    from ray.train import DataConfig, RunConfig, ScalingConfig
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
    files = ray.data.read_binary_files(args.data, include_paths=True,
                                       file_extensions=["jpg", "jpeg", "png"])
    dataset = files.map_batches(
        measure.measured(decode_and_augment), fn_kwargs={"image_size": args.image_size},
        batch_size=args.batch_size, num_cpus=1)
    trainer = TorchTrainer(
        train_loop, train_loop_config={"batch_size": args.batch_size, "steps": args.steps},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=shape["gpus"] > 0,
                                     label_selector=shape["train_selector"]),
        datasets={"train": dataset},
        dataset_config=DataConfig(execution_options=data_options),
        run_config=RunConfig(name="template", logging_config=cluster.train_logging()))
    started = time.perf_counter()
    with autopilot.steering():  # where the values file turns it on (autopilot:), nothing else
        metrics = trainer.fit().metrics
    result = summary.summarize("template", metrics, shape, workers=workers,
                               batch_size=args.batch_size, wall_s=time.perf_counter() - started)
    summary.emit(result, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
