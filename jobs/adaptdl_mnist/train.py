"""One AdaptDL replica of the MNIST job (PyTorch's official MNIST example, made elastic).

The launcher (main.py) has AdaptDL's controller run this file in each replica, with the
same flags. When AdaptDL rescales, every replica checkpoints and exits, and the next
generation resumes from that checkpoint: the model, optimizer and scheduler (through
AdaptiveDataParallel), the data position (AdaptiveDataLoader), the epoch
(remaining_epochs_until), the running sums (Accumulator) and the job's history (History).
Replica 0 also hands the controller a checkpoint at each epoch's start: a replica that
dies costs at most the epoch under way.
"""

import json
import logging
import os
import sys
import tempfile
import time

import adaptdl_compat

adaptdl_compat.apply()  # also the worker_process_setup_hook; here too so the file runs alone

import adaptdl.checkpoint  # noqa: E402
import adaptdl.env  # noqa: E402
import adaptdl.torch as adl  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.optim.lr_scheduler import StepLR  # noqa: E402

import data  # noqa: E402
import flags  # noqa: E402
import summary  # noqa: E402
from model import Net  # noqa: E402

SUMMARY_ACTOR = "adaptdl_mnist_summary"  # the launcher's mailbox for replica 0's summary
LOG = logging.getLogger("adaptdl_mnist")


class History(adaptdl.checkpoint.State):
    """One record per finished epoch, and one per generation (its replicas and start);
    checkpointed, so it survives every rescale."""

    def __init__(self):
        super().__init__("adaptdl-mnist-history")
        self.epochs = []
        self.generations = []

    def save(self, fileobj):
        fileobj.write(json.dumps({"epochs": self.epochs, "generations": self.generations}).encode())

    def load(self, fileobj):
        saved = json.loads(fileobj.read())
        self.epochs, self.generations = saved["epochs"], saved["generations"]


def say(message: str) -> None:
    """Replica 0 speaks for the job; the others stay quiet."""
    if adaptdl.env.replica_rank() == 0:
        print(f"[adaptdl_mnist] {message}", flush=True)


def train_epoch(model, loader, optimizer, device) -> dict:
    model.train()
    stats = adl.Accumulator()
    seen, start, global_batch_size = 0, time.perf_counter(), None
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        output = model(images)
        loss = F.nll_loss(output, labels)
        loss.backward()
        optimizer.step()
        stats["loss_sum"] += loss.item() * labels.size(0)
        stats["correct"] += (output.argmax(1) == labels).sum().item()
        stats["count"] += labels.size(0)
        seen += labels.size(0)
        global_batch_size = loader.current_batch_size  # AdaptDL's choice, valid in the loop
    elapsed = time.perf_counter() - start
    with stats.synchronized():
        return {"train_loss": stats["loss_sum"] / max(stats["count"], 1),
                "train_accuracy": stats["correct"] / max(stats["count"], 1),
                # this generation's replicas, this generation's time (a restart resets both)
                "images_per_s": seen * adaptdl.env.num_replicas() / max(elapsed, 1e-9),
                "global_batch_size": global_batch_size}


def evaluate(model, loader, device) -> dict:
    model.eval()
    stats = adl.Accumulator()
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            output = model(images)
            stats["loss_sum"] += F.nll_loss(output, labels, reduction="sum").item()
            stats["correct"] += (output.argmax(1) == labels).sum().item()
            stats["count"] += labels.size(0)
    with stats.synchronized():
        return {"test_loss": stats["loss_sum"] / max(stats["count"], 1),
                "test_accuracy": stats["correct"] / max(stats["count"], 1)}


def main(argv) -> None:
    args = flags.parse(argv)
    logging.getLogger("adaptdl.checkpoint").setLevel(logging.WARNING)  # a line per state
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    adl.init_process_group("nccl" if use_cuda else "gloo")

    history = History()
    adaptdl.checkpoint.load_state(history)
    history.generations.append({"generation": adaptdl.env.num_restarts(),
                                "replicas": adaptdl.env.num_replicas(),
                                "start_s": summary.seconds_since_start()})
    say(f"generation {adaptdl.env.num_restarts()}: {adaptdl.env.num_replicas()} replica(s), "
        f"{len(history.epochs)} epoch(s) done before")

    train_set, test_set = data.load(args.data, args.train_samples,
                                    args.data_dir or adaptdl.env.share_path() or "data")
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    model = adl.AdaptiveDataParallel(model, optimizer, scheduler)

    train_loader = adl.AdaptiveDataLoader(train_set, batch_size=args.batch_size,
                                          shuffle=True, drop_last=True)
    train_loader.autoscale_batch_size(args.max_batch_size,
                                      local_bsz_bounds=(args.local_bsz_min, args.local_bsz_max),
                                      gradient_accumulation=True)
    test_loader = adl.AdaptiveDataLoader(test_set, batch_size=data.TEST_SAMPLES)

    first_epoch = len(history.epochs)  # this generation's: its restored state is that epoch's start
    for epoch in adl.remaining_epochs_until(args.epochs):
        if epoch > first_epoch:
            checkpoint(epoch)
        record = {"epoch": epoch, "replicas": adaptdl.env.num_replicas(),
                  "restarts": adaptdl.env.num_restarts()}
        record |= train_epoch(model, train_loader, optimizer, device)
        record |= evaluate(model, test_loader, device)
        scheduler.step()
        record["end_s"] = summary.seconds_since_start()
        history.epochs.append(record)
        say(summary.epoch_line(record))
        if summary.reached(record, args.target_accuracy):
            say(f"test accuracy {record['test_accuracy']:.3f} reached --target-accuracy "
                f"{args.target_accuracy:g}: stopping")
            break  # every replica sees the same (synchronized) accuracy and stops here

    if adaptdl.env.replica_rank() == 0:
        report(summary.summarize(args, history.epochs, history.generations, trainer="adaptdl",
                                 restarts=adaptdl.env.num_restarts()))


def checkpoint(epoch: int) -> None:
    """Every replica saves AdaptDL's states (a collective) at the start of an epoch, where no
    data loop is under way: a generation restored from here starts this epoch afresh and
    repeats none before it. Replica 0 hands the files to the controller, which starts the
    next generation from the latest it holds, after a rescale or a failed replica
    (adaptdl_compat._fix_replica_failure).

    The states go to a fresh directory, not the generation's own checkpoint path: AdaptDL
    saves there once per generation (at a rescale) and fails renaming onto a second save."""
    import ray
    if not ray.is_initialized():  # run alone: no controller to hand a checkpoint to
        return
    from adaptdl_ray.aws.utils import _serialize_checkpoint
    own_path = os.environ["ADAPTDL_CHECKPOINT_PATH"]
    with tempfile.TemporaryDirectory(prefix="adaptdl-epoch-") as directory:
        os.environ["ADAPTDL_CHECKPOINT_PATH"] = directory  # adaptdl reads it on each save
        try:
            adaptdl.checkpoint.save_all_states()
        finally:
            os.environ["ADAPTDL_CHECKPOINT_PATH"] = own_path
        if adaptdl.env.replica_rank() == 0:
            controller = ray.get_actor("AdaptDLController")
            ray.get(controller.register_checkpoint.remote(_serialize_checkpoint(directory)))
    say(f"checkpoint saved at the start of epoch {epoch}")


def report(result: dict) -> None:
    """Hand the summary to the launcher on the head; alone (no launcher), print it."""
    import ray
    try:
        box = ray.get_actor(SUMMARY_ACTOR) if ray.is_initialized() else None
    except ValueError:  # no such actor
        box = None
    if box is None:  # run outside the kit's launcher
        print("RESULT " + json.dumps(result), flush=True)
    else:
        ray.get(box.put.remote(result))


if __name__ == "__main__":
    main(sys.argv[1:])
