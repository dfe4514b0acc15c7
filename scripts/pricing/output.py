"""How the pricing commands show what they computed: aligned text tables for the terminal
and PNG charts for the files `make bench` saves. One place for both, so every table lines
up the same way and every chart is written the same way."""

import os
from contextlib import contextmanager
from pathlib import Path

from scripts.core.paths import BUILD


def text_table(rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> list[str]:
    """Rows of cells (the header first) as lines: the columns in `left` (names) aligned
    left, the others (figures) right, two spaces between columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) if i in left else cell.rjust(width)
                      for i, (cell, width) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


def cell(value, spec: str) -> str:
    """A figure formatted by `spec`, or '-' where there is none."""
    return "-" if value is None else format(value, spec)


@contextmanager
def chart_file(path: Path, columns: int, size: tuple[float, float]):
    """Axes of a figure of `columns` side-by-side charts; on leaving, the figure is laid
    out, written to `path` (PNG) and closed. No display is needed: files only."""
    # matplotlib keeps its font cache in ~/.cache unless told: the kit writes nothing
    # outside the checkout that the user did not name
    os.environ.setdefault("MPLCONFIGDIR", str(BUILD / "cache" / "matplotlib"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, columns, figsize=size)
    try:
        yield axes
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
