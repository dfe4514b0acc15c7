"""Where a run's steady state begins, and its figures there, from the trainers' own step
records (measure.TrainProfile). Pure arithmetic, tested on traces.

A run has three parts:
  the first step   the start-up: Ray Data's start, the preprocessing processes' imports,
                   the model built and moved, the pipeline's first batch (first_step_s,
                   counted from the training function's start);
  the stock        the batches made while the first step was under way, which the trainer
                   then eats at its own pace: a rate that says nothing of what the
                   preprocessing delivers (a 100-step run on an H200 was fed mostly from
                   it, at more images/s than its CPUs make);
  the steady flow  every step after the stock. Its later half gives the steady rate (the
                   earlier half may still be ramping), and the ramp is the time from the
                   stock's end (the first step's, without a stock) until the trainer first
                   runs at RAMP_SHARE of that rate: the time it ran below speed.

A run with fewer than 2 x MIN_STEADY_STEPS steps after its stock has no steady state: it is
said to be too short, with the steps a run would need.
"""

import math
import statistics

MIN_STEADY_STEPS = 10   # the steady rate rests on at least this many steps
RAMP_SHARE = 0.9        # "at speed": this share of the steady rate
RAMP_WINDOW = 5         # steps in the rolling rate the ramp is judged on
EARLY_STEPS = slice(1, 5)  # steps 2-5: the data wait right after the start-up


def stock_steps(made_s: list[float | None], first_end_s: float) -> int:
    """Steps after the first whose batch was made before the first step ended (the
    start-up's stock): made_s[i] is when step i's batch was done, on the trainer's clock
    (None: the batch carries no time; counted as made in the steady flow)."""
    return sum(1 for made in made_s[1:] if made is not None and made < first_end_s)


def steady_state(ends_s: list[float], waits_s: list[float], images_per_step: int,
                 stock: int) -> dict:
    """ends_s: each step's end, in seconds from the training function's start (rank 0's;
    DDP keeps every rank in step); waits_s: each step's wait for data; images_per_step:
    every rank's images in one step; stock: steps after the first fed by the start-up's
    stock (stock_steps)."""
    steps = len(ends_s)
    later = waits_s[1:]
    out = {
        "first_step_s": ends_s[0] if steps else None,
        "stock_steps": stock,
        "wait_p50_s": percentile(later, 50),
        "wait_p95_s": percentile(later, 95),
        "early_wait_s": statistics.fmean(waits_s[EARLY_STEPS]) if waits_s[EARLY_STEPS] else None,
        "steady": False, "steady_from_step": None, "steady_steps": 0,
        "steady_images_per_s": None, "steady_step_s": None, "steady_wait_s": None,
        "steady_wait_share": None, "ramp_s": None, "steps_needed": None,
    }
    flow = steps - 1 - stock  # steps of the steady flow
    if flow < 2 * MIN_STEADY_STEPS:
        # the stock lasts as long in a longer run; where the run ended inside it, at least
        out["steps_needed"] = 1 + stock + 2 * MIN_STEADY_STEPS
        return out
    start = steps - flow // 2 - 1  # the later half of the flow: from the end of step `start`
    span = ends_s[-1] - ends_s[start]
    counted = steps - 1 - start
    if span <= 0:
        out["steps_needed"] = 1 + stock + 2 * MIN_STEADY_STEPS
        return out
    rate = counted * images_per_step / span
    wait = sum(waits_s[start + 1:])
    out |= {"steady": True, "steady_from_step": start + 2, "steady_steps": counted,
            "steady_images_per_s": rate, "steady_step_s": span / counted,
            "steady_wait_s": wait / counted, "steady_wait_share": wait / span,
            "ramp_s": ramp(ends_s, images_per_step, rate, stock)}
    return out


def ramp(ends_s: list[float], images_per_step: int, steady_rate: float, stock: int = 0) -> float | None:
    """Seconds from the stock's end (step 1 + stock) until a rolling window of RAMP_WINDOW
    steps first runs at RAMP_SHARE of the steady rate (0: at speed from there on). The
    stock itself is eaten at the trainer's own pace: never below speed."""
    window = min(RAMP_WINDOW, len(ends_s) - 1 - stock)
    for last in range(stock + window, len(ends_s)):
        span = ends_s[last] - ends_s[last - window]
        if span > 0 and window * images_per_step / span >= RAMP_SHARE * steady_rate:
            return ends_s[last - window] - ends_s[stock]
    return None


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of `values`; None where there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]
