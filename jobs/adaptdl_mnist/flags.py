"""The job's flags, shared by the launcher (main.py, on the head) and every replica
(train.py): the launcher checks them all before Ray starts any work, then hands the same
argv to the replicas."""

import argparse
import math

# ports.py's MAX_OFFSET (65535 - BASE - STRIDE), restated: flags.py is also loaded by path,
# without the job's folder on sys.path (the bench's ARGS check); a test holds the two alike
MAX_PORT_OFFSET = 65535 - 47000 - 100

DESCRIPTION = "PyTorch's MNIST example made elastic with AdaptDL, on the kit's Ray cluster"


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="adaptdl_mnist", description=DESCRIPTION)
    launch = p.add_argument_group("launcher (AdaptDL controller on the head)")
    launch.add_argument("--trainer", choices=["adaptdl", "fixed"], default="adaptdl",
                        help="adaptdl: elastic, 1 to --max-replicas replicas, adaptive batch "
                             "size; fixed: Ray Train on exactly --max-replicas workers at "
                             "--batch-size, the baseline `make bench JOB=adaptdl_mnist` compares")
    launch.add_argument("-m", "--max-replicas", type=int, default=2,
                        help="most replicas AdaptDL may scale to (it starts with 1); the "
                             "fixed trainer's workers")
    launch.add_argument("--cpus", type=float, default=1, help="CPUs per replica")
    launch.add_argument("--gpus", type=int, default=-1,
                        help="GPUs per replica; -1: 1 if the cluster has GPUs, else 0")
    launch.add_argument("--timeout", type=float, default=1800,
                        help="stop the job with an error after this many seconds")
    launch.add_argument("--max-failures", type=int, default=2,
                        help="replica failures (a replica killed or crashed) the job recovers "
                             "from, each by restarting from the latest epoch's checkpoint")
    launch.add_argument("--checkpoint-timeout", type=int, default=120,
                        help="seconds to wait for replica 0's checkpoint at a rescale")
    launch.add_argument("--hint-interval", type=float, default=30,
                        help="seconds between replica 0's scheduling hints, on which AdaptDL "
                             "rescales (upstream's fixed 30); shorter: a short job rescales sooner")
    launch.add_argument("--rescale-timeout", type=int, default=60,
                        help="seconds to wait for the autoscaler before using the nodes there are")
    launch.add_argument("--port-offset", type=int, default=-1,
                        help="AdaptDL's reducer binds 47000+offset+restarts; -1: per job, a random "
                             "free span above the OS's ephemeral ports (ports.py), so back-to-back "
                             "jobs never hit a port still in TIME_WAIT")
    launch.add_argument("--spot-listener", choices=["auto", "imds", "mock", "off"], default="auto",
                        help="spot-termination notices: imds (AWS IMDSv2), mock (MOCK=true), "
                             "off; auto: mock on the local cluster, imds elsewhere")
    launch.add_argument("--results", default="",
                        help="also write the summary JSON to this path on the head (the kit "
                             "keeps a copy in build/results/ on every run)")

    train = p.add_argument_group("training (each replica)")
    train.add_argument("--epochs", type=int, default=2, help="epochs to train")
    train.add_argument("--target-accuracy", type=float, default=0.0,
                       help="stop after the first epoch whose test accuracy reaches this; "
                            "0: train every epoch (the summary's time_to_target_s is then empty)")
    train.add_argument("--data", choices=["synthetic", "mnist"], default="synthetic",
                       help="synthetic: MNIST-shaped, generated, no download; "
                            "mnist: torchvision's MNIST (needs internet on the workers)")
    train.add_argument("--train-samples", type=int, default=6000,
                       help="synthetic training images (MNIST has 60000)")
    train.add_argument("--data-dir", default="",
                       help="where MNIST is downloaded; '' : AdaptDL's per-replica share path")
    train.add_argument("--batch-size", type=int, default=64, help="initial global batch size")
    train.add_argument("--max-batch-size", type=int, default=1024,
                       help="largest global batch size AdaptDL may choose")
    train.add_argument("--local-bsz-min", type=int, default=32, help="smallest batch per replica")
    train.add_argument("--local-bsz-max", type=int, default=128, help="largest batch per replica")
    train.add_argument("--lr", type=float, default=1.0, help="Adadelta learning rate")
    train.add_argument("--gamma", type=float, default=0.7, help="learning-rate decay per epoch")
    args = p.parse_args(argv)

    problems = []
    for name in ("cpus", "timeout", "target_accuracy", "lr", "gamma", "hint_interval"):
        if not math.isfinite(getattr(args, name)):  # nan passes every comparison below
            problems.append(f"--{name.replace('_', '-')} must be a finite number (got {getattr(args, name)})")
    for name in ("max_replicas", "epochs", "train_samples", "batch_size", "local_bsz_min"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    if not 1 <= args.hint_interval <= 3600:  # each hint refits AdaptDL's model: not every step
        problems.append(f"--hint-interval must be 1 to 3600 seconds (got {args.hint_interval})")
    if args.max_failures < 0:
        problems.append(f"--max-failures must be 0 or more (got {args.max_failures})")
    if args.cpus <= 0:
        problems.append(f"--cpus must be positive (got {args.cpus})")
    if args.gpus < -1:
        problems.append(f"--gpus must be -1 (auto), 0 or more (got {args.gpus})")
    if args.timeout <= 0:
        problems.append(f"--timeout must be positive seconds (got {args.timeout})")
    if not (args.port_offset == -1 or 0 <= args.port_offset <= MAX_PORT_OFFSET):
        problems.append(f"--port-offset must be -1 (a free span, per job) or 0 to {MAX_PORT_OFFSET}, so "
                        f"47000 + offset + restarts stays a port (got {args.port_offset})")
    if args.local_bsz_min > args.local_bsz_max:
        problems.append(f"--local-bsz-min {args.local_bsz_min} exceeds --local-bsz-max {args.local_bsz_max}")
    if not args.local_bsz_min <= args.batch_size <= args.local_bsz_max:
        problems.append(f"--batch-size {args.batch_size} must lie within the per-replica bounds "
                        f"[{args.local_bsz_min}, {args.local_bsz_max}]: it starts on one replica")
    if args.max_batch_size < args.batch_size:
        problems.append(f"--max-batch-size {args.max_batch_size} is below --batch-size {args.batch_size}")
    if args.data == "synthetic" and args.train_samples < args.batch_size:
        problems.append(f"--train-samples {args.train_samples} is below one batch ({args.batch_size})")
    if not 0 <= args.target_accuracy <= 1:
        problems.append(f"--target-accuracy must be from 0 to 1 (got {args.target_accuracy})")
    if not 0 < args.gamma <= 1:
        problems.append(f"--gamma must be in (0, 1] (got {args.gamma})")
    if args.lr <= 0:
        problems.append(f"--lr must be positive (got {args.lr})")
    if problems:
        p.error("; ".join(problems))  # exits 2 before Ray starts any work
    return args
