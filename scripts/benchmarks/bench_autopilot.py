"""make bench-autopilot: the autopilot against fixed mixes and the job without it (Ray's autoscalers).

The same ViT job (ARGS) on CLUSTER (default local_autopilot: quarter-core preprocess
nodes, so that each node adds throughput), one run after the other, each on a cluster of
its own (`make run`), the values file changed only as the row says:

  fixed_min  the preprocess type held at min_workers (autopilot off)
  fixed_max  held at max_workers (autopilot off)
  raydata    min..max workers, autopilot off: the job turns Ray Data's resource
             reservation off, so Ray's autoscaler starts nodes for its queue of tasks
             (up to max workers, before the first batch), beside Ray Data's own cluster
             autoscaler (it scales on its resource utilization)
  held       the autopilot on, held at min_workers by a $/h ceiling at what the mix costs
             there: the job as the autopilot runs it (Ray Data's resource reservation on),
             without its decisions. On a node whose rate is set by Ray Data's per-task
             latency, not its CPU (this bench's), the reservation moves the phases' rates
             (docs/benchmark-log.md, 2026-11-29): the simulator's calibration fits the
             autopilot row on this one
  autopilot  min..max workers, the kit's autopilot steering from the trainers' data wait

The default job's appetite changes: light (one blur pass), heavy (--blur-count passes),
light again (`--phases light:..,heavy:..,light:..`), on local_autopilot's mix: a head that
trains (no quota), one to three quarter-core preprocess nodes, each priced as a quarter of
one of a c5.4xlarge's vCPUs (scripts/pricing/cost.py). Measured (docs/benchmark-log.md): even
three nodes leave this trainer waiting in the heavy phase, so the bench does not yet show
the sizing the issue asks for.

Each row, from the run's own summary: the job's wall time, images/s over the steps after
the first, the trainers' data wait outside the start-up (mean, and per phase), the
preprocess node-seconds, the nodes' bill (priced as the values file's prices_as) and $ per
million images. Saved in build/bench/<time>-autopilot/: rows.json, rows.csv and the
autopilot run's timeline (autopilot.png).
"""

import copy
import csv
import os
import signal
import sys

import yaml

from jobs.raykit.contract import RunSummary
from scripts.build import build_text
from scripts.commands.checked import checked
from scripts.commands.jobs import run_once
from scripts.core import charts, roles
from scripts.core.errors import KitError, command_exit
from scripts.core.inputs import OneLineParser, check_name, json_text, split_args
from scripts.core.paths import BENCH
from scripts.core.results import summary_of
from scripts.kit import raise_keyboard_interrupt
from scripts.pricing.bench_table import new_run_dir
from scripts.core.tables import cell, text_table
from scripts.job_env import usd_per_hour_at_min
from scripts.pricing.cost import mix_prices, node_hour_prices

DEFAULT_ARGS = "--phases light:60,heavy:120,light:60 --blur-count 6 --image-size 96 --log-every 30"
ROWS = ("fixed_min", "fixed_max", "raydata", "held", "autopilot")
FIELDS = ["row", "preprocess_nodes", "wall_s", "images_per_s", "data_wait_fraction",
          "phase_wait_shares", "mean_wait_share", "preprocess_node_s", "usd", "usd_per_million_images"]


def variant(values: dict, row: str, held_at_usd_per_hour: float | None = None) -> dict:
    """The values file as `row` runs it: only the preprocess type's bounds, the autopilot's
    switch and, for `held`, its $/h ceiling (the mix's at min_workers) change."""
    values = copy.deepcopy(values)
    (kind,) = roles.preprocess_types(values)
    worker = values["workers"][kind]
    if row == "fixed_min":
        worker["max_workers"] = worker["min_workers"]
    if row == "fixed_max":
        worker["min_workers"] = worker["max_workers"]
    values["autopilot"]["enabled"] = row in ("held", "autopilot")
    if row == "held":
        values["autopilot"]["max_usd_per_hour"] = held_at_usd_per_hour
    return values


def moved_from(timeline: list[dict], count: int) -> int | None:
    """The first count other than `count` the autopilot asked for in its timeline (None:
    it held)."""
    return next((p["asked"] for p in timeline if p.get("asked") not in (None, count)), None)


def whole_run_wait_share(summary: RunSummary) -> float | None:
    """The trainers' wait over the whole run, ramp included: the first step (the pipeline's
    fill, which the summary's means leave out) counted as waiting."""
    rest, first = max(0, summary.steps - 1), summary.warmup_s
    total = summary.mean_step_s * rest + first if summary.mean_step_s is not None else 0
    return (summary.mean_data_wait_s * rest + first) / total if total > 0 else None


def measured(row: str, summary: RunSummary, kind: str, bounds: str) -> dict:
    images, usd, phases = summary.images, summary.usd, summary.phases  # all ranks' trained images
    return {"row": row, "policy": row, "preprocess_nodes": bounds, "wall_s": summary.wall_s,
            "images_per_s": summary.images_per_s, "data_wait_fraction": summary.data_wait_fraction,
            "phases": phases,
            "phase_wait_shares": " ".join(f"{p['load']} {p['wait_share']:.0%}" for p in phases
                                          if p.get("wait_share") is not None),
            "mean_wait_share": whole_run_wait_share(summary),
            "preprocess_node_s": summary.node_seconds.get(kind),
            "node_seconds": summary.node_seconds,
            "usd": usd, "usd_per_1k_images": usd / images * 1000 if usd is not None and images else None,
            "usd_per_million_images": usd / images * 1e6 if usd is not None and images else None,
            "timeline": (summary.autopilot or {}).get("timeline") or []}


def table(rows: list[dict]) -> list[str]:
    header = ("run", "preprocess nodes", "wall s", "images/s", "data wait", "per phase",
              "node-s", "$", "$/M images")
    return text_table([header] + [
        (r["row"], r["preprocess_nodes"], cell(r["wall_s"], ".0f"), cell(r["images_per_s"], ".1f"),
         cell(r["data_wait_fraction"], ".0%"), r["phase_wait_shares"] or "-",
         cell(r["preprocess_node_s"], ".0f"), cell(r["usd"], ".4f"),
         cell(r["usd_per_million_images"], ".2f")) for r in rows], left=(0, 1, 5))


def main(argv=None) -> int:
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # `kill`: the teardown still runs
    p = OneLineParser(see="python -m scripts.benchmarks.bench_autopilot --help", prefix="",
                      description=__doc__.split("\n\n")[0])
    # CLUSTER as the user gave it; the Makefile's own default (local) is not an autopilot mix
    given = os.environ.get("KIT_CLUSTER_ORIGIN", "command line") != "file"
    p.add_argument("--cluster", default=(given and os.environ.get("KIT_CLUSTER")) or "local_autopilot")
    p.add_argument("--args", default=os.environ.get("KIT_ARGS") or DEFAULT_ARGS, help="the job's flags")
    return command_exit(lambda: run(p.parse_args(argv)))


def run(a) -> int:
    cluster = check_name("CLUSTER", a.cluster)
    base = checked(cluster)
    kinds = roles.preprocess_types(base.values)
    if len(kinds) != 1 or base.values["workers"][kinds[0]]["min_workers"] >= \
            base.values["workers"][kinds[0]]["max_workers"]:
        raise KitError(f"CLUSTER={cluster}: bench-autopilot needs one preprocess worker type with "
                       "min_workers < max_workers (local_autopilot.yaml is one)")
    (kind,) = kinds
    priced = node_hour_prices(base, mix_prices(base))
    held_at = usd_per_hour_at_min(base.values, priced[0]) if priced else None
    rows_run = ROWS if held_at is not None else tuple(r for r in ROWS if r != "held")
    if held_at is None:
        print(f"note: no held row: it holds the autopilot at min_workers by a $/h ceiling, and '{cluster}' "
              "has no prices (a local mix's prices_as gives it them)", flush=True)
    # every variant built (and so checked) before the first cluster starts
    runs = {row: build_text(cluster, yaml.safe_dump(variant(base.values, row, held_at)).encode()) for row in rows_run}
    rows, reports = [], {}
    for i, (row, built) in enumerate(runs.items(), 1):
        w = built.values["workers"][kind]
        bounds = f"{w['min_workers']}" if w["min_workers"] == w["max_workers"] or row == "held" else \
            f"{w['min_workers']}-{w['max_workers']}"
        print(f"\n== bench-autopilot {i}/{len(runs)}: {row} ({kind} {bounds})", flush=True)
        code, summary = run_once(built, "vit_synthetic", split_args(a.args), None)
        if code != 0 or summary is None:
            raise KitError(f"bench-autopilot: the {row} run failed (exit {code}); its log is above")
        summary = summary_of(summary, f"the {row} run's summary")
        rows.append(measured(row, summary, kind, bounds))
        reports[row] = summary.autopilot
        if row == "held" and (moved := moved_from(rows[-1]["timeline"], w["min_workers"])):
            # its row is no longer the autopilot's job without its decisions: said, and marked
            rows[-1]["preprocess_nodes"] = f"{bounds}, moved"
            print(f"note: the held row's autopilot asked for {moved} node(s) where its ceiling holds it at "
                  f"{w['min_workers']}: that row is not the job without the autopilot's decisions", flush=True)
    out = new_run_dir(BENCH, "-autopilot")
    (out / "rows.json").write_text(json_text({"cluster": cluster, "args": a.args, "rows": rows,
                                              "autopilot": reports.get("autopilot")}) + "\n")
    with open(out / "rows.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")  # the lists stay in rows.json
        writer.writeheader()
        writer.writerows(rows)
    if reports.get("autopilot") and reports["autopilot"].get("timeline"):
        charts.autopilot_chart(reports["autopilot"], out / "autopilot.png")
    print(f"\nthe autopilot against fixed mixes and the autopilot off (Ray's and Ray Data's autoscalers) on '{cluster}', "
          f"ARGS=\"{a.args}\" (one run each, this machine, one after the other):")
    print("\n".join(table(rows)))
    print(f"saved in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
