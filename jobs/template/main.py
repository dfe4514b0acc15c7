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

What it keeps (raykit.checkpoint, the one rule every job shares): the labels are the
images' folder names (cat/, dog/: one class each, as many classes as folders); the run's
folder is <--storage>/<--name> (by default Ray's ~/ray_results on the head, and a name of
the run's own: <this folder's name>-<date>_<time>-<4 hex>); every --checkpoint-every steps
a checkpoint, and at the end the final model (model.pt, loadable with torch.load alone). A
training worker that dies restarts from the last checkpoint (up to --max-failures times);
submitted again with the same --storage and --name, the run resumes. `make submit` prints
where the model is; `make fetch ID=<submission id>` copies the run's folder home.
"""

import argparse
import io
import sys
import time

import numpy as np
from raykit import autopilot, checkpoint, cluster, feed, logbook, measure, summary


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True,
                   help="JPEG/PNG files: an absolute directory every node can read, or s3://...")
    p.add_argument("--epochs", type=int, default=1, help="passes over the images")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: run every epoch)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="steps between checkpoints a restarted worker resumes from (0: the final model only)")
    checkpoint.add_run_flags(p, storage_default="Ray's ~/ray_results on the head")
    p.add_argument("--log-every", type=int, default=10,
                   help="print a progress line every N steps (0: none)")
    p.add_argument("--eval-data", default="",
                   help="held-out JPEG/PNG files in the same class folders (absolute or s3://): "
                        "evaluated every --eval-every steps and at the end")
    p.add_argument("--eval-every", type=int, default=0, help="steps between evaluations (0: at the end only)")
    p.add_argument("--batch-size", type=int, default=16, help="images per step per worker")
    p.add_argument("--image-size", type=int, default=64, help="images are resized to this square")
    p.add_argument("--results", default="",
                   help="also write the summary JSON to this path on the head (the kit "
                        "keeps a copy in build/results/ on every run)")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "image_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")  # exits 2, before Ray
    for name in ("steps", "checkpoint_every", "max_failures", "log_every", "eval_every"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be 0 or more")
    # pyarrow refuses a path with no scheme, and the driver's working directory is a temp folder
    problems = [problem for problem in (checkpoint.storage_problem("--data", args.data),
                                        checkpoint.storage_problem("--eval-data", args.eval_data)) if problem]
    problems += checkpoint.run_flag_problems(args)
    if problems:
        p.error("; ".join(problems))
    return args


# --- 1. preprocessing: runs on the CPU workers --------------------------------------------

def decode_and_augment(batch: dict, image_size: int, classes: list[str], augment: bool = True) -> dict:
    """JPEG/PNG bytes -> uint8 CHW images, flipped at random (augment); label = the index of the
    file's folder in `classes`. uint8 crosses the network to the trainer: a quarter of
    float32's bytes (it scales them)."""
    from PIL import Image

    images = []
    for data in batch["bytes"]:
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image.convert("RGB").resize((image_size, image_size)), np.uint8)
        if augment and np.random.rand() < 0.5:
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

    # after a restart, or submitted again on the run's folder: the last checkpoint
    run = checkpoint.Resume(plan={"steps": config["steps"], "epochs": config["epochs"]})
    if run.finished is not None:  # the run had ended: its summary again, nothing trained
        run.report_again()
        return
    steps = measure.TrainProfile()  # first: times the start-up, each wait for data and each step
    # the data starts flowing now, while the model is built (raykit/feed.py)
    batches = feed.Feed("train", batch_size=config["batch_size"])  # Train's "train" dataset
    model = ray.train.torch.prepare_model(build_model(len(config["classes"])))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    run.load(model, optimizer)  # from the last checkpoint's step, where there is one
    log = logbook.Logbook(config["tensorboard"])  # TensorBoard event files, where --tensorboard
    step, loss = run.step, None
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
            step = run.step + len(steps.steps_s)
            if config["log_every"] and step % config["log_every"] == 0:
                log.steps(step, steps, config["batch_size"], loss=loss.item())
                if run.rank == 0:
                    print(steps.progress(step, config["steps"], config["log_every"], config["batch_size"],
                                         loss.item()), flush=True)
            if config["eval_every"] and step % config["eval_every"] == 0:
                log.scalars(step, evaluate(model, config, steps.device))
                steps.pause_done()  # the evaluation is neither data wait nor a step
            if config["checkpoint_every"] and step % config["checkpoint_every"] == 0:
                run.save(model, optimizer, step)
                steps.pause_done()  # the save is neither data wait nor a step
            if config["steps"] and step >= config["steps"]:
                break
        if config["steps"] and step >= config["steps"]:
            break
    scores = evaluate(model, config, steps.device)
    log.scalars(step, scores)
    log.close()
    metrics = steps.metrics(model, final_loss=float(loss.item()) if loss is not None else None,
                            resumed_from_step=run.step, restarts=run.restarts, evaluation=scores)
    metrics["steps"] = step
    run.final(model, metrics)  # the summary and the final model (model.pt)


# --- 4. evaluation (optional): runs on the first training worker ----------------------------

def evaluate(model, config: dict, device) -> dict:
    """The model's scores on --eval-data (Train's unsplit "eval" dataset): accuracy and
    mean loss, on the first worker; {} without --eval-data, or on the other workers."""
    import ray.train
    import torch

    if not config["eval"] or ray.train.get_context().get_world_rank() != 0:
        return {}
    net = getattr(model, "module", model)  # outside DDP: one worker evaluates alone
    net.eval()
    right = seen = 0
    loss_sum = 0.0
    with torch.no_grad():
        for batch in ray.train.get_dataset_shard("eval").iter_batches(
                batch_size=config["batch_size"], batch_format="numpy"):
            images = torch.tensor(batch["image"], device=device).float().div_(255)
            labels = torch.tensor(batch["label"], device=device)
            logits = net(images)
            loss_sum += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
            right += int((logits.argmax(1) == labels).sum())
            seen += len(labels)
    net.train()
    scores = {"eval_accuracy": right / seen, "eval_loss": loss_sum / seen} if seen else {}
    print(f"evaluation: {seen} images, " + (f"accuracy {scores['eval_accuracy']:.3f}, loss "
                                            f"{scores['eval_loss']:.3f}" if seen else "none read"), flush=True)
    return scores


def images(ray, folder: str, args, classes: list[str], augment: bool):
    """The JPEG/PNG files under `folder`, decoded (and augmented) in Ray Data's tasks."""
    files = ray.data.read_binary_files(folder, include_paths=True, file_extensions=["jpg", "jpeg", "png"])
    return files.map_batches(
        measure.measured(decode_and_augment),
        fn_kwargs={"image_size": args.image_size, "classes": classes, "augment": augment},
        batch_size=args.batch_size, num_cpus=1)


def main(argv=None) -> int:
    args = parse_args(argv)
    import ray
    from ray.train import DataConfig, RunConfig
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
    datasets = {"train": images(ray, args.data, args, classes, augment=True)}
    if args.eval_data:
        unknown = sorted(set(class_names(args.eval_data)) - set(classes))
        if unknown:
            sys.exit(f"error: --eval-data {args.eval_data}: folders {', '.join(unknown[:5])} are no class "
                     f"of --data ({', '.join(classes[:10])}); evaluate on the same classes")
        datasets["eval"] = images(ray, args.eval_data, args, classes, augment=False)
    run = checkpoint.run_config(args.storage, args.name, max_failures=args.max_failures)
    trainer = TorchTrainer(
        train_loop, train_loop_config={
            "batch_size": args.batch_size, "steps": args.steps, "epochs": args.epochs, "classes": classes,
            "checkpoint_every": args.checkpoint_every, "log_every": args.log_every,
            "eval": bool(args.eval_data), "eval_every": args.eval_every, "tensorboard": args.tensorboard},
        scaling_config=cluster.scaling_config(shape, workers),
        datasets=datasets,
        # Train's default DataConfig drops the selector; each worker reads all of "eval"
        dataset_config=DataConfig(datasets_to_split=["train"], execution_options=data_options),
        run_config=RunConfig(**run, logging_config=cluster.train_logging()))
    started = time.perf_counter()
    with autopilot.steering() as steered:  # where the values file turns it on (autopilot:), nothing else
        fitted = trainer.fit()
    outputs = checkpoint.outputs(fitted)
    if outputs["model"]:
        print(f"model saved in {outputs['model']} ({len(classes)} classes: "
              f"{', '.join(classes[:10])}{', ...' if len(classes) > 10 else ''})", flush=True)
    result = summary.summarize(checkpoint.job_name(), fitted.metrics, shape, workers=workers,
                               batch_size=args.batch_size, wall_s=time.perf_counter() - started,
                               autopilot=steered.report, extra={"outputs": outputs, "classes": classes,
                                      "evaluation": fitted.metrics.get("evaluation") or {}})
    summary.emit(result, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
