"""`make bench`: does a heterogeneous mix pay? One table in the published results' shape.

Each row is one mix that ran the ViT job (the same ARGS for every mix), or a row read
back with FROM=rows.json (measured earlier, or published). A row holds:

  name                    the mix (local mixes: "local_hetero as hetero")
  usd_per_hour            on-demand $/h with the nodes it ran with (min_workers)
  mean_step_s             the trainer's mean step, wall time, in the steady state (after the
                          start-up's stock: jobs/raykit/steady.py), else over the whole run
  data_wait_share         the share of each step the trainer waited for data (likewise)
  trainer_utilization     NVML's GPU utilization where there is a GPU, else the busy
                          share of the trainer's step (1 - data_wait_share)
  cpu_utilization         per node type, the share of its CPUs the job kept busy
  images_per_s            images trained per second, all trainers together, in the steady
                          state; empty where the run was too short to reach it (a rate fed by
                          the start-up's stock says nothing of the mix)
  steady                  whether the run reached its steady state; steps_needed: where not,
                          the steps a run needs
  first_step_s, ramp_s    the start-up: the first step (from the training function's start)
                          and the time below the steady rate after it
  predicted_images_per_s  the planner's model (scripts/pricing/planner.py) from the FIRST row's
                          profile: min(trainer rate, preprocessing CPUs x rate per CPU);
                          empty where preprocessing shares the trainer's CPUs (a one-core
                          head), which the model does not describe
  usd_per_100_steps, usd_per_million_images, change (1 - $ per 100 steps / the first
                          row's: positive is cheaper per unit of training)

Only name, usd_per_hour and mean_step_s are required in a FROM file; the arithmetic is
scripts/pricing/formulas.py's, so a measured row and a published one mean the same thing.
"""

import csv
import re
import time
from pathlib import Path

from jobs.raykit.contract import RunSummary
from scripts.core.errors import KitError, short
from scripts.core.inputs import check_name, json_text, read_json
from scripts.core.state import make_dir
from scripts.pricing.formulas import cost_change, usd_per_100_steps, usd_per_million_images
from scripts.core.charts import chart_file
from scripts.core.tables import cell, text_table
from scripts.pricing.planner import predicted_images_per_s

FIELDS = ["name", "usd_per_hour", "mean_step_s", "data_wait_share", "trainer_utilization",
          "cpu_utilization", "images_per_s", "predicted_images_per_s", "steady", "steps_needed",
          "first_step_s", "ramp_s", "usd_per_100_steps", "usd_per_million_images", "change"]
REQUIRED = ("name", "usd_per_hour", "mean_step_s")
SHARES = ("data_wait_share", "trainer_utilization")
DERIVED = ("usd_per_100_steps", "usd_per_million_images", "change")  # recomputed, never read
# Starts with a letter or digit: a name can never be a spreadsheet formula in the CSV.
ROW_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.,:+()/-]{0,79}")
MAX_ROWS = 50
DEFAULT_CLUSTERS = "local_single local_hetero"  # the homogeneous baseline, then the mix


def cluster_names(text: str) -> list[str]:
    names = (text or DEFAULT_CLUSTERS).split()
    if not 1 <= len(names) <= 10:
        raise KitError(f"CLUSTERS={short(text)}: name 1 to 10 values files, separated by "
                       'spaces, e.g. CLUSTERS="single hetero"')
    names = [check_name("CLUSTERS", name) for name in names]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise KitError(f"CLUSTERS: {', '.join(repeated)} named twice; name each values file once")
    return names


def measured_row(name: str, usd_per_hour: float, summary: RunSummary, profile: RunSummary | None) -> dict:
    """A row from the job's summary (its RESULT line); `profile` is the first row's
    summary, whose measured rates predict this mix's images/s. The steady state's figures
    where the run reached it; otherwise no rate, and the steps a run would need."""
    steady = summary.reached_steady
    return {
        "name": name,
        "usd_per_hour": usd_per_hour,
        "mean_step_s": summary.steady_step_s if steady else summary.mean_step_s,
        "data_wait_share": summary.steady_wait_share if steady else summary.data_wait_fraction,
        "trainer_utilization": summary.trainer_utilization,
        "cpu_utilization": summary.cpu_utilization,
        "images_per_s": summary.steady_images_per_s if steady else None,
        "predicted_images_per_s": predicted(profile or summary, summary),
        "steady": steady,
        "steps_needed": None if steady else summary.steps_needed,
        "first_step_s": summary.first_step_s,
        "ramp_s": summary.ramp_s,
    }


def predicted(profile: RunSummary, summary: RunSummary) -> float | None:
    if summary.preprocess_shares_trainer_cpus:
        return None
    return predicted_images_per_s(profile.trainer_images_per_s, profile.preprocess_images_per_s_per_cpu,
                                  summary.preprocess_cpus)


def completed(rows: list[dict]) -> list[dict]:
    """The rows with the price-performance figures computed, in FIELDS order."""
    out = []
    for row in rows:
        full = {field: row.get(field) for field in FIELDS}
        full["usd_per_100_steps"] = usd_per_100_steps(row["usd_per_hour"], row["mean_step_s"])
        rate = row.get("images_per_s")
        full["usd_per_million_images"] = usd_per_million_images(row["usd_per_hour"], rate) if rate else None
        baseline = out[0]["usd_per_100_steps"] if out else full["usd_per_100_steps"]
        full["change"] = cost_change(full["usd_per_100_steps"], baseline) if baseline else None
        out.append(full)
    return out


# --- FROM=rows.json ------------------------------------------------------------------

def read_rows(path_text: str) -> list[dict]:
    """Rows from a file `make bench` saved (rows.json) or one written by hand: a list of
    objects, or {"rows": [...]}. Every problem is one line naming the row and field."""
    hint = 'pass a rows.json from build/bench/, or a list of {"name", "usd_per_hour", "mean_step_s"}'
    data = read_json("FROM", path_text, hint)
    if isinstance(data, dict) and "rows" in data:
        data = data["rows"]
    if not isinstance(data, list) or not 1 <= len(data) <= MAX_ROWS:
        raise KitError(f"FROM={short(path_text)}: not a list of 1 to {MAX_ROWS} rows; {hint}")
    rows = [checked_row(i, row) for i, row in enumerate(data)]
    names = [row["name"] for row in rows]
    for i, name in enumerate(names):
        if name in names[:i]:  # the chart would draw both as one bar
            raise KitError(f"FROM: rows[{i}].name: {short(name)} names rows[{names.index(name)}] "
                           "too; give each row a name of its own")
    return rows


def checked_row(i: int, row) -> dict:
    where = f"FROM: rows[{i}]"
    if not isinstance(row, dict):
        raise KitError(f"{where}: not an object; give name, usd_per_hour and mean_step_s")
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise KitError(f"{where}.{short(unknown[0], 40)[1:-1]}: not a field; the fields are "
                       f"{', '.join(FIELDS)}")
    for field in REQUIRED:
        if row.get(field) is None:
            raise KitError(f"{where}.{field}: missing; every row needs {', '.join(REQUIRED)}")
    if not isinstance(row["name"], str) or not ROW_NAME.fullmatch(row["name"]):
        raise KitError(f"{where}.name: {short(row['name'])} is not a name (letters, digits, "
                       "spaces and _.,:+()/x-, starting with a letter or digit, at most 80)")
    number(row, "usd_per_hour", where, low=MIN_USD_PER_HOUR, high=MAX_USD_PER_HOUR)
    number(row, "mean_step_s", where, low=MIN_STEP_S, high=MAX_STEP_S)
    for field in ("images_per_s", "predicted_images_per_s"):
        number(row, field, where, low=MIN_IMAGES_PER_S, high=MAX_IMAGES_PER_S, optional=True)
    for field in SHARES:
        number(row, field, where, low=0.0, high=1.0, optional=True)
    for field in ("first_step_s", "ramp_s"):
        number(row, field, where, low=0.0, high=MAX_STEP_S, optional=True)
    if row.get("steady") is not None and not isinstance(row["steady"], bool):
        raise KitError(f"{where}.steady: {short(row['steady'], 40)} is not true or false")
    if row.get("steps_needed") is not None and (isinstance(row["steps_needed"], bool) or not isinstance(
            row["steps_needed"], int) or not 1 <= row["steps_needed"] <= 10 ** 7):
        raise KitError(f"{where}.steps_needed: {short(row['steps_needed'], 40)} is not a whole "
                       "number of steps from 1 to 10000000")
    use = row.get("cpu_utilization")
    if use is not None:
        if not isinstance(use, dict) or len(use) > 20 or not all(
                isinstance(k, str) and ROW_NAME.fullmatch(k) for k in use):
            raise KitError(f"{where}.cpu_utilization: not an object of up to 20 node types "
                           "(names as for `name`) to shares from 0 to 1")
        for node_type in use:
            number(use, node_type, f"{where}.cpu_utilization", low=0.0, high=1.0)
    return {field: row.get(field) for field in FIELDS if field not in DERIVED}


# Plausible ranges of a row's figures: past them the table's arithmetic overflows or
# underflows (a 400-digit integer has no float; 1/5e-324 is inf) and says nothing.
MIN_USD_PER_HOUR, MAX_USD_PER_HOUR = 1e-6, 1e5  # a price of 0 would divide by zero
MIN_STEP_S, MAX_STEP_S = 1e-6, 1e5
MIN_IMAGES_PER_S, MAX_IMAGES_PER_S = 1e-6, 1e9


def number(row: dict, field: str, where: str, low: float, high: float,
           optional: bool = False) -> None:
    """A figure within [low, high], compared as it is (no float() of a huge integer)."""
    value = row.get(field)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise KitError(f"{where}.{field}: {short(value, 40)} is not a number from {low:g} to "
                       f"{high:g}")


# --- output --------------------------------------------------------------------------

def table(rows: list[dict]) -> list[str]:
    cells = [("mix", "$/h", "step s", "data wait", "trainer", "CPU use by node type",
              "images/s", "predicted", "first step", "ramp", "$/100 steps", "$/M images", "change")]
    for r in rows:
        use = ", ".join(f"{t} {u:.0%}" for t, u in sorted((r["cpu_utilization"] or {}).items())) or "-"
        rate = (cell(r["images_per_s"], ".1f") if r.get("steady") is not False
                else f"too short: run >= {r['steps_needed']} steps" if r.get("steps_needed")
                else "too short")
        cells.append((r["name"], cell(r["usd_per_hour"], ".3f"), cell(r["mean_step_s"], ".3f"),
                      cell(r["data_wait_share"], ".0%"), cell(r["trainer_utilization"], ".0%"), use,
                      rate, cell(r["predicted_images_per_s"], ".1f"),
                      cell(r.get("first_step_s"), ".1f", " s"), cell(r.get("ramp_s"), ".1f", " s"),
                      cell(r["usd_per_100_steps"], ".4f"), cell(r["usd_per_million_images"], ".2f"),
                      cell(r["change"], "+.0%")))
    return text_table(cells, left=(0, 5, 6))


def new_run_dir(bench_dir: Path, suffix: str = "") -> Path:
    """A new directory build/bench/<timestamp><suffix>/ for one bench's files."""
    stamp = time.strftime("%Y%m%d-%H%M%S") + suffix
    make_dir(bench_dir)
    for attempt in range(100):  # two benches in one second each get a directory
        out = bench_dir / (stamp if attempt == 0 else f"{stamp}-{attempt}")
        try:
            out.mkdir(parents=True)
            return out
        except FileExistsError:
            continue
    raise KitError(f"could not create a new directory under {bench_dir}")


def save(rows: list[dict], bench_dir: Path) -> Path:
    """build/bench/<timestamp>/: rows.json (FROM= reads it back), rows.csv, chart.png."""
    out = new_run_dir(bench_dir)
    (out / "rows.json").write_text(json_text({"rows": rows}) + "\n")
    with open(out / "rows.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow(r | {"cpu_utilization": "; ".join(
                f"{t}={u:.3f}" for t, u in sorted((r["cpu_utilization"] or {}).items()))})
    chart(rows, out / "chart.png")
    return out


def chart(rows: list[dict], path: Path) -> None:
    """$ per 100 steps and images/s per mix, side by side, the change written on the bars."""
    with chart_file(path, 2, (4 + 1.6 * len(rows), 4.5)) as (cost_ax, rate_ax):
        draw_mixes(rows, cost_ax, rate_ax)


def draw_mixes(rows: list[dict], cost_ax, rate_ax) -> None:
    names = [r["name"] for r in rows]
    bars = cost_ax.bar(names, [r["usd_per_100_steps"] for r in rows], color="#4c72b0")
    cost_ax.bar_label(bars, labels=[f"{r['change']:+.0%}" if r["change"] is not None else ""
                                    for r in rows])
    cost_ax.set_title("$ per 100 steps (lower is better)")
    measured = [r["images_per_s"] or 0 for r in rows]
    rate_ax.bar(names, measured, color="#55a868", label="measured")
    predicted = [(i, r["predicted_images_per_s"]) for i, r in enumerate(rows)
                 if r["predicted_images_per_s"] is not None]
    if predicted:
        rate_ax.scatter(*zip(*predicted), color="black", marker="_", s=600, label="predicted")
        rate_ax.legend()
    rate_ax.set_title("images/s (higher is better)")
    for ax in (cost_ax, rate_ax):
        ax.tick_params(axis="x", labelrotation=20)
