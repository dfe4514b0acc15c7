"""The workloads the simulator plays: each a sequence of phases, in time (not steps), with
the trainer's images/s and the CPU cost per image. `trainer` is the GPU's images/s at full
size (the A10G's is not measured yet: swept), `cpu_s` one vCPU's seconds per image of the
kit's heavy pipeline (10 blurs at 224 px: ~0.1-0.14 s on a c5 vCPU, estimated from the
measured 9.9-12.8 images/s a host core, docs/benchmark-log.md)."""

import math
import random

from scripts.sim.world import Phase, Trace

HOUR = 3600.0
LIGHT = 0.25  # a light phase's CPU cost, of the heavy one's (one blur pass against ten, about)


def bench_stretched(hours: float, trainer: float, cpu_s: float) -> Trace:
    """`make bench-autopilot`'s own job (light, heavy, light: 60/120/60 steps), stretched."""
    s = hours * HOUR
    return Trace("bench_stretched", (Phase(s / 4, trainer, cpu_s * LIGHT), Phase(s / 2, trainer, cpu_s),
                                     Phase(s / 4, trainer, cpu_s * LIGHT)),
                 "the bench's light/heavy/light job, its phases in hours")


def heavy_first(hours: float, trainer: float, cpu_s: float) -> Trace:
    """Heavy from the first batch (strong augmentation at the start), then light."""
    s = hours * HOUR
    return Trace("heavy_first", (Phase(0.4 * s, trainer, cpu_s * 1.5), Phase(0.6 * s, trainer, cpu_s * LIGHT)),
                 "heavy from the first batch (1.5x), light after 40%")


def progressive_resizing(hours: float, trainer: float, cpu_s: float) -> Trace:
    """FFCV's ImageNet schedule (rn50_88_epochs): 160 px for 75% of the run, a ramp to
    192 px, 192 px to the end. The GPU's cost grows with the pixels, decoding does not:
    the appetite for preprocessing is highest early ((192/160)^2 = 1.44x)."""
    s = hours * HOUR
    return Trace("progressive_resizing", (Phase(0.75 * s, trainer * 1.44, cpu_s),
                                          Phase(0.12 * s, trainer * 1.2, cpu_s),
                                          Phase(0.13 * s, trainer, cpu_s)),
                 "FFCV's resizing: 1.44x the images/s early, at the same decode cost")


def curriculum(hours: float, trainer: float, cpu_s: float) -> Trace:
    """Heavy augmentation for 75% of the run (RandAugment's magnitude), then light fine-tuning."""
    s = hours * HOUR
    return Trace("curriculum", (Phase(0.75 * s, trainer, cpu_s), Phase(0.25 * s, trainer, cpu_s * LIGHT)),
                 "heavy augmentation for 75%, then light")


def periodic_eval(hours: float, trainer: float, cpu_s: float) -> Trace:
    """Train 30 minutes, evaluate 3 (no training step; the pipeline idles), repeated."""
    phases, left = [], hours * HOUR
    while left > 0:
        phases.append(Phase(min(1800.0, left), trainer, cpu_s))
        left -= 1800.0
        if left > 0:
            phases.append(Phase(min(180.0, left), 0.0, cpu_s, kind="eval"))
            left -= 180.0
    return Trace("periodic_eval", tuple(phases), "train 30 min, evaluate 3 min, repeated")


def mixing(hours: float, trainer: float, cpu_s: float, seed: int = 7) -> Trace:
    """Blocks of 2-10 minutes from three sources of different decode cost, in random order:
    phases about as long as a node's start (a negative control for any reactive policy)."""
    rng, phases, left = random.Random(seed), [], hours * HOUR
    while left > 0:
        length = min(left, rng.uniform(120.0, 600.0))
        phases.append(Phase(length, trainer, cpu_s * rng.choice((0.5, 1.0, 1.5))))
        left -= length
    return Trace("mixing", tuple(phases), "2-10 min blocks of 0.5x, 1x or 1.5x cost")


def spot_heavy(hours: float, trainer: float, cpu_s: float) -> Trace:
    """Steady heavy preprocessing on spot workers, interrupted twice an hour a node (a stress)."""
    return Trace("spot_heavy", (Phase(hours * HOUR, trainer, cpu_s),),
                 "steady heavy on spot workers, 2 interruptions a node-hour", spot_per_hour=2.0)


def square_wave(minutes: float, hours: float, trainer: float, cpu_s: float) -> Trace:
    """Heavy and light phases of `minutes` each, alternating, for the regime map."""
    phases, left, heavy = [], hours * HOUR, True
    while left > 0:
        phases.append(Phase(min(minutes * 60.0, left), trainer, cpu_s if heavy else cpu_s * LIGHT))
        left -= minutes * 60.0
        heavy = not heavy
    return Trace(f"square_{minutes:g}min", tuple(phases), f"heavy/light every {minutes:g} min")


MAX_PHASES = 200


def from_spec(spec: str, trainer: float, cpu_s: float) -> Trace:
    """A user's own schedule, `MINUTES:LOAD,...`: each phase's length with the trainer never
    waiting, and its CPU cost per image against a heavy phase's (1: `cpu_s`; 0.25: about
    one blur pass against ten), or `eval` (no training step; the pipeline idles). Raises
    ValueError naming the first item that is not one."""
    phases = []
    items = spec.split(",")
    if not spec.strip() or len(items) > MAX_PHASES:
        raise ValueError(f"give 1 to {MAX_PHASES} phases as MINUTES:LOAD, comma-separated (e.g. 540:1,180:0.25)")
    for item in items:
        minutes, sep, load = item.strip().partition(":")
        try:
            length = float(minutes)
            cost = None if load.strip() == "eval" else float(load)
        except ValueError:
            length, cost = math.nan, math.nan
        if not sep or not 0 < length <= 48 * 60 or (cost is not None and not 0.01 <= cost <= 10):
            raise ValueError(f"{item.strip()[:40]!r} is not MINUTES:LOAD (minutes over 0 up to 2880, a load "
                             "from 0.01 to 10 times a heavy phase's CPU per image, or eval)")
        phases.append(Phase(length * 60, 0.0, cpu_s, kind="eval") if cost is None
                      else Phase(length * 60, trainer, cpu_s * cost))
    if sum(p.seconds for p in phases) > 48 * HOUR:
        raise ValueError("the phases add up to more than 48 hours")
    return Trace("your_phases", tuple(phases), f"your phases ({spec.strip()[:60]})")


TRACES = {f.__name__: f for f in (bench_stretched, heavy_first, progressive_resizing, curriculum,
                                  periodic_eval, mixing, spot_heavy)}
