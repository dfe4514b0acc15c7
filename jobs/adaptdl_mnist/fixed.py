"""The baseline AdaptDL is measured against: the same model (model.py), data (data.py),
optimizer, learning-rate schedule and flags, trained by Ray Train on exactly
--max-replicas workers at the fixed global batch --batch-size (`--trainer fixed`).

Its workers go where AdaptDL's replicas would: CPU workers anywhere but the launcher's
node (AdaptDL never places a replica on its controller's), GPU workers on the GPUs. Each
epoch's record and the summary have the AdaptDL trainer's shape (summary.py).
"""

import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import data
import summary
from model import Net


def run(args, argv: list[str], replica: dict, controller_node: dict, start: float,
        history_box, storage: str) -> dict:
    """Train; return the summary of rank 0's history, which it puts in `history_box`
    after each epoch (Train V2 keeps a report's metrics only with a checkpoint). `storage`:
    Ray Train's run storage, this run's own (the caller makes and removes it)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from raykit import cluster

    use_gpu = replica["GPU"] > 0
    # "!<id>": any node but this one (Ray's built-in ray.io/node-id label)
    selector = None if use_gpu else {"ray.io/node-id": f"!{controller_node['NodeID']}"}
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"argv": argv, "start": start, "history_box": history_box},
        scaling_config=ScalingConfig(num_workers=args.max_replicas, use_gpu=use_gpu,
                                     resources_per_worker={"CPU": replica["CPU"],
                                                           **({"GPU": replica["GPU"]} if use_gpu else {})},
                                     label_selector=selector),
        run_config=RunConfig(name="adaptdl_mnist_fixed", storage_path=storage,
                             logging_config=cluster.train_logging()),
    )
    trainer.fit()
    import ray
    history = ray.get(history_box.get.remote())
    return summary.summarize(args, history["epochs"], history["generations"], trainer="fixed",
                             restarts=0)


def train_loop(config: dict) -> None:
    """One Ray Train worker: PyTorch's MNIST example under DistributedDataParallel."""
    import os

    import ray
    import ray.train
    import ray.train.torch

    import flags

    args = flags.parse(config["argv"])
    os.environ[summary.JOB_START_ENV] = str(config["start"])
    context = ray.train.get_context()
    workers, rank = context.get_world_size(), context.get_world_rank()
    torch.manual_seed(0)  # the same initial weights on every worker, as AdaptDL's replicas
    with tempfile.TemporaryDirectory(prefix="mnist-") as data_dir:
        train_set, test_set = data.load(args.data, args.train_samples, args.data_dir or data_dir)
    local_batch = max(1, args.batch_size // workers)  # the global batch, split
    loader = ray.train.torch.prepare_data_loader(torch.utils.data.DataLoader(
        train_set, batch_size=local_batch, shuffle=True, drop_last=True))
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=data.TEST_SAMPLES)
    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(Net())
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)

    history = {"epochs": [], "generations": [{"generation": 0, "replicas": workers,
                                               "start_s": summary.seconds_since_start()}]}
    for epoch in range(args.epochs):
        if workers > 1:
            loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, as DataLoader's
        record = {"epoch": epoch, "replicas": workers, "restarts": 0,
                  "global_batch_size": local_batch * workers}
        record |= train_epoch(model, loader, optimizer, device, workers)
        record |= evaluate(model, test_loader, device)
        scheduler.step()
        record["end_s"] = summary.seconds_since_start()
        history["epochs"].append(record)
        if rank == 0:
            print(f"[adaptdl_mnist] {summary.epoch_line(record)}", flush=True)
            ray.get(config["history_box"].put.remote(history))
        if summary.reached(record, args.target_accuracy):
            if rank == 0:
                print(f"[adaptdl_mnist] test accuracy {record['test_accuracy']:.3f} reached "
                      f"--target-accuracy {args.target_accuracy:g}: stopping", flush=True)
            break  # every worker evaluates the whole test set: all stop at the same epoch


def train_epoch(model, loader, optimizer, device, workers: int) -> dict:
    model.train()
    sums = torch.zeros(3)  # loss sum, correct, count
    seen, started = 0, time.perf_counter()
    for images, labels in loader:
        optimizer.zero_grad()
        output = model(images)
        loss = F.nll_loss(output, labels)
        loss.backward()
        optimizer.step()
        sums += torch.tensor([loss.item() * labels.size(0),
                              (output.argmax(1) == labels).sum().item(), labels.size(0)])
        seen += labels.size(0)
    elapsed = time.perf_counter() - started
    if workers > 1:
        torch.distributed.all_reduce(sums)
    loss_sum, correct, count = sums.tolist()
    return {"train_loss": loss_sum / max(count, 1), "train_accuracy": correct / max(count, 1),
            "images_per_s": seen * workers / max(elapsed, 1e-9)}


def evaluate(model, loader, device) -> dict:
    model.eval()
    loss_sum = correct = count = 0
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            output = model(images)
            loss_sum += F.nll_loss(output, labels, reduction="sum").item()
            correct += (output.argmax(1) == labels).sum().item()
            count += labels.size(0)
    return {"test_loss": loss_sum / max(count, 1), "test_accuracy": correct / max(count, 1)}


if __name__ == "__main__":
    sys.exit("fixed.py is run by main.py --trainer fixed")
