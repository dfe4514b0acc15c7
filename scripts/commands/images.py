"""`make images`: a set of JPEG files a job reads with Ray Data (`--data DIR`), so the real
file path (read, decode, augment) runs offline on the local cluster.

The images are photo-like, not noise: a coarse random grid of colours blown up smoothly,
plus fine grain, so JPEG compresses and decodes them at a photo's cost (noise would be
several times larger and slower to decode). Files go under DIR/<class>/<n>.jpg; the job
takes the folder as the label. Seeded: the same flags write the same bytes.
"""

import os
from pathlib import Path

from scripts.core.errors import KitError, short
from scripts.core.inputs import OneLineParser, split_args
from scripts.core.paths import BUILD, REPO

DEFAULT_DIR = BUILD / "images"
MAX_COUNT = 100_000
CLASSES = 10


def parser() -> OneLineParser:
    p = OneLineParser(see="make images ARGS=--help", prog="make images ARGS=...", description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=512, help=f"images to write (1-{MAX_COUNT})")
    p.add_argument("--size", type=int, default=256, help="width and height in pixels (32-1024)")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality (50-100)")
    p.add_argument("--dir", default=str(DEFAULT_DIR),
                   help="where to write them: a new directory or an image set this wrote (relative "
                        "to the checkout, or absolute such as the data volume's host path)")
    return p


def cmd_images(a) -> int:
    options = parser().parse_args(split_args(a.args))
    for name, low, high in (("count", 1, MAX_COUNT), ("size", 32, 1024), ("quality", 50, 100)):
        if not low <= getattr(options, name) <= high:
            raise KitError(f"ARGS: --{name} {getattr(options, name)} is out of range; "
                           f"give {low} to {high}")
    directory = (REPO / options.dir).resolve()
    problem = directory_problem(directory)
    if problem:
        raise KitError(f"ARGS: --dir {short(options.dir)} {problem}")
    written = write_images(directory, options.count, options.size, options.quality)
    print(f"{options.count} JPEG images of {options.size}px in {directory} ({written / 2**20:.1f} MiB); "
          f"train on them: make submit ARGS=\"--data {directory}\"")
    return 0


def directory_problem(directory: Path) -> str | None:
    """Images go only into a new directory or an image set this command wrote (class
    folders 0-9 and nothing else): never among someone's files, nor into /etc or $HOME."""
    if not directory.exists():
        return None
    if not directory.is_dir():
        return "is not a directory; name a new one"
    others = [p.name for p in directory.iterdir() if not (p.is_dir() and p.name.isdigit())]
    if others:
        return (f"holds other files ({short(others[0])}, ...); name a new directory or one "
                "that `make images` wrote")
    return None


def write_images(directory: Path, count: int, size: int, quality: int) -> int:
    """Write count images; return the bytes written."""
    import numpy as np
    from PIL import Image

    total = 0
    for n in range(count):
        rng = np.random.default_rng(n)
        coarse = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
        image = Image.fromarray(coarse).resize((size, size), Image.BICUBIC)
        grain = rng.normal(0, 6, (size, size, 3))
        pixels = np.clip(np.asarray(image, dtype=np.float32) + grain, 0, 255).astype(np.uint8)
        path = directory / str(n % CLASSES) / f"{n:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        Image.fromarray(pixels).save(tmp, "JPEG", quality=quality)
        os.replace(tmp, path)
        total += path.stat().st_size
    return total
