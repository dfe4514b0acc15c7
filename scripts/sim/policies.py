"""The policies the simulator compares, one interface: start(trace, mix), then poll(obs) ->
the preprocess nodes wanted, every `period_s`.

  fixed_min, fixed_max  the preprocess type held at min_workers / max_workers
  planner               the count `make plan` picks (scripts/pricing/planner.py's
                        vcpus_to_feed) from the profile a user would have measured: the
                        trace's first training phase; held all run
  raydata               the kit's job with the autopilot off (`make bench-autopilot`'s
                        raydata row): the job turns Ray Data's resource reservation off
                        there (jobs/vit_synthetic/pipeline.py), so the tasks it queues past
                        the CPUs it holds reach Ray's autoscaler as demand, which launches
                        max_workers from the dataset's first submission; and Ray Data's
                        own rule beside it (raydata_rule)
  raydata_rule          Ray Data 2.60's own cluster autoscaler alone (RATE_BASED, the
                        default; a pipeline on Ray's defaults, reservation on), re-
                        implemented and checked against Ray's class: every 10 s, while
                        its CPUs were at least 50% busy over 10 s, it asks for twice the
                        CPUs it holds; a node it holds leaves only by Ray's 10-minute idle
                        timeout, which backpressured map tasks never let run out
  autopilot             the kit's own: raykit.autopilot.Steering imported from this
                        checkout (never a copy), with the settings the kit passes a job
  oracle                knows the trace: each phase's cheapest count per image at steady
                        state, asked one median start latency ahead of the phase (whose
                        start it foresees at its own rates) and given back at its end (a
                        near bound to judge the others by, not a policy anyone can run,
                        and not an exact one: it ignores the cost of a change, and on spot
                        traces the interruptions)
"""

import math
import sys

from scripts.core.paths import JOBS
from scripts.pricing.planner import vcpus_to_feed
from scripts.sim.world import Mix, Observation, Trace

sys.path.insert(0, str(JOBS))  # as a job imports it: the autopilot of this checkout
from raykit.autopilot import BusyWindow, Settings, Steering  # noqa: E402

TARGET_WAIT_SHARE = 0.1  # the values files' default
COOLDOWN_S = 60.0


class Fixed:
    def __init__(self, which: str):
        self.which = which

    def start(self, trace: Trace, mix: Mix) -> None:
        self.count = mix.min_nodes if self.which == "min" else mix.max_nodes

    def poll(self, obs: Observation) -> int:
        return self.count


def steady_images_per_s(mix: Mix, nodes: int, trainer: float, cpu_s_per_image: float) -> float:
    """The trainer's images/s with `nodes` delivering at steady state (the model's)."""
    return min(trainer, nodes * mix.node_vcpus / cpu_s_per_image * mix.efficiency)


class Planner:
    def start(self, trace: Trace, mix: Mix) -> None:
        first = next(p for p in trace.phases if p.kind == "train")
        vcpus = vcpus_to_feed(first.trainer_images_per_s, mix.efficiency / first.cpu_s_per_image)
        self.count = min(max(math.ceil(vcpus / mix.node_vcpus), mix.min_nodes), mix.max_nodes)

    def poll(self, obs: Observation) -> int:
        return self.count


class RayData:
    """Ray Data 2.60's RateBasedClusterAutoscaler.try_trigger_scaling for the kit's
    pipeline, one map operator of 1-CPU tasks: at most every MIN_GAP_S, where its rolling
    utilization is under UTILIZATION it sends its last request again; else, once a task
    has finished (it has a rate), twice the CPUs it holds (its throughput doubled at one
    task a CPU), at most MAX_CPU_DELTA more; before that, nothing. Its utilization is its
    tasks' CPUs over the joined nodes' (a task holds its CPU while its worker starts: a
    node importing counts busy). The request is a floor
    for Ray's autoscaler: a node above it leaves only by the 10-minute idle timeout, which
    backpressured map tasks never let run out, so the nodes asked never fall.
    tests/sim/test_simulator.py drives Ray's own class through its seams beside this one.

    queued: Ray Data's resource reservation is off (the kit's job without the autopilot),
    so it submits tasks past the CPUs it holds (its concurrency cap is unbounded by
    default: ConcurrencyCapBackpressurePolicy) and they wait for a CPU; Ray's autoscaler
    (every 5 s) launches nodes for that demand. Every trace's queue outgrows max_workers'
    CPUs, so from the dataset's first submission (the job's start, as world.py plays it)
    it asks max_workers (measured on the local bench: its raydata rows' extra nodes joined
    11-14 s into the job, before its first batch)."""

    MIN_GAP_S = 10.0              # MIN_GAP_BETWEEN_AUTOSCALING_REQUESTS_S
    UTILIZATION = 0.5             # DEFAULT_CLUSTER_SCALING_UP_*_UTIL_THRESHOLD
    SCALING_UP_FACTOR = 2.0       # DEFAULT_CLUSTER_SCALING_UP_FACTOR
    MAX_CPU_DELTA = 256.0         # DEFAULT_CLUSTER_SCALING_UP_MAX_RESOURCE_DELTA's cpu
    AUTOSCALER_S = 5.0            # Ray's autoscaler's update interval (AUTOSCALER_UPDATE_INTERVAL_S)

    def __init__(self, queued: bool = False):
        self.queued = queued
        self.period_s = self.AUTOSCALER_S if queued else self.MIN_GAP_S

    def start(self, trace: Trace, mix: Mix) -> None:
        self.mix, self.asked, self.requested_cpus = mix, mix.min_nodes, 0.0
        self.ruled_at = -math.inf

    def request(self, held_cpus: float, utilization: float, has_rate: bool) -> float:
        """The CPUs it requests now (the sum of its 1-CPU bundles)."""
        if utilization >= self.UTILIZATION:
            self.requested_cpus = (math.ceil(min(self.SCALING_UP_FACTOR * held_cpus, held_cpus + self.MAX_CPU_DELTA))
                                   if has_rate else 0.0)
        return self.requested_cpus

    def poll(self, obs: Observation) -> int:
        if self.queued:  # the queue's demand: Ray's autoscaler launches for it (the rule can ask no more)
            return self.mix.max_nodes
        if obs.now - self.ruled_at >= self.MIN_GAP_S:
            self.ruled_at, held = obs.now, obs.held_vcpus
            cpus = self.request(held, obs.busy_vcpus / held if held else 0.0, obs.producing_since is not None)
            self.asked = max(self.asked, min(math.ceil(cpus / self.mix.node_vcpus), self.mix.max_nodes))
        return self.asked


class Autopilot:
    """load_signal: the steered nodes' CPUs in use reach the policy (each poll's sample,
    as Pilot takes it); False plays the driver before it did (the runs measured so).
    join_timeout_s: the values file's, as docs/autopilot.md tells a user to set it (about
    twice a node's start, the 600 s default at least); a number plays it as given."""
    period_s = 5.0  # its POLL_S

    def __init__(self, cooldown_s: float = COOLDOWN_S, load_signal: bool = True,
                 join_timeout_s: float | None = None):
        self.cooldown_s, self.load_signal, self.join_timeout_s = cooldown_s, load_signal, join_timeout_s

    def start(self, trace: Trace, mix: Mix) -> None:
        timeout = self.join_timeout_s or max(Settings.join_timeout_s, 2 * mix.start_median_s)
        self.settings = Settings(target_wait_share=TARGET_WAIT_SHARE, min_nodes=mix.min_nodes,
                                 max_nodes=mix.max_nodes, cooldown_s=self.cooldown_s, join_timeout_s=timeout,
                                 node_usd_per_hour=mix.node_usd_per_hour,
                                 base_usd_per_hour=mix.head_usd_per_hour)
        self.steering = Steering(self.settings, started=0.0)
        self.busy = BusyWindow(self.settings.window_s)

    def poll(self, obs: Observation) -> int:
        self.busy.add(obs.now, obs.busy_vcpus, obs.held_vcpus)
        decision = self.steering.step(obs.now, obs.steps, obs.waiting, obs.delivered, obs.nodes,
                                      obs.producing_since, self.busy.share(obs.now) if self.load_signal else None)
        return decision.asked


class Oracle:
    def start(self, trace: Trace, mix: Mix) -> None:
        self.trace, self.mix = trace, mix
        self.lead = mix.start_median_s
        self.best = [self.cheapest(p) for p in trace.phases]
        # each phase's length at its own count: when it expects the next one to begin
        self.lengths = [p.seconds if p.kind != "train" else
                        p.work / steady_images_per_s(mix, n, p.trainer_images_per_s, p.cpu_s_per_image)
                        for p, n in zip(trace.phases, self.best)]

    def cheapest(self, phase) -> int:
        """The count with the cheapest image at steady state in `phase` (min_nodes where it
        trains nothing)."""
        m = self.mix
        if phase.kind != "train" or not phase.trainer_images_per_s:
            return m.min_nodes

        def usd_per_image(n: int) -> float:
            rate = steady_images_per_s(m, n, phase.trainer_images_per_s, phase.cpu_s_per_image)
            return (m.head_usd_per_hour + n * m.node_usd_per_hour) / max(rate, 1e-9)
        return min(range(m.min_nodes, m.max_nodes + 1), key=usd_per_image)

    def count_at(self, t: float) -> int:
        for length, count in zip(self.lengths, self.best):
            if t < length:
                return count
            t -= length
        return self.best[-1]

    def poll(self, obs: Observation) -> int:
        return max(self.count_at(obs.now), self.count_at(obs.now + self.lead))


POLICIES = {"fixed_min": lambda: Fixed("min"), "fixed_max": lambda: Fixed("max"), "planner": Planner,
            "raydata": lambda: RayData(queued=True), "raydata_rule": RayData, "autopilot": Autopilot,
            "oracle": Oracle}
