"""make simulate (scripts/sim/): the simulated cluster's physics and bill, each policy's
rule, the kit's own autopilot driven from this checkout, and the supply model against the
runs docs/benchmark-log.md records (the first rung of the calibration the simulator still
lacks: docs/autopilot.md, "The simulator")."""

import dataclasses
import math
import statistics
import sys

import pytest

from conftest import REPO
from scripts.sim import policies, traces
from scripts.sim.simulate import main
from scripts.sim.world import Mix, Node, Observation, Phase, Trace, World, run

MIX = Mix(head_usd_per_hour=1.0, node_usd_per_hour=0.7, node_vcpus=15, min_nodes=1, max_nodes=4,
          start_median_s=240.0)


def steady(trace_seconds: float, trainer: float, cpu_s: float) -> Trace:
    return Trace("steady", (Phase(trace_seconds, trainer, cpu_s),))


def test_the_autopilot_it_drives_is_this_checkouts_not_a_copy():
    import raykit.autopilot

    assert policies.Steering is raykit.autopilot.Steering
    assert raykit.autopilot.__file__ == str(REPO / "jobs" / "raykit" / "autopilot.py")


def test_a_fixed_mix_short_of_supply_waits_its_shortfall_and_bills_its_nodes():
    """One node of 15 vCPUs at 0.25 s an image makes 15 x 4 x 0.95 = 57 images/s against a
    trainer that takes 100: the phase's images (an hour's at 100/s) take 1/0.57 as long,
    waiting ~43% of the time; the bill is the head and one node for that whole time."""
    out = run(steady(3600, 100.0, 0.25), MIX, policies.Fixed("min"), seed=1)
    assert out.images == pytest.approx(100 * 3600, rel=0.001)  # the work, whatever the policy
    assert out.mean_wait_share == pytest.approx(1 - 57 / 100, abs=0.02)
    assert out.wall_s == pytest.approx(3600 / 0.57, rel=0.03)
    assert out.usd == pytest.approx((1.0 + 0.7) * out.wall_s / 3600, rel=0.01)  # the start node: from t = 0


def test_on_one_host_each_node_at_work_takes_its_share_of_the_trainers_rate():
    import dataclasses

    fed = steady(600, 100.0, 0.01)  # supply far above the trainer's: it never waits
    alone = run(fed, MIX, policies.Fixed("min"), seed=1)
    shared = run(fed, dataclasses.replace(MIX, shared_host_slowdown=0.1), policies.Fixed("min"), seed=1)
    assert shared.wall_s == pytest.approx(alone.wall_s / (1 - 0.1 * MIX.min_nodes), rel=0.02)
    assert shared.wait_s == pytest.approx(alone.wait_s, abs=2)  # slower, not waiting longer: the trainer itself is slower


def test_a_node_is_billed_from_running_with_ec2s_minute_minimum_and_pending_is_free():
    node = Node("n", asked_at=0.0, running_at=25.0, joined_at=200.0, delivering_at=215.0)
    node.gone_at = 40.0
    assert node.billed_s(1000.0, MIX.min_billed_s) == 60.0  # ran 15 s: billed the minute
    early = Node("m", asked_at=0.0, running_at=25.0, joined_at=200.0, delivering_at=215.0)
    early.gone_at = 10.0  # given back while pending: EC2 never ran it
    assert early.billed_s(1000.0, MIX.min_billed_s) == 0.0
    late = Node("l", asked_at=0.0, running_at=25.0, joined_at=200.0, delivering_at=215.0)
    assert late.billed_s(1000.0, MIX.min_billed_s) == 975.0


def test_a_node_no_longer_wanted_before_it_joins_runs_on_to_its_join_then_goes():
    """Ray's autoscaler v2 never cancels a pending node for not being needed
    (RAY_AUTOSCALER_PENDING_NODE_IDLE_TIMEOUT_S: -1, read below): three asked, then one,
    before the two new ones joined: they run on, billing, and are drained as they join
    (the kit's Pilot drains every node up above its ask); the world cancelled them free."""
    from ray.autoscaler._private.constants import RAY_AUTOSCALER_PENDING_NODE_IDLE_TIMEOUT_S

    assert RAY_AUTOSCALER_PENDING_NODE_IDLE_TIMEOUT_S < 0  # Ray's default: never
    world = World(steady(3600, 100.0, 0.25), MIX, seed=3)
    world.reconcile(0.0, 1)
    world.nodes[0].joined_at = world.nodes[0].delivering_at = 0.0
    world.reconcile(5.0, 3)
    world.reconcile(10.0, 1)
    new = world.nodes[1:]
    assert len(world.alive()) == 3 and all(n.leaving_at is None for n in new)  # still starting
    joined = max(n.joined_at for n in new)
    world.reconcile(joined, 1)
    assert all(n.leaving_at == joined and n.gone_at == joined + MIX.removal_s for n in new)
    world.bill(joined + MIX.removal_s)
    assert world.outcome.node_s > 2 * (joined - MIX.ec2_s)  # billed from running to gone


def test_a_node_asked_delivers_after_its_start_latency_and_the_autoscaler_replaces_a_reclaimed_one():
    world = World(steady(3600, 100.0, 0.25), MIX, seed=3)
    world.reconcile(0.0, 2)
    new = world.nodes[-1]
    assert new.asked_at == 0.0 and new.running_at == MIX.ec2_s and new.delivering_at > new.joined_at > new.running_at
    assert 0.3 * MIX.start_median_s < new.delivering_at < 3 * MIX.start_median_s
    new.leaving_at, new.gone_at = 10.0, 130.0  # a spot notice
    world.reconcile(10.0, 2)
    assert len(world.alive()) == 2 and world.nodes[-1].asked_at == 10.0


def test_rays_autoscaler_v2_replaces_a_draining_node_at_once_as_the_world_does_at_a_spot_notice():
    """Ray's own v2 scheduler (`ray up`'s and KubeRay's autoscaler) on the hetero mix's
    rendered config, its preprocess type at max_workers 3, asked (as the autopilot asks)
    for three of its bundles with three up: none launched; one of them draining (a spot
    notice, or a node given back), a replacement launched at once, at max_workers too: a
    draining node (RAY_STOPPING) is not schedulable there. So the world launches at the
    notice, not at the node's end; and the autopilot's lower request must reach Ray before
    its drain (Pilot.await_ask; the cluster steering test)."""
    from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig
    from ray.autoscaler.v2.scheduler import ResourceDemandScheduler, SchedulingRequest
    from ray.autoscaler.v2.schema import AutoscalerInstance
    from ray.core.generated.autoscaler_pb2 import (ClusterResourceConstraint, NodeState, NodeStatus,
                                                   ResourceRequest, ResourceRequestByCount)
    from ray.core.generated.instance_manager_pb2 import Instance, NodeKind

    from scripts.build import build

    config = build("hetero").config
    config["available_node_types"]["cpu_worker"].update(min_workers=0, max_workers=3)
    types = AutoscalingConfig(config, skip_content_hash=True).get_node_type_configs()
    resources = types["cpu_worker"].resources
    bundle = {"raykit-node-cpu_worker": 1.0}
    assert resources["raykit-node-cpu_worker"] == 1  # the autopilot's bundle: one a node

    def node(i: int, draining: bool) -> AutoscalerInstance:
        return AutoscalerInstance(
            cloud_instance_id=f"i-{i}",
            im_instance=Instance(instance_id=f"im-{i}", instance_type="cpu_worker", cloud_instance_id=f"i-{i}",
                                 status=Instance.RAY_STOPPING if draining else Instance.RAY_RUNNING,
                                 node_id=f"{i:02x}" * 28, node_kind=NodeKind.WORKER),
            ray_node=NodeState(node_id=bytes([i]) * 28, instance_id=f"i-{i}", total_resources=resources,
                               available_resources=resources,
                               status=NodeStatus.DRAINING if draining else NodeStatus.RUNNING))

    def launched(asked: int, draining: bool) -> int:
        wanted = ClusterResourceConstraint(resource_requests=[ResourceRequestByCount(
            request=ResourceRequest(resources_bundle=bundle), count=asked)])
        reply = ResourceDemandScheduler().schedule(SchedulingRequest(
            disable_launch_config_check=True, node_type_configs=types, max_num_nodes=10,
            cluster_resource_constraints=[wanted],
            current_instances=[node(1, False), node(2, False), node(3, draining)]))
        return sum(launch.count for launch in reply.to_launch if launch.instance_type == "cpu_worker")

    assert launched(3, draining=False) == 0
    assert launched(3, draining=True) == 1  # the drain before the lower request: a replacement
    assert launched(2, draining=True) == 0  # the lower request first: none
    world = World(steady(3600, 100.0, 0.25), MIX, seed=3)
    world.reconcile(0.0, 2)
    world.nodes[-1].leaving_at, world.nodes[-1].gone_at = 10.0, 130.0  # noticed at 10 s, ends at 130 s
    world.reconcile(10.0, 2)
    assert world.nodes[-1].asked_at == 10.0


def test_a_node_given_back_is_listed_as_draining_until_its_raylet_exits_and_only_earlier_pilots_count_it():
    """Ray's node table lists a drained node Alive until its raylet exits (44-78 s measured on
    the bench's job): today's Pilot leaves it out of the nodes up, round 2's counted it,
    and asked for it again (its first run's thrash)."""
    from scripts.sim import history

    world = World(steady(3600, 100.0, 0.25), dataclasses.replace(MIX, removal_s=54.0), seed=1)
    world.reconcile(0.0, 2)
    given = world.nodes[-1]
    world.reconcile(given.delivering_at + 10, 1)
    draining = world.observe(given.delivering_at + 60)
    assert (given.id, given.id) in draining.draining and (given.id, given.id) not in draining.nodes
    assert len(draining.nodes) == 1 and len(history.up_in_ray(draining)) == 2
    gone = world.observe(given.delivering_at + 65)
    assert gone.draining == [] and len(history.up_in_ray(gone)) == 1


def test_before_the_kit_refreshed_ray_datas_budget_a_node_got_its_first_task_at_the_coordinators_tick():
    ticked = Mix(head_usd_per_hour=1.0, node_usd_per_hour=0.01, node_vcpus=1, min_nodes=1, max_nodes=3,
                 ec2_s=4.0, first_task_s=20.0, start_median_s=30.0, start_sigma=0.0, budget_tick_s=20.0)
    for seed in range(5):
        world = World(steady(600, 100.0, 0.01), ticked, seed=seed)
        world.reconcile(33.0, 2)
        node = world.nodes[-1]
        waited = node.delivering_at - ticked.first_task_s - node.joined_at  # for the tick after its join
        assert node.joined_at == 43.0 and 0.0 <= waited < 20.0
        ticks = (node.delivering_at - ticked.first_task_s - world.tick_phase) / 20.0
        assert ticks == pytest.approx(round(ticks))  # on one of the coordinator's ticks
    at_once = World(steady(600, 100.0, 0.01), dataclasses.replace(ticked, budget_tick_s=0.0), seed=0)
    at_once.reconcile(33.0, 2)
    assert at_once.nodes[-1].delivering_at == 63.0


def test_ray_datas_rule_doubles_while_busy_and_never_asks_for_less():
    rule = policies.RayData()
    rule.start(steady(60, 100.0, 0.25), MIX)
    clock = iter(range(10, 1000, 10))  # its polls, MIN_GAP_S apart

    def seen(busy: float, held: float = 15.0, produced: float | None = 1.0) -> Observation:
        return Observation(float(next(clock)), [], [], {}, [], held, busy, 1, producing_since=produced)
    assert rule.poll(seen(busy=15.0, produced=None)) == 1  # busy, but no task has finished: no rate yet
    assert rule.poll(seen(busy=5.0)) == 1  # a third busy: the previous request, unchanged
    assert rule.poll(seen(busy=10.0)) == 2  # two thirds: twice the CPUs it holds
    assert rule.poll(seen(busy=30.0, held=30.0)) == 4
    assert rule.poll(seen(busy=0.0, held=60.0)) == 4  # idle now: still never less


def test_the_kits_job_without_the_autopilot_has_rays_autoscaler_launch_max_workers_for_its_queue(monkeypatch):
    """The raydata row is the kit's job with the autopilot off: its pipeline turns Ray Data's
    resource reservation off and sets its 1-CPU stage no concurrency, and Ray's own classes
    then hold no task back (no allocator; a cap of infinity), so its tasks queue past the
    CPUs it holds and Ray's autoscaler launches max_workers for them from its first poll.
    Ray Data's rule alone, with the reservation on, waits for a finished task and doubles."""
    import ray
    from ray.data._internal.execution import create_resource_allocator
    from ray.data._internal.execution.backpressure_policy.concurrency_cap_backpressure_policy import \
        ConcurrencyCapBackpressurePolicy

    sys.path[:0] = [str(REPO / "jobs" / "vit_synthetic"), str(REPO / "jobs")]
    import pipeline
    from raykit.autopilot import SETTINGS_ENV

    staged = []

    class Stage:  # an operator that sets no concurrency
        def get_max_concurrency_limit(self):
            return None

    class Records:  # what ray.data.range returns, without starting Ray
        def map_batches(self, fn, **options):
            staged.append(options)

    monkeypatch.setattr(ray.data, "range", lambda *_, **__: Records())
    ctx = ray.data.DataContext.get_current().copy()  # the job's own, not this process's
    monkeypatch.setattr(ray.data.DataContext, "get_current", staticmethod(lambda: ctx))
    for steered in (False, True):
        if steered:
            monkeypatch.setenv(SETTINGS_ENV, "{}")
        else:
            monkeypatch.delenv(SETTINGS_ENV, raising=False)
        pipeline.build_dataset(64, 16, 32, 1, 3)
        assert ctx.op_resource_reservation_enabled is steered
    assert all(o.get("num_cpus") == 1 and o.get("concurrency") is None for o in staged)
    off = ctx.copy()
    off.op_resource_reservation_enabled = False
    assert create_resource_allocator(None, off) is None  # nothing budgets its tasks
    stage = Stage()
    assert ConcurrencyCapBackpressurePolicy(off, {stage: None}, None)._concurrency_caps[stage] == math.inf

    trace = Trace("start", (Phase(26.0, 0.0, 0.01, kind="eval"), Phase(600.0, 100.0, 0.01)))
    queued, rule_alone = policies.POLICIES["raydata"](), policies.POLICIES["raydata_rule"]()
    assert (queued.period_s, rule_alone.period_s) == (5.0, 10.0)  # Ray's autoscaler's update; Ray Data's gap
    for policy in (queued, rule_alone):
        policy.start(trace, MIX)
    first = Observation(5.0, [], [], {}, [("a", "a")], 15.0, 15.0, 1, producing_since=None)
    assert queued.poll(first) == MIX.max_nodes and rule_alone.poll(first) == 1  # busy, but no rate yet
    out = run(trace, MIX, queued, seed=1)
    assert {p["asked"] for p in out.timeline} == {MIX.max_nodes} and out.changes == 1


def test_a_node_given_up_before_it_joins_still_comes_and_is_held():
    """A node that starts in 15 minutes (a cold node group) outlasts the 10-minute default
    join timeout and is given up: the request drops, but Ray's autoscaler v2 never cancels
    a launch in flight, so the node joins after all; the autopilot holds it (a count above
    its ask it would drain, the node's start paid for nothing). The run costs what one with
    the timeout set above the start costs; the timeout stops only the asking for nodes that
    never come (test_a_node_that_never_joins_is_given_up_not_asked_for_forever)."""
    slow = Mix(head_usd_per_hour=1.0, node_usd_per_hour=0.7, node_vcpus=15, min_nodes=1, max_nodes=3,
               start_median_s=900.0)
    heavy = steady(3 * 3600, 130.0, 2.9 * 15 * 0.95 / 130.0)  # 2.9 nodes feed the trainer: 3 pay
    default, as_told = policies.Autopilot(join_timeout_s=600.0), policies.Autopilot()
    given_up, waited = run(heavy, slow, default, seed=0), run(heavy, slow, as_told, seed=0)
    assert as_told.settings.join_timeout_s == 1800.0 and default.settings.join_timeout_s == 600.0
    reasons = default.steering.state.reasons
    assert any("never joined" in r for r in reasons) and any("joined after all: held" in r for r in reasons)
    assert default.steering.state.given_up == 0 and default.steering.state.asked == 3
    assert given_up.mean_wait_share < 0.1
    assert given_up.usd_per_million_images == pytest.approx(waited.usd_per_million_images, rel=0.01)


def test_ray_data_counts_a_node_busy_while_its_first_task_imports():
    """Ray Data's utilization is its tasks' CPUs over the joined nodes' (its resource
    manager's global usage and limits): a task holds its CPU from its submission, so the
    start node importing for its first task is 100% busy though it delivers nothing, and
    Ray Data asks for more once that task finishes (it has a rate), before the first step."""
    mix = Mix(head_usd_per_hour=1.0, node_usd_per_hour=0.01, node_vcpus=1, min_nodes=1, max_nodes=3,
              ec2_s=4.0, first_task_s=20.0, start_median_s=24.0, buffer_images=64)
    trace = Trace("start", (Phase(26.0, 0.0, 0.01, kind="eval"), Phase(60.0, 100.0, 0.01)))
    world = World(trace, mix, seed=0)
    for t in range(10):
        world.tick(float(t))
    seen = world.observe(10.0)
    assert (seen.held_vcpus, seen.busy_vcpus, seen.producing_since) == (1, 1.0, None)
    rule = policies.RayData()
    rule.start(trace, mix)
    assert rule.poll(seen) == 1  # busy, no task finished yet: no rate, no request
    for t in range(10, 25):
        world.tick(float(t))
    seen = world.observe(25.0)
    assert seen.producing_since == 20.0 and not seen.steps  # produced, before the first step
    assert rule.poll(seen) == 2


def test_the_ray_data_rule_requests_what_ray_datas_own_autoscaler_requests():
    """Ray's RateBasedClusterAutoscaler, driven through its seams (a coordinator that
    reserves what the cluster holds, a utilization gauge, a clock; one map operator of
    1-CPU tasks, as the kit's preprocessing), beside the simulator's rule on the same
    inputs, second by second: the same CPUs requested at the same moments."""
    from types import SimpleNamespace

    from ray.data._internal.cluster_autoscaler import rate_based_cluster_autoscaler as ray_rule
    from ray.data._internal.cluster_autoscaler.resource_utilization_gauge import ClusterUtil
    from ray.data._internal.execution.interfaces.execution_options import ExecutionResources

    now = {"t": 1000.0}
    seen = {"held": 0.0, "util": 0.0, "rate": None}
    sent = []

    class Coordinator:  # what DefaultAutoscalingCoordinator answers: the CPUs reserved for it
        def request_resources(self, resources, expire_after_s, request_remaining=None, **_):
            sent.append((now["t"], sum(r.get("CPU", 0.0) for r in resources)))

        def get_reserved_resources(self):
            return {"cluster": {"CPU": seen["held"]}}

        def cancel_request(self):
            pass

    class Gauge:
        def observe(self):
            pass

        def get(self):
            return ClusterUtil(cpu=seen["util"], gpu=0.0, memory=0.0, object_store_memory=0.0)

    class MapOperator:  # the kit's preprocessing: 1-CPU read-and-augment tasks
        output_dependencies = []
        metrics = SimpleNamespace(average_num_inputs_per_task=1.0, average_num_outputs_per_task=1.0,
                                  num_output_blocks_per_task_s=None)

        def per_task_resource_allocation(self):
            return ExecutionResources(cpu=1)

        def min_scheduling_resources(self):
            return ExecutionResources(cpu=1)

        def get_max_concurrency_limit(self):
            return None

        def has_completed(self):
            return False

    op = MapOperator()
    ray_rule_time = ray_rule.time
    ray_rule.time = SimpleNamespace(monotonic=lambda: now["t"])
    try:
        theirs = ray_rule.RateBasedClusterAutoscaler([op], "sim", utility_calculator=Gauge(),
                                                     autoscaling_coordinator=Coordinator())
        ours = policies.RayData()
        ours.start(steady(60, 100.0, 0.25), MIX)
        # (seconds, CPUs held, utilization, a task has finished): busy before any rate, a
        # doubling, a quiet spell (the last request again), a node lost while busy, growth
        # past the 256-CPU step
        script = [(15, 15, 0.9, False), (20, 15, 0.8, True), (30, 30, 0.3, True), (20, 45, 0.6, True),
                  (20, 30, 0.7, True), (20, 400, 0.9, True)]
        mine = [(now["t"], 0.0)]  # both register with an empty request
        last = now["t"]
        for seconds, held, util, finished in script:
            for _ in range(seconds):
                now["t"] += 1.0
                seen.update(held=float(held), util=util)
                op.metrics.num_output_blocks_per_task_s = 2.0 if finished else None
                theirs.try_trigger_scaling()
                if now["t"] - last >= ours.MIN_GAP_S:
                    mine.append((now["t"], ours.request(float(held), util, finished)))
                    last = now["t"]
    finally:
        ray_rule.time = ray_rule_time
    assert sent == mine
    # registered; busy without a rate; doubled; quiet: the same again; doubled; a node lost
    # (Ray asks less: its nodes above it leave only when idle); the step capped at +256
    assert [cpus for _, cpus in sent] == [0, 0, 30, 30, 30, 30, 30, 90, 90, 60, 60, 656, 656]


def test_the_oracle_beats_every_fixed_choice_on_a_long_square_wave_and_each_policy_keeps_its_bounds():
    """The bound the others are judged by: on hour-long heavy and light phases the oracle's
    image is cheaper than every fixed choice's and Ray Data's, and within 3% of the cheapest
    of all (it knows the phases, but picks each one's steady-state optimum and ignores the
    cost of a change: a near bound, not an exact one). Where the autopilot lands is a result
    `make simulate` reports, never asserted here."""
    wave = traces.square_wave(60, 6, 130.0, 2.5 * 15 * 0.95 / 130.0)
    out = {name: run(wave, MIX, make(), seed=2) for name, make in policies.POLICIES.items()}
    assert max(o.images for o in out.values()) / min(o.images for o in out.values()) < 1.001  # the same work
    cost = {name: o.usd_per_million_images for name, o in out.items()}
    assert cost["oracle"] < min(cost[p] for p in ("fixed_min", "fixed_max", "planner", "raydata")), cost
    assert cost["oracle"] <= 1.03 * min(cost.values()), cost
    for name, o in out.items():
        assert all(MIX.min_nodes <= p["asked"] <= MIX.max_nodes for p in o.timeline), name
    assert out["fixed_min"].changes == 0 and out["raydata"].changes >= 1


@pytest.mark.parametrize("row,cpus,ms_an_image,measured", [
    ("machine A, local_gpu_single", 3, 75.2, 39.5),
    ("machine A, local_gpu_hetero", 12, 90.6, 118.3),
    ("machine B, local_gpu_single", 3, 106.0, 27.4),
])
def test_the_supply_model_predicts_the_measured_data_bound_rows_within_12_percent(row, cpus, ms_an_image, measured):
    """docs/benchmark-log.md's H100 rows (2026-11-27): each data-bound row's steady images/s
    from its own CPU cost an image (fit on the row, never across machines: they differ 40%)."""
    mix = Mix(head_usd_per_hour=1.0, node_usd_per_hour=0.1, node_vcpus=cpus, min_nodes=1, max_nodes=1)
    out = run(steady(1800, 300.0, ms_an_image / 1000), mix, policies.Fixed("min"), seed=0)
    predicted = out.images / out.wall_s
    assert abs(predicted / measured - 1) <= 0.12, (row, predicted, measured)


def test_make_simulate_prints_a_table_per_trace_and_refuses_bad_flags(capsys, tmp_path, monkeypatch):
    from scripts.sim import simulate

    monkeypatch.setattr(simulate, "BUILD", tmp_path)
    # it misses checks today (tests/sim/test_calibration.py says which): no cloud table
    assert main(["--hours", "1", "--seeds", "2", "--traces", "curriculum"]) == 2
    out, err = capsys.readouterr()
    assert "calibration on make bench-autopilot of 2026-11-27" in out and "  MISS  " in out
    assert "calibration on make bench's start" in out and "B local_gpu_single ramp: measured 7.6 s" in out
    assert "error: NOT CALIBRATED: the simulator misses " in err and "ARGS=--uncalibrated" in err
    assert "trace curriculum" not in out and not list(tmp_path.glob("sim/*/rows.json"))
    assert main(["--hours", "1", "--seeds", "2", "--traces", "curriculum", "--uncalibrated"]) == 0
    out = capsys.readouterr().out
    assert "NOT CALIBRATED" in out and "the tables below (--uncalibrated)" in out
    assert "trace curriculum: heavy augmentation for 75%, then light (1 h)" in out
    for policy in policies.POLICIES:
        assert f"\n  {policy} " in out
    assert "the autopilot against the best other (" in out
    assert list(tmp_path.glob("sim/*/rows.json"))
    assert main(["--seeds", "0"]) == 2 and "error: ARGS: --seeds" in capsys.readouterr().err
    assert main(["--hours", "100"]) == 2 and "error: ARGS: --hours must be from 0.1 to 48" in capsys.readouterr().err


def test_a_users_own_phases_are_played_and_bad_ones_refused_in_one_line(capsys, tmp_path, monkeypatch):
    """`--phases MINUTES:LOAD,...`: a 12-hour schedule a user knows (9 h of heavy
    augmentation, 3 h light) instead of the traces; an evaluation as `eval`. Whatever is
    not one of those is one error line naming the item."""
    from scripts.sim import simulate

    own = traces.from_spec("540:1, 180:0.25,3:eval", 130.0, 0.1)
    assert [(p.seconds, p.trainer_images_per_s, p.cpu_s_per_image, p.kind) for p in own.phases] == [
        (32400.0, 130.0, 0.1, "train"), (10800.0, 130.0, 0.025, "train"), (180.0, 0.0, 0.1, "eval")]
    monkeypatch.setattr(simulate, "BUILD", tmp_path)
    assert main(["--uncalibrated", "--seeds", "2", "--phases", "60:1,60:0.25"]) == 0
    out = capsys.readouterr().out
    assert "trace your_phases: your phases (60:1,60:0.25) (2 h)" in out and "trace curriculum" not in out
    for bad in ("60", "60:x", "0:1", "60:nan", "60:inf", "60:0", "3000:1", "60:1;rm -rf /", "", ",".join(["1:1"] * 201)):
        assert main(["--uncalibrated", "--phases", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ARGS: --phases: ") and err.count("\n") == 1, (bad, err)


def test_the_spot_trace_prices_its_workers_at_the_spot_prices_make_prices_read():
    import json
    from types import SimpleNamespace

    from scripts import catalog
    from scripts.sim.simulate import hetero_mix

    a = SimpleNamespace(min_nodes=1, max_nodes=4, start_minutes=4.0)
    catalog.fetched_spot_prices.cache_clear()
    unread, said = hetero_mix(a, spot=True)
    assert unread.node_usd_per_hour == hetero_mix(a)[0].node_usd_per_hour
    assert "no spot prices read" in said
    path = catalog.spot_price_list_path("us-east-1")
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"region": "us-east-1", "source": "test", "fetched": "2026-11-29 06:00 UTC",
                                "usd_per_hour": {"c5.4xlarge": {"us-east-1a": 0.25, "us-east-1b": 0.3}}}))
    catalog.fetched_spot_prices.cache_clear()
    try:
        spot, said = hetero_mix(a, spot=True)
    finally:
        path.unlink()
        catalog.fetched_spot_prices.cache_clear()
    disk_usd = unread.node_usd_per_hour - catalog.instance_usd_per_hour("c5.4xlarge", "us-east-1")
    assert spot.node_usd_per_hour == pytest.approx(0.3 + disk_usd)
    assert "spot prices read 2026-11-29 06:00 UTC" in said
