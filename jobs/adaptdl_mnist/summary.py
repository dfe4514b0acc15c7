"""The job's summary, one shape for both trainers (AdaptDL's train.py and Ray Train's
fixed.py), so `make bench JOB=adaptdl_mnist` compares like with like.

Each epoch's record holds `end_s`: seconds from the launcher's start (RAYKIT_JOB_START,
set by main.py) to the end of that epoch's evaluation, start-up and every restart included;
each generation's (AdaptDL restarts its replicas at every rescale; the fixed trainer has
one) its replicas and `start_s`.
"""

import os
import time

JOB_START_ENV = "RAYKIT_JOB_START"  # the launcher's time.time(), in every replica's env
PROCESS_START = time.time()


def seconds_since_start() -> float:
    """Seconds since the launcher started the job; from this process's start where no
    launcher set it (a replica run alone)."""
    start = float(os.environ.get(JOB_START_ENV) or PROCESS_START)
    return round(time.time() - start, 2)


def reached(record: dict, target: float) -> bool:
    return target > 0 and record["test_accuracy"] >= target


def epoch_line(record: dict) -> str:
    """An epoch's progress line (both trainers print it)."""
    return (f"epoch {record['epoch']}: replicas={record['replicas']} "
            f"global_batch_size={record['global_batch_size']} "
            f"loss={record['train_loss']:.4f} accuracy={record['train_accuracy']:.3f} "
            f"test_accuracy={record['test_accuracy']:.3f} "
            f"images/s={record['images_per_s']:.1f} at {record['end_s']:.0f} s")


def replica_seconds(generations: list, end_s: float) -> float:
    """Replicas x the time each generation ran, from its start to the next one's (the last
    to end_s): what nodes released whenever no replica uses them would bill. A generation
    lost with a failure (restored from an older checkpoint) counts as the one before it."""
    ends = [g["start_s"] for g in generations[1:]] + [end_s]
    return round(sum(g["replicas"] * max(0.0, end - g["start_s"])
                     for g, end in zip(generations, ends)), 1)


def summarize(args, epochs: list, generations: list, *, trainer: str, restarts: int) -> dict:
    last = epochs[-1]
    first_at_target = next((e for e in epochs if reached(e, args.target_accuracy)), None)
    return {
        "job": "adaptdl_mnist", "trainer": trainer, "data": args.data, "epochs": len(epochs),
        "final_test_accuracy": last["test_accuracy"], "final_train_loss": last["train_loss"],
        "target_accuracy": args.target_accuracy,
        "time_to_target_s": first_at_target["end_s"] if first_at_target else None,
        "replicas_per_epoch": [e["replicas"] for e in epochs],
        "global_batch_size_per_epoch": [e["global_batch_size"] for e in epochs],
        "test_accuracy_per_epoch": [e["test_accuracy"] for e in epochs],
        "end_s_per_epoch": [e["end_s"] for e in epochs],
        "max_replicas_used": max(e["replicas"] for e in epochs),
        "replica_seconds": replica_seconds(generations, last["end_s"]),
        # [seconds since the start, replicas] at each generation's start
        "replicas_over_time": [[g["start_s"], g["replicas"]] for g in generations],
        "restarts": restarts,
        "history": epochs,
    }
