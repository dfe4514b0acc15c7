"""make bench-data: the job's preprocessing pipeline against its limit and its peer.

On the same images and transform (jobs/vit_synthetic/pipeline.py):
  (a) limit : the transform alone, one process per core (multiprocessing.Pool)
  (b) ray   : the job's Ray Data pipeline alone (generate + preprocess), iterated as the
              trainer iterates it
  (c) peer  : torch.utils.data.DataLoader(num_workers=cores) with the same transform
  (d) before: (b) shipping float32 images, as the job did before it shipped uint8: the
              bytes per image the trainer receives, and images/s, beside (b)'s
The four run in turn, round after round (a b c d a b c d ...), so that a slow spell of a
shared machine hits all three alike. A round is --waves waves of tasks on every core (a
task: --batches-per-task batches, as the job's), so that it scales with the machine: the
round's start and its last wave weigh as much at 16 cores as at 2. The first round runs
on fresh processes (their start, imports, Ray's pipeline start) and is reported apart, as
the cold round; each figure is the median of the warm rounds after it. Prints images/s
and the ratios b/a (target >= 0.97) and b/c (target >= 1), the length of a Ray Data task,
and where the cores' time went during (b): Ray's workers (the transform), the driver (the
streaming executor and the iterator), Ray's daemons and its own actors, idle. The last
line is b/a on the cores Ray's own processes leave to its workers. Absolute numbers vary
with the host; compare ratios from one run.
"""

import argparse
import logging
import os
import statistics
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import psutil

JOB_DIR = Path(__file__).resolve().parents[2] / "jobs" / "vit_synthetic"
sys.path[:0] = [str(JOB_DIR), str(JOB_DIR.parent)]  # the job's pipeline, and raykit it imports
from pipeline import (BATCHES_PER_TASK, Preprocess, build_dataset, make_images,  # noqa: E402
                      preprocessing_problems)
from raykit.feed import Feed, pace_executor_loop  # noqa: E402

from scripts.core.errors import KitError, command_exit  # noqa: E402
from scripts.core.inputs import OneLineParser, split_args  # noqa: E402

ARGS = None  # the parsed flags, in each process of the limit's pool
STAGE = None  # the job's preprocessing stage, built once per process of the pool

# glibc gives a freed buffer above its adaptive thresholds back to the OS, and a process
# that allocates one 600 KB image at a time (the DataLoader's workers) then faults every
# page in again: half its CPU went to page faults here, or none, depending on what the
# parent had allocated before it forked. Fixed thresholds, in the environment before any
# process of the benchmark starts (the pool's, Ray's and the DataLoader's inherit them),
# keep all three out of that trap: the ratios compare pipelines, not malloc's history.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def transform_chunk(start: int) -> int:
    """(a): generate and preprocess one batch in this process; return images done."""
    batch = make_images({"id": np.arange(start, start + ARGS.batch_size)}, ARGS.image_size)
    return len(STAGE(batch)["image"])


def init_worker(args):
    global ARGS, STAGE
    ARGS = args
    STAGE = Preprocess(args.blur_count, args.blur_kernel)  # also sets torch to one thread


def timed(images_done) -> float:
    """images/s of a callable that processes the images and returns how many it did."""
    start = time.perf_counter()
    done = images_done()
    return done / (time.perf_counter() - start)


class Limit:
    """(a) one process per core, each generating and transforming whole batches."""

    def __init__(self, args, cores: int):
        self.args = args
        self.pool = Pool(cores, initializer=init_worker, initargs=(args,))

    def round(self) -> float:
        starts = range(0, self.args.images, self.args.batch_size)
        return timed(lambda: sum(self.pool.map(transform_chunk, starts, chunksize=1)))

    def close(self):
        self.pool.terminate()


class RayData:
    """(b) the job's dataset (build_dataset), consumed batch by batch as the trainer
    consumes it (raykit.feed); ship: what it hands the trainer (the job's uint8; (d)
    float32, the old way)."""

    def __init__(self, args, cores: int, ship: str = "uint8"):
        import ray

        self.args, self.ship = args, ship
        self.image_bytes = self.images = 0
        if not ray.is_initialized():  # (b) and (d) share one Ray
            ray.init(num_cpus=cores, include_dashboard=False, logging_level="ERROR",
                     runtime_env={"env_vars": {"PYTHONPATH": f"{JOB_DIR}:{JOB_DIR.parent}"}})
        ray.data.DataContext.get_current().enable_progress_bars = False
        pace_executor_loop()  # as the job's cluster.configure_data does
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # a line per dataset run
        self.cores = cores
        self.task_cpu_s: dict[float, float] = {}  # per task (its start): its CPU seconds
        self.cpu_s = {"workers": 0.0, "driver": 0.0, "daemons": 0.0}
        self.wall_s = 0.0

    def consume(self, images: int) -> int:
        """Iterate the dataset as the trainer does; keep each task's CPU seconds (the sum
        of its batches' measured preprocess_cpu_s, by the task's start)."""
        a = self.args
        dataset = build_dataset(images, a.batch_size, a.image_size, a.blur_count, a.blur_kernel,
                                batches_per_task=a.batches_per_task, ship=self.ship)
        done = 0
        for batch in Feed(dataset, batch_size=a.batch_size, ahead=4):
            done += len(batch["label"])
            self.image_bytes += batch["image"].nbytes + batch["label"].nbytes  # what a trainer receives
            self.images += len(batch["label"])
            task = float(batch["preprocess_started_at"][0])
            self.task_cpu_s[task] = self.task_cpu_s.get(task, 0.0) + float(batch["preprocess_cpu_s"].sum())
        return done

    def round(self, measured: bool = True) -> float:
        """One round's images/s; measured: its cores' time counts in shares() (not the
        cold round's, which is mostly processes starting)."""
        before, start = ray_cpu_seconds(), time.perf_counter()
        rate = timed(lambda: self.consume(self.args.images))
        if not measured:
            self.task_cpu_s = {}
            return rate
        self.wall_s += time.perf_counter() - start
        after = ray_cpu_seconds()
        for pid, (group, seconds) in after.items():
            # a process started during the round counts from 0; one that ended is not seen
            self.cpu_s[group] += seconds - before.get(pid, (group, 0.0))[1]
        return rate

    def shares(self) -> dict:
        """Each group's share of the cores' time over the rounds; the rest was idle."""
        total = self.cores * self.wall_s
        shares = {group: seconds / total for group, seconds in self.cpu_s.items()}
        return shares | {"idle": max(0.0, 1 - sum(shares.values()))}

    def close(self):
        import ray

        ray.shutdown()


# Ray names every process it runs Python in "ray::<what it runs>": the pipeline's workers
# (ray::IDLE between tasks), but also its agents and Ray Data's own actors (its stats and
# its autoscaling coordinator), which take ~1.5% of 2 cores and run none of the transform.
RAY_OWN_TITLES = ("ray::_", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def group_of(cmdline: list[str]) -> str:
    """A child process of the benchmark's: "workers" (runs the pipeline's tasks) or
    "daemons" (Ray's own: gcs_server, the raylet, the log monitor, the agents, Ray Data's
    actors)."""
    title = cmdline[0] if cmdline else ""
    return "workers" if title.startswith("ray::") and not title.startswith(RAY_OWN_TITLES) else "daemons"


def ray_cpu_seconds() -> dict:
    """pid -> (group, CPU seconds so far) of this process (the driver) and everything Ray
    started under it (group_of)."""
    me = psutil.Process()
    seen = {me.pid: ("driver", me.cpu_times())}
    for child in me.children(recursive=True):
        try:
            with child.oneshot():
                seen[child.pid] = (group_of(child.cmdline()), child.cpu_times())
        except psutil.Error:  # ended meanwhile
            continue
    return {pid: (group, t.user + t.system) for pid, (group, t) in seen.items()}


class SyntheticImages:
    """The same images and transform as a map-style torch Dataset, one image per item,
    shipped as the job ships them (uint8, CHW): the same work per image as (a) and (b)."""

    def __init__(self, args):
        self.args = args
        self.stage = None

    def __len__(self):
        return self.args.images

    def __getitem__(self, i):
        if self.stage is None:
            self.stage = Preprocess(self.args.blur_count, self.args.blur_kernel)
        out = self.stage(make_images({"id": np.array([i])}, self.args.image_size))
        return out["image"][0], out["label"][0]


class Loader:
    """(c) torch's DataLoader with one worker process per core, kept across rounds."""

    def __init__(self, args, cores: int):
        import torch

        # each worker builds its own Preprocess, which sets torch to one thread there;
        # spawned, not forked: a fork of this process, which runs Ray's threads, left a Ray
        # Data run after it hanging for good (seen at 32 px)
        self.loader = torch.utils.data.DataLoader(
            SyntheticImages(args), batch_size=args.batch_size, num_workers=cores,
            persistent_workers=True, prefetch_factor=4, multiprocessing_context="spawn")

    def round(self) -> float:
        return timed(lambda: sum(len(labels) for _, labels in self.loader))

    def close(self):
        del self.loader


ENGINES = {"a": Limit, "b": RayData, "c": Loader,
           "d": lambda args, cores: RayData(args, cores, ship="float32")}


def parse(argv: list[str]) -> argparse.Namespace:
    """The flags, checked as the ViT job checks the same ones (pipeline.py's rules): a
    pipeline the job would refuse is not measured. A mistake is one KitError line."""
    p = OneLineParser(see="make bench-data ARGS=--help", prog="make bench-data ARGS=...",
                      description=__doc__.split("\n\n")[0])
    p.add_argument("--waves", type=int, default=8,
                   help="waves of tasks on every core per round (the round's images: waves x "
                        "cores x batch-size x batches-per-task)")
    p.add_argument("--images", type=int, default=0, help="images per round instead (0: by --waves)")
    p.add_argument("--rounds", type=int, default=3, help="warm rounds of a, b, c, d in turn, after the cold one")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--blur-count", type=int, default=10)
    p.add_argument("--blur-kernel", type=int, default=11)
    p.add_argument("--batches-per-task", type=int, default=BATCHES_PER_TASK,
                   help=f"batches each Ray Data task makes (the job's default: {BATCHES_PER_TASK})")
    args = p.parse_args(argv)
    problems = preprocessing_problems(args.batch_size, args.image_size, args.blur_count,
                                      args.blur_kernel, args.batches_per_task)
    problems += [f"--{name} must be at least 1 (got {value})"
                 for name, value in (("waves", args.waves), ("rounds", args.rounds)) if value < 1]
    if args.images < 0 or (args.batch_size >= 1 and args.images % args.batch_size):
        problems.append(f"--images must be 0 (by --waves) or a positive multiple of --batch-size "
                        f"(got {args.images})")
    if problems:
        raise KitError(f"ARGS: {'; '.join(problems)}")
    return args


def main(argv: list[str] | None = None) -> int:
    return command_exit(lambda: measure(parse(
        # `make bench-data ARGS="--rounds 5"`: ARGS as a shell splits it (KIT_ARGS, from make)
        split_args(os.environ.get("KIT_ARGS", "")) if argv is None else argv)))


def measure(args: argparse.Namespace) -> int:
    cores = os.cpu_count()
    args.images = args.images or args.waves * cores * args.batch_size * args.batches_per_task
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        # malloc reads these once, at process start: run again with them set
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]],
                  os.environ | MALLOC_ENV)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tasks = -(-args.images // (args.batch_size * args.batches_per_task))
    print(f"{args.images} images of {args.image_size}px per round ({tasks} tasks of "
          f"{args.batches_per_task} x {args.batch_size}: {tasks / cores:.1f} waves on {cores} cores), "
          f"{args.blur_count} x GaussianBlur({args.blur_kernel}); a cold round, then "
          f"{args.rounds} warm ones", flush=True)
    engines = {}
    try:
        for key, engine in ENGINES.items():
            engines[key] = engine(args, cores)
        cold = {key: engine.round(measured=False) if isinstance(engine, RayData) else engine.round()
                for key, engine in engines.items()}
        print("cold round: " + "  ".join(f"{k} {v:.1f}" for k, v in cold.items())
              + "  (fresh processes: their start and imports)", flush=True)
        rates = {key: [] for key in ENGINES}
        for r in range(args.rounds):
            for key, engine in engines.items():
                rates[key].append(engine.round())
            print(f"round {r + 1}: " + "  ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()),
                  flush=True)
    finally:
        for engine in engines.values():
            engine.close()
    a, b, c, d = (statistics.median(rates[key]) for key in "abcd")
    task_cpu_s = list(engines["b"].task_cpu_s.values())
    labels = {"a": f"limit, {cores} processes", "b": "Ray Data pipeline",
              "c": f"DataLoader(num_workers={cores})"}
    for key, rate in zip("abc", (a, b, c)):
        print(f"({key}) {labels[key]:30} {rate:8.1f} images/s (median of the warm rounds)")
    print(f"b/a = {b / a:.2f} (target >= 0.97)   b/c = {b / c:.2f} (target >= 1.00)   "
          f"cold: b/a = {cold['b'] / cold['a']:.2f}, b/c = {cold['b'] / cold['c']:.2f}")
    # what crosses a train node's network per image: the job ships uint8 since 2026-11
    before, after = (engines[k].image_bytes / engines[k].images for k in "db")
    print(f"bytes per image the trainer receives: (d) float32 before {before:,.0f}, (b) uint8 "
          f"after {after:,.0f} ({before / after:.1f}x fewer); images/s (d) {d:.1f}, (b) {b:.1f} "
          f"(b/d = {b / d:.2f})")
    # Ray Data notices a finished task only at the end of a 0.1 s polling window, and each
    # task pays its scheduling on top: the shorter the task, the larger that share.
    print(f"Ray Data tasks: {len(task_cpu_s)} of {args.batch_size * args.batches_per_task} "
          f"images, mean {statistics.mean(task_cpu_s):.3f} s CPU each")
    # Ray's own processes take their CPU from the same cores as its workers: on a small
    # machine that alone can hold (b) below the limit, which has no such processes.
    shares = engines["b"].shares()
    print(f"the cores' time during (b): Ray workers {shares['workers']:.1%}, driver "
          f"{shares['driver']:.1%}, Ray daemons and actors {shares['daemons']:.1%}, idle {shares['idle']:.1%}")
    left = 1 - shares["driver"] - shares["daemons"]
    print(f"b/a on the {left:.0%} of the cores Ray's own processes leave = {b / (a * left):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(None if len(sys.argv) == 1 else sys.argv[1:]))
