"""Calibration before prediction: the simulator, fitted on two rows of one measured run set,
plays the set's other rows, and says how close it lands. Absolute figures differ up to
2.4x between sets on the 2-core machine, so a fit never crosses sets: each set below is
fitted on its own fixed rows and judged on its own other rows.

The sets: `make bench-autopilot` runs (docs/benchmark-log.md): the ViT job, phases of so
many steps of 16 images (light: one blur pass an image, heavy: --blur-count), on
local_autopilot (a 2-core head that trains; 1-3 preprocess nodes of a quarter core),
priced as hetero (the head as a g5.xlarge, a node as a quarter of one of a c5.4xlarge's
vCPUs).

Fitted, from fixed_min and fixed_max only (and held, where a set has it):
- the trainer's images/s never waiting, and what each node at work beside it on the one
  host takes from it: a line through both rows' images/s over one less their wait;
- one node's images/s in each phase: fixed_min's per phase (one node, the trainer's rate
  times one minus the phase's wait); for the autopilot's row, held's where the set has it
  (make bench-autopilot's row of the job as the autopilot runs it, held at one node: Ray
  Data's resource reservation on moves a latency-bound node's phase rates, light faster
  and heavy slower, docs/benchmark-log.md), else fixed_min's;
- the start before the first step: each fixed row's wall time less its steps' time (mean);
- a node's start (local, measured on its own, not fitted): joins ~4 s after the ask, first
  batch 16-23 s later.

Predicted: the raydata and autopilot rows (raydata: the kit's job with the autopilot off,
Ray's autoscaler answering its queue of tasks and Ray Data's rule; the autopilot: the one
that ran, with local_autopilot's settings: the checkout's own Steering, or an earlier
commit's policy driven as its driver drove it, scripts/sim/history.py), and the
autopilot's own asks. The checks: (a) the ranking by $ per million images, of the rows
measured more than RANK_GAP apart (closer, one run each, their order is the machine's
noise); (b) each row's $ per million images and wall time within 20%; (c) the
autopilot's asks within two polls (10 s); (e) whether the autopilot gave nodes back, as
it did or did not in the measured run; (f) where only their number was kept, how often
it changed. A measured row is one run, the model's ten seeds ten: a row is judged on
the median seed's play, or, where that misses, on a play inside the seeds' 10-90% band
(played_as: where a policy's course forks, the seeds play each course). An earlier
policy's sets include runs of it again, later, from its own commit: whether a miss is
the model's or that hour's.

A run's start (its first step and ramp: start.py, fitted on an H100 row of its own) is
checked beside them: the simulator is calibrated when both pass.
"""

import math
import statistics
from dataclasses import dataclass

from scripts.sim import history, policies, start
from scripts.sim.world import Mix, Phase, Trace, band_index, run

BATCH = 16
HEAD_USD_PER_HOUR = 1.0224           # hetero's g5.xlarge head with its disk (make cost CLUSTER=hetero)
NODE_USD_PER_HOUR = 0.691 / 16 * 0.25  # a quarter of one of a c5.4xlarge's 16 vCPUs, with its disk
COOLDOWN_S = 10.0                    # local_autopilot.yaml's
JOIN_S, FIRST_BATCH_S = 4.0, 19.5    # ask -> join; join -> first batch (16-23 s measured)
DRAIN_S = 58.5                       # given back -> its raylet exits (43.9-77.6 s measured, 3 drains: its blocks freed)
TOLERANCE = 0.20
ASK_TOLERANCE_S = 10.0
RANK_GAP = 0.10                      # rows closer than this in $/M images are not ranked
CHANGES_FACTOR = 2.0                 # a count of changes (times not kept) within this factor
BOUNDS = {"fixed_min": (1, 1), "fixed_max": (3, 3), "raydata": (1, 3), "held": (1, 1), "autopilot": (1, 3)}
# the rows that run the job as the autopilot runs it, Ray Data's resource reservation on
# (make bench-autopilot's held, from 2026-11-29 17:00): one node's rates differ there
RESERVED = ("held", "autopilot")
# the two jobs: the bench's default, and a load that drops (--blur-count 30 --image-size 96)
LIGHT_HEAVY_LIGHT = (("light", 60), ("heavy", 120), ("light", 60))
HEAVY_THEN_LIGHT = (("heavy", 60), ("light", 60))


@dataclass(frozen=True)
class Row:
    wall_s: float
    images_per_s: float
    wait: float                       # over the steps after the first
    phase_waits: tuple[float, ...]    # one per phase of the set
    node_s: float
    usd_per_million_images: float


@dataclass(frozen=True)
class RunSet:
    name: str
    logged: str                                  # its heading in docs/benchmark-log.md
    phases: tuple[tuple[str, int], ...]          # (light | heavy, steps)
    rows: dict[str, Row]
    asks: tuple[tuple[float, int], ...]          # the autopilot's: (s from the job's start, nodes asked)
    load_signal: bool = False                    # its driver passed the nodes' CPUs in use (from 2026-11-29)
    policy: str = ""                             # the commit whose autopilot ran ("": this checkout's Steering)
    changes: int | None = None                   # the autopilot's changes, where their times were not kept

    @property
    def images(self) -> int:
        return BATCH * sum(steps for _, steps in self.phases)


def gave_back(asks) -> bool:
    """Whether the autopilot's changes (time, nodes asked), from min_workers, ever asked
    for fewer nodes."""
    counts = [BOUNDS["autopilot"][0]] + [n for _, n in asks]
    return any(after < before for before, after in zip(counts, counts[1:]))


SETS = (
    # round 2 (2026-11-26): the autopilot of each commit, as its driver ran it; before
    # cd0e52f a node it asked for got its first task at Ray Data's coordinator's next tick
    RunSet("2026-11-26 c3d5807", "Round 2: share pricing, phases, the policy on price (2026-11-26, later)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(180, 27.9, 0.79, (0.77, 0.79, 0.80), 180, 13.47),
            "fixed_max": Row(84, 82.4, 0.34, (0.23, 0.37, 0.34), 253, 6.45),
            "raydata": Row(80, 74.2, 0.43, (0.61, 0.31, 0.37), 202, 6.06),
            "autopilot": Row(218, 22.3, 0.82, (0.79, 0.87, 0.45), 387, 16.40)},
           asks=(), policy="c3d5807", changes=16),
    RunSet("2026-11-26 db3f21b", "Round 2: share pricing, phases, the policy on price (2026-11-26, later)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(163, 28.7, 0.80, (0.83, 0.80, 0.74), 164, 12.22),
            "fixed_max": Row(79, 87.2, 0.28, (0.03, 0.36, 0.30), 236, 6.00),
            "raydata": Row(85, 86.4, 0.35, (0.54, 0.20, 0.36), 217, 6.46),
            "autopilot": Row(108, 52.7, 0.61, (0.73, 0.62, 0.04), 247, 8.16)},
           asks=((35.0, 3),), policy="db3f21b"),
    RunSet("2026-11-26 cd0e52f", "Round 2: share pricing, phases, the policy on price (2026-11-26, later)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(149, 31.9, 0.81, (0.79, 0.82, 0.78), 149, 11.17),
            "fixed_max": Row(71, 99.1, 0.31, (0.02, 0.43, 0.26), 212, 5.39),
            "raydata": Row(75, 76.9, 0.46, (0.72, 0.27, 0.22), 192, 5.70),
            "autopilot": Row(98, 54.1, 0.58, (0.69, 0.63, 0.01), 231, 7.44)},
           asks=((25.0, 2), (35.0, 3)), policy="cd0e52f"),
    RunSet("2026-11-27", "Counting a node from its first batch (2026-11-27)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(80, 71.3, 0.47, (0.40, 0.50, 0.47), 80, 5.99),
            "fixed_max": Row(67, 110.5, 0.02, (0.02, 0.02, 0.02), 202, 5.13),
            "raydata": Row(65, 103.0, 0.16, (0.41, 0.02, 0.01), 165, 4.95),
            "autopilot": Row(103, 50.8, 0.58, (0.01, 0.59, 0.71), 198, 7.76)},
           asks=((35.0, 2), (71.0, 3)), policy="567898f"),
    RunSet("2026-11-29 07:56", "Calibration sets (2026-11-29)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(60.0, 118.8, 0.29, (0.32, 0.27, 0.30), 60.1, 4.49),
            "fixed_max": Row(48.5, 162.7, 0.02, (0.02, 0.02, 0.02), 145.4, 3.70),
            "raydata": Row(51.7, 146.1, 0.06, (0.13, 0.02, 0.02), 128.9, 3.92),
            "autopilot": Row(61.2, 101.8, 0.37, (0.02, 0.52, 0.02), 91.0, 4.60)},
           asks=((30.2, 2),)),
    RunSet("2026-11-29 08:04, load dropping", "Calibration sets (2026-11-29)",
           HEAVY_THEN_LIGHT,
           {"fixed_min": Row(83.7, 31.8, 0.795, (0.857, 0.625), 83.7, 12.51),
            "fixed_max": Row(48.4, 93.1, 0.358, (0.440, 0.251), 145.1, 7.39),
            "raydata": Row(52.4, 76.3, 0.453, (0.607, 0.121), 128.3, 7.95),
            "autopilot": Row(70.0, 44.0, 0.714, (0.828, 0.017), 141.1, 10.57)},
           asks=((30.2, 3), (65.3, 2))),
    # the autopilot with the load signal (its driver passes the nodes' CPUs in use)
    RunSet("2026-11-29 08:16", "Calibration sets (2026-11-29)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(57.7, 116.1, 0.288, (0.268, 0.371, 0.081), 57.7, 4.31),
            "fixed_max": Row(48.3, 165.3, 0.017, (0.017, 0.017, 0.017), 144.9, 3.69),
            "raydata": Row(49.1, 148.1, 0.084, (0.188, 0.050, 0.018), 121.9, 3.73),
            "autopilot": Row(60.9, 103.9, 0.359, (0.015, 0.512, 0.021), 90.4, 4.57)},
           asks=((30.3, 2),), load_signal=True),
    RunSet("2026-11-29 08:21, load dropping", "Calibration sets (2026-11-29)",
           HEAVY_THEN_LIGHT,
           {"fixed_min": Row(72.2, 37.5, 0.779, (0.798, 0.757), 72.3, 10.81),
            "fixed_max": Row(41.2, 107.1, 0.342, (0.284, 0.393), 123.5, 6.29),
            "raydata": Row(46.3, 83.5, 0.460, (0.550, 0.329), 115.6, 7.03),
            "autopilot": Row(65.2, 47.5, 0.701, (0.818, 0.020), 140.8, 9.86)},
           asks=((25.3, 3),), load_signal=True),
    # the autopilot as it is now: the load signal, and the trainers away not read as slack
    RunSet("2026-11-29 11:46", "The simulator's autopilot-off row, evaluations, the join timeout (2026-11-29, later)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(52.4, 121.2, 0.282, (0.028, 0.389, 0.235), 52.4, 3.92),
            "fixed_max": Row(47.6, 168.9, 0.019, (0.020, 0.018, 0.019), 142.9, 3.63),
            "raydata": Row(49.3, 144.1, 0.106, (0.261, 0.039, 0.019), 119.9, 3.74),
            "autopilot": Row(58.4, 102.0, 0.412, (0.017, 0.572, 0.018), 85.6, 4.39)},
           asks=((30.1, 2),), load_signal=True),
    RunSet("2026-11-29 11:52, load dropping",
           "The simulator's autopilot-off row, evaluations, the join timeout (2026-11-29, later)",
           HEAVY_THEN_LIGHT,
           {"fixed_min": Row(76.8, 36.5, 0.769, (0.802, 0.722), 76.8, 11.48),
            "fixed_max": Row(43.9, 97.8, 0.356, (0.361, 0.351), 131.7, 6.70),
            "raydata": Row(49.0, 75.6, 0.509, (0.572, 0.411), 120.8, 7.44),
            "autopilot": Row(68.1, 46.4, 0.699, (0.814, 0.018), 140.1, 10.29)},
           asks=((30.1, 3),), load_signal=True),
    # the 2026-11-27 set's and round 2's autopilots run again, each from its own commit, in a
    # quicker hour (one node 96-152 images/s, against 24-81 then); 41836e4 has 567898f's
    # policy, its timeline counting the nodes delivering
    RunSet("2026-11-29 14:00, 2026-11-27's policy again",
           "Earlier policies run again (2026-11-29, later)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(56.8, 115.4, 0.302, (0.272, 0.280, 0.370), 56.8, 4.25),
            "fixed_max": Row(48.1, 157.1, 0.020, (0.023, 0.020, 0.017), 144.3, 3.67),
            "raydata": Row(46.3, 147.9, 0.141, (0.368, 0.019, 0.017), 115.6, 3.51),
            "autopilot": Row(60.3, 97.5, 0.396, (0.016, 0.558, 0.018), 88.5, 4.53)},
           asks=((30.6, 2),), policy="567898f"),
    RunSet("2026-11-29 14:12, db3f21b's policy again",
           "Earlier policies run again (2026-11-29, later)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(54.4, 114.3, 0.268, (0.028, 0.350, 0.272), 54.4, 4.07),
            "fixed_max": Row(49.2, 150.6, 0.028, (0.048, 0.021, 0.015), 147.7, 3.75),
            "raydata": Row(55.4, 141.4, 0.061, (0.149, 0.019, 0.016), 138.5, 4.21),
            "autopilot": Row(71.3, 80.4, 0.480, (0.020, 0.554, 0.527), 129.4, 5.37)},
           asks=((30.6, 2), (50.6, 3)), policy="db3f21b"),
    RunSet("2026-11-29 14:18, cd0e52f's policy again",
           "Earlier policies run again (2026-11-29, later)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(58.6, 119.0, 0.243, (0.424, 0.140, 0.210), 58.6, 4.38),
            "fixed_max": Row(49.0, 149.7, 0.021, (0.025, 0.021, 0.017), 146.9, 3.74),
            "raydata": Row(49.5, 136.5, 0.114, (0.313, 0.018, 0.016), 121.6, 3.76),
            "autopilot": Row(57.9, 98.1, 0.372, (0.017, 0.524, 0.020), 109.0, 4.37)},
           asks=((25.5, 2), (35.5, 3)), policy="cd0e52f"),
    RunSet("2026-11-29 14:24, c3d5807's policy again",
           "Earlier policies run again (2026-11-29, later)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(66.2, 105.2, 0.370, (0.425, 0.405, 0.196), 66.2, 4.95),
            "fixed_max": Row(46.2, 154.0, 0.021, (0.036, 0.016, 0.016), 138.5, 3.53),
            "raydata": Row(50.8, 134.9, 0.095, (0.181, 0.080, 0.015), 123.9, 3.85),
            "autopilot": Row(69.3, 88.7, 0.442, (0.017, 0.606, 0.013), 86.6, 5.19)},
           asks=((35.9, 2), (50.9, 1)), policy="c3d5807"),
    # with the held row: the autopilot's job held at one node, which its row is fitted on
    RunSet("2026-11-29 17:05", "One node, the autopilot's job and the job without it (2026-11-29, 16:40)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(52.7, 123.9, 0.294, (0.204, 0.406, 0.047), 52.7, 3.94),
            "fixed_max": Row(44.6, 179.9, 0.026, (0.050, 0.016, 0.017), 133.7, 3.40),
            "raydata": Row(46.4, 157.8, 0.104, (0.286, 0.014, 0.016), 116.2, 3.52),
            "held": Row(49.9, 124.7, 0.316, (0.035, 0.481, 0.017), 49.9, 3.73),
            "autopilot": Row(53.9, 108.6, 0.376, (0.028, 0.527, 0.016), 81.3, 4.05)},
           asks=((25.1, 2),), load_signal=True),
    RunSet("2026-11-29 17:14, load dropping",
           "One node, the autopilot's job and the job without it (2026-11-29, 16:40)",
           HEAVY_THEN_LIGHT,
           {"fixed_min": Row(76.5, 36.1, 0.772, (0.825, 0.677), 76.6, 11.45),
            "fixed_max": Row(40.5, 115.8, 0.251, (0.399, 0.027), 121.5, 6.18),
            "raydata": Row(48.0, 82.3, 0.457, (0.557, 0.289), 116.8, 7.28),
            "held": Row(74.8, 37.5, 0.785, (0.878, 0.015), 74.8, 11.18),
            "autopilot": Row(64.8, 50.4, 0.699, (0.813, 0.015), 140.7, 9.81)},
           asks=((25.2, 3),), load_signal=True),
    RunSet("2026-11-29 17:26, heavy CPU-bound",
           "One node, the autopilot's job and the job without it (2026-11-29, 16:40)",
           LIGHT_HEAVY_LIGHT,
           {"fixed_min": Row(70.6, 78.7, 0.524, (0.530, 0.572, 0.379), 70.6, 5.28),
            "fixed_max": Row(48.5, 160.2, 0.025, (0.044, 0.017, 0.018), 145.4, 3.70),
            "raydata": Row(51.3, 141.7, 0.107, (0.298, 0.017, 0.016), 128.9, 3.89),
            "held": Row(71.0, 75.9, 0.576, (0.027, 0.731, 0.023), 71.0, 5.31),
            "autopilot": Row(70.9, 76.3, 0.519, (0.016, 0.647, 0.341), 134.0, 5.35)},
           asks=((25.1, 2), (50.1, 3)), load_signal=True),
)


@dataclass(frozen=True)
class Fit:
    trainer_images_per_s: float                     # never waiting, no node at work beside it
    slowdown_per_node: float                        # of that, lost to each node at work (one host)
    node_images_per_s: tuple[float, ...]            # one node's, per phase
    start_s: float                                  # the job's start to its first step
    # one node's per phase as the autopilot's job runs (held's); None: a set without that row
    held_node_images_per_s: tuple[float, ...] | None = None

    def node_rates(self, row: str) -> tuple[float, ...]:
        """One node's images/s per phase in `row`'s job: held's where the row reserves and
        the set has it, else fixed_min's."""
        return self.held_node_images_per_s if row in RESERVED and self.held_node_images_per_s else \
            self.node_images_per_s


def fit(measured: RunSet) -> Fit:
    """The two fixed rows' trainers ran at different rates never waiting (images/s over
    one less the wait: one node beside it, three): the host's cores are shared, so the
    trainer's rate is a line in the nodes at work, T0 (1 - k n), through both."""
    low, high = measured.rows["fixed_min"], measured.rows["fixed_max"]
    (n_low, _), (n_high, _) = BOUNDS["fixed_min"], BOUNDS["fixed_max"]
    t_low, t_high = low.images_per_s / (1 - low.wait), high.images_per_s / (1 - high.wait)
    k = (t_low - t_high) / (n_high * t_low - n_low * t_high)
    trainer = t_low / (1 - k * n_low)
    start = statistics.mean(r.wall_s - measured.images / r.images_per_s for r in (low, high))
    held = measured.rows.get("held")  # the same node in the autopilot's job
    return Fit(trainer, k, one_node_rates(low), start, one_node_rates(held) if held is not None else None)


def one_node_rates(row: Row) -> tuple[float, ...]:
    """One node's images/s in each phase of a row run on one node: its trainer's rate beside
    the node (images/s over one less the wait) times one less the phase's wait."""
    beside_one = row.images_per_s / (1 - row.wait)
    return tuple(beside_one * (1 - w) for w in row.phase_waits)


def trace_of(measured: RunSet, f: Fit, row: str = "fixed_min") -> Trace:
    """The set's job as `row` runs it, as phases of work: the start (no step: Ray Train's
    workers and the feed start), then its phases at the trainer's rate, each phase's CPU
    cost per image the one that makes a node deliver what one node did in that job
    (fixed_min's, or held's: Fit.node_rates)."""
    rates = f.node_rates(row)
    phases = [Phase(f.start_s, 0.0, 1.0 / rates[0], kind="eval")]
    for (_, steps), node_rate in zip(measured.phases, rates):
        phases.append(Phase(steps * BATCH / f.trainer_images_per_s, f.trainer_images_per_s, 1.0 / node_rate))
    return Trace(f"bench_{measured.name}", tuple(phases), f"make bench-autopilot's job, as measured {measured.name}")


BUDGET_TICK_S = 20.0                 # Ray Data's AutoscalingCoordinator's TICK_INTERVAL_S
TICKED = ("c3d5807", "db3f21b")      # before cd0e52f the autopilot left a join to that tick


def mix_for(row: str, f: Fit, measured: RunSet | None = None) -> Mix:
    least, most = BOUNDS[row]
    ticked = row == "autopilot" and measured is not None and measured.policy in TICKED
    return Mix(head_usd_per_hour=HEAD_USD_PER_HOUR, node_usd_per_hour=NODE_USD_PER_HOUR, node_vcpus=1,
               min_nodes=least, max_nodes=most, start_median_s=JOIN_S + FIRST_BATCH_S, start_sigma=0.1,
               ec2_s=JOIN_S, first_task_s=FIRST_BATCH_S, removal_s=DRAIN_S, efficiency=1.0, min_billed_s=0.0,
               buffer_images=4 * BATCH, shared_host_slowdown=f.slowdown_per_node,
               budget_tick_s=BUDGET_TICK_S if ticked else 0.0)


def policy_for(row: str, measured: RunSet):
    """The row's policy as it ran: the autopilot of its commit, with what its driver passed
    it then."""
    if row == "autopilot" and measured.policy:
        return history.GLUE[measured.policy](measured.policy, cooldown_s=COOLDOWN_S)
    if row == "autopilot":
        return policies.Autopilot(cooldown_s=COOLDOWN_S, load_signal=measured.load_signal)
    if row == "held":
        return policies.Fixed("min")
    return policies.POLICIES[row]()


@dataclass(frozen=True)
class Play:
    """One seed's run of a row."""
    seed: int
    wall_s: float
    usd_per_million_images: float
    node_s: float
    asks: tuple[tuple[float, int], ...]   # (time, nodes asked) at each change

    @property
    def course(self) -> tuple[int, ...]:
        """The counts it asked for, in order, whenever it asked."""
        return tuple(n for _, n in self.asks)


@dataclass
class Predicted:
    """A row's plays over seeds, cheapest first; `middle`, the median play."""
    row: str
    plays: list[Play]

    @property
    def middle(self) -> Play:
        return self.plays[len(self.plays) // 2]

    @property
    def band(self) -> list[Play]:
        """The plays inside the 10-90% band of $ per million images (simulate.py's band)."""
        n = len(self.plays)
        return self.plays[band_index(n, 0.1):band_index(n, 0.9) + 1]


def play(seed: int, outcome, least: int) -> Play:
    asks, last = [], least
    for point in outcome.timeline:
        if point["asked"] != last:
            asks.append((point["t"], point["asked"]))
            last = point["asked"]
    return Play(seed, outcome.wall_s, outcome.usd_per_million_images, outcome.node_s, tuple(asks))


def predict(measured: RunSet, seeds: int = 10, f: Fit | None = None) -> dict[str, Predicted]:
    f = f or fit(measured)
    out = {}
    for row in measured.rows:
        trace = trace_of(measured, f, row)
        plays = [play(seed, run(trace, mix_for(row, f, measured), policy_for(row, measured), seed=seed),
                      BOUNDS[row][0]) for seed in range(seeds)]
        out[row] = Predicted(row, sorted(plays, key=lambda p: (p.usd_per_million_images, p.seed)))
    return out


def ranked_pairs(usd: dict[str, float]) -> list[tuple[str, str]]:
    """(cheaper, dearer) for each pair of rows more than RANK_GAP apart."""
    return [(a, b) for a in usd for b in usd if usd[b] > usd[a] * (1 + RANK_GAP)]


def row_checks(measured: RunSet, row: str, p: Play) -> list[tuple[str, bool, str]]:
    """(check, passed, what was compared) for one play of one row: C3's (b), and for the
    autopilot's row (c), C5's (e) or C4's (f)."""
    m, found = measured.rows[row], []
    for what, mine, theirs, form in (("$/M images", p.usd_per_million_images, m.usd_per_million_images, "{:.2f}"),
                                     ("wall s", p.wall_s, m.wall_s, "{:.0f}")):
        off = mine / theirs - 1
        found.append((f"(b) {row} {what}", abs(off) <= TOLERANCE,
                      f"measured {form.format(theirs)}, simulated {form.format(mine)} ({off:+.0%})"))
    if row != "autopilot":
        return found
    asks = p.asks
    for i, (at, count) in enumerate(measured.asks):  # its i-th change, to the same count
        when = asks[i][0] if i < len(asks) and asks[i][1] == count else math.inf
        nodes = f"{count} node{'' if count == 1 else 's'}"
        found.append((f"(c) the autopilot's change {i + 1}: {nodes}", abs(when - at) <= ASK_TOLERANCE_S,
                      f"measured at {at:g} s, simulated " + (f"at {when:g} s" if when < math.inf else
                                                             f"not so ({', '.join(f'{n} at {t:g} s' for t, n in asks) or 'no change'})")))
    if measured.changes is not None:  # their times not kept: how often it changed (C4's thrash)
        found.append((f"(f) the autopilot's changes: {measured.changes}",
                      measured.changes / CHANGES_FACTOR <= len(asks) <= measured.changes * CHANGES_FACTOR,
                      f"measured {measured.changes}, simulated {len(asks)} (within a factor of {CHANGES_FACTOR:g})"))
        return found
    said = lambda gave: "gave nodes back" if gave else "held what it asked for"  # noqa: E731
    found.append(("(e) the autopilot gives back, or holds", gave_back(asks) == gave_back(measured.asks),
                  f"measured: {said(gave_back(measured.asks))}; simulated: {said(gave_back(asks))}"))
    return found


def played_as(measured: RunSet, predicted: Predicted) -> tuple[Play, list[tuple[str, bool, str]]]:
    """The play a measured row is judged on, and its checks: the median play where it
    passes them all; else the play inside the seeds' 10-90% band that passes most (C4: a
    measured row is one run, and where the policy's course forks, as where a rise is judged
    before or after its nodes deliver, the seeds play each course). A course played by
    one seed alone, the cheapest or the dearest, lies outside the band (the median play
    never does)."""
    middle = predicted.middle
    judged = [(p, row_checks(measured, predicted.row, p)) for p in predicted.band]
    # the most checks passed; on a tie the median play, else the cheapest
    return max(judged, key=lambda pair: (sum(ok for _, ok, _ in pair[1]), pair[0] is middle))


def checks(measured: RunSet, predicted: dict[str, Predicted]) -> list[tuple[str, bool, str]]:
    """(check, passed, what was compared): C3's (a) the ranking, on the plays each row is
    judged on, then each row's own (row_checks)."""
    judged = {row: played_as(measured, predicted[row]) for row in measured.rows}
    usd = {r: m.usd_per_million_images for r, m in measured.rows.items()}
    mine = {r: p.usd_per_million_images for r, (p, _) in judged.items()}
    pairs = ranked_pairs(usd)
    kept = [(a, b) for a, b in pairs if mine[a] < mine[b]]
    found = [(f"(a) ranking by $/M images ({len(pairs)} pairs over {RANK_GAP:.0%} apart)", kept == pairs,
              "measured " + " < ".join(sorted(usd, key=usd.get)) + "; simulated " + " < ".join(sorted(mine, key=mine.get))
              + "".join(f"; {b} measured dearer than {a}, not simulated so" for a, b in pairs if (a, b) not in kept))]
    for row, (p, row_found) in judged.items():
        whole = predicted[row]
        if p is not whole.middle:  # say which course, and how many seeds played it
            alike = sum(q.course == p.course for q in whole.plays)
            aside = (f" (seed {p.seed}, {alike} of {len(whole.plays)} seeds on its course; the median play: "
                     f"{whole.middle.usd_per_million_images:.2f} $/M, {whole.middle.wall_s:.0f} s)")
            row_found = [(name, ok, said + aside) for name, ok, said in row_found]
        found += row_found
    return found


def playable(measured: RunSet) -> bool:
    """Whether this checkout can play the set's autopilot: its own, or an earlier commit's
    from its git history."""
    return not measured.policy or history.source(measured.policy) is not None


def report(seeds: int = 10) -> tuple[bool, list[str]]:
    """(every check of every set passed, the lines `make simulate` prints): the bench-autopilot
    sets', then a run's start (start.py)."""
    lines, passed = [], True
    for measured in SETS:
        if not playable(measured):
            lines += [f"calibration on make bench-autopilot of {measured.name} (not played):",
                      f"  MISS  played: the autopilot its rows measured ({measured.policy}) is not in this "
                      "checkout's history (a full git clone has it)"]
            passed = False
            continue
        f = fit(measured)
        found = checks(measured, predict(measured, seeds, f))
        lines.append(f"calibration on make bench-autopilot of {measured.name} "
                     f"({', '.join(f'{load} {steps}' for load, steps in measured.phases)} steps; fitted on fixed_min "
                     f"and fixed_max: trainer {f.trainer_images_per_s:.1f} images/s, {-f.slowdown_per_node:+.1%} "
                     f"a node at work beside it on the shared host, one node "
                     f"{', '.join(f'{r:.1f}' for r in f.node_images_per_s)} images/s by phase"
                     + (f" ({', '.join(f'{r:.1f}' for r in f.held_node_images_per_s)} in the autopilot's job, held)"
                        if f.held_node_images_per_s else "") + f", start {f.start_s:.0f} s):")
        lines += [f"  {'pass' if ok else 'MISS'}  {name}: {said}" for name, ok, said in found]
        passed = passed and all(ok for _, ok, _ in found)
    started, start_lines = start.report()
    return passed and started, lines + start_lines
