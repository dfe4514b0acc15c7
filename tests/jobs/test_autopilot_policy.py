"""The autopilot's policy (jobs/raykit/autopilot.py) on recorded traces: each trace gives
the trainers' wait share at a time and a count of preprocess nodes joined, the images/s
following from it (a trainer that takes FED images/s when it never waits), fed to decide()
as the driver would, every 5 s; the assertions are on the nodes it holds."""

import os
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "jobs"))  # as a job imports it
from raykit.autopilot import Settings, State, busy_share, decide, steady_measure, wait_share  # noqa: E402

SETTINGS = Settings(target_wait_share=0.10, min_nodes=1, max_nodes=6, cooldown_s=20, join_timeout_s=60)
FED = 100.0  # images/s the trainers take when they never wait


def replay(settings: Settings, trace, joins_after_s: float = 10.0, start: int = 1, never_join: int = 0,
           leaves_after_s: float = 0.0, busy=None):
    """Drive decide() over time: `trace(t)` gives the wait share at t; asked nodes join
    joins_after_s after the ask (the last never_join of each ask never do), and nodes given
    back leave leaves_after_s after (a drain); `busy(t, joined)`, where given, the steered
    nodes' CPUs in use. Returns [(t, asked, joined)]."""
    state, joined, pending, leaving, out = State(asked=start), start, [], [], []
    for t in range(0, 600, 5):
        joined += sum(1 for due in pending if due <= t)
        pending = [due for due in pending if due > t]
        joined -= sum(1 for due in leaving if due <= t)
        leaving = [due for due in leaving if due > t]
        asked_before = state.asked
        share = trace(t, joined)
        measured = None if share is None else (share, FED * (1 - share))
        asked = decide(settings, state, float(t), measured, joined, busy_share=busy and busy(t, joined))
        if asked > asked_before:
            new = asked - max(asked_before, joined + len(pending))
            pending += [t + joins_after_s] * max(0, new - never_join)
        elif asked < joined - len(leaving):
            if leaves_after_s:
                leaving += [t + leaves_after_s] * (joined - len(leaving) - asked)
            else:
                joined = asked  # the autoscaler removes the idle nodes given back
        out.append((t, asked, joined))
    return out, state


def starving(t, joined):
    """Data-bound: wait share falls as nodes join (one node feeds 32% of the trainers)."""
    return max(0.0, 1 - 0.32 * joined)


def test_a_starving_trainer_gets_the_nodes_that_feed_it_in_few_steps():
    out, state = replay(SETTINGS, starving)
    asks = sorted({asked for _, asked, _ in out})
    assert out[-1][1:] == (3, 3)  # the fewest that feed it: 1 - 0.32 * 3 <= 0.10 < 1 - 0.32 * 2
    assert len(asks) <= 4  # proportional steps (n / (1 - w)), not one node at a time
    assert all(1 <= asked <= 6 for _, asked, _ in out)


def test_a_saturated_trainer_gives_nodes_back_one_at_a_time_to_min_workers():
    out, _ = replay(SETTINGS, lambda t, joined: 0.0, start=5)
    counts = [asked for _, asked, _ in out]
    assert counts[-1] == 1  # min_workers
    assert all(a - b <= 1 for a, b in zip(counts, counts[1:]))  # one at a time
    changes = [t for (t, a, _), (_, b, _) in zip(out, out[1:]) if a != b]
    assert all(b - a >= SETTINGS.cooldown_s for a, b in zip(changes, changes[1:]))


def test_a_mix_on_the_edge_of_the_target_flaps_ever_more_slowly():
    """3 nodes: a hair above the target; 4: no wait at all. Each node given back that
    was needed doubles the wait before the next goes back."""
    edge = lambda t, joined: max(0.0, 1 - 0.3 * joined) + (0.001 if joined == 3 else 0)  # noqa: E731
    out, state = replay(SETTINGS, edge)
    downs = [t for (_, a, _), (t, b, _) in zip(out, out[1:]) if b < a]
    assert len(downs) <= 5, state.reasons  # every 40 s without the back-off: 15
    held = [b - a for a, b in zip(downs, downs[1:])]
    assert held == sorted(held) and held[-1] >= 4 * SETTINGS.cooldown_s, downs


# a load of 2.3 nodes' work: 2 nodes leave the trainers waiting, 3 feed them with slack
BETWEEN = lambda t, joined: max(0.0, 1 - joined / 2.3)  # noqa: E731
BETWEEN_BUSY = lambda t, joined: min(1.0, 2.3 / max(joined, 1))  # noqa: E731


def test_a_load_between_two_counts_holds_the_higher_where_the_others_could_not_carry_it():
    """3 nodes busy 77%: two would need 115% of their CPUs, so none goes back. Without the
    signal (a driver that passes none), the same load flaps 3, 2, 3, ... (each change a
    node's start billed on a cloud)."""
    out, state = replay(SETTINGS, BETWEEN, start=3, busy=BETWEEN_BUSY)
    assert {asked for _, asked, _ in out} == {3} and state.reasons == []
    blind, _ = replay(SETTINGS, BETWEEN, start=3)
    assert sum(1 for (_, a, _), (_, b, _) in zip(blind, blind[1:]) if b < a) >= 2


def test_a_light_load_still_goes_back_to_the_count_that_carries_it():
    """A load of 1.2 nodes' work on 5: one goes back each cooldown while the others would
    stay under 85% busy (1.2 / 2 = 60%), and the last one that would not (1.2 / 1) stays."""
    out, state = replay(SETTINGS, lambda t, joined: 0.0, start=5, busy=lambda t, joined: 1.2 / max(joined, 1))
    assert out[-1][1] == 2 and [a for _, a, _ in out].count(5) < len(out), state.reasons


def test_the_busy_share_pools_the_polls_samples_in_the_window():
    samples = [(0.0, 15.0, 15.0), (75.0, 6.0, 15.0), (80.0, 9.0, 15.0), (85.0, 12.0, 30.0)]
    assert busy_share(samples, 90.0, 30.0) == pytest.approx(27.0 / 60.0)  # the sample at 0 s is out of the window
    assert busy_share(samples[:3], 90.0, 30.0) is None  # two samples: too few to judge a load by
    assert busy_share([(80.0, 0.0, 0.0)] * 5, 90.0, 30.0) is None  # no CPUs up (all draining)


def test_a_wait_inside_the_band_does_not_flap():
    """Between a third of the target and the target: hold, whatever the noise."""
    noisy = lambda t, joined: [0.04, 0.09, 0.05, 0.08][t // 5 % 4]  # noqa: E731
    out, state = replay(SETTINGS, noisy, start=3)
    assert {asked for _, asked, _ in out} == {3} and state.reasons == []


def test_a_node_that_never_joins_is_given_up_not_asked_for_forever():
    out, state = replay(SETTINGS, starving, never_join=1)
    assert state.given_up >= 1
    assert any("never joined" in reason for reason in state.reasons)
    # it ends holding what joined, with no ask outstanding for ever
    t, asked, joined = out[-1]
    assert asked == joined


def test_a_node_given_up_that_joins_after_all_is_held_as_a_rise():
    """Given up after the join timeout, a node that was only slow still joins (Ray's
    autoscaler v2 never cancels a launch in flight): held, as a rise judged like any
    other, not drained as a node above the ask."""
    settings = Settings(target_wait_share=0.1, min_nodes=1, max_nodes=3, cooldown_s=20, join_timeout_s=60)
    state = State(asked=3, changed_at=0.0, last_move=1)
    for t in range(5, 70, 5):  # two of three joined; the third, 60 s after the loss was seen, given up
        decide(settings, state, float(t), None, 2)
    assert (state.asked, state.given_up) == (2, 1)
    assert decide(settings, state, 90.0, None, 3) == 3
    assert (state.given_up, state.changed_at, state.from_count) == (0, 90.0, 2)
    assert state.reasons[-1] == "90: 3 node(s): 1 given up joined after all: held"


def test_the_usd_ceiling_bounds_the_nodes():
    capped = Settings(target_wait_share=0.10, min_nodes=1, max_nodes=6, cooldown_s=20,
                      node_usd_per_hour=0.68, base_usd_per_hour=1.0, max_usd_per_hour=3.1)
    assert capped.affordable() == 3  # 1.0 + 3 x 0.68 = 3.04 <= 3.1
    out, state = replay(capped, starving)
    assert max(asked for _, asked, _ in out) == 3
    assert any("the $/h ceiling" in reason for reason in state.reasons)


def test_a_ceiling_at_the_mixs_usd_per_hour_at_min_workers_holds_it_there_however_starved():
    """make bench-autopilot's held row: the job as the autopilot runs it, never moving."""
    base, node = 1.0224, 0.691 / 16 * 0.25
    held = Settings(target_wait_share=0.10, min_nodes=1, max_nodes=3, cooldown_s=10,
                    node_usd_per_hour=node, base_usd_per_hour=base, max_usd_per_hour=base + node * 1)
    assert held.affordable() == 1
    out, state = replay(held, starving)
    assert {asked for _, asked, _ in out} == {1}


def test_where_more_nodes_buy_nothing_the_cheapest_count_is_held_not_max_workers():
    """A trainer starved whatever the nodes (the data source, not the CPUs): the rise is
    tried once, measured, undone, and tried again ever more rarely."""
    out, state = replay(SETTINGS, lambda t, joined: 0.9)
    assert out[-1][1] == 1 and any("not worth their price" in r for r in state.reasons)
    at_one = sum(1 for _, asked, _ in out if asked == 1) / len(out)
    assert at_one > 0.7, state.reasons
    rises = [t for (_, a, _), (t, b, _) in zip(out, out[1:]) if b > a]
    assert len(rises) <= 3 and all(b - a > 100 for a, b in zip(rises, rises[1:])), rises


def test_a_node_that_adds_throughput_stays_and_one_that_adds_none_goes_back():
    """Trainer-bound at 2 nodes (each feeds half the trainers): the rise to 2 pays, a third
    never stays."""
    capped = lambda t, joined: max(0.0, 1 - 0.5 * joined)  # noqa: E731
    out, state = replay(SETTINGS, capped)
    assert out[-1][1] == 2
    assert sum(1 for _, asked, _ in out if asked > 2) <= 3


def test_a_node_is_not_added_where_it_costs_more_than_the_time_it_saves():
    """Pecan's rule: a cheap cluster and a dear node, a little starvation: holding is cheaper."""
    dear = Settings(target_wait_share=0.10, min_nodes=1, max_nodes=6, cooldown_s=20,
                    node_usd_per_hour=5.0, base_usd_per_hour=0.5)
    out, state = replay(dear, lambda t, joined: 0.2 if joined == 1 else 0.0)
    assert {asked for _, asked, _ in out} == {1}, state.reasons
    cheap = Settings(target_wait_share=0.10, min_nodes=1, max_nodes=6, cooldown_s=20,
                     node_usd_per_hour=0.01, base_usd_per_hour=1.0)
    out, _ = replay(cheap, lambda t, joined: 0.2 if joined == 1 else 0.0)
    assert 2 in {asked for _, asked, _ in out}


def test_a_load_that_rises_and_falls_is_followed_up_and_down():
    """light (one node feeds), heavy (two needed), light again: 1 -> 2 -> 1."""
    def phases(t, joined):
        heavy = 150 <= t < 350
        return max(0.0, 1 - (0.5 if heavy else 1.0) * joined)
    out, state = replay(SETTINGS, phases)
    held = {t: asked for t, asked, _ in out}
    assert held[140] == 1 and held[340] == 2 and held[595] == 1, state.reasons
    assert max(held.values()) <= 3


def test_a_rise_met_by_a_heavier_load_is_kept_and_a_node_leaving_is_not_asked_again():
    """What bench-autopilot showed: a node added as a light phase turned heavy made fewer
    images/s than one node had in the light phase, and was undone, again and again (16
    changes, 88% wait); each undo's node, still draining, was asked for again at once.
    More nodes never make the trainers wait more: a wait that grew is the load, and the
    count before is no measure. Here the heavy phase gets the nodes and keeps them."""
    settings = Settings(target_wait_share=0.10, min_nodes=1, max_nodes=3, cooldown_s=10, join_timeout_s=60)

    def phases(t, joined):  # one node feeds 60% of the light load, 15% of the heavy one
        per_node = 0.15 if 15 <= t < 400 else 0.6  # heavy from just after the first rise
        return max(0.0, 1 - per_node * joined)

    out, state = replay(settings, phases, leaves_after_s=30)
    heavy = [asked for t, asked, _ in out if 200 <= t < 400]
    assert heavy and min(heavy) == 3, state.reasons  # all of them, held through the phase
    changes = [(t, a, b) for (_, a, _), (t, b, _) in zip(out, out[1:]) if a != b]
    in_heavy = [(t, a, b) for t, a, b in changes if 15 <= t < 400]
    assert in_heavy == [(20, 2, 3)], state.reasons  # up once it was heavy, never undone
    assert out[-1][1] <= 2, state.reasons  # given back once the light phase came


def test_the_measure_rests_on_the_steady_flow_since_the_change():
    steps = [(90.0, 1.0, 0.9, 16), (96.0, 1.0, 0.5, 16), (97.0, 1.0, 0.1, 16), (98.0, 1.0, 0.1, 16),
             (99.0, 1.0, 0.1, 16)]
    share, rate = steady_measure(steps, [], now=100.0, since=95.0)  # the step at 90 is before
    assert share == pytest.approx(0.8 / 4.0 / (5 / 4), rel=0.3) and rate == pytest.approx(64 / 4.0)
    assert steady_measure(steps[:3], [], now=100.0, since=95.0) is None  # too few steps


def test_nothing_moves_before_a_step_is_measured_or_while_a_node_joins():
    state = State(asked=2)
    assert decide(SETTINGS, state, 100.0, None, 2) == 2
    assert decide(SETTINGS, state, 100.0, 0.9, 1) == 2  # one of the two still joining
    assert state.reasons == []


def test_the_wait_share_is_every_ranks_steps_in_the_window():
    steps = [(10.0, 1.0, 0.5), (95.0, 1.0, 0.5), (99.0, 1.0, 0.1), (99.5, 2.0, 0.0)]
    assert wait_share(steps, now=100.0, window_s=30) == pytest.approx(0.6 / 4.0)
    assert wait_share(steps, now=500.0, window_s=30) is None


def test_a_rank_still_blocked_for_its_batch_counts_as_waiting_now():
    """The pipeline's first fill, or a stall: no step ends, yet the trainer starves."""
    assert wait_share([], now=100.0, window_s=30, waiting=[90.0]) == 1.0
    steps = [(99.0, 1.0, 0.1)]  # one rank stepping, another blocked for 9 s of the window
    assert wait_share(steps, now=100.0, window_s=30, waiting=[91.0]) == pytest.approx(9.1 / 10.0)
    # only the part inside the window: a wait open for 10 minutes weighs 30 s, not 600
    assert wait_share(steps, now=700.0, window_s=30, waiting=[100.0]) == 1.0
    assert wait_share([(699.0, 30.0, 0.0)], now=700.0, window_s=30, waiting=[100.0]) == pytest.approx(0.5)


def test_the_step_log_closes_a_ranks_wait_with_its_step_or_its_loops_end():
    from raykit.steps import StepLog

    log = StepLog()
    log.waiting("a", 10.0)
    log.waiting("b", 11.0)
    assert log.window(0) == ([], [10.0, 11.0], {})
    log.record(12.0, 2.0, 2.0, 16, "a", ("10.0.0.5",))
    log.waiting("b", None)
    assert log.window(0) == ([(12.0, 2.0, 2.0, 16)], [], {"10.0.0.5": 12.0})


def test_a_node_added_counts_from_its_first_batch_not_its_join():
    """The step log keeps when each node's images last fed a step; a node the autopilot saw
    join at 100 s delivers once a step after that was fed by it (not by an earlier node at
    the same address), or, having fed none, DELIVERY_GRACE_S after its join."""
    from raykit.autopilot import DELIVERY_GRACE_S, delivering
    from raykit.steps import StepLog

    log = StepLog()
    log.record(90.0, 1.0, 0.5, 16, "a", ("10.0.0.5", "10.0.0.6"))  # before the join: another node there
    log.record(101.0, 1.0, 0.5, 16, "a", ("10.0.0.5",))
    _, _, delivered = log.window(0)
    assert delivered == {"10.0.0.5": 101.0, "10.0.0.6": 90.0}
    held = {"10.0.0.5": 100.0, "10.0.0.6": 100.0}  # both seen up at 100 s
    assert not delivering(held, delivered, now=102.0)  # .6 has fed nothing since it joined
    assert delivering({"10.0.0.5": 100.0}, delivered, now=102.0)
    log.record(103.0, 1.0, 0.1, 16, "a", ("10.0.0.6",))
    assert delivering(held, log.window(0)[2], now=104.0)
    assert not delivering({"10.0.0.7": 100.0}, delivered, now=100.0 + DELIVERY_GRACE_S - 1)
    assert delivering({"10.0.0.7": 100.0}, delivered, now=100.0 + DELIVERY_GRACE_S)  # Ray Data never used it


def test_a_trainer_starving_from_its_start_gets_nodes_after_one_cooldown_not_a_step_later():
    """The first batch takes 90 s at min_workers: the open wait drives the first ask."""
    state = State(asked=1)
    for t in range(0, 20, 5):  # start-up: imports and the first fill, whatever the wait
        assert decide(SETTINGS, state, float(t), (1.0, 0.0), 1) == 1
    assert decide(SETTINGS, state, 20.0, (1.0, 0.0), 1) == 6  # max_workers: 1 / (1 - 1.0) is unbounded
    assert state.reasons and "wait 100%" in state.reasons[0]


AWS = Settings(target_wait_share=0.1, min_nodes=1, max_nodes=4, cooldown_s=60,
               node_usd_per_hour=0.691, base_usd_per_hour=1.0224)  # hetero: c5.4xlarge + disk, g5.xlarge head


@pytest.mark.parametrize("nodes,share,asked", [
    (2, 0.35, 3),   # the jump to 4 does not pay, one more node does: it held 2
    (3, 0.28, 4),   # the unclamped jump to 5 (over max_workers 4) vetoed the 4 that pays: it held 3
    (3, 0.30, 4),
])
def test_the_price_gate_prices_the_count_it_would_ask_and_one_more(nodes, share, asked):
    """At AWS prices a preprocess node is 68% of the head: the gate (Pecan's rule) priced
    the unclamped jump ceil(n / (1 - w)) and never tried n + 1 (docs/autopilot.md: at 2
    nodes and a 35% wait it held 2 where 3 paid)."""
    assert decide(AWS, State(asked=nodes, changed_at=0), 1000.0, (share, 100.0), nodes) == asked


def test_a_rise_asks_the_count_with_the_cheapest_image_not_the_whole_jump():
    """One node feeds 28% of an appetite of 3.6 nodes: the jump to 4 makes the image
    cheaper than 1 does, but 3 (the trainers waiting 17%) cheaper still: each node must pay
    for itself, the fourth does not (it asked for 4)."""
    state = State(asked=1, changed_at=0)
    assert decide(AWS, state, 1000.0, (0.72, 52.0), 1) == 3
    assert "3, not 4: a node more would make an image dearer" in state.reasons[-1] and state.price_holds == 1
    # then, measured at 3 and waiting 17%: the fourth still does not pay, nothing moves
    assert decide(AWS, state, 2000.0, (0.17, 155.0), 3) == 3


def test_a_wait_held_by_max_workers_is_not_counted_as_the_price_gates():
    """At max_workers there is no node more to price: the summary's "one node more would
    not have made an image cheaper" must not be said of a count that max_workers holds."""
    state = State(asked=4, changed_at=0)
    assert decide(AWS, state, 1000.0, (0.5, 100.0), 4) == 4 and state.price_holds == 0
    state = State(asked=3, changed_at=0)  # at 3 of 4, a 12% wait: the fourth would not pay
    assert decide(AWS, state, 1000.0, (0.12, 100.0), 3) == 3 and state.price_holds == 1


def test_a_node_that_costs_more_than_the_time_it_saves_goes_back_though_the_others_run_past_carry_share():
    """A load of 2.8 nodes' work on 4 at AWS prices: 3 would run at 93% of their CPUs, past
    CARRY_SHARE, so the fourth stayed all phase (the wait and load rules alone). Three at
    CARRY_SHARE feed 91% of the appetite for a cheaper image: it goes back; two would
    not (at 2 the image is dearer), and the rise back to 4 does not pay: 3 is held."""
    load = lambda t, joined: max(0.0, 1 - joined / 2.8)  # noqa: E731
    busy = lambda t, joined: min(1.0, 2.8 / max(joined, 1))  # noqa: E731
    out, state = replay(AWS, load, start=4, busy=busy)
    assert [a for _, a, _ in out][-1] == 3 and {a for _, a, _ in out} == {4, 3}, state.reasons
    assert "for a cheaper image" in state.reasons[0]
    # unpriced (only the rate counts), the same load keeps its 4: CARRY_SHARE as before
    out, state = replay(Settings(target_wait_share=0.1, min_nodes=1, max_nodes=4, cooldown_s=60), load, start=4,
                        busy=busy)
    assert {a for _, a, _ in out} == {4}, state.reasons


def test_a_node_goes_back_on_price_by_what_one_fewer_measured_at_the_same_load():
    """The CPUs in use under-read what a node makes at 100%: from 3 nodes busy 68% the
    prediction for 2 is 108 images/s (a cheaper image), but 2 measured 100 at this load
    (the trainers would take 130 either way), a dearer image: the third stays, where the
    prediction alone went 2, 3, 2, ... each rise a node's start. A measure at another load
    (a heavier phase before) says nothing: the prediction decides."""
    def at_three(fewer):
        state = State(asked=3, changed_at=0, rates={2: fewer})
        return decide(AWS, state, 2000.0, (0.0, 130.0), 3, busy_share=0.68), state
    kept, state = at_three((100.0, 0.23, 1000.0))  # 100 / (1 - 0.23) = 130: this load
    assert kept == 3 and state.reasons == []
    given, state = at_three((150.0, 0.2, 1000.0))  # 187 a second: a heavier load
    assert given == 2 and "108 images/s for a cheaper image" in state.reasons[-1]


def test_a_hold_keeps_the_count_asked_not_the_nodes_up():
    """One node more up than asked (a node given back still draining, a drain Ray
    refused): the two holds of the slack rule kept the nodes up, so a poll raised the ask
    to them with no reason said (the bench: "85: 3 node(s): ", the node being drained asked
    for again)."""
    starved = State(asked=2, changed_at=0, rates={2: (90.0, 0.4, 990.0)})  # one fewer starved them just now
    assert decide(AWS, starved, 1000.0, (0.0, 130.0), 3) == 2 and starved.reasons == []
    carried = State(asked=2, changed_at=0)  # the others would run past CARRY_SHARE, and one fewer is dearer
    assert decide(SETTINGS, carried, 1000.0, (0.0, 130.0), 3, busy_share=0.9) == 2 and carried.reasons == []


def test_the_price_gate_is_monotone_in_the_wait_share():
    """More waiting never asks for fewer nodes, from any count."""
    shares = [0.12, 0.15, 0.2, 0.25, 0.28, 0.3, 0.35, 0.4, 0.5, 0.65, 0.8, 0.95]
    for nodes in range(1, 5):
        row = [decide(AWS, State(asked=nodes, changed_at=0), 1000.0, (w, 100.0), nodes) for w in shares]
        assert row == sorted(row), (nodes, row)


def test_an_evaluation_phase_gives_nodes_back_after_the_pause_limit_not_freezes():
    """No step ends and no rank waits (the trainers evaluate, or save): the measure is None
    and no wait is open, so the autopilot held every node it had, billing, to the phase's
    end. After pause_give_back_s one goes back each cooldown, to min_workers; a pause
    shorter than that changes nothing."""
    from raykit.autopilot import Steering

    settings = Settings(target_wait_share=0.1, min_nodes=1, max_nodes=4, cooldown_s=60, pause_give_back_s=300)
    steering = Steering(settings, started=0.0)
    steering.state = State(asked=3, changed_at=0.0)
    nodes = [(f"id-{i}", f"10.0.0.{i}") for i in range(1, 4)]
    steps = [(t + 0.5, 0.5, 0.0, 16) for t in range(100, 130)]  # training until 130 s (compute-bound, no waits)
    steering.step(130.0, steps, [], {ip: 130.0 for _, ip in nodes}, nodes)
    asked = {}
    for t in range(135, 1000, 5):  # then an evaluation: no step, no wait
        decision = steering.step(float(t), [], [], {ip: 130.0 for _, ip in nodes}, nodes)
        asked[t] = decision.asked
    assert all(n == 3 for t, n in asked.items() if t - 130 < 300)  # a short pause: nothing moves
    assert asked[435] == 2 and min(asked.values()) == 1  # then down, one per cooldown, to min_workers
    assert "trainers took no batch for 3" in steering.state.reasons[0]


def test_an_evaluation_is_not_read_as_slack_at_its_start_nor_after_it():
    """Three nodes carry a load of 2.5 (83% of their CPUs busy, no wait: none can go). Then
    a 3-minute evaluation: no step ends, none waits, the nodes idle (backpressure). The
    window still holds the steps from before (no wait) while the CPUs in use fall: read as
    slack, a node went back at the evaluation's start and another once it ended (fed from
    the stock at first), each asked again a node's start later (make simulate's periodic
    evaluation: 14 changes in 4 hours). Away and just back, nothing is measured: it holds."""
    from raykit.autopilot import BusyWindow, Steering

    settings = Settings(target_wait_share=0.1, min_nodes=1, max_nodes=4, cooldown_s=60)
    steering, busy = Steering(settings, started=0.0), BusyWindow(settings.window_s)
    steering.state = State(asked=3, changed_at=0.0)
    nodes = [(f"id-{i}", f"10.0.0.{i}") for i in range(1, 4)]
    steps, asked = [], {}
    for t in range(5, 900, 5):
        evaluating = 300 <= t < 480
        if not evaluating:
            steps += [(t - 5 + i + 0.5, 0.5, 0.0, 16) for i in range(5)]
        steps = [s for s in steps if s[0] >= t - settings.window_s]
        busy.add(float(t), 0.0 if evaluating else 2.5, 3.0)
        delivered = {ip: max((s[0] for s in steps), default=0.0) for _, ip in nodes}
        decision = steering.step(float(t), list(steps), [], delivered, nodes, busy_share=busy.share(float(t)))
        asked[t] = decision.asked
    assert set(asked.values()) == {3}, (steering.state.reasons, {t: n for t, n in asked.items() if n != 3})
    assert steering.away is False and steering.resumed_at == 480.0


def test_a_node_lost_long_after_the_last_change_is_not_given_up_while_its_replacement_starts():
    """A spot reclaim hours after the last change: the join timeout counted from that change,
    so the node was given up at once (never asked for again), every time; a spot mix sank to
    min_workers for good (`make simulate`'s spot trace: 58% wait). Counted from the loss,
    the replacement has join_timeout_s to join; a node that never joins is still given up."""
    state = State(asked=3, changed_at=0.0)
    settings = Settings(target_wait_share=0.1, min_nodes=1, max_nodes=4, cooldown_s=60, join_timeout_s=600)
    for t in range(7200, 7200 + 590, 5):  # a node lost at 7200 s; its replacement not joined yet
        assert decide(settings, state, float(t), (0.3, 80.0), 2) == 3
    assert state.given_up == 0
    assert decide(settings, state, 7800.0, (0.3, 80.0), 2) == 2 and state.given_up == 1  # it never came
    assert "1 node(s) never joined" in state.reasons[-1]


def test_overlapping_losses_each_get_their_replacements_time_and_a_give_up_lapses():
    """Two spot reclaims overlapping: the second at 400 s while the first's replacement
    starts; each replacement joins in its time (500 s, 800 s). The timeout counts from the
    latest loss, so neither is given up (from the first, one was at 600 s, and the count
    stayed one short for the rest of a 12-hour spot run: `make simulate`'s spot trace +5%
    against the planner, +1% now). A node given up for good is asked for again an hour
    later: a spot pool's capacity comes back."""
    settings = Settings(target_wait_share=0.1, min_nodes=1, max_nodes=3, cooldown_s=60, join_timeout_s=600)
    state = State(asked=3, changed_at=0.0)
    for t in range(7200, 8000, 5):  # the wait of those minutes is the losses' (Steering measures none)
        joined = 2 if t < 7600 else 1 if t < 7700 else 2
        assert decide(settings, state, float(t), (0.3, 80.0), joined) == 3, state.reasons
    assert decide(settings, state, 8000.0, (0.05, 120.0), 3) == 3 and state.given_up == 0
    for t in range(8100, 8800, 5):  # a third loss whose replacement never comes
        decide(settings, state, float(t), (0.3, 80.0), 2)
    assert state.asked == 2 and state.given_up == 1
    assert decide(settings, state, 8800.0 + 3600, (0.3, 80.0), 2) == 3  # an hour on: asked again
    assert state.given_up == 0


def test_the_steering_step_is_the_pilots_glue_without_ray():
    """raykit.autopilot.Steering: the step log's window and the nodes up in, the nodes to
    ask for, the drains and the timeline's point out; no Ray call (a simulator drives it)."""
    from raykit.autopilot import Steering

    steering = Steering(SETTINGS, started=1000.0)
    node = [("id-1", "10.0.0.1")]
    first = steering.step(1005.0, [], [1001.0], {}, node)  # the first fill: blocked, not judged
    assert (first.asked, first.give_back, first.joined_more) == (1, 0, True)
    assert first.point == {"t": 5.0, "preprocess_nodes": 1, "delivering": 0, "asked": 1,
                           "wait_share": 1.0, "images_per_s": None, "busy_share": None}
    # steady starvation after the cooldown: steps that waited 80% of each, node 1 delivering
    t, steps, decision = 1005.0, [], None
    while t < 1060.0:
        t += 5.0
        steps = [s for s in steps if s[0] >= t - SETTINGS.window_s]
        steps += [(t - 4 + i, 1.0, 0.8, 16) for i in range(4)]
        decision = steering.step(t, steps, [], {"10.0.0.1": t}, node)
    assert decision.asked > 1 and not decision.joined_more and decision.give_back == 0
    assert "trainers wait 80%" in steering.state.reasons[-1]
    # the nodes asked join and the load falls to nothing: one node at a time goes back
    nodes = [(f"id-{i}", f"10.0.0.{i}") for i in range(1, decision.asked + 1)]
    t += 5.0
    steps = [s for s in steps if s[0] >= t - SETTINGS.window_s] + [(t - 4 + i, 1.0, 0.8, 16) for i in range(4)]
    joined = steering.step(t, steps, [], {ip: t for _, ip in nodes}, nodes)
    assert joined.joined_more and joined.point["delivering"] == len(nodes)
    for _ in range(60):
        t += 5.0
        steps = [s for s in steps if s[0] >= t - SETTINGS.window_s] + [(t - 4 + i, 1.0, 0.0, 16) for i in range(4)]
        decision = steering.step(t, steps, [], {ip: t for _, ip in nodes}, nodes)
        if decision.give_back:
            break
    assert decision.give_back == 1 and decision.asked == len(nodes) - 1


def test_nodes_that_join_above_the_ask_go_back_when_they_join():
    """Three nodes asked, one up; the trainers then evaluate for 5 minutes and one node goes
    back (the pause rule) while the other two are still starting. Ray's autoscaler v2 never
    cancels a pending node for not being needed, so both join: the one above the ask is
    drained as it joins (it was drained only on the poll of a change, so it stayed, and
    Ray Data's tasks kept it busy and billing to the job's end)."""
    from raykit.autopilot import Steering

    settings = Settings(target_wait_share=0.1, min_nodes=1, max_nodes=4, cooldown_s=60, join_timeout_s=3600,
                        pause_give_back_s=300)
    steering = Steering(settings, started=0.0)
    first = [("id-1", "10.0.0.1")]
    steering.step(5.0, [], [], {}, first)
    steering.state.asked, steering.state.changed_at = 3, 5.0  # asked for three: two start
    steps = [(t + 0.5, 0.5, 0.0, 16) for t in range(100, 130)]  # training until 130 s, then an evaluation
    steering.step(130.0, steps, [], {"10.0.0.1": 130.0}, first)
    t = 130.0
    while steering.state.asked == 3:
        t += 5.0
        assert steering.step(t, [], [], {"10.0.0.1": 130.0}, first).give_back == 0
    assert steering.state.asked == 2 and "no batch" in steering.state.reasons[-1]
    three = first + [("id-2", "10.0.0.2"), ("id-3", "10.0.0.3")]
    joined = steering.step(t + 5.0, [], [], {"10.0.0.1": 130.0}, three)  # the two started join
    assert (joined.asked, joined.give_back) == (2, 1)
    assert steering.step(t + 10.0, [], [], {"10.0.0.1": 130.0}, three[:2]).give_back == 0  # drained: gone


@pytest.mark.parametrize("max_nodes,asked,give_back", [(4, 3, 0), (2, 2, 1)])
def test_nodes_up_at_the_start_are_held_not_drained_and_started_again(max_nodes, asked, give_back):
    """A job started while an earlier job's nodes are still up (Ray's autoscaler removes
    them only once idle): the first poll holds them as its count, up to max_workers, and the
    policy judges them from there (they were held uncounted: the policy asked min_workers,
    never gave them back, and Ray Data kept them busy to the end)."""
    from raykit.autopilot import Steering

    settings = Settings(target_wait_share=0.1, min_nodes=1, max_nodes=max_nodes, cooldown_s=60)
    steering = Steering(settings, started=0.0)
    three = [(f"id-{i}", f"10.0.0.{i}") for i in (1, 2, 3)]
    first = steering.step(5.0, [], [1.0], {}, three)
    assert (first.asked, first.give_back) == (asked, give_back)
    assert steering.state.reasons == [f"5: {asked} node(s): up at the start (left by an earlier job): held, "
                                      "not started again"]
    later = steering.step(10.0, [], [1.0], {}, three + [("id-4", "10.0.0.4")])  # only the first poll adopts
    assert (later.asked, later.give_back) == (asked, 4 - asked)


def test_the_wait_while_a_lost_nodes_replacement_starts_asks_for_no_node_more():
    """A settled count of three loses one (a spot reclaim); Ray's autoscaler starts its
    replacement for the standing request. The trainers wait 30% meanwhile: the loss's
    wait, not the load's, so no fourth node is asked (before, a spot mix asked one more at
    each reclaim and gave it back after: 3, 4, 3, ...). Once the replacement delivers, the
    measures resume on the steps since."""
    from raykit.autopilot import Steering

    steering = Steering(SETTINGS, started=0.0)
    steering.state.asked = 3
    three = [(f"id-{i}", f"10.0.0.{i}") for i in (1, 2, 3)]
    t, steps = 0.0, []

    def run_for(seconds, nodes, wait):
        nonlocal t, steps
        decision = None
        for _ in range(int(seconds // 5)):
            t += 5.0
            steps = [s for s in steps if s[0] >= t - SETTINGS.window_s] + [(t - 4 + i, 1.0, wait, 16) for i in range(4)]
            decision = steering.step(t, steps, [], {ip: t for _, ip in nodes}, nodes)
        return decision
    assert run_for(120, three, 0.05).asked == 3  # settled, inside the band
    lost = run_for(200, three[:2], 0.30)  # one reclaimed; its replacement starting for 200 s
    assert lost.asked == 3 and steering.state.reasons == [], steering.state.reasons
    replaced = [three[0], three[1], ("id-4", "10.0.0.4")]
    back = run_for(120, replaced, 0.05)
    assert back.asked == 3 and steering.state.reasons == [] and not steering.replacing


@pytest.mark.parametrize("producing_at,first_ask", [
    (None, None),      # the nodes still import: the first fill is not judged, however long
    (40.0, 70.0),      # producing from 40 s, the first batch still missing a window later
    (200.0, None),     # producing from 200 s: a window has not passed by the first step
])
def test_a_first_fill_slow_from_preprocessing_gets_nodes_and_one_slow_from_imports_does_not(producing_at, first_ask):
    """The trainer waits for its first batch from 20 s to 220 s (heavy augmentation from
    the first batch: ~190 s measured on local_autopilot, one node held all along). Before,
    the first fill was never judged. Now it is, once a preprocessing task has finished (the
    nodes' imports are done) and a window has passed without the batch."""
    from raykit.autopilot import Steering

    steering = Steering(SETTINGS, started=0.0)
    node = [("id-1", "10.0.0.1")]
    asks = {}
    for t in range(5, 220, 5):
        producing = producing_at if producing_at is not None and t >= producing_at else None
        asks[t] = steering.step(float(t), [], [20.0], {}, node, producing).asked
    asked_at = min((t for t, n in asks.items() if n > 1), default=None)
    assert asked_at == first_ask, asks
    if first_ask:
        assert "wait 100%" in steering.state.reasons[0]


def driver_env() -> dict:
    """A job driver's environment for a script of its own Ray: raykit importable, no
    RAY_ADDRESS (the suite's shared cluster) to join instead."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "jobs"))
    env.pop("RAY_ADDRESS", None)
    return env


def test_the_pilot_sees_the_preprocessing_produce_in_rays_own_task_table(tmp_path):
    """ray_state.preprocessing_produced on a real Ray: not for Ray's actors' calls or the
    kit's own tasks, yes once a Ray Data map task has finished. Beside the suite's other
    Rays on this machine: the state API is told which (without, it refused to pick one)."""
    script = tmp_path / "produced.py"
    script.write_text('''import time, ray, ray.data
from raykit import ray_state
ray.init(num_cpus=1, logging_level="ERROR")
job = ray.get_runtime_context().get_job_id()
ray.get(ray.remote(lambda: 1).remote())  # a task of the job's own, no preprocessing
from ray.util.state import list_tasks
for _ in range(120):  # task events reach the GCS on a 1 s flush (later on a loaded machine)
    if list_tasks(address=ray_state.state_address(), filters=[("job_id", "=", job), ("state", "=", "FINISHED")],
                  timeout=10):
        break
    time.sleep(0.5)
print("before", ray_state.preprocessing_produced(job))
ray.data.DataContext.get_current().enable_progress_bars = False
next(iter(ray.data.range(100, override_num_blocks=2).map_batches(lambda b: b).iter_batches()))
seen = False
for _ in range(120):
    seen = ray_state.preprocessing_produced(job)
    if seen:
        break
    time.sleep(0.5)
print("after", seen)
ray.shutdown()
''')
    env = driver_env()
    # another Ray on the machine, as the suite's shared cluster is (or a user's second
    # local cluster): it stops when its driver leaves (stdin closed)
    other = subprocess.Popen([sys.executable, "-c", "import ray, sys; ray.init(num_cpus=0, include_dashboard=False, "
                              "logging_level='ERROR'); print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert other.stdout.readline().strip() == "up"
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    finally:
        other.stdin.close()
        other.wait(timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "before False" in run.stdout and "after True" in run.stdout, run.stdout


def test_the_pilot_reads_the_cpus_in_use_from_rays_resource_view(tmp_path):
    """ray_state.cpus_in_use on a real Ray: a task holding one of the node's two CPUs is
    one in use; once it has ended, none. (The task ends when told, not by a cancel: a
    force-cancelled worker's CPU was once still held 20 s later on a loaded machine.)"""
    script = tmp_path / "busy.py"
    flag = tmp_path / "hold"
    flag.touch()
    script.write_text(f'''import os, time, ray
from raykit import ray_state
ray.init(num_cpus=2, logging_level="ERROR")
node = [n for n in ray.nodes() if n["Alive"]]
@ray.remote(num_cpus=1)
def hold(flag):
    while flag and os.path.exists(flag):
        time.sleep(0.05)
ray.get(hold.remote(None))  # a worker up
running = hold.remote({str(flag)!r})
seen = None
for _ in range(300):  # the GCS's resource view follows the raylet's within a second or so
    seen = ray_state.cpus_in_use(node)
    if seen[0] == 1.0:
        break
    time.sleep(0.2)
print("running", seen)
os.remove({str(flag)!r})
ray.get(running)
for _ in range(300):
    seen = ray_state.cpus_in_use(node)
    if seen[0] == 0.0:
        break
    time.sleep(0.2)
print("after", seen)
ray.shutdown()
''')
    env = driver_env()
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "running (1.0, 2.0)" in run.stdout and "after (0.0, 2.0)" in run.stdout, run.stdout


# --- what the kit passes the job, and what the job makes of it --------------------------

import json  # noqa: E402

import yaml  # noqa: E402

from conftest import load_example  # noqa: E402
from raykit import contract  # noqa: E402
from raykit.autopilot import settings_from_env  # noqa: E402
from raykit.report import autopilot_text  # noqa: E402
from scripts.build import build, build_text  # noqa: E402
from scripts.core.errors import KitError  # noqa: E402
from scripts.job_env import job_env  # noqa: E402
from scripts.pricing import cost  # noqa: E402


def built_with(cluster: str, change):
    values = load_example(cluster)
    change(values)
    return build_text(cluster, yaml.safe_dump(values).encode())


def test_the_kit_passes_the_steered_type_its_bounds_prices_and_switches_ray_datas_own_off():
    env = job_env(build("local_autopilot"))
    settings = json.loads(env[contract.AUTOPILOT_ENV])
    assert settings | {"node_usd_per_hour": None, "base_usd_per_hour": None} == {
        "node_type": "cpu_worker", "node_bundle": {"raykit-node-cpu_worker": 1}, "min_nodes": 1, "max_nodes": 3,
        "target_wait_share": 0.1, "cooldown_s": 10, "join_timeout_s": 600, "max_usd_per_hour": None,
        "node_usd_per_hour": None, "base_usd_per_hour": None}
    prices = cost.node_hour_prices(build("hetero"))[0]  # local_autopilot's prices_as
    # a quarter-core node stands for a quarter of one of the c5.4xlarge's 16 vCPUs
    assert settings["node_usd_per_hour"] == pytest.approx(prices["cpu_worker"] * 0.25 / 16)
    assert settings["base_usd_per_hour"] == prices["head"]
    assert env["RAY_DATA_DEFAULT_CLUSTER_SCALING_UP_CPU_UTIL_THRESHOLD"] == "2"  # never reached: off
    found, node_type, bundle = settings_from_env(env[contract.AUTOPILOT_ENV])
    assert (found.min_nodes, found.max_nodes, found.join_timeout_s, node_type) == (1, 3, 600, "cpu_worker")
    # the local v1 autoscaler counts the head's free CPUs and ignores selectors: the
    # type's own resource makes each bundle a node of that type; no CPUs, which Ray Data's
    # AutoscalingCoordinator would reserve to the autopilot, out of Ray Data's budget
    assert bundle == {"raykit-node-cpu_worker": 1.0}
    worker_type = next(t for t in build("local_autopilot").config["available_node_types"].values()
                       if "raykit-node-cpu_worker" in t["resources"])
    assert worker_type["resources"]["raykit-node-cpu_worker"] == 1
    assert contract.AUTOPILOT_ENV not in job_env(build("local"))  # off by default


@pytest.mark.parametrize("cluster", ["hetero", "k8s_hetero"])
def test_aws_and_kuberay_mixes_carry_the_resource_the_autopilot_names(cluster):
    built = built_with(cluster, lambda v: v.setdefault("autopilot", {}).update(enabled=True))
    settings = json.loads(job_env(built)[contract.AUTOPILOT_ENV])
    # a node's start: minutes on EC2, up to ~15 on a cold node group (the cluster autoscaler's)
    assert settings["join_timeout_s"] == (600 if cluster == "hetero" else 1200)
    slower = built_with(cluster, lambda v: v.setdefault("autopilot", {}).update(enabled=True, join_timeout_s=2400))
    assert settings_from_env(job_env(slower)[contract.AUTOPILOT_ENV])[0].join_timeout_s == 2400
    kind = "cpu_worker" if cluster == "hetero" else "cpu-worker"  # KubeRay's group names are DNS labels
    assert settings["node_type"] == kind and settings["node_bundle"] == {f"raykit-node-{kind}": 1}
    if cluster == "hetero":  # Ray's cluster config: the type's resources, its CPUs as before
        assert built.config["available_node_types"]["cpu_worker"]["resources"] == {
            "CPU": 15, "raykit-node-cpu_worker": 1}  # c5.4xlarge: 16 - 1 for Ray's own processes
    else:  # the RayCluster's group: the top-level resources (KubeRay >= 1.5), CPUs from limits
        (group,) = [g for g in built.config["spec"]["workerGroupSpecs"] if g["groupName"] == kind]
        assert group["resources"] == {"raykit-node-cpu-worker": "1"}


@pytest.mark.parametrize("change,message", [
    (lambda v: v["workers"]["cpu_worker"].update(max_workers=1), r"min_workers = max_workers \(1\): nothing to steer"),
    (lambda v: v["autopilot"].update(target_wait_share=0), "autopilot.target_wait_share"),
    (lambda v: v["autopilot"].update(cooldown_s=1), "autopilot.cooldown_s"),
    (lambda v: v["autopilot"].update(join_timeout_s=30), "autopilot.join_timeout_s"),
    (lambda v: v["autopilot"].update(join_timeout_s="600"), "autopilot.join_timeout_s"),
    (lambda v: v["autopilot"].update(surprise=1), "autopilot"),
])
def test_bad_autopilot_values_are_refused_before_anything_runs(change, message):
    with pytest.raises(KitError, match=message):
        built_with("local_autopilot", change)


def test_a_ceiling_below_the_mix_at_min_workers_or_without_prices_is_refused():
    low = built_with("local_autopilot", lambda v: v["autopilot"].update(max_usd_per_hour=0.5))
    with pytest.raises(KitError, match=r"below what the mix costs at min_workers \(\$1\.03/h\)"):
        job_env(low)
    unpriced = built_with("local_autopilot", lambda v: (v["autopilot"].update(max_usd_per_hour=5),
                                                        v.update(prices_as=None)))
    with pytest.raises(KitError, match="no prices to hold under a ceiling"):
        job_env(unpriced)


@pytest.mark.parametrize("text", ["{", "[]", '{"target_wait_share": 2}', json.dumps(
    {"target_wait_share": 0.1, "min_nodes": 1, "max_nodes": 3, "cooldown_s": 5, "join_timeout_s": 600, "node_type": "w",
     "node_bundle": {}, "node_usd_per_hour": None, "base_usd_per_hour": 0, "max_usd_per_hour": None}),
    json.dumps(
    {"target_wait_share": 0.1, "min_nodes": 3, "max_nodes": 1, "cooldown_s": 5, "join_timeout_s": 600, "node_type": "w",
     "node_bundle": {"CPU": 1}, "node_usd_per_hour": None, "base_usd_per_hour": 0, "max_usd_per_hour": None}),
    json.dumps(
    {"target_wait_share": 0.1, "min_nodes": 1, "max_nodes": 3, "cooldown_s": 5, "join_timeout_s": 0, "node_type": "w",
     "node_bundle": {"CPU": 1}, "node_usd_per_hour": None, "base_usd_per_hour": 0, "max_usd_per_hour": None})])
def test_settings_that_are_not_the_kits_stop_the_job_with_one_line(text):
    with pytest.raises(SystemExit) as stopped:
        settings_from_env(text)
    assert str(stopped.value).startswith("error: RAYKIT_AUTOPILOT")


def test_the_summary_row_says_what_it_held_and_the_wait():
    report = {"node_type": "cpu_worker", "min_nodes": 1, "max_nodes": 3, "target_wait_share": 0.1,
              "mean_wait_share": 0.06, "changes": ["53: 3 node(s): ..."], "given_up": 0,
              "timeline": [{"preprocess_nodes": 1}, {"preprocess_nodes": 3}]}
    assert autopilot_text(report) == ("steered cpu_worker between 1 and 3 node(s) (1-3 allowed), 1 change(s); "
                                      "trainers waited 6% of each step on average (target 10%)")


def test_a_wait_far_above_the_target_held_by_the_price_gate_is_said_in_the_summary():
    """At AWS prices the gate holds 2 nodes at a 20% wait (a third would not make an image
    cheaper): the run's summary says why it stayed above the target, and what buys speed."""
    state = State(asked=2, changed_at=0.0)
    for t in range(120, 400, 5):
        decide(AWS, state, float(t), (0.20, 104.0), 2)
    assert state.asked == 2 and state.price_holds > 0
    report = {"node_type": "cpu_worker", "min_nodes": 1, "max_nodes": 4, "target_wait_share": 0.1,
              "mean_wait_share": 0.20, "changes": [], "given_up": 0, "price_holds": state.price_holds,
              "timeline": [{"preprocess_nodes": 2}]}
    assert autopilot_text(report).endswith(
        f"; above the target because one node more would not have made an image cheaper ({state.price_holds} "
        "poll(s)): the cheapest image is not the fastest run; for speed at any price, raise the preprocess "
        "type's min_workers")
    assert "cheaper" not in autopilot_text(report | {"mean_wait_share": 0.15})  # near the target: not said
    assert "cheaper" not in autopilot_text(report | {"price_holds": 0})


def test_a_kept_summary_with_an_autopilot_timeline_gets_its_chart(tmp_path, capsys):
    """The summary the kit keeps on this machine, and beside it a PNG of the nodes and the
    wait over time (scripts/core/charts.py); a summary without a timeline gets none."""
    from scripts.core import submit

    report = {"node_type": "cpu_worker", "target_wait_share": 0.1, "min_nodes": 1, "max_nodes": 3,
              "mean_wait_share": 0.2, "changes": [], "given_up": 0, "errors": [],
              "timeline": [{"t": 5.0 * i, "preprocess_nodes": min(1 + i // 3, 3), "asked": min(1 + i // 2, 3),
                            "wait_share": max(0.6 - 0.1 * i, 0.02), "images_per_s": 10.0 + 4 * i}
                           for i in range(10)] + [{"t": 50.0, "preprocess_nodes": 3, "asked": 3,
                                                   "wait_share": None, "images_per_s": None}]}
    submit.keep_result(tmp_path, "raysubmit_1", "vit_synthetic", [], 0, {"autopilot": report})
    chart = tmp_path / "raysubmit_1.autopilot.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
    assert f"autopilot's nodes and data wait over time: {chart}" in capsys.readouterr().out
    # a timeline that says which nodes were delivering gets that line too (older ones lack it)
    delivering = report | {"timeline": [p | {"delivering": max(0, p["preprocess_nodes"] - 1)}
                                        for p in report["timeline"]]}
    submit.keep_result(tmp_path, "raysubmit_4", "vit_synthetic", [], 0, {"autopilot": delivering})
    other = (tmp_path / "raysubmit_4.autopilot.png").read_bytes()
    assert other[:8] == b"\x89PNG\r\n\x1a\n" and other != chart.read_bytes()
    submit.keep_result(tmp_path, "raysubmit_2", "vit_synthetic", [], 0, {"autopilot": None})
    assert not (tmp_path / "raysubmit_2.autopilot.png").exists()
    submit.keep_result(tmp_path, "raysubmit_3", "vit_synthetic", [], 0, {"autopilot": {"timeline": [{"t": 1}]}})
    assert "no autopilot chart: its timeline is not the kit's" in capsys.readouterr().out
