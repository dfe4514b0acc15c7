"""The job's data: synthetic images and the heavy CPU preprocessing (Ray Data stages).

Kept free of Ray Train so that the benchmark (scripts/benchmarks/bench_data.py) and the unit tests
run exactly the code the job runs.
"""

import time

import numpy as np
import torch
from torchvision import transforms

NUM_CLASSES = 1000


def make_images(batch: dict, image_size: int, num_classes: int = NUM_CLASSES) -> dict:
    """Random HWC uint8 images and labels, seeded by the record ids (reproducible). The
    CPU seconds it takes are the stand-in for reading and decoding real images: they are
    counted as preprocessing (the `preprocess_cpu_s` column that Preprocess adds to)."""
    start = time.thread_time()
    ids = batch["id"]
    rng = np.random.default_rng(int(ids[0]))
    images = rng.integers(0, 256, (len(ids), image_size, image_size, 3), dtype=np.uint8)
    labels = rng.integers(0, num_classes, len(ids), dtype=np.int64)
    seconds = time.thread_time() - start
    return {"image": images, "label": labels,
            "preprocess_cpu_s": np.full(len(ids), seconds / len(ids), dtype=np.float64)}


def build_transform(blur_count: int, blur_kernel: int) -> transforms.Compose:
    """ToTensor + GaussianBlur x blur_count: the seed's stand-in for heavy augmentation."""
    return transforms.Compose(
        [transforms.ToTensor()]
        + [transforms.GaussianBlur(blur_kernel) for _ in range(blur_count)]
    )


class Preprocess:
    """A Ray Data map_batches stage: HWC uint8 images -> normalized CHW float32.

    Each batch also records the node that ran it and the CPU seconds it took, so the job
    can prove where preprocessing ran and measure its throughput per CPU. CPU time, not
    wall time: where a task shares its core (with the trainer, or another node's tasks on
    an unpinned local cluster), wall time would count the other's share too."""

    def __init__(self, blur_count: int, blur_kernel: int):
        self.transform = build_transform(blur_count, blur_kernel)
        torch.set_num_threads(1)  # one Ray CPU per task: no oversubscription

    def __call__(self, batch: dict) -> dict:
        import ray

        start = time.thread_time()  # the transforms run on this thread (1 torch thread)
        images = torch.stack([self.transform(image) for image in batch["image"]]).numpy()
        seconds = time.thread_time() - start
        n = len(images)
        return {
            "image": images,
            "label": batch["label"],
            "node": np.array([ray.util.get_node_ip_address()] * n),
            "preprocess_cpu_s": batch["preprocess_cpu_s"] + seconds / n,
        }


def build_dataset(num_records: int, batch_size: int, image_size: int, blur_count: int,
                  blur_kernel: int, resources: dict | None = None):
    """ray.data.range -> random images -> preprocessing, one block per training batch so
    batches stream to the trainer one by one (no whole-block stalls).

    The stages take whole blocks (batch_size=None), which lets Ray Data fuse the range
    read and both maps into one task per batch: a map_batches(batch_size=N) after a read
    is never fused, and the separate read tasks then cost a quarter of the throughput."""
    import ray

    # Ray Data reserves part of the CPUs for each operator by default; with the cheap
    # range read as its own operator that idles half of a small cluster's CPUs.
    ray.data.DataContext.get_current().op_resource_reservation_enabled = False
    stage_resources = {"num_cpus": 1}
    if resources:
        stage_resources["resources"] = resources
    preprocess = Preprocess(blur_count, blur_kernel)
    return (
        ray.data.range(num_records, override_num_blocks=max(1, num_records // batch_size))
        .map_batches(make_images, fn_kwargs={"image_size": image_size},
                     batch_size=None, **stage_resources)
        .map_batches(preprocess, batch_size=None, **stage_resources)
    )
