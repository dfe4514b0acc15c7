"""The job's data: synthetic images or JPEG/PNG files, and the heavy CPU preprocessing
(one Ray Data stage, BatchStage). The stage is wrapped in raykit.measure.measured, which
records the node that ran it and its CPU seconds per image: the job proves where
preprocessing ran and measures its cost per CPU (decoding included, for files).

Kept free of Ray Train so that the benchmark (scripts/benchmarks/bench_data.py) and the unit
tests run exactly the code the job runs.
"""

import io
import os
import zlib

import numpy as np
from raykit.autopilot import SETTINGS_ENV
from raykit.feed import one_batch_blocks
from raykit.measure import measured

NUM_CLASSES = 1000
IMAGE_EXTENSIONS = ["jpg", "jpeg", "png"]
# Batches a Ray Data task preprocesses. Ray Data notices a finished task only when its
# 0.1 s polling window ends, and each task pays its scheduling on top: 4 batches of the
# default 10 blurs run ~2 s a task, where that cost is lost in the noise (make bench-data:
# b/a 0.91 at 1 batch, 0.98 at 4 on 2 cores). Each batch leaves its task as soon as it is
# made (BatchStage), so a longer task delays no batch.
BATCHES_PER_TASK = 4
PATCH = 16               # the ViT's patch size: an image side is a multiple of it
MAX_IMAGE_SIZE = 1024    # a side past this is no training image (a batch of 16 at 1024px is 50 MB)
MAX_BLUR_COUNT = 50


def preprocessing_problems(batch_size: int, image_size: int, blur_count: int, blur_kernel: int,
                           batches_per_task: int) -> list[str]:
    """What is wrong with the preprocessing's flags, one phrase each: the job refuses them,
    and so does `make bench-data`, which measures the same pipeline."""
    problems = [f"--{name} must be at least 1 (got {value})" for name, value in
                (("batch-size", batch_size), ("image-size", image_size), ("blur-kernel", blur_kernel),
                 ("batches-per-task", batches_per_task)) if value < 1]
    if image_size >= 1 and (image_size % PATCH or image_size > MAX_IMAGE_SIZE):
        problems.append(f"--image-size must be a multiple of the ViT patch size {PATCH}, at most "
                        f"{MAX_IMAGE_SIZE} (got {image_size})")
    if blur_kernel >= 1 and blur_kernel % 2 == 0:
        problems.append(f"--blur-kernel must be odd (got {blur_kernel})")
    if not 0 <= blur_count <= MAX_BLUR_COUNT:
        problems.append(f"--blur-count must be between 0 and {MAX_BLUR_COUNT} (got {blur_count})")
    return problems


def make_images(batch: dict, image_size: int, num_classes: int = NUM_CLASSES) -> dict:
    """Random HWC uint8 images and labels, seeded by the record ids (reproducible): the
    synthetic stand-in for reading and decoding image files."""
    ids = batch["id"]
    rng = np.random.default_rng(int(ids[0]))
    return {"image": rng.integers(0, 256, (len(ids), image_size, image_size, 3), dtype=np.uint8),
            "label": rng.integers(0, num_classes, len(ids), dtype=np.int64), "id": ids}


def decode_images(batch: dict, image_size: int, num_classes: int = NUM_CLASSES) -> dict:
    """JPEG/PNG bytes -> HWC uint8 RGB images of image_size x image_size; the label is the
    folder a file sits in (a class number, or any name, hashed)."""
    from PIL import Image

    images, labels = [], []
    for data, path in zip(batch["bytes"], batch["path"]):
        with Image.open(io.BytesIO(data)) as image:
            image = image.convert("RGB")
            if image.size != (image_size, image_size):
                image = image.resize((image_size, image_size), Image.BILINEAR)
            images.append(np.asarray(image, dtype=np.uint8))
        parts = str(path).split("/")
        folder = parts[-2] if len(parts) > 1 else ""
        labels.append(int(folder) % num_classes if folder.isdigit()
                      else zlib.crc32(folder.encode()) % num_classes)
    return {"image": np.stack(images), "label": np.array(labels, dtype=np.int64)}


def build_transform(blur_count: int, blur_kernel: int):
    """ToTensor + GaussianBlur x blur_count: the seed's stand-in for heavy augmentation."""
    from torchvision import transforms

    return transforms.Compose(
        [transforms.ToTensor()]
        + [transforms.GaussianBlur(blur_kernel) for _ in range(blur_count)]
    )


# What the preprocessing ships to the trainers: uint8 CHW (the trainer's device scales it
# to [0, 1], normalize_on_device), a quarter of float32's bytes: every image a CPU worker
# makes crosses the train node's network (make plan's network term). "float32": the old
# way, kept for make bench-data's before/after.
SHIP_DTYPES = ("uint8", "float32")


class Preprocess:
    """HWC uint8 images -> CHW images through the heavy augmentation, shipped as uint8
    (or float32 in [0, 1]).

    It holds its settings only; the transforms are built on first use, in the process that
    runs them, with torch at one thread there (one Ray CPU per task). So the stage pickles
    small, and what unpickles it without running it (Ray Data's coordinator, which unpickles
    the dataset; the training workers, which import this module) imports neither torch nor
    torchvision: ~3 s of the first batch's wait on 2 cores. (Built in __init__, as it was,
    the one-thread setting ran in the driver and never in Ray's workers.)"""

    def __init__(self, blur_count: int, blur_kernel: int, ship: str = "uint8",
                 heavy: tuple[tuple[int, int], ...] | None = None):
        assert ship in SHIP_DTYPES, ship
        self.blur_count, self.blur_kernel, self.ship = blur_count, blur_kernel, ship
        # a load that changes during the run (make bench-autopilot): records in the heavy
        # [start, end) ranges get blur_count passes, the others one (None: every record heavy)
        self.heavy = heavy
        self._built = None

    def built(self) -> tuple:
        """(the heavy transform, the light one or None), made once per process."""
        if self._built is None:
            import torch

            torch.set_num_threads(1)
            light = (build_transform(min(1, self.blur_count), self.blur_kernel)
                     if self.heavy is not None else None)
            self._built = (build_transform(self.blur_count, self.blur_kernel), light)
        return self._built

    def is_heavy(self, record: int) -> bool:
        return any(start <= record < end for start, end in self.heavy)

    @property
    def transform(self):
        return self.built()[0]

    def __call__(self, batch: dict) -> dict:
        import torch

        heavy, light = self.built()
        ids = batch.get("id") if light is not None else None
        images = torch.stack([(heavy if ids is None or self.is_heavy(int(ids[i])) else light)(image)
                              for i, image in enumerate(batch["image"])])
        if self.ship == "uint8":
            images = images.mul_(255).round_().clamp_(0, 255).to(torch.uint8)
        return {"image": images.numpy(), "label": batch["label"]}


class BatchStage:
    """A task's records (ids, or files' bytes) -> the trainer's batches, `chunk` records at
    a time: `source` makes or decodes them (make_images, decode_images), then `preprocess`;
    each batch is yielded as soon as it is done, and with one_batch_blocks leaves the task
    then, not with the task's last one (raykit/feed.py)."""

    def __init__(self, source, preprocess, chunk: int, **source_kwargs):
        self.source, self.preprocess, self.chunk = source, preprocess, chunk
        self.source_kwargs = source_kwargs
        self.__name__ = f"{source.__name__}+{type(preprocess).__name__}"  # Ray Data's stage name

    def __call__(self, records: dict):
        rows = len(next(iter(records.values())))
        for start in range(0, rows, self.chunk):
            part = {key: column[start:start + self.chunk] for key, column in records.items()}
            yield self.preprocess(self.source(part, **self.source_kwargs))


def batch_bytes(batch_size: int, image_size: int, ship: str = "uint8") -> int:
    """One shipped batch's image bytes: the block size that keeps each batch a block."""
    return batch_size * 3 * image_size * image_size * (1 if ship == "uint8" else 4)


def normalize_on_device(images):
    """The trainer's side of the uint8 images: float in [0, 1], on its device (a float32
    batch, the old way, passes as it is)."""
    import torch

    return images.float().div_(255) if images.dtype == torch.uint8 else images


def build_dataset(num_records: int, batch_size: int, image_size: int, blur_count: int,
                  blur_kernel: int, files: tuple | None = None,
                  batches_per_task: int = BATCHES_PER_TASK, ship: str = "uint8",
                  heavy: tuple[tuple[int, int], ...] | None = None):
    """num_records images in tasks of batches_per_task training batches: synthetic
    (ray.data.range -> random images) where `files` is None, else JPEG/PNG files
    (image_files' filesystem and paths, read, then decoded on the preprocessing nodes);
    made and preprocessed a batch at a time in one stage (BatchStage), each batch a block
    that leaves its task when done.

    One stage taking whole blocks (batch_size=None) lets Ray Data fuse the read and the
    stage into one task per block: a map_batches(batch_size=N) after a read is never
    fused, and the separate read tasks then cost a quarter of the throughput. Where the
    tasks run is the DataContext's label selector (raykit.cluster.configure_data)."""
    import ray

    # Ray Data reserves part of the CPUs for each operator by default; with the cheap
    # read as its own operator that idles half of a small cluster's CPUs. Where the
    # autopilot steers, the reservation stays: it bounds Ray Data's tasks to the CPUs its
    # nodes have, so that no queue of tasks makes Ray's autoscaler add nodes by itself.
    ctx = ray.data.DataContext.get_current()
    ctx.op_resource_reservation_enabled = bool(os.environ.get(SETTINGS_ENV))
    ctx.op_resource_reservation_ratio = 0.0  # bounded, but no operator's share held back
    one_batch_blocks(batch_bytes(batch_size, image_size, ship), blocks_per_task=batches_per_task)
    # batches_per_task > 1: longer tasks amortise Ray Data's per-task cost (make bench-data)
    # (rounded up: a short run of a batch or two per CPU still spreads over the workers)
    blocks = -(-num_records // (batch_size * batches_per_task))
    preprocess = Preprocess(blur_count, blur_kernel, ship, heavy)
    if files is None:
        records = ray.data.range(num_records, override_num_blocks=blocks)
        stage = BatchStage(make_images, preprocess, batch_size, image_size=image_size)
    else:
        # the first num_records files of the listing: a limit() after the read would keep
        # Ray Data from fusing it with the stage
        filesystem, paths = files
        records = ray.data.read_binary_files(paths[:num_records], include_paths=True,
                                             override_num_blocks=blocks, filesystem=filesystem)
        stage = BatchStage(decode_images, preprocess, batch_size, image_size=image_size)
    return records.map_batches(measured(stage), batch_size=None, num_cpus=1)


def image_files(data: str) -> tuple:
    """(the filesystem of `data`, the JPEG/PNG files under it, sorted): `data` is an
    absolute directory or an s3:// URI. Listed once, by the driver: the job checks the
    count, and build_dataset reads exactly these."""
    import pyarrow.fs

    filesystem, root = pyarrow.fs.FileSystem.from_uri(data)
    infos = filesystem.get_file_info(pyarrow.fs.FileSelector(root, recursive=True))
    return filesystem, sorted(i.path for i in infos if i.type == pyarrow.fs.FileType.File
                              and i.path.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS)
