"""The autopilot's actuator on a real local cluster: a job run through the kit (so with
the kit's RAYKIT_AUTOPILOT settings and bundle) feeds the autopilot steps that starve
(the trainers waiting 90% of each step), and the autopilot's request alone brings the
preprocess type from min_workers to max_workers, as Ray's node table shows; then steps
with no wait, fed by the node of the start alone (nothing moves: the nodes added have not
delivered), then by all three, and after its cooldown it asks for one node fewer and
drains it, once its lower request has reached Ray (the coordinator that carries it held
busy: Ray's autoscaler v2 would replace a node drained first). That node holds a block
in its object store, so it stays Alive in Ray's node table while it drains (as a node
Ray Data feeds does): the autopilot no longer counts it, never asks for it again, never
drains it twice, and it leaves Ray's node table once the block is freed. The policy's
other cases are replayed on traces (jobs/test_autopilot_policy.py)."""

import json
import shutil
import uuid

import pytest
import yaml

from conftest import USER_JOBS, USER_VALUES, kept_summary, load_example, local_cluster_up, make

JOB = '''import json, time
import ray
from raykit import autopilot
from raykit import steps as step_log

ray.init()
settings, node_type, bundle = autopilot.settings_from_env()
pilot = autopilot.Pilot(settings, node_type, bundle, step_log.start_step_log())
seen = {"before": pilot.joined(), "bundle": bundle}
had = [n["NodeManagerAddress"] for n in pilot.steered_nodes()]  # the node of the start
# a requester as Ray Data's executor is one: the preprocess subcluster's leftover CPUs
from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
    DefaultAutoscalingCoordinator, get_or_create_autoscaling_coordinator)
from raykit import placement
DefaultAutoscalingCoordinator("as-ray-data", subcluster_selector={placement.SUBCLUSTER: placement.PREPROCESS}).request_resources(
    resources=[], expire_after_s=600, request_remaining=["CPU"])
values_cooldown = settings.cooldown_s
time.sleep(max(0.0, settings.cooldown_s - (time.time() - pilot.started)) + 0.5)  # its start-up cooldown

def steps(step_s, wait_share, fed_by=()):  # ten steps that end now: inside the window however slow this machine is
    ray.get(pilot.log.since.remote(0))  # the actor is up (its start may take seconds here)
    now = time.time()
    ray.get([pilot.log.record.remote(now - 0.01 * i, step_s, step_s * wait_share, 16, "rank", tuple(fed_by))
             for i in range(10)])

steps(1.0, 0.9)  # starving: 90% of each 1 s step waiting for data
pilot.tick()
seen["asked_up"], seen["first"] = pilot.state.asked, pilot.timeline[-1]
deadline = time.time() + 90
while pilot.joined() < settings.max_nodes and time.time() < deadline:
    time.sleep(0.5)
seen["after_up"] = pilot.joined()
time.sleep(settings.cooldown_s + 0.5)
pilot.log = step_log.start_step_log(name=None)  # a fresh log: the starving steps are out of the window
steps(0.3, 0.0, had)  # the trainers step on (seconds without a step and without a wait are a pause)
pilot.tick()  # it sees the three up: its measures count from now (the count's steady flow)
# ... and has Ray Data's coordinator recompute its reservations at once (not at its next
# 20 s tick, which the joins above came well inside): the nodes that joined are in them
time.sleep(1.0)  # that recompute is fire and forget
reserved = ray.get(get_or_create_autoscaling_coordinator().get_reserved_resources.remote("as-ray-data"))
seen["reserved_nodes"] = sum(1 for r in reserved.values() if r.get("CPU", 0) > 0)
seen["refreshes"] = pilot.budget_refreshes
time.sleep(0.1)
steps(0.3, 0.0, had)  # fed with slack, but by the node of the start alone: the two added
pilot.tick()          # have delivered nothing yet, and the rise is not judged on it
seen["asked_before_delivery"], seen["reasons_before_delivery"] = pilot.state.asked, list(pilot.state.reasons)
seen["delivering_before"] = pilot.timeline[-1]["delivering"]
everyone = [n["NodeManagerAddress"] for n in pilot.steered_nodes()]
steps(0.3, 0.0, everyone)  # now all three feed the trainers
pilot.tick()               # its measures count from here
seen["delivering_after"] = pilot.timeline[-1]["delivering"]
time.sleep(0.1)
# the node a give-back drains (the last listed) holds a block in its object store, as a node
# Ray Data feeds does: drained, it stays Alive in Ray's node table until the block is freed
# (the bench's job: 44-78 s after the drain)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
last = pilot.steered_nodes()[-1]["NodeID"]
block = ray.remote(lambda: b"x" * (4 << 20)).options(
    num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(last, soft=False)).remote()
ray.wait([block], timeout=60)  # made there (a worker process starts on a quarter core)
# Ray's autoscaler v2 leaves a draining node out of its count at once: a drain that reached
# Ray before the lower request would have it launch a replacement. The coordinator, busy
# (as when it recomputes its reservations), holds the lower request; the drain must wait
from ray.autoscaler.v2.utils import is_autoscaler_v2
def requested():  # the steered type's bundles in the request the cluster's autoscaler reads now
    key = next(iter(bundle))
    if is_autoscaler_v2():  # the GCS's cluster resource constraint
        from ray.autoscaler.v2.sdk import get_cluster_resource_state
        state = get_cluster_resource_state(ray._private.worker.global_worker.gcs_client)
        return sum(r.count for c in state.cluster_resource_constraints for r in c.resource_requests
                   if r.request.resources_bundle.get(key))
    from ray.autoscaler._private.constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
    from ray.experimental.internal_kv import _internal_kv_get
    return sum(1 for b in json.loads(_internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL) or b"[]") if b.get(key))
drain = pilot.give_back
def give_back(nodes):
    seen["requested_at_drain"] = requested()
    drain(nodes)
pilot.give_back = give_back
seen["requested_before"] = requested()
everyone_ids = {n["NodeID"] for n in pilot.steered_nodes()}
alive = lambda: sum(1 for n in ray.nodes() if n["Alive"] and n["NodeID"] in everyone_ids)  # noqa: E731
time.sleep(0.1)
steps(0.3, 0.0, everyone)  # fed, with slack, at three times the rate: the rise paid, and one node can go
get_or_create_autoscaling_coordinator().__ray_call__.remote(lambda actor: time.sleep(2))  # busy for 2 s
pilot.tick()
seen["asked_down"] = pilot.state.asked
seen["drained_first"], seen["busy_node"] = list(pilot.drained), last
# the node given back still holds its block: up in Ray's node table, not counted by the autopilot
seen["alive_draining"], seen["joined_draining"] = alive(), pilot.joined()
time.sleep(values_cooldown + 0.5)
steps(0.3, 0.0, [n["NodeManagerAddress"] for n in pilot.steered_nodes()])  # the two left feed, with slack
pilot.tick()
seen["asked_then"], seen["alive_then"] = pilot.state.asked, alive()
seen["reasons"], seen["drained"] = pilot.state.reasons, pilot.drained
del block  # freed: the node drained is idle, its raylet exits
deadline = time.time() + 60
while alive() > pilot.state.asked and time.time() < deadline:
    time.sleep(0.5)
seen["after_down"] = alive()
pilot.coordinator.cancel_request()
print("RESULT " + json.dumps(seen))
'''


@pytest.mark.slow
def test_the_autopilots_request_alone_scales_the_preprocess_type_up_then_asks_for_less(tmp_path):
    values = load_example("local_autopilot") | {"cluster_name": "steered"}
    values["autopilot"]["cooldown_s"] = 5
    (USER_VALUES / "steered.yaml").write_text(yaml.safe_dump(values))
    job = USER_JOBS / f"steer_{uuid.uuid4().hex[:6]}"
    job.mkdir()
    (job / "main.py").write_text(JOB)
    try:
        with local_cluster_up(tmp_path / "build", "steered") as (env, _):
            run = make("submit", "CLUSTER=steered", f"JOB={job.name}", env=env, timeout=240)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
            seen = kept_summary(run.stdout)
    finally:
        shutil.rmtree(job, ignore_errors=True)
    assert seen["bundle"] == {"raykit-node-cpu_worker": 1.0}
    assert seen["before"] == 1 and seen["asked_up"] == 3, seen  # min_workers 1; 1 / (1 - 0.9) > 3: max
    assert seen["after_up"] == 3, seen  # Ray's node table: the three the autopilot asked for
    assert seen["reserved_nodes"] == 3 and len(seen["refreshes"]) == 2, seen  # at the first join, then the two
    # the nodes added count from their first batch, not their join (raykit.autopilot.delivering)
    assert seen["asked_before_delivery"] == 3 and len(seen["reasons_before_delivery"]) == 1, seen
    assert (seen["delivering_before"], seen["delivering_after"]) == (1, 3), seen  # the timeline's count
    assert seen["asked_down"] == 2 and "slack" in seen["reasons"][-1], seen
    assert seen["drained_first"] == [seen["busy_node"]], seen  # the last listed, holding its block
    # the lower request was in the GCS before the drain (before: 3 there, the coordinator busy)
    assert (seen["requested_before"], seen["requested_at_drain"]) == (3, 2), seen
    # drained but still busy: up in Ray's node table, and not counted (counted, the next poll
    # asked for it again, or drained it again and left another up to the end)
    assert (seen["alive_draining"], seen["joined_draining"]) == (3, 2), json.dumps(seen)
    assert seen["alive_then"] == 3 and seen["asked_then"] <= 2, seen  # still draining, never asked for again
    assert len(set(seen["drained"])) == len(seen["drained"]), seen  # each drain a node of its own
    assert not any(d.startswith("refused") for d in seen["drained"]), seen
    assert seen["after_down"] == seen["asked_then"], seen  # Ray's node table: the nodes given back are gone
