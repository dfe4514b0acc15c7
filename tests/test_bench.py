"""`make bench`: the table's arithmetic on published rows, FROM= files as hostile input,
a small real bench of local_single vs local_hetero, and the CPU sets that make it honest."""

import csv
import json
import os
import re
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml

from conftest import REPO, load_example, make
from jobs.raykit import contract
from jobs.raykit.contract import run_summary
from scripts import kit
from scripts.build import build, build_text
from scripts.core.errors import KitError
from scripts.pricing import bench_table as bench
from scripts.pricing import cost
from scripts.providers.aws import prices as aws_prices
from scripts.providers.local import names as local_names
from scripts.job_env import job_env

# The published TensorFlow row (p4d.24xlarge alone vs + 2 x c5.18xlarge), in FROM's shape.
PUBLISHED = [{"name": "p4d.24xlarge", "usd_per_hour": 37.688, "mean_step_s": 0.192},
             {"name": "p4d.24xlarge + 2 x c5.18xlarge", "usd_per_hour": 45.032, "mean_step_s": 0.086}]


def test_published_rows_reproduce_the_paper_and_are_saved(tmp_path):
    rows_file = tmp_path / "published.json"
    rows_file.write_text(json.dumps(PUBLISHED))
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"))
    run = make("bench", f"FROM={rows_file}", env=env, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    alone, mixed = [next(line for line in lines if line.strip().startswith(r["name"] + " "))
                    for r in PUBLISHED]
    assert "0.2010" in alone and "+0%" in alone
    assert "0.1076" in mixed and "+46%" in mixed
    (saved,) = (tmp_path / "build" / "bench").iterdir()
    assert {p.name for p in saved.iterdir()} == {"rows.json", "rows.csv", "chart.png"}
    assert (saved / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(saved / "rows.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["name"] for r in table] == [r["name"] for r in PUBLISHED]
    assert float(table[1]["change"]) == pytest.approx(0.4648, abs=1e-4)
    # what was saved reads back to the same rows
    assert bench.completed(bench.read_rows(str(saved / "rows.json"))) == json.loads(
        (saved / "rows.json").read_text())["rows"]


def row(**changes):
    return [dict(PUBLISHED[0], **changes)]


BAD_ROWS = [
    ("no name", [{"usd_per_hour": 1, "mean_step_s": 1}], "rows[0].name: missing"),
    ("a formula as name", row(name="=HYPERLINK(\"x\")"), "rows[0].name"),
    ("a newline in a name", row(name="a\nb"), "rows[0].name"),
    ("negative price", row(usd_per_hour=-1), "rows[0].usd_per_hour"),
    ("a zero step", row(mean_step_s=0), "rows[0].mean_step_s"),
    ("a string step", row(mean_step_s="0.1"), "rows[0].mean_step_s"),
    ("a boolean price", row(usd_per_hour=True), "rows[0].usd_per_hour"),
    ("a share over 1", row(data_wait_share=1.5), "rows[0].data_wait_share"),
    ("a CPU share over 1", row(cpu_utilization={"head": 2}), "rows[0].cpu_utilization.head"),
    ("a formula as node type", row(cpu_utilization={"=cmd": 0.5}), "rows[0].cpu_utilization"),
    ("an unknown field", row(colour="red"), "rows[0].colour: not a field"),
    ("a list of numbers", [1, 2], "rows[0]: not an object"),
    ("no rows", [], "not a list of 1 to 50 rows"),
    ("too many rows", PUBLISHED * 30, "not a list of 1 to 50 rows"),
    ("an object without rows", {"name": "x"}, "not a list"),
]


@pytest.mark.parametrize("name,data,message", BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_bad_rows_are_one_line_naming_the_row_and_field(tmp_path, capsys, name, data, message):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(data))
    code = kit.main(["bench", "--from", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: FROM"), err
    assert message in err
    assert "Traceback" not in out + err


def test_nan_and_infinity_are_not_json(tmp_path, capsys):
    path = tmp_path / "rows.json"
    path.write_text('[{"name": "x", "usd_per_hour": NaN, "mean_step_s": Infinity}]')
    assert kit.main(["bench", "--from", str(path)]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_a_local_mix_is_priced_as_the_aws_mix_it_stands_for_with_its_own_counts():
    """Its own counts, and each preprocess node as its share of the type: local_hetero's
    worker, one pinned core, is one of a c5.4xlarge's 16 vCPUs; the head (the GPU) whole."""
    name, usd = cost.priced(build("local_hetero"))
    aws = build("hetero").values
    assert name == "local_hetero as hetero"
    worker = aws["workers"]["cpu_worker"]
    one_core = dict(aws, workers={"cpu_worker": dict(worker, min_workers=1, share=1 / 16)})
    assert usd == pytest.approx(aws_prices.hourly_cost(one_core)[0])
    whole = dict(aws, workers={"cpu_worker": dict(worker, min_workers=1)})
    assert aws_prices.hourly_cost(whole)[0] - usd == pytest.approx(
        aws_prices.worker_usd_per_hour(worker, aws["aws"]) * 15 / 16)
    assert cost.priced(build("local_single"))[1] == pytest.approx(aws_prices.hourly_cost(build("single").values)[0])
    unpriced = dict(load_example("local_single"), prices_as=None)
    with pytest.raises(KitError, match="sets no prices_as"):
        cost.priced(build_text("local_single", yaml.safe_dump(unpriced).encode()))


def test_the_planners_prediction_needs_dedicated_preprocessing_cpus():
    profile = run_summary({"diagnosis": {"trainer_images_per_s": 30.0, "preprocess_images_per_s_per_cpu": 12.0}})
    fed = run_summary({"preprocess_cpus": 4, "preprocess_shares_trainer_cpus": False})
    starved = run_summary({"preprocess_cpus": 1, "preprocess_shares_trainer_cpus": False})
    shared = run_summary({"preprocess_cpus": 2, "preprocess_shares_trainer_cpus": True})
    assert bench.predicted(profile, fed) == 30.0       # the trainer bounds it
    assert bench.predicted(profile, starved) == 12.0   # one CPU bounds it
    assert bench.predicted(profile, shared) is None    # the model does not apply


def marked(build_dir, clusters=("local_single", "local_hetero")):
    """Processes of any of the clusters started from build_dir (their marker says so)."""
    markers = {local_names.cluster_id(name, build_dir) for name in clusters}
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(local_names.MARKER) in markers:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return found


def raylet_cores(build_dir, cluster: str) -> dict[str, list[int]]:
    """The cores each node's raylet of `cluster` (started from build_dir) may run on, by
    the node's address."""
    found = {}
    for proc in marked(build_dir, [cluster]):
        try:
            args = " ".join(proc.cmdline())
            if "raylet" in proc.name() and "--node_ip_address=" in args:
                found[args.split("--node_ip_address=")[1].split()[0]] = proc.cpu_affinity()
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="local_hetero needs 2 cores")
def test_a_small_bench_runs_each_mix_on_cores_of_its_own_and_tears_each_down(tmp_path):
    build_dir = tmp_path / "build"
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(build_dir))
    proc = subprocess.Popen(["make", "--no-print-directory", "bench", "CLUSTERS=local_single local_hetero",
                             "ARGS=--steps 4 --batch-size 8 --image-size 64 --blur-count 2"],
                            cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # while local_hetero runs, each of its pinned nodes has a core of its own
    hetero_cores, seen = {}, set()
    while proc.poll() is None:
        now = raylet_cores(build_dir.resolve(), "local_hetero")
        hetero_cores |= now
        seen |= set(now)
        time.sleep(1)
    stdout, stderr = proc.communicate(timeout=900)
    run = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr
    cores = sorted(os.sched_getaffinity(0))
    assert hetero_cores == {"127.0.0.2": [cores[0]], "127.0.0.3": [cores[1]]}, seen
    assert run.stdout.count("tearing down") == 2
    assert not marked(build_dir.resolve()) and not list(build_dir.glob("launched/*.json"))
    (saved,) = (build_dir / "bench").iterdir()
    rows = json.loads((saved / "rows.json").read_text())["rows"]
    assert [r["name"] for r in rows] == ["local_single as single", "local_hetero as hetero"]
    single, hetero = rows
    assert single["usd_per_hour"] == pytest.approx(cost.priced(build("local_single"))[1])
    assert hetero["usd_per_hour"] == pytest.approx(cost.priced(build("local_hetero"))[1])
    for r in rows:
        # 4 steps are too few to leave the start-up's stock: no rate, the steps it would take
        # (the steady rows' arithmetic: test_a_row_reports_the_steady_state_or_says_it_is_too_short)
        assert r["steady"] is False and r["images_per_s"] is None and r["usd_per_million_images"] is None
        assert r["steps_needed"] >= 21 and f"too short: run >= {r['steps_needed']} steps" in run.stdout
        assert r["first_step_s"] > 0 and r["ramp_s"] is None
        assert all(r[field] is not None for field in bench.FIELDS if field not in (
            "predicted_images_per_s", "images_per_s", "usd_per_million_images", "steps_needed", "ramp_s"))
        assert 0 <= r["data_wait_share"] < 1 and 0 < r["trainer_utilization"] <= 1
    # node types as the values files name them; one core does it all on the single head
    assert set(single["cpu_utilization"]) == {"head"}
    assert set(hetero["cpu_utilization"]) == {"head", "cpu_worker"}
    assert single["predicted_images_per_s"] is None  # trainer and preprocessing share a core
    assert hetero["predicted_images_per_s"] > 0
    assert single["change"] == 0 and hetero["change"] == pytest.approx(
        1 - hetero["usd_per_100_steps"] / single["usd_per_100_steps"])
    assert "local_hetero as hetero" in run.stdout and f"saved in {saved}" in run.stdout

# A job's summary as make bench reads it, from a run that reached its steady state.
STEADY_SUMMARY = {"mean_step_s": 0.3, "data_wait_fraction": 0.05, "trainer_utilization": 0.95,
                  "cpu_use_by_node_type": {"head": {"utilization": 0.5}},
                  "preprocess_shares_trainer_cpus": True,
                  "steady": {"steady": True, "steady_step_s": 0.5, "steady_wait_share": 0.4,
                             "steady_images_per_s": 32.0, "first_step_s": 9.5, "ramp_s": 1.5,
                             "steps_needed": None}}


def test_a_row_reports_the_steady_state_or_says_it_is_too_short():
    """make bench's row from a summary: the steady state's step, wait and rate where the run
    reached it (the stock's faster steps left out), else no rate and the steps needed."""
    summary = STEADY_SUMMARY
    row = bench.measured_row("mix", 1.0, run_summary(summary), None)
    assert (row["mean_step_s"], row["data_wait_share"], row["images_per_s"]) == (0.5, 0.4, 32.0)
    assert row["steady"] is True and row["steps_needed"] is None
    assert (row["first_step_s"], row["ramp_s"]) == (9.5, 1.5)
    short = summary | {"steady": {"steady": False, "steps_needed": 57, "first_step_s": 30.0, "ramp_s": None}}
    too_short = bench.measured_row("short mix", 1.0, run_summary(short), None)
    assert too_short["images_per_s"] is None and too_short["steps_needed"] == 57
    assert too_short["mean_step_s"] == 0.3  # the whole run's, said not to be steady
    rows = bench.completed([row, too_short])
    assert rows[0]["usd_per_million_images"] == pytest.approx(1.0 / 3600 / 32.0 * 1e6)
    assert rows[1]["usd_per_million_images"] is None
    shown = "\n".join(bench.table(rows))
    assert "too short: run >= 57 steps" in shown and "9.5 s" in shown and "1.5 s" in shown
    # and read back from a rows file
    assert bench.completed([bench.checked_row(0, r) for r in rows]) == rows


@pytest.mark.parametrize("field,value,message", [
    ("steady", "yes", "rows[0].steady: 'yes' is not true or false"),
    ("steps_needed", 2.5, "rows[0].steps_needed: 2.5 is not a whole number of steps"),
    ("ramp_s", -1, "rows[0].ramp_s: -1 is not a number from 0"),
])
def test_bad_steady_fields_in_a_rows_file_are_one_line(field, value, message):
    with pytest.raises(KitError, match=re.escape(message)):
        bench.checked_row(0, {"name": "x", "usd_per_hour": 1, "mean_step_s": 1, field: value})


def test_bench_of_adaptdl_dry_run_names_both_runs_and_another_job_is_refused(tmp_path):
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"))
    run = make("bench", "JOB=adaptdl_mnist", "CLUSTER=local", "DRY_RUN=1", "ARGS=--epochs 3", env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-2:] == [
        f'would run: make submit CLUSTER=local JOB=adaptdl_mnist ARGS="--target-accuracy 0.9 '
        f'--epochs 4 --epochs 3 --trainer {trainer}"' for trainer in ("fixed", "adaptdl")]
    assert not (tmp_path / "build" / "launched").exists() or not list((tmp_path / "build" / "launched").iterdir())
    other = make("bench", "JOB=smoke", "CLUSTER=local", "DRY_RUN=1", env=env)
    assert other.returncode == 2
    assert other.stderr.strip().splitlines()[:1] == [
        "error: JOB=smoke: `make bench` compares the mixes of CLUSTERS on vit_synthetic (the "
        "default), or AdaptDL with fixed Ray Train on CLUSTER with JOB=adaptdl_mnist"]


@pytest.mark.parametrize("args,message", [
    ("--epochs 0", "ARGS: --epochs must be at least 1 (got 0)"),
    ("--target-accuracy nan", "ARGS: --target-accuracy must be a finite number (got nan)"),
    ("--target-accuracy 0", "ARGS: --target-accuracy 0 sets no target"),
    ("--trainer", "ARGS: argument --trainer: expected one argument"),
    ("--no-such-flag", "ARGS: unrecognized arguments: --no-such-flag"),
])
def test_bench_of_adaptdl_checks_the_jobs_flags_before_any_cluster_starts(tmp_path, args, message):
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"))
    run = make("bench", "JOB=adaptdl_mnist", "CLUSTER=local", f"ARGS={args}", env=env)
    assert run.returncode == 2
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: {message}") and "Traceback" not in run.stderr + run.stdout
    assert not (tmp_path / "build" / "launched").exists() or not list((tmp_path / "build" / "launched").iterdir())


@pytest.mark.slow
def test_bench_of_adaptdl_stops_the_cluster_it_started_when_a_run_fails(tmp_path):
    build_dir = tmp_path / "build"
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(build_dir))
    # 4 CPUs a worker fits no node: Ray Train would wait forever; --timeout ends the run
    run = make("bench", "JOB=adaptdl_mnist", "CLUSTER=local", "ARGS=--cpus 4 --timeout 5",
               env=env, timeout=600)
    assert run.returncode == 2, run.stdout[-4000:] + run.stderr
    assert "Ray Train did not finish within --timeout 5 s" in run.stdout
    assert "error: bench: the fixed run failed on 'local'" in run.stderr
    # Ray Train's run storage went too, though fit() never returned
    (storage,) = re.findall(r"\(its storage (/tmp/raykit-mnist-fixed-\w+), removed at the end\)", run.stdout)
    assert not Path(storage).exists()
    assert "tearing down 'local'" in run.stdout  # the bench started it: the bench stops it
    assert not marked(build_dir.resolve(), ["local"]) and not list(build_dir.glob("launched/*.json"))


# --- make bench-autopilot's rows (its runs are a benchmark: docs/benchmarks.md) ------

def test_bench_autopilots_rows_change_only_the_bounds_the_switch_and_the_held_rows_ceiling():
    from scripts.benchmarks import bench_autopilot
    from scripts.job_env import usd_per_hour_at_min
    from scripts.pricing.cost import mix_prices, node_hour_prices

    base = build("local_autopilot")
    values = base.values
    held_at = usd_per_hour_at_min(values, node_hour_prices(base, mix_prices(base))[0])  # hetero's head, one node
    assert held_at == pytest.approx(1.0224 + 0.691 / 16 * 0.25, rel=0.01)
    rows = {row: bench_autopilot.variant(values, row, held_at) for row in bench_autopilot.ROWS}
    bounds = {row: (v["workers"]["cpu_worker"]["min_workers"], v["workers"]["cpu_worker"]["max_workers"],
                    v["autopilot"]["enabled"], v["autopilot"]["max_usd_per_hour"]) for row, v in rows.items()}
    assert bounds == {"fixed_min": (1, 1, False, None), "fixed_max": (3, 3, False, None),
                      "raydata": (1, 3, False, None), "held": (1, 3, True, held_at), "autopilot": (1, 3, True, None)}
    for v in rows.values():  # nothing else moved
        v["workers"]["cpu_worker"] |= values["workers"]["cpu_worker"]
        assert v | {"autopilot": values["autopilot"]} == values
    for row, v in rows.items():  # each variant is a values file the kit accepts
        built = build_text("local_autopilot", yaml.safe_dump(v).encode())
        assert (cost_env_has_autopilot(built)) == (row in ("held", "autopilot"))
        if row == "held":  # the ceiling the job gets is the mix's $/h at min_workers, to the cent's fraction
            settings = json.loads(job_env(built)[contract.AUTOPILOT_ENV])
            least = settings["base_usd_per_hour"] + settings["node_usd_per_hour"] * settings["min_nodes"]
            assert settings["max_usd_per_hour"] == least


def test_a_mix_without_prices_runs_the_bench_without_its_held_row(monkeypatch, capsys):
    """The held row needs the autopilot's $/h ceiling, so a mix without prices skips it and
    says so; the runs are stood in (the first fails: the bench stops there, in one line)."""
    from scripts.benchmarks import bench_autopilot

    built_rows = []
    real_build = bench_autopilot.build_text
    monkeypatch.setattr(bench_autopilot, "node_hour_prices", lambda built, mix: None)
    monkeypatch.setattr(bench_autopilot, "build_text",
                        lambda cluster, text: built_rows.append(yaml.safe_load(text)) or real_build(cluster, text))
    monkeypatch.setattr(bench_autopilot, "run_once", lambda built, job, args, timeout: (1, None))
    import signal

    before = signal.getsignal(signal.SIGTERM)
    try:
        assert bench_autopilot.main(["--cluster", "local_autopilot"]) == 2
    finally:
        signal.signal(signal.SIGTERM, before)
    out, err = capsys.readouterr()
    assert "note: no held row: it holds the autopilot at min_workers by a $/h ceiling" in out
    assert len(built_rows) == 4 and not any(v["autopilot"]["max_usd_per_hour"] for v in built_rows)
    assert err.startswith("error: bench-autopilot: the fixed_min run failed (exit 1)") and len(err.splitlines()) == 1


def test_a_held_row_that_moved_is_told_apart():
    from scripts.benchmarks import bench_autopilot

    held = [{"t": 5.0, "asked": 1}, {"t": 10.0, "asked": 1}, {"t": 15.0}]
    assert bench_autopilot.moved_from(held, 1) is None and bench_autopilot.moved_from([], 1) is None
    assert bench_autopilot.moved_from(held + [{"t": 20.0, "asked": 2}, {"t": 25.0, "asked": 3}], 1) == 2


def cost_env_has_autopilot(built) -> bool:
    return contract.AUTOPILOT_ENV in job_env(built)


def test_bench_autopilot_refuses_a_mix_it_cannot_steer_before_anything_starts(capsys):
    from scripts.benchmarks import bench_autopilot

    import signal

    before = signal.getsignal(signal.SIGTERM)
    try:
        assert bench_autopilot.main(["--cluster", "local"]) == 2  # cpu_worker min = max = 2
    finally:
        signal.signal(signal.SIGTERM, before)  # main() makes SIGTERM a Ctrl-C, for its teardown
    err = capsys.readouterr().err
    assert err.startswith("error: CLUSTER=local: bench-autopilot needs one preprocess worker type with "
                          "min_workers < max_workers") and len(err.splitlines()) == 1


def test_make_bench_autopilot_takes_cluster_from_the_command_line():
    """Through make, as a user types it: CLUSTER given on the command line reaches the bench
    (make's origin of it, "command line", is two words: unquoted, the shell ran `line`)."""
    run = make("bench-autopilot", "CLUSTER=local", timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if not line.startswith("make")]
    assert errors == [line for line in errors if line.startswith("error: CLUSTER=local: bench-autopilot needs")]
    assert len(errors) == 1, run.stderr


def test_bench_autopilots_table_prices_a_million_images_and_each_phases_wait():
    from scripts.benchmarks import bench_autopilot

    timeline = [{"t": 5.0, "preprocess_nodes": 1, "asked": 3, "wait_share": 1.0, "images_per_s": None}]
    summary = {"steps": 30, "batch_size": 16, "workers": 1, "wall_s": 120.0, "images_per_s": 40.0,
               "data_wait_fraction": 0.25, "node_seconds": {"cpu_worker": 200.0, "head": 120.0},
               "bill": {"usd": 0.048}, "mean_step_s": 0.4, "mean_data_wait_s": 0.1, "warmup_s": 20.0,
               "autopilot": {"timeline": timeline},
               "phases": [{"load": "light", "steps": [1, 10], "wait_share": 0.02, "images_per_s": 45.0},
                          {"load": "heavy", "steps": [11, 30], "wait_share": 0.31, "images_per_s": 30.0}]}
    row = bench_autopilot.measured("autopilot", run_summary(summary), "cpu_worker", "1-3")
    assert row["usd_per_1k_images"] == pytest.approx(0.048 / 480 * 1000)
    assert row["usd_per_million_images"] == pytest.approx(0.048 / 480 * 1e6)
    # the ramp counts: the first step (20 s, the pipeline's fill) as waiting
    assert row["mean_wait_share"] == pytest.approx((0.1 * 29 + 20) / (0.4 * 29 + 20))
    assert row["policy"] == "autopilot" and row["node_seconds"] == summary["node_seconds"]
    assert row["timeline"] == timeline
    lines = bench_autopilot.table([row])
    assert lines[0].split()[:3] == ["run", "preprocess", "nodes"]
    assert row["phase_wait_shares"] == "light 2% heavy 31%"
    assert lines[1].split() == ["autopilot", "1-3", "120", "40.0", "25%", "light", "2%", "heavy", "31%",
                                "200", "0.0480", "100.00"]


def test_a_bench_stopped_by_ctrl_c_keeps_the_rows_it_measured(monkeypatch, capsys):
    """Ctrl-C (or a failed run) in the second mix: the first mix's row is saved, as
    `make bench FROM=` reads it, before the interrupt goes on to tear down and exit. The
    runs are stood in: what is checked is the command's bookkeeping, not a job."""
    from scripts.commands import priceperf

    runs = []

    def run_once(built, job, args, timeout):
        runs.append(built.cluster)
        if len(runs) == 2:
            raise KeyboardInterrupt
        return 0, STEADY_SUMMARY

    monkeypatch.setattr(priceperf, "run_once", run_once)
    monkeypatch.setattr(priceperf, "prepared", lambda built: built)  # no preflight of cores
    with pytest.raises(KeyboardInterrupt):
        priceperf.cmd_bench(kit.parse(["bench", "--clusters", "local_single local_hetero"]))
    assert runs == ["local_single", "local_hetero"]
    out = capsys.readouterr().out
    saved = re.search(r"rows so far saved in (\S+)", out).group(1)
    rows = bench.read_rows(f"{saved}/rows.json")
    assert [r["name"] for r in rows] == ["local_single as single"] and rows[0]["images_per_s"] == 32.0
