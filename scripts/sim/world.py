"""The simulated cluster: one GPU head that trains, preprocess nodes that come and go, the
data between them, and the bill. A policy (policies.py) only says how many preprocess
nodes it wants; this module plays what the cloud, Ray's autoscaler and Ray Data make of
that, one second at a time.

The model, and what it leaves out (docs/autopilot.md, "The simulator"):
- A phase is work, not time: its `seconds` at the trainer's full rate are so many images
  to train, and a policy that starves the trainer takes longer over them (an evaluation
  phase lasts its seconds). So every policy trains the same images, and its $ per image
  is its bill over them: timed phases let a starved trainer skip the dear images.
- The trainer takes `trainer_images_per_s` of the phase when never waiting; each second
  it consumes what the buffer holds, up to that. A second in which it took nothing is a
  blocked second: no step ends, and a wait is open (as a rank blocked for its batch).
  The steps the policy reads are one record per second (end, 1 s, the second's wait,
  images): the autopilot reads shares and rates over 30 s windows, which those keep
  (a real step is 0.1-0.5 s; Ray Data delivers in 0.1 s quanta: below this resolution).
- Each delivering node makes vcpus / cpu_s_per_image images a second, times a per-second
  noise (the measured task-time spread) and `efficiency` (measured supply over n x c,
  0.92-0.99), until the buffer (the feed's prefetch and Ray Data's queue) is full:
  backpressure, as Ray Data's.
- A node asked for: EC2 (billing from `running`, per second, 60 s minimum), then the
  launcher's setup and `ray start` (join), then its first task's import (delivering):
  start latency D = ask -> first batch, lognormal around its median. Given back: it stops
  delivering at once (drained) and is gone `removal_s` later; billed to then. A node no
  longer wanted before it joined runs on to its join, billing, and is drained then (Ray's
  autoscaler v2 never cancels a pending node for not being needed).
- On one host (the local cluster; `shared_host_slowdown`), each node at work takes a share
  of the trainer's rate: its cores are the trainer's neighbours. 0 on a cloud.
- Spot: each node is interrupted at `spot_per_hour` (a Poisson rate), with EC2's
  2-minute notice, drained at once and gone at the notice's end; whoever still wants the
  node asks for another (Ray's autoscaler keeps the count: min_workers or a request).
- An evaluation phase: the trainer takes no batch (no step, no wait); the preprocess nodes
  idle (the training pipeline is backpressured).
"""

import math
import random
from dataclasses import dataclass, field

TICK_S = 1.0
NOTICE_S = 120.0  # EC2's spot interruption notice


@dataclass(frozen=True)
class Phase:
    seconds: float                # its length with the trainer never waiting
    trainer_images_per_s: float   # what the trainer takes, never waiting (0 in an evaluation)
    cpu_s_per_image: float        # one vCPU's preprocessing time per image in this phase
    kind: str = "train"           # train | eval

    @property
    def work(self) -> float:
        """What ends the phase: its images (training), or its seconds (an evaluation)."""
        return self.seconds * self.trainer_images_per_s if self.kind == "train" else self.seconds


@dataclass(frozen=True)
class Trace:
    name: str
    phases: tuple[Phase, ...]
    about: str = ""
    spot_per_hour: float = 0.0    # interruptions per node-hour (0: on-demand)

    @property
    def seconds(self) -> float:
        """The trace's length with the trainer never waiting."""
        return sum(p.seconds for p in self.phases)


@dataclass(frozen=True)
class Mix:
    """The cluster: the head's and one preprocess node's $/h (instance and disks), the
    vCPUs a node preprocesses on, the bounds, and the start and removal times."""
    head_usd_per_hour: float
    node_usd_per_hour: float
    node_vcpus: int
    min_nodes: int
    max_nodes: int
    start_median_s: float = 240.0     # D: ask -> first batch, median
    start_sigma: float = 0.35         # lognormal spread of D
    ec2_s: float = 25.0               # ask -> running (billing starts); from D's part
    first_task_s: float = 15.0        # join -> first batch (process start, imports); from D's part
    # given back -> gone: its drain (44-78 s measured on the local cluster: its blocks freed
    # first), then the autoscaler terminates it (seconds, not measured on AWS)
    removal_s: float = 60.0
    efficiency: float = 0.95          # measured supply over n x c (docs/benchmark-log.md: 0.92-0.99)
    noise: float = 0.10               # per-second spread of a node's supply
    buffer_images: float = 128.0      # the feed's prefetch and Ray Data's queue
    min_billed_s: float = 60.0        # EC2's per-second billing: 60 s at least per instance start
    # the trainer's rate lost per preprocess node at work (delivering, or starting: its
    # processes and imports): 0 on a cloud, where a node is a machine of its own; on one
    # host (the local cluster) the nodes' cores are the trainer's neighbours
    shared_host_slowdown: float = 0.0
    # Ray Data's AutoscalingCoordinator recomputes its reservations on a tick (its
    # TICK_INTERVAL_S, 20 s); where nothing has it recompute at a join (the kit's autopilot
    # before 2026-11-26's cd0e52f), a node that joins mid-run gets its first task at the
    # next tick. 0: at once (the autopilot has it recompute now)
    budget_tick_s: float = 0.0


@dataclass
class Node:
    id: str
    asked_at: float
    running_at: float
    joined_at: float
    delivering_at: float
    leaving_at: float | None = None   # drained (given back, or a spot notice)
    gone_at: float | None = None

    def billed_s(self, end: float, minimum: float) -> float:
        """Seconds billed while the job ran (from 0, as the kit's bill): from running to
        gone (or `end`), at least `minimum` for a node started during it."""
        stop = min(self.gone_at if self.gone_at is not None else end, end)
        start = max(self.running_at, 0.0)
        if stop <= start:
            return 0.0  # cancelled before EC2 ran it: pending is free
        return max(minimum, stop - start) if self.running_at >= 0 else stop - start

    def delivers(self, t: float) -> bool:
        return t >= self.delivering_at and self.leaving_at is None

    def joined(self, t: float) -> bool:
        return t >= self.joined_at and self.leaving_at is None


@dataclass
class Observation:
    """What a policy sees at a poll: as the autopilot reads Ray and its step log."""
    now: float
    steps: list[tuple[float, float, float, int]]   # the last 30 s, one record a second
    waiting: list[float]                            # an open wait's start, while blocked
    delivered: dict[str, float]                     # node address -> the last step it fed
    nodes: list[tuple[str, str]]                    # joined nodes (id, address), oldest first
    held_vcpus: float                               # the joined nodes' (Ray Data's global limits)
    busy_vcpus: float                               # of which running a task, last 10 s mean (its usage)
    target: int                                     # the count asked now
    producing_since: float | None = None            # a node's first batch made (its imports done)
    # given back (or noticed) and still up in Ray's node table until `removal_s` passes:
    # today's Pilot leaves them out of its count; the earlier ones counted them (history.py)
    draining: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Outcome:
    images: float = 0.0
    wait_s: float = 0.0
    train_s: float = 0.0
    usd: float = 0.0
    node_s: float = 0.0
    changes: int = 0
    wall_s: float = 0.0
    timeline: list[dict] = field(default_factory=list)

    @property
    def usd_per_million_images(self) -> float:
        return self.usd / self.images * 1e6 if self.images else math.inf

    @property
    def mean_wait_share(self) -> float:
        return self.wait_s / self.train_s if self.train_s else 0.0


class World:
    def __init__(self, trace: Trace, mix: Mix, seed: int):
        self.trace, self.mix, self.rng = trace, mix, random.Random(seed)
        self.nodes: list[Node] = []
        self.buffer = 0.0
        self.blocked_since: float | None = None
        self.records: list[tuple[float, float, float, int]] = []
        self.delivered: dict[str, float] = {}
        self.busy: list[float] = []  # busy vCPUs, one a second (the last 10 s are read)
        self.target = mix.min_nodes
        self.phase, self.done = 0, 0.0  # the phase under way, and its work done
        self.outcome = Outcome()
        self.count = 0
        self.tick_phase = self.rng.uniform(0.0, mix.budget_tick_s) if mix.budget_tick_s else 0.0
        for _ in range(mix.min_nodes):  # `make up` returned with min_workers joined
            self.nodes.append(Node(self._id(), -600.0, -600.0, -60.0, mix.first_task_s))

    def _id(self) -> str:
        self.count += 1
        return f"node-{self.count}"

    def start_latency(self) -> float:
        m = self.mix
        return max(m.ec2_s + m.first_task_s + 1.0,
                   m.start_median_s * math.exp(self.rng.gauss(0.0, m.start_sigma)))

    def launch(self, t: float) -> None:
        m, d = self.mix, self.start_latency()
        joined, delivering = t + d - m.first_task_s, t + d
        if m.budget_tick_s:  # its first task waits for the coordinator's next tick
            ticks = math.ceil((joined - self.tick_phase) / m.budget_tick_s)
            delivering = self.tick_phase + ticks * m.budget_tick_s + m.first_task_s
        self.nodes.append(Node(self._id(), t, t + m.ec2_s, joined, delivering))

    def alive(self) -> list[Node]:
        return [n for n in self.nodes if n.leaving_at is None]

    def give_back(self, t: float, count: int) -> None:
        """Drain `count` of the joined nodes, the newest first."""
        up = sorted((n for n in self.alive() if n.joined(t)), key=lambda n: n.asked_at, reverse=True)
        for node in up[:count]:
            node.leaving_at, node.gone_at = t, t + self.mix.removal_s

    def reconcile(self, t: float, target: int) -> None:
        """Ray's autoscaler: launch up to the target (the nodes still starting count); the joined
        nodes above it drained (the kit's Pilot drains every node up above its ask). A
        node still starting runs on to its join: Ray's autoscaler v2 never cancels a
        pending node for not being needed (RAY_AUTOSCALER_PENDING_NODE_IDLE_TIMEOUT_S: -1),
        and Ray's node table lists a node only once it joined."""
        target = min(max(target, self.mix.min_nodes), self.mix.max_nodes)
        if target != self.target:
            self.outcome.changes += 1
            self.target = target
        alive = self.alive()
        if len(alive) < target:
            for _ in range(target - len(alive)):
                self.launch(t)
        up = sum(1 for n in alive if n.joined(t))
        if up > target:
            self.give_back(t, up - target)

    def observe(self, t: float) -> Observation:
        joined = [n for n in self.nodes if n.joined(t)]
        held = sum(self.mix.node_vcpus for n in joined)
        recent = self.busy[-10:]
        return Observation(now=t, steps=[r for r in self.records if r[0] >= t - 30.0],
                           waiting=[self.blocked_since] if self.blocked_since is not None else [],
                           delivered=dict(self.delivered), nodes=[(n.id, n.id) for n in joined],
                           draining=[(n.id, n.id) for n in self.nodes if n.leaving_at is not None
                                     and t >= n.joined_at and t < n.gone_at],
                           held_vcpus=held, busy_vcpus=sum(recent) / len(recent) if recent else 0.0,
                           target=self.target,
                           producing_since=min((n.delivering_at for n in self.nodes if n.delivering_at <= t),
                                               default=None))

    @property
    def finished(self) -> bool:
        return self.phase >= len(self.trace.phases)

    def advance(self, work: float) -> None:
        phase = self.trace.phases[self.phase]
        self.done += work
        if self.done >= phase.work:
            self.phase, self.done = self.phase + 1, 0.0

    def tick(self, t: float) -> None:
        """One second of the world from t."""
        m, phase = self.mix, self.trace.phases[self.phase]
        for node in self.nodes:  # spot notices
            if self.trace.spot_per_hour and node.leaving_at is None and t >= node.running_at \
                    and self.rng.random() < self.trace.spot_per_hour * TICK_S / 3600:
                node.leaving_at, node.gone_at = t, t + NOTICE_S
        feeding = [n for n in self.nodes if n.delivers(t)]
        per_vcpu = 1.0 / phase.cpu_s_per_image
        made_max = sum(m.node_vcpus * per_vcpu * m.efficiency * max(0.0, self.rng.gauss(1.0, m.noise))
                       for _ in feeding)
        if phase.kind == "eval":  # the trainer is away: no step, no wait; the pipeline idles
            room = max(0.0, m.buffer_images - self.buffer)
            made = min(made_max, room)
            self.buffer += made
            self.blocked_since = None
            self.advance(TICK_S)
        else:
            working = sum(1 for n in self.nodes if n.leaving_at is None and n.joined_at <= t)
            want = phase.trainer_images_per_s * max(0.0, 1.0 - m.shared_host_slowdown * working) * TICK_S
            have = self.buffer + made_max
            took = min(want, have)
            made = min(made_max, took + m.buffer_images - self.buffer)
            self.buffer = min(m.buffer_images, have - took)
            if took < 1.0:  # nothing this second: blocked for its batch
                if self.blocked_since is None:
                    self.blocked_since = t
            else:
                # the step that ends a blocked stretch waited all of it
                blocked = t - self.blocked_since if self.blocked_since is not None else 0.0
                self.blocked_since = None
                self.records.append((t + TICK_S, TICK_S + blocked, blocked + TICK_S * (1.0 - took / want),
                                     int(took)))
                for node in feeding:
                    self.delivered[node.id] = t + TICK_S
                self.outcome.images += took
            self.outcome.train_s += TICK_S
            self.outcome.wait_s += TICK_S * (1.0 - took / want)
            self.advance(took)
        # Ray Data's usage: a task holds its CPU from its submission, so a joined node still
        # starting its worker (the first task's import) counts busy while the feed has room
        capacity = sum(m.node_vcpus for _ in feeding)
        starting = sum(m.node_vcpus for n in self.nodes if n.joined(t) and not n.delivers(t))
        self.busy.append((capacity * (made / made_max) if made_max else 0.0)
                         + (starting if self.buffer < m.buffer_images else 0.0))
        if len(self.records) > 120:
            del self.records[:60]
        if len(self.busy) > 60:
            del self.busy[:30]

    def bill(self, end: float) -> None:
        m = self.mix
        node_s = sum(n.billed_s(end, m.min_billed_s) for n in self.nodes)
        self.outcome.node_s = node_s
        self.outcome.usd = m.head_usd_per_hour * end / 3600 + m.node_usd_per_hour * node_s / 3600


MAX_STRETCH = 10.0  # a run that takes this many times the trace's length is stopped


def run(trace: Trace, mix: Mix, policy, seed: int = 0, poll_s: float = 5.0) -> Outcome:
    """Play `trace` on `mix` with `policy` (policies.py) to its last phase's end: its poll
    every poll_s (its own period where it has one), the world every second. Returns the
    outcome, billed to the end (`wall_s`)."""
    world = World(trace, mix, seed)
    policy.start(trace, mix)
    period = getattr(policy, "period_s", poll_s)
    t, next_poll = 0.0, period
    while not world.finished and t < MAX_STRETCH * trace.seconds:
        world.tick(t)
        t += TICK_S
        if t >= next_poll:
            next_poll += period
            world.reconcile(t, policy.poll(world.observe(t)))
            world.outcome.timeline.append({"t": t, "asked": world.target, "nodes": len(world.alive())})
    world.bill(t)
    world.outcome.wall_s = t
    return world.outcome


def band_index(count: int, quantile: float) -> int:
    """The index, in `count` outcomes sorted, of the one at `quantile` (nearest rank): the
    10-90% band over seeds runs from band_index(n, 0.1) to band_index(n, 0.9), so 10 seeds'
    band leaves out the cheapest and the dearest."""
    return min(count - 1, max(0, round(quantile * (count - 1))))
