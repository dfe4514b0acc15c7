"""The autopilot's policy: how many preprocess nodes the job should hold, from the trainers'
own data wait. Pure arithmetic on what the trainers measured (measure.TrainProfile), so
that it can be tested on recorded traces; the job's driver applies it (through Ray's
request_resources, never a cloud's API).

The signal is the share of each training step spent waiting for data, over the steps of
the last `window_s`, every rank's, and the waits still open: a trainer blocked for its next
batch (the pipeline's first fill, a stall) counts as waiting now, not only once its step
ends, so the autopilot acts within a poll of a starving trainer, not a step later.
Above the target the trainers starve: ask for the nodes
that would feed them (while data-bound, throughput grows with the preprocess nodes, so a
wait share w needs about n / (1 - w) nodes where n run now). Below a third of the target
(the hysteresis band between keeps it from flapping) the trainers are compute-bound with
slack: give one node back, if the others could carry its work (the steered nodes' CPUs in
use, from Ray's resource view over the window, would stay under CARRY_SHARE with one
fewer; a load between two counts no longer flaps between them), or if one fewer makes an
image cheaper even so (priced as a rise is: no flap back). Where giving one back
made them starve (a mix on the edge of
the target), the next one goes back only after twice the wait (up to MAX_DOWN_BACKOFF
cooldowns): such a mix flaps ever more slowly, not every cooldown. The first decision
waits one cooldown after the start, and the wait for the first batch (the pipeline's
first fill) is not judged while the nodes import (more nodes would not shorten that):
only once a window has passed since a preprocessing task first finished, the first batch
still missing (the preprocessing too slow for it, as heavy augmentation from the first
batch, which more nodes do shorten). After any change, nothing moves for `cooldown_s` (at least the
time a node takes to join: its steps would not show yet); a node asked for that has not
joined after `join_timeout_s` (the values file's: above the nodes' start, or every node
asked is given up before it comes) is given up (capacity, quota), not asked for again and
again (for an hour: a spot pool's capacity comes back).
A rise is judged once every node it added has fed a trainer a batch (delivering), not
when they join: a node joined mid-run spends its first 20-30 s starting processes.
The count stays within min..max workers and under the $/h ceiling. A node given back is
drained through Ray's GCS (Pilot.give_back): Ray Data would otherwise keep it busy, and a
busy node never goes idle for the autoscaler to remove.

The driver side (steering): every rank's TrainProfile publishes each step to a small actor
(steps.StepLog); a thread in the driver reads the last window every POLL_S, counts the preprocess
nodes up (Ray's node table, by label), decides, and asks for one bundle per node it holds,
for that node type's label, through Ray Data's AutoscalingCoordinator: the actor through
which Ray's own components share `ray.autoscaler.sdk.request_resources` (a request made
beside it would be replaced at its next tick). The bundle is the type's own resource
(placement.type_resource), not its CPUs: the coordinator reserves what a request names to
its requester, and Ray Data's budget is what is left, so a bundle of CPUs would keep Ray
Data off the very nodes asked for it (measured: 6.4 images/s with three nodes, 13.7 with
one). Ray Data's own cluster autoscaler is switched off meanwhile by the kit
(scripts/job_env.py's autopilot_env).
Nodes given back are drained (give_back): their raylets exit once their work is done, and
the cluster's autoscaler removes the machines.
The kit passes the settings in RAYKIT_AUTOPILOT; without it, steering does nothing.
"""

import json
import math
import os
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field

from raykit import contract, gauges, ray_state, stall, steps
from raykit.rates import images_per_s, wait_share  # noqa: F401 (the policy's measures)

SETTINGS_ENV = contract.AUTOPILOT_ENV  # set by the kit (scripts/job_env.py's autopilot_env)
POLL_S = float(os.environ.get("RAYKIT_AUTOPILOT_POLL_S") or 5)
REQUESTER = "raykit-autopilot"     # its name at Ray Data's AutoscalingCoordinator
REQUEST_EXPIRES_S = 120            # re-sent every poll: a dead driver's request lapses
MAX_DOWN_BACKOFF = 8               # cooldowns before a node goes back, after flaps
MIN_GAIN = 0.07                    # a node added must raise images/s by more than this (Cachew's 7%)
MEMORY_WINDOWS = 4                 # a count's measured rate is trusted this many windows
LOAD_CHANGE_SHARE = 0.1           # a wait share this much above a count's own: the load grew, not the nodes
GIVE_BACK_DEADLINE_S = 300         # a node given back: its running work's time to finish
ASK_LANDS_S = 10.0                 # the most a give-back waits for its lower request to reach Ray
DELIVERY_GRACE_S = 60.0            # a node that joined and fed no trainer counts after this anyway
GIVE_UP_LAPSE_S = 3600.0           # nodes given up (never joined) are asked for again after this
CARRY_SHARE = 0.85                 # a node goes back only if the others would stay under this busy
SAME_LOAD = 0.1                    # two measures whose trainers would take this close images/s: one load
# no step for this long (and for three of their usual steps), none waiting for a batch:
# the trainers are outside their loop (an evaluation, a save). The window's steps are then
# from before, and the nodes idle (backpressure): read as slack, an evaluation gave nodes
# back at its start and after it, each one asked again a node's start later
AWAY_S = 5.0


@dataclass(frozen=True)
class Settings:  # noqa: D101 (documented by its fields)
    """The values file's `autopilot:` block, with what the kit computed for the mix."""
    target_wait_share: float        # hold the trainers' data wait under this share of a step
    min_nodes: int                  # the preprocess type's min_workers..max_workers
    max_nodes: int
    cooldown_s: float               # after a change, this long before the next
    join_timeout_s: float = 600.0   # a node asked for that has not joined by then is given up (the values file's)
    window_s: float = 30.0          # the steps the wait share is measured over
    node_usd_per_hour: float | None = None   # one preprocess node's price
    base_usd_per_hour: float = 0.0           # the rest of the cluster's (head, train nodes)
    max_usd_per_hour: float | None = None    # the whole cluster's ceiling (None: none)
    # trainers outside their loop this long (no step ends, none waits: an evaluation, a
    # save) and a node goes back each cooldown: they hold nodes that feed nobody. 10 min:
    # about where giving a node back pays on AWS when one takes ~4 min to come back
    # (a light phase must outlast ~1.4 x (the start + its detection) + the removal)
    pause_give_back_s: float = 600.0

    @property
    def slack_share(self) -> float:
        """Below this wait share the trainers have slack to spare: a node can go."""
        return self.target_wait_share / 3

    def usd_per_image(self, nodes: int, images_per_s: float) -> float:
        """What an image costs with `nodes` preprocess nodes at that rate: the whole
        cluster's $/h over its images/h (unpriced: 1/rate, so only the rate counts)."""
        hourly = (self.base_usd_per_hour + nodes * self.node_usd_per_hour
                  if self.node_usd_per_hour is not None else 1.0)
        return hourly / max(images_per_s, 1e-9)

    def affordable(self) -> int:
        """The most preprocess nodes the $/h ceiling allows (max_nodes without one)."""
        if self.max_usd_per_hour is None or not self.node_usd_per_hour:
            return self.max_nodes
        return max(0, math.floor((self.max_usd_per_hour - self.base_usd_per_hour) / self.node_usd_per_hour + 1e-9))


@dataclass
class State:
    """What the autopilot remembers between decisions."""
    asked: int                       # the preprocess nodes it last asked for
    changed_at: float | None = None  # when it last changed the ask (None: not yet)
    given_up: int = 0                # nodes asked for that never joined: not asked again
    last_move: int = 0               # +1 up, -1 down: the last change's direction
    down_backoff: int = 1            # giving a node back waits this many cooldowns
    reasons: list[str] = field(default_factory=list)
    # each count's last steady images/s and when it was measured: what an added node
    # bought (Pecan's rule) and the cheapest count where the target is out of reach
    rates: dict[int, tuple[float, float, float]] = field(default_factory=dict)  # (images/s, share, at)
    from_count: int | None = None    # the count before the last rise, to compare against
    hold: tuple[int, float, float] | None = None  # no rise above this count until then (one did
                                                   # not pay), unless the wait grows past this share
    hold_s: float = 0.0              # how long the next such hold lasts (doubles on each)
    short_since: float | None = None  # since when fewer nodes are up than asked (a rise, or a node lost)
    short_joined: int = 0            # the nodes up when that shortfall last grew
    given_up_at: float | None = None  # the last give-up: they may be asked again GIVE_UP_LAPSE_S after
    price_holds: int = 0             # measures above the target where no node more made an image cheaper


MIN_SETTLED_STEPS = 3  # a measure rests on at least this many steps (every rank's)
MIN_BUSY_SAMPLES = 3   # a busy share rests on at least this many polls' samples


def busy_share(samples: list[tuple[float, float, float]], now: float, window_s: float) -> float | None:
    """The steered nodes' CPUs running tasks over the last window: the polls' samples
    (time, CPUs in use, CPUs), pooled; None with too few (the load is then unknown)."""
    recent = [(busy, cpus) for t, busy, cpus in samples if t >= now - window_s and cpus > 0]
    if len(recent) < MIN_BUSY_SAMPLES:
        return None
    return sum(busy for busy, _ in recent) / sum(cpus for _, cpus in recent)


class BusyWindow:
    """Each poll's sample of the steered nodes' CPUs in use, kept for one window: what the
    driver (Pilot) and the simulator both feed the policy."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self.samples: list[tuple[float, float, float]] = []  # (time, CPUs in use, CPUs)

    def add(self, now: float, busy: float, cpus: float) -> None:
        self.samples = [s for s in self.samples if s[0] >= now - self.window_s] + [(now, busy, cpus)]

    def share(self, now: float) -> float | None:
        return busy_share(self.samples, now, self.window_s)


def steady_measure(steps: list[tuple[float, float, float, int]], waiting: list[float], now: float,
                   since: float) -> tuple[float, float] | None:
    """(wait share, images/s) of the steps that ended since `since` (end time, step s,
    waiting s, images), open waits counted inside it; None on fewer than
    MIN_SETTLED_STEPS steps. `since`: past the trainers' first step (the pipeline's first
    fill) and past the last change's settling, so that a decision rests on the steady flow
    of the nodes it holds, not on the start-up's wait or the count before."""
    recent = [s for s in steps if s[0] >= since and s[1] > 0]
    if len(recent) < MIN_SETTLED_STEPS:
        return None
    share = wait_share([s[:3] for s in recent], now, now - since, [w for w in waiting if w >= since])
    rate = images_per_s(recent)
    if share is None or rate is None:
        return None
    return share, rate


def delivering(nodes: dict[str, float], delivered: dict[str, float], now: float) -> bool:
    """Whether every node held delivers: `nodes` maps each steered node's address to when
    the autopilot first saw it up, `delivered` each address to the last step its images
    fed. A node counts from its first batch after it joined, not from its join: one that
    joins mid-run starts its processes and imports torch first (20-30 s on a quarter core,
    docs/benchmark-log.md), and a measure taken meanwhile judged it on work it had not begun
    (the third node "made 29.2 images/s against 72.3 with 2", given back, asked again). One
    that has fed nothing DELIVERY_GRACE_S after it joined counts anyway: Ray Data may never
    use it, and the measure then says so."""
    fed = fed_since_joining(nodes, delivered)
    return all(ip in fed or now - seen >= DELIVERY_GRACE_S for ip, seen in nodes.items())


def fed_since_joining(nodes: dict[str, float], delivered: dict[str, float]) -> set[str]:
    """The addresses of `nodes` (address -> when first seen up) whose images have fed a
    step since (`delivered`: address -> the last step its images fed)."""
    return {ip for ip, seen in nodes.items() if delivered.get(ip, -math.inf) >= seen}


def decide(settings: Settings, state: State, now: float, measured: tuple[float, float] | None,
           joined: int, paused_s: float = 0.0, busy_share: float | None = None) -> int:
    """The preprocess nodes to hold from now on (state.asked, updated with its reason in
    state.reasons). `measured`: the trainers' (wait share, images/s) in the steady flow
    since the last change settled (None: not measured yet); `joined`: the preprocess nodes
    up now.

    Up where the trainers wait more than the target, by the nodes that would feed them, but
    only while a node pays for itself (Pecan's rule): its predicted images/s, priced at the
    whole cluster's $/h, must cost less per image than now, and of the counts up to that
    many, the cheapest image's is asked. After a rise, the new count is
    judged on what it measured: less than MIN_GAIN more images/s than the count before, or
    a dearer image, and it goes back there, and no higher until that memory lapses
    (MEMORY_WINDOWS): where the target is out of reach, the cheapest count is held, not
    max_workers. Down by one where they wait under a third of the target, or where they
    have taken no batch for pause_give_back_s (`paused_s`: outside their loop, neither
    stepping nor waiting: an evaluation, a save), one node each cooldown. busy_share: the
    steered nodes' CPUs running preprocessing over the window (None: unknown): a node goes
    back for slack only where the others could carry what they all do now, or where one
    fewer, the others at CARRY_SHARE, makes an image cheaper even so."""
    low = settings.min_nodes
    if state.given_up and now - (state.given_up_at or now) >= GIVE_UP_LAPSE_S:
        state.given_up = 0  # capacity comes back (a spot pool, a quota raised): asked again
    if state.given_up and joined > state.asked:
        # nodes given up joined after all: Ray's autoscaler v2 never cancels a launch in
        # flight for not being needed, so a node slower than the join timeout still comes;
        # held as a rise (drained as above the ask, its start was paid for nothing)
        back = min(joined - state.asked, state.given_up)
        state.given_up -= back
        state.from_count, state.asked, state.changed_at, state.last_move = state.asked, state.asked + back, now, 1
        state.reasons.append(f"{now:.0f}: {state.asked} node(s): {back} given up joined after all: held")
    high = min(settings.max_nodes, settings.affordable(), settings.max_nodes - state.given_up)
    high = max(low, high)
    want, why = state.asked, ""
    since = math.inf if state.changed_at is None else now - state.changed_at
    # the join timeout counts from when the nodes up fell short of the ask: from a rise, or
    # from a node lost (a spot reclaim) whose replacement is starting; counted from the
    # last change, hours before, a lost node was given up at once, every time, and a spot
    # mix sank to min_workers for good
    # ... and from each further loss while short: two spot reclaims overlapping (the
    # second while the first's replacement starts) gave a node up after one timeout from
    # the first, though each replacement came in its time
    if joined >= state.asked:
        state.short_since = None
    elif state.short_since is None or joined < state.short_joined:
        state.short_since, state.short_joined = now, joined
    short = now - state.short_since if state.short_since is not None else 0.0
    if joined < state.asked and state.changed_at is not None and min(since, short) >= settings.join_timeout_s:
        state.given_up += state.asked - joined  # capacity or quota said no: stop asking for them
        state.given_up_at = now
        want, why = max(low, joined), f"{state.asked - joined} node(s) never joined; holding {joined}"
    elif paused_s >= settings.pause_give_back_s and since >= settings.cooldown_s * state.down_backoff:
        want, why = state.asked - 1, (f"trainers took no batch for {paused_s:.0f} s (an evaluation, a save): "
                                      "the nodes feed nobody")
    elif measured is None or since < settings.cooldown_s or joined < state.asked or now < settings.cooldown_s:
        pass  # nothing measured yet, cooling down, a node still joining (or the start's), starting up
    else:
        share, rate = measured
        state.rates[joined] = (rate, share, now)
        want, why = judged(settings, state, now, share, rate, joined, high, busy_share)
    clamped = min(max(want, low), high)
    if clamped != want and why:
        why += f"; held to {clamped} ({'max_workers or the $/h ceiling' if clamped < want else 'min_workers'})"
    if clamped != state.asked:
        move = 1 if clamped > state.asked else -1
        if move == 1 and state.last_move == -1:  # the node given back was needed: a flap
            state.down_backoff = min(state.down_backoff * 2, MAX_DOWN_BACKOFF)
        state.from_count = state.asked if move == 1 else None
        state.asked, state.changed_at, state.last_move = clamped, now, move
        state.reasons.append(f"{now:.0f}: {clamped} node(s): {why}")
    return state.asked


def fed_rate(rate: float, share: float) -> float:
    """What the trainers would take never waiting: a measure's images/s over one less its
    wait share (while data-bound, images/s grows with the nodes)."""
    return rate / max(1 - share, 0.05)


def same_load(rate_a: float, share_a: float, rate_b: float, share_b: float) -> bool:
    """Whether two measures (images/s, wait share) saw the same load: what the trainers
    would take never waiting within SAME_LOAD."""
    fed_a, fed_b = fed_rate(rate_a, share_a), fed_rate(rate_b, share_b)
    return abs(fed_a - fed_b) <= SAME_LOAD * max(fed_a, fed_b)


def judged(settings: Settings, state: State, now: float, share: float, rate: float,
           joined: int, high: int | None = None, busy_share: float | None = None) -> tuple[int, str]:
    """decide()'s judgement of a settled measure at `joined` nodes: (nodes, why). high:
    the most nodes it may ask for (max_workers, the ceiling, those given up)."""
    high = settings.max_nodes if high is None else high
    before, state.from_count = state.from_count, None  # a rise is judged once, on its first measure
    if before is not None and before in state.rates and joined > before:
        old_rate, old_share, _ = state.rates[before]
        if share > old_share + LOAD_CHANGE_SHARE:
            # more nodes never make the trainers wait more: the load grew meanwhile (a
            # heavier phase), and what the counts measured before says nothing now
            state.rates = {joined: state.rates[joined]}
        elif rate < old_rate * (1 + MIN_GAIN) or \
                settings.usd_per_image(joined, rate) >= settings.usd_per_image(before, old_rate):
            state.hold_s = min(2 * state.hold_s, 8 * MEMORY_WINDOWS * settings.window_s) or \
                MEMORY_WINDOWS * settings.window_s
            state.hold = (before, now + state.hold_s, share + LOAD_CHANGE_SHARE)
            return before, (f"{joined} node(s) made {rate:.1f} images/s against {old_rate:.1f} with "
                            f"{before}: not worth their price; back to {before}, held {state.hold_s:.0f} s")
    if share > settings.target_wait_share:
        if state.hold and now < state.hold[1] and share <= state.hold[2]:
            # more nodes did not pay here: the cheaper count stays (the count asked, not the
            # nodes up: one given back may still be leaving, and is not asked for again)
            return state.asked, ""
        # while data-bound, images/s grows with the nodes: n / (1 - w) would feed the trainers
        up = max(state.asked + 1, math.ceil(max(joined, 1) / max(1 - share, 0.05)))
        fed = fed_rate(rate, share)

        def cost(count: int) -> float:  # an image's price with `count` nodes feeding what they can
            return settings.usd_per_image(count, min(fed, rate * count / max(joined, 1)))
        # Pecan's rule, node by node: of the counts up to the jump (clamped to `high`), the
        # one whose image is cheapest, if cheaper than now. Priced on the jump alone, the
        # unclamped jump once vetoed a rise to max_workers that paid, a jump that did not pay
        # held a count where one node more would have, and one that paid took nodes that
        # each made the image dearer (4 where 3 fed a cheaper image, waiting more)
        counts = range(state.asked + 1, min(up, high) + 1)
        if rate <= 0 and counts:  # nothing delivered: no price to compare, the jump
            count = counts[-1]
        else:
            count = min(counts, key=cost, default=state.asked)
        if count > state.asked and (rate <= 0 or cost(count) < settings.usd_per_image(joined, rate)):
            held = f"; held to {count} (max_workers or the $/h ceiling)" if count < up and count == high else ""
            dearer = f"; {count}, not {min(up, high)}: a node more would make an image dearer" \
                if count < min(up, high) else ""
            if dearer:
                state.price_holds += 1
            return count, f"trainers wait {share:.0%} of each step (target {settings.target_wait_share:.0%}){held}{dearer}"
        if counts:  # (at max_workers or the ceiling there is no count to price)
            state.price_holds += 1
        return state.asked, ""  # the time they would save is worth less than they cost
    if share < settings.slack_share and now - (state.changed_at or -math.inf) >= settings.cooldown_s * state.down_backoff:
        fewer = state.rates.get(joined - 1)
        if fewer and now - fewer[2] < MEMORY_WINDOWS * settings.window_s and fewer[1] > settings.target_wait_share:
            return state.asked, ""  # one fewer starved them a moment ago: these are the nodes that feed them
        if busy_share is not None and joined > 1 and busy_share * joined / (joined - 1) > CARRY_SHARE:
            # the others would run past CARRY_SHARE of their CPUs to carry this node's work:
            # giving it back would starve the trainers, and asking for it again bills its
            # start (without this, a load between two counts flapped 2, 3, 2, ... all run).
            # Unless one fewer makes the image cheaper even so: the others fed up to
            # CARRY_SHARE of their CPUs (the same margin), the trainers waiting for the rest;
            # the rise back is priced the same way and does not pay (no flap). Without it a
            # node that cost more than the time it saved stayed all phase
            fewer_rate = min(rate, rate * CARRY_SHARE * (joined - 1) / (busy_share * joined))
            if fewer and same_load(fewer[0], fewer[1], rate, share):
                # one fewer measured at this load: its rate, not the prediction (the CPUs in
                # use under-read what a node makes at 100%: predicted 108 images/s, two
                # nodes made 100, and the count went 2, 3, 2, ... each rise a node's start)
                fewer_rate = fewer[0]
            if settings.usd_per_image(joined - 1, fewer_rate) < settings.usd_per_image(joined, rate):
                return state.asked - 1, (f"trainers wait only {share:.0%}, and {joined - 1} node(s) would feed "
                                         f"~{fewer_rate:.0f} images/s for a cheaper image")
            return state.asked, ""  # a hold keeps the count asked, never the nodes up (one may be more)
        return state.asked - 1, f"trainers wait only {share:.0%}: compute-bound with slack"
    return state.asked, ""


# --- the driver side ------------------------------------------------------------------

def settings_from_env(text: str | None = None) -> tuple[Settings, str, dict[str, float]] | None:
    """(the policy's settings, the node type it steers, one node's bundle) from the kit's
    RAYKIT_AUTOPILOT; None where it is not set (autopilot off). Anything else in it is
    refused in one line: the kit writes it, a hand-made one may be wrong."""
    text = os.environ.get(SETTINGS_ENV, "") if text is None else text
    if not text:
        return None
    try:
        given = json.loads(text)
        settings = Settings(
            target_wait_share=float(given["target_wait_share"]), min_nodes=int(given["min_nodes"]),
            max_nodes=int(given["max_nodes"]), cooldown_s=float(given["cooldown_s"]),
            join_timeout_s=float(given["join_timeout_s"]),
            node_usd_per_hour=None if given["node_usd_per_hour"] is None else float(given["node_usd_per_hour"]),
            base_usd_per_hour=float(given["base_usd_per_hour"]),
            max_usd_per_hour=None if given["max_usd_per_hour"] is None else float(given["max_usd_per_hour"]))
        node_type = str(given["node_type"])
        bundle = {str(k): float(v) for k, v in given["node_bundle"].items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise SystemExit(f"error: {SETTINGS_ENV} is not the kit's autopilot settings "
                         f"({type(e).__name__}: {e}); run the job through `make submit`") from None
    if not (0 < settings.target_wait_share < 1 and 0 <= settings.min_nodes <= settings.max_nodes
            and settings.join_timeout_s > 0 and bundle and all(v > 0 for v in bundle.values())):
        raise SystemExit(f"error: {SETTINGS_ENV}: a target outside 0-1, min above max, no join timeout, "
                         "or an empty bundle")
    return settings, node_type, bundle


@dataclass(frozen=True)
class Decision:
    """One poll's outcome: the nodes to ask for, how many of those up to drain, whether a
    node joined (Ray Data's budget is recomputed then), and the timeline's point."""
    asked: int
    give_back: int
    joined_more: bool
    point: dict


class Steering:
    """The policy as a pure step, between the step log's window and decide(): what a poll
    makes of the steps, the open waits, which node fed which step and the nodes up. No Ray
    in it: Pilot calls it with what Ray says, a simulator or a test with what it plays.

    It keeps what decide() needs beyond State: when each steered node was first seen up,
    the trainers' first step (before it, the pipeline's first fill: judged only once the
    preprocessing has produced for a window), and when the last change's nodes all
    delivered (a measure starts there, not at the change)."""

    def __init__(self, settings: Settings, started: float):
        self.settings, self.started = settings, started
        self.state = State(asked=settings.min_nodes)
        self.first_step_end: float | None = None
        self.settled_at, self.settled_for = started, None  # the ask's nodes all delivering since
        self.seen: dict[str, float] = {}  # each steered node (its id): when a poll first saw it up
        self.last_joined = 0
        self.last_step_end: float | None = None  # the trainers' latest step (a pause is measured from it)
        self.away = False  # the trainers outside their loop now (AWAY_S)
        self.resumed_at: float | None = None  # back in it: measures wait a window from then
        self.replacing = False  # a node of a settled count lost (a spot reclaim): its replacement not at work yet
        self.polled = False  # a step has run (the first adopts the nodes already up)

    def adopt(self, now: float, joined: int) -> None:
        """Nodes of the steered type already up at the first poll (an earlier job's, not
        idle long enough for Ray's autoscaler to remove them): held as the starting count,
        up to max_workers and the $/h ceiling, not drained and started again; the policy
        judges them as any other count."""
        state = self.state
        state.asked = max(state.asked, min(joined, self.settings.max_nodes, self.settings.affordable()))
        state.reasons.append(f"{now - self.started:.0f}: {state.asked} node(s): up at the start "
                             "(left by an earlier job): held, not started again")

    def step(self, now: float, steps: list[tuple[float, float, float, int]], waiting: list[float],
             delivered: dict[str, float], nodes: list[tuple[str, str]],
             producing_since: float | None = None, busy_share: float | None = None) -> Decision:
        """steps: every rank's (end, step s, wait s, images) of the last window; waiting:
        each open wait's start; delivered: node address -> the last step its images fed;
        nodes: the steered type's (node id, address) up now, in Ray's order (the last ones
        are given back first); producing_since: when a preprocessing task was first seen
        finished (None: not yet, or unknown); busy_share: the steered nodes' CPUs running
        preprocessing tasks over the window (None: unknown). Times are epoch seconds."""
        settings, state = self.settings, self.state
        share = wait_share([s[:3] for s in steps], now, settings.window_s, waiting)
        joined = len(nodes)
        if not self.polled and joined > state.asked:
            self.adopt(now, joined)
        self.polled = True
        up = {address: self.seen.setdefault(node_id, now) for node_id, address in nodes}
        joined_more = joined > self.last_joined
        self.last_joined = joined
        if self.first_step_end is None and steps:
            self.first_step_end = min(s[0] for s in steps)  # the trainers' first step: the fill
        if steps:
            newest = max(s[0] for s in steps)
            if self.away and newest > self.last_step_end:  # back in their loop
                self.away, self.resumed_at = False, now
            self.last_step_end = max(self.last_step_end or -math.inf, newest)
        # outside their loop: no step for a while (the window may still hold the steps
        # before) and none blocked for a batch; measured from their last step
        gap_s = now - self.last_step_end if self.last_step_end is not None and not waiting else 0.0
        usual_s = sorted(s[1] for s in steps)[len(steps) // 2] if steps else 0.0
        self.away = self.away or gap_s > max(AWAY_S, 3 * usual_s)
        paused_s = gap_s if self.away else 0.0
        settling = self.settled_for != state.changed_at  # the last change's nodes not all at work
        if settling and joined == state.asked and delivering(up, delivered, now):
            self.settled_for, self.settled_at, settling = state.changed_at, now, False
        # a node lost from a settled count (a spot reclaim, a crash): Ray's autoscaler starts
        # its replacement for the standing request, and the wait meanwhile is the loss's, not
        # the load's (read as the load's, a spot mix asked one node more at each reclaim and
        # gave it back after: 3, 4, 3, ...); measures resume once it delivers
        if not settling and joined < state.asked:
            self.replacing = True
        if self.replacing and joined >= state.asked and delivering(up, delivered, now):
            self.replacing, self.settled_at = False, now
        since = max(now - settings.window_s, self.settled_at, (self.first_step_end or math.inf) + 1e-6)
        # after a rise, nothing is measured until the nodes added deliver: the steps would
        # judge them on the count before (decide() still gives up a node that never joins)
        rising = settling and state.last_move == 1
        # away, the steps are stale; just back, the first ones are fed from the stock and
        # the nodes' CPUs in use still hold the pause's idle: a window's flow first
        resuming = self.resumed_at is not None and now - self.resumed_at < settings.window_s
        unmeasured = rising or self.replacing or self.away or resuming
        measured = None if unmeasured else steady_measure(steps, waiting, now, since)
        blocked = [w for w in waiting if w < since]
        if measured is None and not unmeasured and blocked and (joined == 0 or now - since >= settings.window_s):
            measured = (1.0, 0.0)  # a trainer blocked all along (no node, or none that delivers)
        if measured is None and not unmeasured and self.first_step_end is None and waiting and producing_since is not None \
                and now - max(min(waiting), producing_since) >= settings.window_s:
            # the first fill: its wait is not judged while the nodes start and import (more
            # nodes would not shorten that), but a window after the preprocessing began
            # producing, a first batch still missing is preprocessing too slow for it
            measured = (1.0, 0.0)
        asked = decide(settings, state, now - self.started, measured, joined, paused_s,  # run-relative times
                       busy_share)
        # every node up above the ask goes back, not only those of this poll's change: a node
        # asked for, then no longer wanted before it joined (the ask fell meanwhile: a pause,
        # a give-up) runs on to its join (Ray's autoscaler v2 never cancels a pending node
        # for that), and Ray Data's tasks then keep it busy to the job's end, billing
        give_back = max(0, joined - asked)
        rate = images_per_s(steps)
        point = {"t": round(now - self.started, 1), "preprocess_nodes": joined,
                 # of those up, the nodes that have fed a trainer since they joined
                 "delivering": len(fed_since_joining(up, delivered)),
                 "asked": asked, "wait_share": None if share is None else round(share, 3),
                 "images_per_s": None if rate is None else round(rate, 2),
                 # the steered nodes' CPUs in use over the window: why a node stayed or went
                 "busy_share": None if busy_share is None else round(busy_share, 3)}
        return Decision(asked, give_back, joined_more, point)


class Pilot(threading.Thread):
    """The loop in the driver: Steering's step fed with what Ray says, its decision sent
    to Ray; and the timeline the summary keeps."""

    def __init__(self, settings: Settings, node_type: str, bundle: dict[str, float], log):
        super().__init__(name="raykit-autopilot", daemon=True)
        self.settings, self.node_type, self.bundle, self.log = settings, node_type, bundle, log
        self.started = time.time()
        self.steering = Steering(settings, self.started)
        self.timeline: list[dict] = []
        self.errors: deque[str] = deque(maxlen=5)  # the last failed reads (a persistent one fails every poll)
        self.drained: list[str] = []  # node ids it drained (or why Ray refused)
        self._halt = threading.Event()
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
            DefaultAutoscalingCoordinator,
        )
        self.coordinator = DefaultAutoscalingCoordinator(REQUESTER)
        self.budget_refreshes: list[float] = []  # run-relative times it had Ray Data's budget recomputed
        self.producing_since: float | None = None  # a preprocessing task first seen finished
        self.busy = BusyWindow(settings.window_s)  # the steered nodes' CPUs in use, a sample a poll

    @property
    def state(self) -> State:
        return self.steering.state

    def steered_nodes(self) -> list[dict]:
        """The steered type's nodes up now and not leaving, from Ray's node table (by their
        label). A node being drained (given back, or a spot notice) stays Alive until its
        raylet exits once idle, its tasks done and its blocks freed: 44-78 s after the drain on
        the bench's job (docs/benchmark-log.md). Counted, a poll after the give-back saw one
        node more than it asked for and asked for it again, and the next give-back drained
        the same node again, leaving the one it should have drained up to the job's end."""
        import ray

        from raykit.placement import NODE_TYPE

        leaving = ray_state.draining_nodes()
        return [n for n in ray.nodes() if n["Alive"] and n["NodeID"] not in leaving
                and (n.get("Labels") or {}).get(NODE_TYPE) == self.node_type]

    def joined(self) -> int:
        return len(self.steered_nodes())

    def give_back(self, nodes: int) -> None:
        """Drain `nodes` of the steered type through Ray's GCS (the last the node table lists): Ray
        schedules nothing more there, the work on them finishes (or is retried elsewhere
        by GIVE_BACK_DEADLINE_S), their raylets exit, and the cluster's autoscaler, whose
        request no longer counts them, removes the machines. Without it Ray Data keeps a
        node given back busy, and it never goes idle."""
        import ray
        from ray.core.generated import autoscaler_pb2

        gcs = ray._private.worker.global_worker.gcs_client
        deadline_ms = int((time.time() + GIVE_BACK_DEADLINE_S) * 1000)
        for node in self.steered_nodes()[-nodes:]:
            accepted, why = gcs.drain_node(
                node["NodeID"], autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
                "the raykit autopilot gives this node back", deadline_ms)
            said = node["NodeID"] if accepted else f"refused: {why}"
            if accepted or said not in self.drained[-1:]:  # a refusal retried each poll is said once
                self.drained.append(said)

    def ask(self, nodes: int) -> None:
        from raykit.placement import NODE_TYPE

        self.coordinator.request_resources(
            resources=[dict(self.bundle) for _ in range(nodes)], expire_after_s=REQUEST_EXPIRES_S,
            label_selectors=[{NODE_TYPE: self.node_type}] * nodes)

    def await_ask(self) -> None:
        """Return once the coordinator has sent Ray the request asked before (up to
        ASK_LANDS_S): it runs one caller's calls in order, so its answer to a later one
        means the request is in the GCS. Ray's autoscaler (v2, `ray up`'s and KubeRay's)
        leaves a draining node out of its count at once (RAY_STOPPING is not schedulable:
        ray/autoscaler/v2/scheduler.py), so a drain that reached Ray before the lower
        request had it launch a node to replace the one given back. The ask is fire and
        forget; a busy coordinator held it behind the drain."""
        import ray
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
            get_or_create_autoscaling_coordinator,
        )

        try:
            ray.get(get_or_create_autoscaling_coordinator().get_reserved_resources.remote(REQUESTER),
                    timeout=ASK_LANDS_S)
        except Exception as e:  # noqa: BLE001 (drained anyway: a node kept busy never goes back)
            self.errors.append(f"the lower request not confirmed before the drain: {type(e).__name__}: {str(e)[:120]}")

    def refresh_budget(self, now: float) -> None:
        """Have Ray Data's AutoscalingCoordinator recompute every reservation now: a node
        that joined enters Ray Data's budget only at the coordinator's next tick, up to 20 s
        later (its TICK_INTERVAL_S), and bills meanwhile: the bench saw the autopilot's
        nodes join mid-run and work late. `recompute=True` is the actor's own on-demand
        tick; fire and forget (Ray Data's executor reads the new reservation at its next poll)."""
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
            get_or_create_autoscaling_coordinator,
        )

        get_or_create_autoscaling_coordinator().get_reserved_resources.remote(REQUESTER, recompute=True)
        self.budget_refreshes.append(round(now - self.started, 1))

    def tick(self) -> None:
        import ray

        now = time.time()
        steps, waiting, delivered = ray.get(self.log.window.remote(now - self.settings.window_s), timeout=30)
        nodes = self.steered_nodes()
        try:
            self.busy.add(now, *ray_state.cpus_in_use(nodes))
        except Exception as e:  # noqa: BLE001 (a poll without the load: the policy judges on the wait alone)
            self.errors.append(f"CPUs in use: {type(e).__name__}: {str(e)[:120]}")
        if self.producing_since is None and self.steering.first_step_end is None and waiting \
                and ray_state.preprocessing_produced(ray.get_runtime_context().get_job_id()):
            self.producing_since = now  # asked only while the first batch is awaited
        decision = self.steering.step(now, steps, waiting, delivered,
                                      [(n["NodeID"], n["NodeManagerAddress"]) for n in nodes],
                                      self.producing_since, self.busy.share(now))
        if decision.joined_more:
            self.refresh_budget(now)
        self.ask(decision.asked)
        if decision.give_back:  # this poll gave nodes back: drain them, once Ray has the lower request
            self.await_ask()
            self.give_back(decision.give_back)
        gauges.publish_autopilot(decision.asked, len(nodes))
        self.timeline.append(decision.point)

    def run(self) -> None:
        while not self._halt.wait(POLL_S):
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 (a missed tick: the next one tries again)
                self.errors.append(f"{type(e).__name__}: {str(e)[:120]}")

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)
        try:
            self.coordinator.cancel_request()  # the nodes go idle, and the autoscaler removes them
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"cancel: {type(e).__name__}")

    def report(self) -> dict:
        shares = [p["wait_share"] for p in self.timeline if p["wait_share"] is not None]
        return {"node_type": self.node_type, "target_wait_share": self.settings.target_wait_share,
                "window_s": self.settings.window_s,  # each timeline rate's span (make plan --points)
                "min_nodes": self.settings.min_nodes, "max_nodes": self.settings.max_nodes,
                "mean_wait_share": sum(shares) / len(shares) if shares else None,
                "changes": self.state.reasons, "given_up": self.state.given_up, "drained": self.drained,
                "price_holds": self.state.price_holds,
                "budget_refreshes": self.budget_refreshes, "timeline": self.timeline, "errors": list(self.errors)}


@dataclass
class Steered:
    """What steering() hands the job: the Pilot while it steers (None where none does),
    and once the block is left, its report for the summary (summary.summarize's autopilot)."""
    pilot: "Pilot | None" = None
    report: dict | None = None


@contextmanager
def steering():
    """Around trainer.fit(): the autopilot steers while it runs, where the kit turned it
    on (RAYKIT_AUTOPILOT); otherwise nothing. It reads the step log the kit's entrypoint
    started (entry.py: the stall watch runs there, for every job); run without the kit, it
    starts one and the stall watch itself (RAYKIT_STALL_S, stall.py). Yields a Steered,
    whose report the job passes its summary:

        with autopilot.steering() as steered:
            result = trainer.fit()
        summary.summarize(..., autopilot=steered.report)"""
    found, stall_limit = settings_from_env(), stall.limit_from_env()
    steered = Steered()
    if found is None and stall_limit is None:
        yield steered
        return
    import ray

    # under the kit's entrypoint (entry.py) the stall watch runs there; run without it, here
    own = os.environ.get(contract.ENTRY_WATCHES_ENV) != "1"
    log = steps.start_step_log()  # the entrypoint's, where it started it first
    watch = stall.Watch(stall_limit, log) if stall_limit and own else None
    pilot = steered.pilot = Pilot(*found, log) if found else None
    if pilot:
        settings = pilot.settings
        print(f"autopilot: steering {pilot.node_type} between {settings.min_nodes} and {settings.max_nodes} "
              f"node(s), trainers' data wait under {settings.target_wait_share:.0%}", flush=True)
        pilot.start()
    if watch:
        watch.start()
    try:
        yield steered
    finally:
        if watch:
            watch.stop()
        if pilot:
            pilot.stop()
            steered.report = pilot.report()
        if own:
            ray.kill(log)
