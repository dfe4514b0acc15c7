"""`make bench JOB=adaptdl_mnist`: does AdaptDL pay on this cluster? AdaptDL's elastic
MNIST against the same model and data trained by fixed-size Ray Train (`--trainer fixed`,
on --max-replicas workers), one after the other on the same cluster, to the same target.

A row per trainer, from its job's summary (jobs/adaptdl_mnist/summary.py):

  trainer              adaptdl | fixed
  time_to_target_s     launcher start to the end of the first epoch at --target-accuracy
                       (start-up, rescales and evaluation included); empty if never reached
  usd_to_target        the cluster's $/h (the AWS mix it stands for, every node it holds:
                       a cluster of fixed size bills them all) x time_to_target_s
  replica_hours        replicas x the time each generation ran, the whole run: what a
                       cluster that released idle nodes at once would bill for them
  replicas_over_time   [seconds since the start, replicas] at each generation's start
  epochs, final_test_accuracy, max_replicas_used, restarts, wall_s
  replicas_per_epoch, global_batch_size_per_epoch, test_accuracy_per_epoch, end_s_per_epoch
                       the timeline the chart draws
  change               1 - usd_to_target / the fixed trainer's (positive: AdaptDL is cheaper)
"""

import csv
import json
from pathlib import Path

from scripts.core.errors import KitError
from scripts.core.inputs import json_text
from scripts.core.paths import REPO
from scripts.pricing.bench_table import new_run_dir
from scripts.core.charts import chart_file
from scripts.core.tables import cell, text_table

JOB_FLAGS = REPO / "jobs" / "adaptdl_mnist" / "flags.py"

TRAINERS = ("fixed", "adaptdl")  # the baseline first, as the mixes' bench puts its own
# The job's flags the bench sets before ARGS (ARGS may change them; the last one counts)
# and after (the trainer, which is the bench's to choose).
DEFAULT_ARGS = ["--target-accuracy", "0.9", "--epochs", "4"]
FIELDS = ["trainer", "time_to_target_s", "usd_to_target", "replica_hours", "epochs",
          "final_test_accuracy", "max_replicas_used", "restarts", "wall_s", "change",
          "replicas_over_time", "replicas_per_epoch", "global_batch_size_per_epoch", "test_accuracy_per_epoch",
          "end_s_per_epoch"]


def job_args(args: list[str], trainer: str) -> list[str]:
    return [*DEFAULT_ARGS, *args, "--trainer", trainer]


def check_args(args: list[str]) -> float:
    """The job's own flag checks on ARGS, here, before any cluster starts: its first
    problem as one error line. Returns the target accuracy the runs will stop at."""
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location("adaptdl_mnist_flags", JOB_FLAGS)
    flags = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flags)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            parsed = flags.parse(job_args(args, "fixed"))
    except SystemExit:
        problem = said.getvalue().strip().splitlines()[-1] if said.getvalue().strip() else "see ARGS=--help"
        raise KitError(f"ARGS: {problem.removeprefix('adaptdl_mnist: error: ')} "
                       "(`make submit JOB=adaptdl_mnist ARGS=--help` lists the flags)") from None
    if not parsed.target_accuracy:
        raise KitError("ARGS: --target-accuracy 0 sets no target; the bench times both trainers "
                       "to one, e.g. --target-accuracy 0.9")
    return parsed.target_accuracy


def row(trainer: str, usd_per_hour: float, summary: dict) -> dict:
    """A row from the job's RESULT line."""
    missing = [k for k in ("time_to_target_s", "replica_seconds", "replicas_over_time",
                           "end_s_per_epoch") if k not in summary]
    if missing:
        raise KitError(f"bench: the {trainer} run's summary lacks {', '.join(missing)}; "
                       "is jobs/adaptdl_mnist the kit's own?")
    to_target = summary["time_to_target_s"]
    return {
        "trainer": trainer,
        "time_to_target_s": to_target,
        "usd_to_target": None if to_target is None else usd_per_hour * to_target / 3600,
        "replica_hours": summary["replica_seconds"] / 3600,
        **{k: summary[k] for k in ("epochs", "final_test_accuracy", "max_replicas_used",
                                   "restarts", "wall_s", "replicas_over_time", "replicas_per_epoch",
                                   "global_batch_size_per_epoch", "test_accuracy_per_epoch",
                                   "end_s_per_epoch")},
    }


def completed(rows: list[dict]) -> list[dict]:
    """The rows with `change` against the fixed trainer's row, in FIELDS order."""
    base = next((r["usd_to_target"] for r in rows if r["trainer"] == "fixed"), None)
    return [{field: r.get(field) for field in FIELDS} | {
        "change": 1 - r["usd_to_target"] / base if base and r["usd_to_target"] is not None else None}
        for r in rows]


def table(rows: list[dict], target: float) -> list[str]:
    cells = [("trainer", f"s to {target:g}", "$ to target", "replica-h", "epochs",
              "final acc", "replicas from s", "global batch per epoch", "restarts", "change")]
    for r in rows:
        cells.append((r["trainer"], cell(r["time_to_target_s"], ".0f"), cell(r["usd_to_target"], ".4f"),
                      cell(r["replica_hours"], ".4f"), str(r["epochs"]),
                      cell(r["final_test_accuracy"], ".3f"),
                      " ".join(f"{k}@{t:.0f}" for t, k in r["replicas_over_time"]),
                      " ".join(map(str, r["global_batch_size_per_epoch"])), str(r["restarts"]),
                      cell(r["change"], "+.0%")))
    return text_table(cells, left=(0, 6, 7))


def save(rows: list[dict], meta: dict, bench_dir: Path) -> Path:
    """build/bench/<timestamp>-adaptdl/: rows.json, rows.csv, epochs.csv, chart.png."""
    out = new_run_dir(bench_dir, "-adaptdl")
    (out / "rows.json").write_text(json_text({**meta, "rows": rows}) + "\n")
    with open(out / "rows.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    with open(out / "epochs.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trainer", "epoch", "end_s", "replicas", "global_batch_size", "test_accuracy"])
        for r in rows:
            writer.writerows(zip([r["trainer"]] * r["epochs"], range(r["epochs"]), r["end_s_per_epoch"],
                                 r["replicas_per_epoch"], r["global_batch_size_per_epoch"],
                                 r["test_accuracy_per_epoch"]))
    chart(rows, meta["target_accuracy"], out / "chart.png")
    return out


def chart(rows: list[dict], target: float, path: Path) -> None:
    """Test accuracy, replicas and global batch size over time, a line per trainer."""
    with chart_file(path, 3, (13, 4)) as axes:
        draw_runs(rows, target, axes)


def draw_runs(rows: list[dict], target: float, axes) -> None:
    for r in rows:
        end = r["end_s_per_epoch"][-1]
        axes[0].plot(r["end_s_per_epoch"], r["test_accuracy_per_epoch"], marker="o", label=r["trainer"])
        # each generation's replicas hold from its start to the next one's (the last to the end)
        starts, replicas = zip(*r["replicas_over_time"])
        axes[1].step([*starts, end], [*replicas, replicas[-1]], where="post", label=r["trainer"])
        # each epoch's batch size (AdaptDL's at the epoch's end) from the previous epoch's end
        t = [0.0] + r["end_s_per_epoch"]
        axes[2].step(t, [r["global_batch_size_per_epoch"][0]] + r["global_batch_size_per_epoch"],
                     where="pre", label=r["trainer"])
    if target:
        axes[0].axhline(target, color="gray", linestyle="--", label=f"target {target:g}")
    axes[1].set_ylim(bottom=0)
    axes[1].yaxis.get_major_locator().set_params(integer=True)  # whole replicas
    for ax, title in zip(axes, ("test accuracy", "replicas", "global batch size")):
        ax.set_title(title)
        ax.set_xlabel("seconds from the job's start")
        ax.legend()
