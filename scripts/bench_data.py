"""make bench-data: the job's preprocessing pipeline against its limit and its peer.

In one run, on the same images and transform (jobs/vit_synthetic/pipeline.py):
  (a) limit : the transform alone, one process per core (multiprocessing.Pool)
  (b) ray   : the job's Ray Data pipeline alone (generate + preprocess), iterated as the
              trainer iterates it
  (c) peer  : torch.utils.data.DataLoader(num_workers=cores) with the same transform
Prints images/s and the ratios b/a (target >= 0.95) and b/c (target >= 1). Ratios from
one run on one machine; absolute numbers vary with the host.
"""

import argparse
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

JOB_DIR = Path(__file__).resolve().parent.parent / "jobs" / "vit_synthetic"
sys.path.insert(0, str(JOB_DIR))
from pipeline import Preprocess, build_dataset, make_images  # noqa: E402

ARGS = None


def transform_chunk(start: int) -> int:
    """(a): generate and preprocess one batch in this process; return images done."""
    import torch

    torch.set_num_threads(1)
    stage = Preprocess(ARGS.blur_count, ARGS.blur_kernel)
    batch = make_images({"id": np.arange(start, start + ARGS.batch_size)}, ARGS.image_size)
    return len(stage(batch)["image"])


def init_worker(args):
    global ARGS
    ARGS = args


def bench_limit(args, cores: int) -> float:
    starts = list(range(0, args.images, args.batch_size))
    with Pool(cores, initializer=init_worker, initargs=(args,)) as pool:
        pool.map(transform_chunk, starts[:cores])  # warm up: imports, first allocations
        t = time.perf_counter()
        done = sum(pool.map(transform_chunk, starts, chunksize=1))
        return done / (time.perf_counter() - t)


def bench_ray(args, cores: int) -> float:
    import ray

    ray.init(num_cpus=cores, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": str(JOB_DIR)}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        warm = build_dataset(cores * args.batch_size, args.batch_size, args.image_size,
                             args.blur_count, args.blur_kernel)
        for _ in warm.iter_batches(batch_size=args.batch_size):
            pass
        dataset = build_dataset(args.images, args.batch_size, args.image_size,
                                args.blur_count, args.blur_kernel)
        t = time.perf_counter()
        done = sum(len(b["label"]) for b in dataset.iter_batches(
            batch_size=args.batch_size, batch_format="numpy", prefetch_batches=4))
        return done / (time.perf_counter() - t)
    finally:
        ray.shutdown()


class SyntheticImages:
    """The same images and transform as a map-style torch Dataset, one image per item."""

    def __init__(self, args):
        self.args = args
        self.stage = None

    def __len__(self):
        return self.args.images

    def __getitem__(self, i):
        if self.stage is None:
            self.stage = Preprocess(self.args.blur_count, self.args.blur_kernel)
        batch = make_images({"id": np.array([i])}, self.args.image_size)
        return self.stage.transform(batch["image"][0]), batch["label"][0]


def bench_dataloader(args, cores: int) -> float:
    import torch

    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(SyntheticImages(args), batch_size=args.batch_size,
                                         num_workers=cores, persistent_workers=True,
                                         prefetch_factor=4)
    iterator = iter(loader)
    for _ in range(cores):  # warm up the worker processes
        next(iterator)
    t = time.perf_counter()
    done = sum(len(labels) for _, labels in iterator)
    return done / (time.perf_counter() - t)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=384)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--blur-count", type=int, default=10)
    p.add_argument("--blur-kernel", type=int, default=11)
    args = p.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cores = os.cpu_count()
    print(f"{args.images} images of {args.image_size}px, {args.blur_count} x GaussianBlur"
          f"({args.blur_kernel}), batch {args.batch_size}, {cores} cores", flush=True)
    a = bench_limit(args, cores)
    print(f"(a) limit, {cores} processes      {a:8.1f} images/s", flush=True)
    b = bench_ray(args, cores)
    print(f"(b) Ray Data pipeline           {b:8.1f} images/s", flush=True)
    c = bench_dataloader(args, cores)
    print(f"(c) DataLoader(num_workers={cores})  {c:8.1f} images/s", flush=True)
    print(f"b/a = {b / a:.2f} (target >= 0.95)   b/c = {b / c:.2f} (target >= 1.00)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
