"""ViT on synthetic images (or JPEG/PNG files): Ray Train trains on the GPU node(s) while
Ray Data preprocesses on the CPU workers. `make submit JOB=vit_synthetic ARGS="--steps 50"`

The seed technique (a heterogeneous cluster feeding a GPU) on Ray 2.60's APIs: Dataset.
map_batches for preprocessing, ray.train.get_dataset_shard in the training loop, ray.train.
report for the results. Placement is by node label (raykit.placement): Ray Data's tasks
select the preprocess subcluster, Ray Train's workers the train one. The measuring is
raykit.measure's, as any job's can be.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

from pipeline import BATCHES_PER_TASK, normalize_on_device, preprocessing_problems
from raykit import autopilot, checkpoint, cluster, feed, logbook, measure, summary

MODEL_PRESETS = {
    # the seed's default: timm's VisionTransformer defaults, ViT-B/16 (86M parameters)
    "base": {"patch_size": 16, "embed_dim": 768, "depth": 12, "num_heads": 12},
    # small enough to train at a few steps/s on a CPU: the local stand-in
    "tiny": {"patch_size": 16, "embed_dim": 192, "depth": 4, "num_heads": 3},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=32,
                   help="training steps per worker (enough for the demo to reach its steady "
                        "state: the summary says where a run is too short)")
    p.add_argument("--batch-size", type=int, default=16, help="images per step per worker")
    p.add_argument("--image-size", type=int, default=224, help="square images, multiple of 16")
    p.add_argument("--blur-count", type=int, default=10, help="GaussianBlur passes per image (0-50)")
    p.add_argument("--blur-kernel", type=int, default=11, help="GaussianBlur kernel size, odd")
    p.add_argument("--light-after-steps", type=int, default=0,
                   help="from this step on, one blur pass an image (a load that drops mid-run; 0: never)")
    p.add_argument("--phases", default="",
                   help="a load that changes: light or heavy phases of so many steps, e.g. "
                        "light:30,heavy:60,light:30 (heavy: --blur-count passes, light: one); "
                        "sets --steps to their sum")
    p.add_argument("--model", choices=[*MODEL_PRESETS, "auto"], default="auto",
                   help="ViT preset; auto: base on a GPU, tiny on CPU")
    p.add_argument("--workers", type=int, default=0,
                   help="training workers; 0: one per trainer slot of the cluster (one per GPU)")
    p.add_argument("--log-every", type=int, default=5, help="print the mean step time every N steps")
    p.add_argument("--prefetch-batches", type=int, default=4,
                   help="batches kept ready ahead of the trainer (raykit.feed)")
    p.add_argument("--batches-per-task", type=int, default=BATCHES_PER_TASK,
                   help="batches each Ray Data task preprocesses: longer tasks amortise Ray "
                        "Data's per-task cost (docs/benchmarks.md, make bench-data)")
    p.add_argument("--data", default="synthetic",
                   help="synthetic, or JPEG/PNG files: an absolute directory every preprocessing "
                        "node can read (`make images`), or an s3:// URI")
    p.add_argument("--checkpoint-every", type=int, default=50,
                   help="save model, optimizer and step every N steps (0: never); a "
                        "training worker that dies restarts from the last one")
    checkpoint.add_run_flags(p, storage_default="a fresh private temp dir, removed after the run "
                                                 "(nothing kept)")
    p.add_argument("--results", default="",
                   help="also write the summary JSON to this path on the head (the kit "
                        "keeps a copy in build/results/ on every run)")
    args = p.parse_args(argv)
    problems = preprocessing_problems(args.batch_size, args.image_size, args.blur_count,
                                      args.blur_kernel, args.batches_per_task)
    for name in ("steps", "log_every", "prefetch_batches"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    if args.light_after_steps < 0 or (args.light_after_steps and args.data != "synthetic"):
        problems.append(f"--light-after-steps must be 0 (off) or a step of a synthetic run "
                        f"(got {args.light_after_steps}{' with --data' if args.data != 'synthetic' else ''})")
    args.heavy = None  # the heavy records' [start, end) ranges, in steps for now
    if args.light_after_steps > 0:
        args.heavy = ((0, args.light_after_steps),)
    if args.phases:
        phases = parse_phases(args.phases)
        if isinstance(phases, str):
            problems.append(phases)
        elif args.light_after_steps or args.data != "synthetic":
            problems.append("--phases goes alone with synthetic images: drop --light-after-steps and --data")
        else:
            args.steps, args.heavy = sum(n for _, n in phases), heavy_steps(phases)
    if args.workers < 0:
        problems.append(f"--workers must be 0 (auto) or more (got {args.workers})")
    for name in ("checkpoint_every", "max_failures"):
        if getattr(args, name) < 0:
            problems.append(f"--{name.replace('_', '-')} must be 0 or more (got {getattr(args, name)})")
    if args.data != "synthetic" and not (args.data.startswith("s3://") or os.path.isabs(args.data)):
        problems.append(f"--data must be synthetic, an absolute directory or an s3:// URI "
                        f"(got {args.data!r})")
    problems += checkpoint.run_flag_problems(args)
    if problems:
        p.error("; ".join(problems))  # exits 2 before Ray starts any work
    return args


def parse_phases(text: str) -> list[tuple[str, int]] | str:
    """'light:30,heavy:60' -> [("light", 30), ("heavy", 60)]; what is wrong, as a string."""
    phases = []
    for part in text.split(","):
        load, _, count = part.partition(":")
        if load not in ("light", "heavy") or not count.isdigit() or not 1 <= int(count) <= 100_000:
            return (f"--phases must be light:N or heavy:N parts (N steps, 1-100000) separated by "
                    f"commas, e.g. light:30,heavy:60,light:30 (got {text[:60]!r})")
        phases.append((load, int(count)))
    return phases if len(phases) <= 20 else "--phases takes at most 20 phases"


def heavy_steps(phases: list[tuple[str, int]]) -> tuple[tuple[int, int], ...]:
    """The heavy phases' [first step, end step) ranges, steps counted from 0."""
    ranges, step = [], 0
    for load, count in phases:
        if load == "heavy":
            ranges.append((step, step + count))
        step += count
    return tuple(ranges)


def build_model(preset: str, image_size: int):
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=image_size, num_classes=1000, **MODEL_PRESETS[preset])


def train_loop(config: dict) -> None:
    """One Ray Train worker: pull preprocessed batches from its shard, train, report."""
    import ray.train
    import ray.train.torch
    import torch

    # after a failure, or submitted again on the run's folder: the last checkpoint
    run = checkpoint.Resume(plan={"steps": config["steps"], "phases": config["phases"]})
    if run.finished is not None:  # the run had ended: its summary again, nothing trained
        run.report_again()
        return
    steps = measure.TrainProfile()  # first: the first step is timed from here
    # the pipeline starts filling now, while the model is built and moved (feed.py)
    batches = feed.Feed("train", batch_size=config["batch_size"],
                        ahead=config["prefetch_batches"])
    model = ray.train.torch.prepare_model(build_model(config["model"], config["image_size"]))
    device = steps.device
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    run.load(model, optimizer)
    rank, first_step, restarts = run.rank, run.step, run.restarts
    log = logbook.Logbook(config["tensorboard"])

    for batch in steps.batches(batches):
        images = normalize_on_device(torch.from_numpy(batch["image"].copy()).to(device, non_blocking=True))
        labels = torch.from_numpy(batch["label"].copy()).to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        steps.step_done(batch)
        step = first_step + len(steps.steps_s)
        if config["checkpoint_every"] and step % config["checkpoint_every"] == 0 \
                and step < config["steps"]:
            run.save(model, optimizer, step)
            steps.pause_done()  # the save is neither data wait nor a step
        if step % config["log_every"] == 0:
            log.steps(step, steps, config["batch_size"], loss=loss.item())
            if rank == 0:
                print(steps.progress(step, config["steps"], config["log_every"], config["batch_size"],
                                     loss.item()), flush=True)
        if step >= config["steps"]:  # after a restart the shard starts over: stop at the total
            break
    metrics = steps.metrics(model, restarts=restarts, resumed_from_step=first_step,
                            final_loss=float(loss.item()),
                            phases=phase_figures(config["phases"], steps, config["batch_size"]))
    metrics["steps"] += first_step
    log.close()
    run.final(model, metrics)  # the summary and the final model (model.pt)


def phase_figures(phases: list, steps, batch_size: int) -> list[dict]:
    """Each --phases phase's wait share and images/s, from this rank's steps (the first
    step, the start-up, left out): the load changed, so did what the mix must deliver."""
    out, start = [], 0
    for load, count in phases or []:
        window = range(max(start, 1), min(start + count, len(steps.steps_s)))
        step_s = sum(steps.steps_s[i] for i in window)
        out.append({"load": load, "steps": [start + 1, start + count],
                    "wait_share": sum(steps.waits[i] for i in window) / step_s if step_s else None,
                    "images_per_s": batch_size * len(window) / step_s if step_s else None})
        start += count
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    import ray
    from ray.train import CheckpointConfig, DataConfig, RunConfig
    from ray.train.torch import TorchTrainer

    from pipeline import build_dataset, image_files

    ray.init()
    shape = cluster.cluster_shape()
    workers = args.workers or shape["trainer_slots"]
    problem = cluster.check_shape(shape, workers)
    if problem:
        sys.exit(problem)
    data_options = cluster.configure_data(shape)
    # the preprocessing processes start while Train does, with what the stage imports
    cluster.warm_up(shape, ["pipeline", "torchvision.transforms"])
    use_gpu = shape["gpus"] > 0
    model = args.model if args.model != "auto" else ("base" if use_gpu else "tiny")
    num_records = args.batch_size * args.steps * workers  # exactly what the steps need
    files = image_files(args.data) if args.data != "synthetic" else None
    if files is not None:
        found = len(files[1])
        if found < num_records:
            sys.exit(f"error: --data {args.data} holds {found} JPEG/PNG files; {args.steps} "
                     f"steps of {args.batch_size} x {workers} need {num_records}: lower --steps "
                     f"or write more (`make images ARGS=\"--count {num_records}\"`)")
    per_step = args.batch_size * workers  # the records of one step, every trainer's
    heavy = None if args.heavy is None else tuple((a * per_step, b * per_step) for a, b in args.heavy)
    dataset = build_dataset(num_records, args.batch_size, args.image_size, args.blur_count,
                            args.blur_kernel, files=files, batches_per_task=args.batches_per_task,
                            heavy=heavy)
    print(f"training ViT-{model} on {workers} worker(s) ({'GPU' if use_gpu else 'CPU'}), "
          f"{num_records} images of {args.image_size}px "
          f"({'synthetic' if args.data == 'synthetic' else 'files from ' + args.data}), "
          f"{args.blur_count} blurs each, preprocessed on {shape['preprocess_cpus']:g} CPUs",
          flush=True)

    # Without --storage the run's folder is a private temp dir (mode 0700), removed after
    # the run: a bench's runs keep no model. A fixed shared path would mix concurrent runs.
    storage = args.storage or tempfile.mkdtemp(prefix="raykit-train-")
    run = checkpoint.run_config(storage, args.name, max_failures=args.max_failures)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"model": model, "image_size": args.image_size,
                           "batch_size": args.batch_size, "steps": args.steps,
                           "log_every": args.log_every, "prefetch_batches": args.prefetch_batches,
                           "checkpoint_every": args.checkpoint_every, "tensorboard": args.tensorboard,
                           "phases": parse_phases(args.phases) if args.phases else []},
        scaling_config=cluster.scaling_config(shape, workers),
        datasets={"train": dataset},
        # Train's default DataConfig drops the DataContext's label selector: pass it here
        dataset_config=DataConfig(datasets_to_split=["train"], execution_options=data_options),
        run_config=RunConfig(**run, checkpoint_config=CheckpointConfig(num_to_keep=2),
                             logging_config=cluster.train_logging()),
    )
    started = time.perf_counter()
    try:
        with autopilot.steering() as steered:  # where the values file turns it on: CPU nodes sized from the data wait
            fitted = trainer.fit()
        metrics, outputs = fitted.metrics, checkpoint.outputs(fitted) if args.storage else None
    finally:
        if not args.storage:  # nothing kept: the summary is printed below
            shutil.rmtree(storage, ignore_errors=True)
    if outputs and outputs["model"]:
        print(f"model saved in {outputs['model']}", flush=True)
    result = summary.summarize(
        "vit_synthetic", metrics, shape, workers=workers, batch_size=args.batch_size,
        wall_s=time.perf_counter() - started, autopilot=steered.report,
        extra={"model": model, "image_size": args.image_size, "blur_count": args.blur_count,
               "data": args.data, "phases": metrics.get("phases") or [], "outputs": outputs})
    summary.emit(result, args.results, headline=f"ViT-{model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
