"""How the kit writes PNG charts: `make bench`'s (scripts/pricing/) and each autopilot
run's timeline beside its summary (submit.keep_result). One way to write them, with no
display and nothing written outside the checkout."""

import os
from contextlib import contextmanager
from pathlib import Path

from scripts.core.paths import BUILD


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


def autopilot_chart(report: dict, path: Path) -> None:
    """The autopilot's run over time (jobs/raykit/autopilot.py's report): the preprocess
    nodes up, delivering and asked for, with their bounds; the trainers' data wait against its target,
    with the images/s they trained."""
    points = report["timeline"]
    t = [p["t"] for p in points]
    with chart_file(path, 2, (11, 4)) as (nodes_ax, wait_ax):
        nodes_ax.step(t, [p["preprocess_nodes"] for p in points], where="post", label="nodes up")
        nodes_ax.step(t, [p["asked"] for p in points], where="post", linestyle="--", label="asked for")
        if all("delivering" in p for p in points):  # timelines kept before 2026-11-27 lack it
            nodes_ax.step(t, [p["delivering"] for p in points], where="post", linestyle=":",
                          label="delivering (fed a trainer since joining)")
        for bound in (report["min_nodes"], report["max_nodes"]):
            nodes_ax.axhline(bound, color="grey", linewidth=0.5)
        nodes_ax.set(xlabel="seconds since the job started", ylabel=f"{report['node_type']} nodes",
                     ylim=(0, report["max_nodes"] + 0.5), title="preprocess nodes")
        nodes_ax.set_yticks(range(report["max_nodes"] + 1))  # whole nodes
        nodes_ax.legend(loc="upper left")
        wait_ax.plot(t, [None if p["wait_share"] is None else 100 * p["wait_share"] for p in points],
                     marker=".", label="trainers' data wait")
        wait_ax.axhline(100 * report["target_wait_share"], color="red", linestyle=":", label="target")
        wait_ax.set(xlabel="seconds since the job started", ylabel="% of each step", ylim=(0, 100),
                    title="data wait, and images/s")
        rate_ax = wait_ax.twinx()
        rate_ax.plot(t, [p["images_per_s"] for p in points], color="green", alpha=0.6, label="images/s")
        rate_ax.set_ylabel("images/s")
        wait_ax.legend(loc="upper left")
        rate_ax.legend(loc="upper right")
