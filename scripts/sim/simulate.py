"""make simulate: the autopilot and the other policies at cloud prices and cloud start
times, on the traces of traces.py, through the simulated cluster of world.py.

Prints, per trace and policy, the medians over seeds (10-90% band of the $ per million
images): $ per million images, its change against fixed_max, the trainers' mean wait,
node-hours, count changes and the gap to the oracle; then (--map) the regime map: phase
length against the nodes' start latency D, where the autopilot wins or loses against the
best of the fixed choices (fixed_min, fixed_max, the planner's), the kit's job without it and Ray Data's rule,
saved as a PNG with the rows as JSON under build/sim/.

The mix is cluster_templates/hetero.yaml's, built and priced as `make cost` prices it (a
g5.xlarge that trains, c5.4xlarge preprocess nodes, disks included), its preprocess type between
--min-nodes and --max-nodes. The A10G's images/s (--trainer) and D (--start-minutes) are
not measured on AWS yet: the table says which values it ran with, and the map sweeps D.
It first plays its calibration (calibrate.py: fitted on each measured bench-autopilot
set's fixed rows, it predicts the set's other rows). A simulator that misses a check prints
no cloud table: `--uncalibrated` prints them anyway, as a ranking of policies under the
model's physics, no forecast of a bill.
"""

import copy
import dataclasses
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import yaml

from scripts import catalog
from scripts.build import build, build_text
from scripts.core import roles
from scripts.core.errors import KitError, command_exit
from scripts.core.inputs import OneLineParser, split_args
from scripts.core.paths import BUILD
from scripts.core.state import make_dir
from scripts.pricing.cost import node_hour_prices
from scripts.sim import calibrate
from scripts.sim.policies import POLICIES
from scripts.sim.traces import TRACES, from_spec, square_wave
from scripts.sim.world import Mix, band_index, run

MAP_MINUTES = (1, 2, 5, 10, 20, 40, 80, 160)   # phase length L
MAP_START_MINUTES = (0.5, 1, 2, 4, 8, 15)       # the nodes' start latency D, median
RIVALS = ("fixed_min", "fixed_max", "planner", "raydata", "raydata_rule")


def parser() -> OneLineParser:
    p = OneLineParser(see="make simulate ARGS=--help", prog="make simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("--hours", type=float, nargs="+", default=[4.0], help="each trace's length (default 4; e.g. 1 4 12)")
    p.add_argument("--seeds", type=int, default=10, help="runs per trace and policy, with different noise and D draws")
    p.add_argument("--trainer", type=float, default=130.0, help="the A10G's images/s never waiting (estimate: 100-160)")
    p.add_argument("--heavy-nodes", type=float, default=2.5,
                   help="the heavy phase's appetite, in preprocess nodes that feed the trainer")
    p.add_argument("--start-minutes", type=float, default=4.0, help="D: a node's ask -> first batch, median")
    p.add_argument("--min-nodes", type=int, default=1)
    p.add_argument("--max-nodes", type=int, default=4)
    p.add_argument("--traces", nargs="+", choices=sorted(TRACES), default=sorted(TRACES))
    p.add_argument("--phases", metavar="MINUTES:LOAD,...",
                   help="your job's own schedule instead of the traces: each phase's minutes and its CPU "
                        "per image against a heavy phase's (1; 0.25 light; or eval), e.g. 540:1,180:0.25")
    p.add_argument("--map", action="store_true", help="also the regime map (phase length x D), 3 seeds a cell")
    p.add_argument("--uncalibrated", action="store_true",
                   help="print the cloud tables though the calibration misses: a ranking under the model, no forecast")
    return p


def hetero_mix(a, spot: bool = False) -> tuple[Mix, str]:
    """`hetero.yaml` as the kit builds and prices it (each node type's $/h with its disks,
    scripts/pricing/cost.py; the preprocess type's vCPUs, as the template offers them), its
    preprocess type between --min-nodes and --max-nodes; and the mix in words. spot: its
    preprocess workers spot, priced as `make cost` would price them (the spot prices `make
    prices` read, else on-demand, said in the words)."""
    built = build("hetero")
    if spot:
        values = copy.deepcopy(built.values)
        for worker in values["workers"].values():
            worker["spot"] = worker["role"] == "preprocess"
        built = build_text("hetero", yaml.safe_dump(values).encode())
    priced = node_hour_prices(built)
    if priced is None:
        raise KitError("cluster_templates/hetero.yaml has no price: `make cost CLUSTER=hetero` says why")
    prices, basis = priced
    if spot and "spot" not in basis:
        basis += "; no spot prices read (`make prices CLUSTER=hetero`): spot workers at on-demand"
    (kind,) = roles.preprocess_types(built.values)
    head, worker = built.values["head"]["instance_type"], built.values["workers"][kind]["instance_type"]
    mix = Mix(head_usd_per_hour=prices["head"], node_usd_per_hour=prices[kind],
              node_vcpus=catalog.preprocess_vcpus(worker), min_nodes=a.min_nodes, max_nodes=a.max_nodes,
              start_median_s=60.0 * a.start_minutes)
    return mix, (f"{head} (${mix.head_usd_per_hour:.3f}/h) + {a.min_nodes}-{a.max_nodes} x {worker} "
                 f"(${mix.node_usd_per_hour:.3f}/h, {mix.node_vcpus} vCPUs preprocess), {basis}")


def heavy_cpu_s(a, mix: Mix) -> float:
    """One vCPU's seconds per image in a heavy phase: `--heavy-nodes` nodes feed the trainer."""
    return a.heavy_nodes * mix.node_vcpus * mix.efficiency / a.trainer


def one(job: tuple) -> dict:
    trace, mix, policy, seed = job
    out = run(trace, mix, POLICIES[policy](), seed)
    return {"trace": trace.name, "policy": policy, "seed": seed, "usd_per_million_images": out.usd_per_million_images,
            "mean_wait_share": out.mean_wait_share, "node_hours": out.node_s / 3600, "changes": out.changes,
            "images": out.images, "usd": out.usd, "wall_hours": out.wall_s / 3600}


def band(values: list[float]) -> tuple[float, float, float]:
    """(10th percentile, median, 90th percentile)."""
    ordered = sorted(values)
    return ordered[band_index(len(ordered), 0.1)], statistics.median(ordered), ordered[band_index(len(ordered), 0.9)]


def table(rows: list[dict], trace_name: str, about: str) -> list[str]:
    by = {p: [r for r in rows if r["trace"] == trace_name and r["policy"] == p] for p in POLICIES}
    median = {p: statistics.median(r["usd_per_million_images"] for r in rs) for p, rs in by.items()}
    lines = [f"trace {trace_name}: {about}",
             f"  {'policy':<12} {'$/M images (10-90%)':>22} {'vs fixed_max':>12} {'mean wait':>9} "
             f"{'node-h':>7} {'wall h':>6} {'changes':>7} {'oracle gap':>10}"]
    for policy, rs in by.items():
        low, mid, high = band([r["usd_per_million_images"] for r in rs])
        lines.append(f"  {policy:<12} {mid:>8.2f} ({low:>5.2f}-{high:>5.2f}) "
                     f"{mid / median['fixed_max'] - 1:>+12.0%} {statistics.median(r['mean_wait_share'] for r in rs):>9.1%} "
                     f"{statistics.median(r['node_hours'] for r in rs):>7.2f} "
                     f"{statistics.median(r['wall_hours'] for r in rs):>6.2f} "
                     f"{statistics.median(r['changes'] for r in rs):>7.0f} {mid / median['oracle'] - 1:>+10.0%}")
    rivals = min(RIVALS, key=lambda p: median[p])
    gain, possible = median[rivals] - median["autopilot"], median[rivals] - median["oracle"]
    lines.append(f"  the autopilot against the best other ({rivals}): {median['autopilot'] / median[rivals] - 1:+.0%}"
                 + (f"; of the oracle's saving over it, {gain / possible:.0%}" if possible > 0 else ""))
    return lines


def regime_map(a, mix: Mix, pool) -> list[dict]:
    """Square waves (heavy and light phases of L minutes) at each start latency D: per cell,
    the autopilot's median $ per million images against the best of its rivals'."""
    cells, jobs = [], []
    per_cell = 3 * (1 + len(RIVALS))
    for d in MAP_START_MINUTES:
        at_d = dataclasses.replace(mix, start_median_s=60.0 * d)
        for minutes in MAP_MINUTES:
            trace = square_wave(minutes, min(8.0, max(2.0, 8 * minutes / 60)), a.trainer, heavy_cpu_s(a, at_d))
            cells.append((d, minutes))
            jobs += [(trace, at_d, policy, seed) for policy in ("autopilot", *RIVALS) for seed in range(3)]
    rows = list(pool.map(one, jobs, chunksize=6))  # in the jobs' order: per_cell rows a cell
    out = []
    for i, (d, minutes) in enumerate(cells):
        cell = rows[i * per_cell:(i + 1) * per_cell]
        median = {p: statistics.median(r["usd_per_million_images"] for r in cell if r["policy"] == p)
                  for p in ("autopilot", *RIVALS)}
        best = min(RIVALS, key=lambda p: median[p])
        out.append({"start_minutes": d, "phase_minutes": minutes, "best_rival": best,
                    "autopilot_vs_best": median["autopilot"] / median[best] - 1, "medians": median})
    return out


def map_lines(cells: list[dict]) -> list[str]:
    lines = ["regime map: the autopilot's $ per million images against the best rival's, heavy/light "
             "phases of L minutes (rows: D, a node's start, median)",
             "  D \\ L   " + "".join(f"{m:>7g}" for m in MAP_MINUTES)]
    for d in MAP_START_MINUTES:
        row = [c for c in cells if c["start_minutes"] == d]
        lines.append(f"  {d:>5g} min" + "".join(f"{c['autopilot_vs_best']:>+7.0%}" for c in row))
    return lines


def map_chart(cells: list[dict], path, calibrated: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = [[next(c["autopilot_vs_best"] for c in cells if c["start_minutes"] == d and c["phase_minutes"] == m) * 100
             for m in MAP_MINUTES] for d in MAP_START_MINUTES]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    limit = max(5.0, max(abs(v) for row in grid for v in row))
    image = ax.imshow(grid, cmap="RdYlGn_r", vmin=-limit, vmax=limit, origin="lower", aspect="auto")
    ax.set_xticks(range(len(MAP_MINUTES)), [f"{m:g}" for m in MAP_MINUTES])
    ax.set_yticks(range(len(MAP_START_MINUTES)), [f"{d:g}" for d in MAP_START_MINUTES])
    ax.set_xlabel("heavy and light phases of L minutes each")
    ax.set_ylabel("D: a node's ask to first batch (min, median)")
    for y, row in enumerate(grid):
        for x, value in enumerate(row):
            ax.text(x, y, f"{value:+.0f}%", ha="center", va="center", fontsize=8)
    fig.colorbar(image, label="autopilot $/image vs the best rival (%; green: cheaper)")
    ax.set_title(f"Where the autopilot pays (simulated{'' if calibrated else ', NOT CALIBRATED'}; hetero mix, us-east-1)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    """argv: the flags (default: ARGS, as the Makefile exports it in KIT_ARGS)."""
    return command_exit(lambda: simulate(parser().parse_args(
        split_args(os.environ.get("KIT_ARGS", "")) if argv is None else argv)))


def simulate(a) -> int:
    for name in ("seeds", "min_nodes", "max_nodes"):
        if getattr(a, name) < (1 if name != "min_nodes" else 0):
            raise KitError(f"ARGS: --{name.replace('_', '-')} is too small")
    if a.max_nodes < max(1, a.min_nodes) or a.max_nodes > 16 or a.seeds > 200:
        raise KitError("ARGS: --max-nodes must be from max(1, --min-nodes) to 16, --seeds at most 200")
    for name in ("trainer", "heavy_nodes", "start_minutes"):
        if not 0 < getattr(a, name) < 1e4:
            raise KitError(f"ARGS: --{name.replace('_', '-')} must be a positive number")
    if any(not 0.1 <= h <= 48 for h in a.hours):
        raise KitError("ARGS: --hours must be from 0.1 to 48")
    mix, described = hetero_mix(a)
    spot_mix, spot_described = hetero_mix(a, spot=True)
    try:
        own = from_spec(a.phases, a.trainer, heavy_cpu_s(a, mix)) if a.phases is not None else None
    except ValueError as e:
        raise KitError(f"ARGS: --phases: {e}") from None
    calibrated, lines = calibrate.report()
    print("\n".join(lines))
    missed = sum(line.startswith("  MISS") for line in lines)
    judged = sum(line.startswith(("  MISS", "  pass")) for line in lines)
    if not calibrated and not a.uncalibrated:
        raise KitError(f"NOT CALIBRATED: the simulator misses {missed} of {judged} checks above, so it prints no "
                       "cloud table; ARGS=--uncalibrated prints them as a ranking under the model, no forecast")
    print("calibrated: every check passed" if calibrated else
          f"NOT CALIBRATED: {missed} of {judged} checks missed; the tables below (--uncalibrated) rank policies "
          "under the model's physics and forecast no bill")
    print()
    started = time.time()
    folder = BUILD / "sim" / time.strftime("%Y%m%d-%H%M%S")
    print(f"simulated: {described}; the A10G "
          f"takes {a.trainer:g} images/s, a heavy phase needs {a.heavy_nodes:g} nodes; D ~ {a.start_minutes:g} min "
          f"(lognormal); {a.seeds} seeds.")
    if not own and any(TRACES[name](1, a.trainer, 1).spot_per_hour for name in a.traces):
        print(f"spot traces: {spot_described}")
    rows = []
    with ProcessPoolExecutor(max_workers=2) as pool:
        for hours in ([own.seconds / 3600] if own else a.hours):
            traces = [own] if own else [TRACES[name](hours, a.trainer, heavy_cpu_s(a, mix)) for name in a.traces]
            jobs = [(trace, spot_mix if trace.spot_per_hour else mix, policy, seed)
                    for trace in traces for policy in POLICIES for seed in range(a.seeds)]
            found = list(pool.map(one, jobs, chunksize=4))
            for row in found:
                row["hours"] = hours
            rows += found
            for trace in traces:
                print()
                print("\n".join(table(found, trace.name, f"{trace.about} ({hours:.3g} h)")))
        cells = regime_map(a, mix, pool) if a.map else []
    make_dir(folder.parent)
    make_dir(folder)
    (folder / "rows.json").write_text(json.dumps({"args": vars(a), "rows": rows, "map": cells}, indent=1))
    if cells:
        print()
        print("\n".join(map_lines(cells)))
        map_chart(cells, folder / "regime.png", calibrated)
    print(f"\nrows: {folder / 'rows.json'}" + (f"; map: {folder / 'regime.png'}" if cells else "")
          + f" ({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
