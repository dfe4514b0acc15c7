"""A run's start at the level of Ray Data's tasks: when the first step ends and how long
the trainer then runs below speed (the ramp), for a data-bound ViT job on one GPU. The
world (world.py) plays supply a second at a time, too coarse for a ramp of a few
seconds; this plays each preprocessing CPU's tasks, each batch and Ray Data's 0.1 s
collection tick, and measures the steps with the kit's own arithmetic (jobs/raykit/
steady.py), as `make bench` measures a real run.

The model (docs/autopilot.md, "Calibration"):
- The pipeline opens `open_s` into the training function (Ray Data's coordinator starts;
  the feed is made before the model is built, so the two overlap).
- Each CPU runs one task at a time, tasks of BATCHES_PER_TASK batches of BATCH images
  (the job's defaults), each batch a block that leaves its task when made; a task takes
  its images times the row's CPU an image, times a lognormal spread. A CPU's first task
  also pays its process's imports and first allocations (`import_s`): the first wave is
  why a run ramps.
- Ray Data hands a made batch over at its executor's next 0.1 s tick; the trainer takes
  the batches in the order they come, waits when none is there, and computes each step in
  COMPUTE_S. It is ready before the first batch (its model is built while the pipeline
  fills), so the first step is the first batch's: a data-bound run's, as on the H100.

Fitted on one row (a machine's `local_gpu_single`): the first wave's extra seconds and
the later tasks' spread from its task table, the pipeline's opening from its first step.
Predicted: every row's first step and ramp, the fit row's ramp included (its task table
is an input, its ramp is not).
"""

import math
import random
import statistics
from dataclasses import dataclass

from jobs.raykit import steady

BATCH = 16                 # images a step (the ViT job's --batch-size)
BATCHES_PER_TASK = 4       # jobs/vit_synthetic/pipeline.py's BATCHES_PER_TASK
COLLECT_TICK_S = 0.1       # Ray Data's executor collects finished blocks every 0.1 s
COMPUTE_S = 0.052          # ViT-base's step of 16 on an H100 (docs/benchmark-log.md)
FIRST_STEP_TOLERANCE_S = 5.0
RAMP_TOLERANCE_S = 3.0
Z_90 = 1.2816              # the 90th percentile of a standard normal


@dataclass(frozen=True)
class StartRow:
    """A data-bound `make bench` row as measured (docs/benchmark-log.md)."""
    name: str
    cpus: int                    # preprocessing CPUs (Ray Data's tasks at once)
    cpu_s_per_image: float       # the row's own "CPU an image"
    steps: int
    first_step_s: float          # from the training function's start
    ramp_s: float


@dataclass(frozen=True)
class TaskTable:
    """What Ray's task table of the fit row says of its map tasks."""
    first_wave_s: tuple[float, ...]   # each CPU's first task
    median_s: float                   # the later tasks'
    p90_s: float                      # the later tasks' 90th percentile


@dataclass(frozen=True)
class StartFit:
    open_s: float                     # the training function's start -> the first tasks
    import_s: tuple[float, ...]       # each first task's extra over a later one
    task_sigma: float                 # the later tasks' lognormal spread
    cpu_s_per_image: float            # the fit row's (imports scale with a machine's speed)

    def imports_at(self, cpu_s_per_image: float) -> tuple[float, ...]:
        """The first wave's extra seconds on a machine whose tasks take cpu_s_per_image:
        a slower machine pays its imports slower alike."""
        return tuple(x * cpu_s_per_image / self.cpu_s_per_image for x in self.import_s)


def fit(row: StartRow, tasks: TaskTable) -> StartFit:
    """The pipeline opens where the fit row's first step says: its first batch is the
    quickest first task's import plus one batch, handed over at the next tick (half a
    tick on average), and the step computes after it."""
    imports = tuple(max(0.0, t - tasks.median_s) for t in tasks.first_wave_s)
    first_batch = min(imports) + BATCH * row.cpu_s_per_image
    return StartFit(open_s=row.first_step_s - COMPUTE_S - COLLECT_TICK_S / 2 - first_batch,
                    import_s=imports, task_sigma=math.log(tasks.p90_s / tasks.median_s) / Z_90,
                    cpu_s_per_image=row.cpu_s_per_image)


def play(row: StartRow, f: StartFit, seed: int) -> dict:
    """One run of the row's steps: the kit's steady-state figures of it (steady.py)."""
    rng = random.Random(seed)
    imports = f.imports_at(row.cpu_s_per_image)
    # the first CPUs' imports as the fit row's task table has them, any more drawn from them
    free = sorted((f.open_s + (imports[i] if i < len(imports) else rng.choice(imports)), i) for i in range(row.cpus))
    handed = []  # when each batch reaches the trainer
    for _ in range(math.ceil(row.steps / BATCHES_PER_TASK)):
        free.sort()
        t, cpu = free.pop(0)
        task_s = BATCHES_PER_TASK * BATCH * row.cpu_s_per_image * math.exp(rng.gauss(0.0, f.task_sigma))
        for _ in range(BATCHES_PER_TASK):
            t += task_s / BATCHES_PER_TASK
            handed.append(math.ceil(t / COLLECT_TICK_S) * COLLECT_TICK_S)
        free.append((t, cpu))
    ready = sorted(handed)[:row.steps]
    ends, waits, now = [], [], 0.0
    for at in ready:
        waits.append(max(0.0, at - now))
        now = max(now, at) + COMPUTE_S
        ends.append(now)
    return steady.steady_state(ends, waits, BATCH, steady.stock_steps(ready, ends[0]))


def predict(row: StartRow, f: StartFit, seeds: int = 20) -> dict[str, tuple[float, float, float]]:
    """(median, 10th, 90th percentile) over the seeds of the first step and the ramp."""
    runs = [play(row, f, seed) for seed in range(seeds)]
    out = {}
    for key in ("first_step_s", "ramp_s"):
        values = sorted(r[key] for r in runs if r[key] is not None)
        out[key] = (statistics.median(values), values[len(values) // 10], values[-1 - len(values) // 10])
    return out


def checks(rows: tuple[StartRow, ...], fitted: StartRow, f: StartFit, seeds: int = 20) -> list[tuple[str, bool, str]]:
    """(check, passed, what was compared): each row's first step within 5 s (but the
    fitted row's: the fit sets it), its ramp within 3 s."""
    found = []
    for row in rows:
        p = predict(row, f, seeds)
        for key, what, measured, tolerance in (("first_step_s", "first step", row.first_step_s, FIRST_STEP_TOLERANCE_S),
                                               ("ramp_s", "ramp", row.ramp_s, RAMP_TOLERANCE_S)):
            if row is fitted and key == "first_step_s":
                continue
            middle, low, high = p[key]
            found.append((f"{row.name} {what}", abs(middle - measured) <= tolerance,
                          f"measured {measured:.1f} s, simulated {middle:.1f} s (10-90%: {low:.1f}-{high:.1f}; "
                          f"within {tolerance:g} s)"))
    return found


# docs/benchmark-log.md, "Third: two H100 machines, the kit at f11882c (2026-11-27, later)":
# two machines of one kind; A's single row is the fit, with its task table (the 80% of the
# later tasks: 4.2-5.3 s). Earlier H100 rows ran a kit whose Ray Data stats actor started
# on the pipeline's first fill: another start, not played
FIT_ROW = StartRow("A local_gpu_single", 3, 0.0752, 200, first_step_s=7.8, ramp_s=4.6)
FIT_TASKS = TaskTable(first_wave_s=(5.9, 6.8, 12.1), median_s=4.7, p90_s=5.3)
ROWS = (FIT_ROW,
        StartRow("A local_gpu_hetero", 12, 0.0906, 250, first_step_s=9.1, ramp_s=0.0),
        # machine B: every task 40% slower, its imports taken as slower alike
        StartRow("B local_gpu_single", 3, 0.1060, 200, first_step_s=9.5, ramp_s=7.6))


def report(seeds: int = 20) -> tuple[bool, list[str]]:
    """(every check passed, the lines `make simulate` prints)."""
    f = fit(FIT_ROW, FIT_TASKS)
    found = checks(ROWS, FIT_ROW, f, seeds)
    lines = [f"calibration on make bench's start, H100 rows of 2026-11-27 (fitted on {FIT_ROW.name} and its task "
             f"table: the pipeline opens {f.open_s:.1f} s into the training function, first tasks "
             f"+{', +'.join(f'{x:.1f}' for x in f.import_s)} s of imports, later tasks' spread "
             f"{f.task_sigma:.2f}):"]
    lines += [f"  {'pass' if ok else 'MISS'}  {name}: {said}" for name, ok, said in found]
    return all(ok for _, ok, _ in found), lines
