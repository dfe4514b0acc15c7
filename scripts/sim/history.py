"""The autopilot as an earlier commit had it, for the calibration sets its driver ran then
(docs/benchmark-log.md's round 2, 2026-11-26, and 2026-11-27): its module read from this
checkout's own git history (`git show COMMIT:jobs/raykit/autopilot.py`), never a copy, and
driven by the glue its Pilot.tick had then:

- JoinSettled (c3d5807 to cd0e52f: the same lines): a rise judged once the nodes asked
  for had joined;
- FirstBatchSettled (567898f, the 2026-11-27 set's): judged once every node up had fed a
  trainer a batch since it joined (or DELIVERY_GRACE_S passed), nothing measured after a
  rise until then.

Both differ from today's Steering in what else they read: the first fill by its wait
alone, and no load signal, no pause, no lost node; and both counted a node being drained
among the nodes up, as Ray's node table lists it (today's leaves it out)."""

import math
import subprocess
import sys
import types
from functools import cache

from scripts.core.errors import KitError
from scripts.core.paths import JOBS, REPO
from scripts.sim.world import Mix, Observation, Trace

POLICY_PATH = "jobs/raykit/autopilot.py"


@cache
def source(commit: str) -> str | None:
    """jobs/raykit/autopilot.py's text at `commit`; None where this checkout has no such
    history (no git, a shallow clone, an archive). Asked once a commit: calibrate.playable
    and policy_module both need it."""
    try:
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:{POLICY_PATH}"],
                               capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return shown.stdout if shown.returncode == 0 else None


@cache
def policy_module(commit: str) -> types.ModuleType:
    """jobs/raykit/autopilot.py as `commit` had it, imported beside this checkout's raykit
    (it imports raykit's stall and steps, used by its driver only)."""
    text = source(commit)
    if text is None:
        raise KitError(f"the autopilot of {commit} is not in this checkout's history (a full git clone has it)")
    if str(JOBS) not in sys.path:
        sys.path.insert(0, str(JOBS))
    module = types.ModuleType(f"autopilot_{commit}")
    module.__file__ = f"{commit}:{POLICY_PATH}"
    exec(compile(text, module.__file__, "exec"), module.__dict__)  # noqa: S102 (the repo's own history)
    return module


def up_in_ray(obs: Observation) -> list[tuple[str, str]]:
    """The nodes those Pilots counted: every one Alive in Ray's node table, those being
    drained included, until their raylet exits (the cause of round 2's first thrash: a
    node given back, still draining, was asked for again)."""
    return obs.nodes + obs.draining


class JoinSettled:
    """The autopilot of `commit` (c3d5807, db3f21b or cd0e52f), as its Pilot.tick drove it:
    the settings a job got then, a measure from when the nodes asked for had joined."""
    period_s = 5.0      # its POLL_S
    rise_waits = False  # whether a rise goes unmeasured until it settles (567898f's did)

    def __init__(self, commit: str, cooldown_s: float, target_wait_share: float = 0.1):
        self.commit, self.cooldown_s, self.target = commit, cooldown_s, target_wait_share

    def start(self, trace: Trace, mix: Mix) -> None:
        m = self.m = policy_module(self.commit)
        self.settings = m.Settings(target_wait_share=self.target, min_nodes=mix.min_nodes, max_nodes=mix.max_nodes,
                                   cooldown_s=self.cooldown_s, node_usd_per_hour=mix.node_usd_per_hour,
                                   base_usd_per_hour=mix.head_usd_per_hour)
        self.state = m.State(asked=mix.min_nodes)
        self.first_step_end, self.settled_at, self.settled_for = None, 0.0, None

    def poll(self, obs: Observation) -> int:
        m, settings, state, now = self.m, self.settings, self.state, obs.now
        steps, waiting, joined = obs.steps, obs.waiting, len(up_in_ray(obs))
        if self.first_step_end is None and steps:
            self.first_step_end = min(s[0] for s in steps)  # the trainers' first step: the fill
        settling = self.settled_for != state.changed_at  # the last change's nodes not all at work
        if settling and self.settled(obs):
            self.settled_for, self.settled_at, settling = state.changed_at, now, False
        since = max(now - settings.window_s, self.settled_at, (self.first_step_end or math.inf) + 1e-6)
        rising = self.rise_waits and settling and state.last_move == 1
        measured = None if rising else m.steady_measure(steps, waiting, now, since)
        blocked = [w for w in waiting if w < since]
        if measured is None and not rising and blocked and (joined == 0 or now - since >= settings.window_s):
            measured = (1.0, 0.0)  # a trainer blocked all along (no node, or none that delivers)
        return m.decide(settings, state, now, measured, joined)

    def settled(self, obs: Observation) -> bool:
        """Whether the last change has settled: the nodes asked are up."""
        return len(up_in_ray(obs)) == self.state.asked


class FirstBatchSettled(JoinSettled):
    """The autopilot of `commit` (567898f) as its Pilot.tick drove it: the last change
    settles once the nodes asked are up and each has fed a trainer since it joined; a
    rise is not measured until it settles."""
    rise_waits = True

    def start(self, trace: Trace, mix: Mix) -> None:
        super().start(trace, mix)
        self.seen: dict[str, float] = {}  # node id -> when a poll first saw it up

    def poll(self, obs: Observation) -> int:
        # every poll, as its Pilot.tick did: each node's first sight, settling or not
        self.up = {address: self.seen.setdefault(node_id, obs.now) for node_id, address in up_in_ray(obs)}
        return super().poll(obs)

    def settled(self, obs: Observation) -> bool:
        return super().settled(obs) and self.m.delivering(self.up, obs.delivered, obs.now)


GLUE = {"c3d5807": JoinSettled, "db3f21b": JoinSettled, "cd0e52f": JoinSettled, "567898f": FirstBatchSettled}
