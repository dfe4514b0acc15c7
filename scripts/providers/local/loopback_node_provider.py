"""Ray autoscaler node provider for the simulated cluster: one raylet per node, each on
its own loopback address.

Ray's FakeMultiNodeProvider starts every simulated node on the host's one IP. Jobs that
tell nodes apart by IP (AdaptDL's controller places replicas per IP and never on its own
node) then see one node. This subclass starts worker k on 127.0.0.(k+2); 127.0.0.0/8 is
all loopback on Linux, so nothing leaves the machine.

Ray loads it from the launched config (`provider: {type: external, module: ...}`) inside
the head's autoscaler process, which inherits the environment that scripts/providers/local/
sets: RAYKIT_GCS_ADDRESS, RAYKIT_TEMP_DIR, the cluster's marker and its auth token. The
nodes it starts inherit them in turn, so `down` finds them and they can reach the GCS.
This module imports Ray; nothing else of the kit imports it but Ray's autoscaler.

With pin_cpus, RAYKIT_WORKER_CORES lists the cores the workers may take: each node gets
as many free ones as its node_config's `cores`, and gives them back when it is terminated.
With a node_config `cpu_quota`, a node's processes run in a cgroup of their own inside
the cluster's (RAYKIT_CGROUP; cpu_quota.py), removed when the node is terminated.
With a node_config `gpus`, a node takes that many of the GPUs in RAYKIT_WORKER_GPUS and
its raylet runs with CUDA_VISIBLE_DEVICES naming them (gpus.py); every other node's names
none. They go back to the pool when the node is terminated.
Its node_config's `worker_niceness` is its raylet's RAY_worker_niceness: a train node's
workers come first on the shared cores (priority.py).
"""

import copy
import json
import os
import sys
from pathlib import Path

import ray
from ray._private import ray_constants
from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider
from ray.autoscaler.tags import (
    NODE_KIND_WORKER,
    STATUS_UP_TO_DATE,
    TAG_RAY_NODE_KIND,
    TAG_RAY_NODE_NAME,
    TAG_RAY_NODE_STATUS,
    TAG_RAY_USER_NODE_TYPE,
)

from scripts.providers.local import cpu_quota, cpu_sets, gpus, priority
from jobs.raykit.placement import CORES

MAX_WORKERS = 250  # 127.0.0.3 .. 127.0.0.252; the local schema allows far fewer


def worker_ip(index: int) -> str:
    """Loopback address of the index-th worker started (1-based). The head is 127.0.0.2
    (Ray rewrites 127.0.0.1 to the host's network address)."""
    return f"127.0.0.{(index - 1) % MAX_WORKERS + 3}"


def raylet_alive(node: "ray._private.node.Node") -> bool:
    raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, [])
    return any(info.process.poll() is None for info in raylets)


class LoopbackNodeProvider(FakeMultiNodeProvider):
    def __init__(self, provider_config, cluster_name):
        provider_config = dict(provider_config, gcs_address=os.environ["RAYKIT_GCS_ADDRESS"])
        super().__init__(provider_config, cluster_name)
        self._temp_dir = os.environ["RAYKIT_TEMP_DIR"]
        self._worker_cores = cpu_sets.from_text(os.environ.get(cpu_sets.WORKER_CORES_ENV, ""))
        self._worker_gpus = gpus.from_text(os.environ.get(gpus.WORKER_GPUS_ENV, ""))
        group = os.environ.get(cpu_quota.GROUP_ENV)
        self._cgroup = Path(group) if group else None  # None: no quotas (or the machine refused them)

    def _free_cores(self, count: int) -> list[int] | None:
        """`count` worker cores no live node holds; None when nodes are not pinned. The
        values check (local/values.py) keeps max_workers within the cores, so they are there."""
        if not self._worker_cores or not count:
            return None
        held = {core for node in self._nodes.values() for core in node.get("cores", ())}
        free = [core for core in self._worker_cores if core not in held]
        if len(free) < count:
            raise RuntimeError(f"{count} cores wanted, {len(free)} free of {self._worker_cores}")
        return free[:count]

    def _free_gpus(self, count: int) -> list[str]:
        """`count` of the workers' GPUs no live node holds (the values check keeps the train
        types' GPUs at max_workers within the machine's, so they are there)."""
        if not count:
            return []
        held = {gpu for node in self._nodes.values() for gpu in node.get("gpus", ())}
        free = [gpu for gpu in self._worker_gpus if gpu not in held]
        if len(free) < count:
            raise RuntimeError(f"{count} GPUs wanted, {len(free)} free of {self._worker_gpus}")
        return free[:count]

    def non_terminated_nodes(self, tag_filters):
        """As a cloud lists its instances: a node whose raylet has exited (drained on a spot
        notice, or killed) is gone, as AWS reports an instance it reclaimed. Its remaining
        processes are stopped and its cores freed; the autoscaler launches a replacement.
        (Ray's fake provider would list it forever, and replace it never.)"""
        with self.lock:
            for node_id, entry in list(self._nodes.items()):
                if "node" in entry and not raylet_alive(entry["node"]):  # the head has none
                    self.terminate_node(node_id)
            return super().non_terminated_nodes(tag_filters)

    def _create_node_with_resources_and_labels(self, node_config, tags, count, resources, labels):
        resources = copy.deepcopy(resources)  # the pops below must not leak to the caller
        with self.lock:
            node_type = tags[TAG_RAY_USER_NODE_TYPE]
            # The node type's labels from the config (placement.py), plus its real cores
            labels = dict(labels or {})
            node_id = self._next_hex_node_id()
            cores = self._free_cores(node_config.get("cores") or 0)
            given = self._free_gpus(node_config.get("gpus") or 0)
            if cores:
                labels[CORES] = str(len(cores))
            params = ray._private.parameter.RayParams(
                node_ip_address=worker_ip(self._next_node_id),
                gcs_address=self._gcs_address,
                temp_dir=self._temp_dir,
                # Every simulated node writes to the head's session dir on this one host;
                # the head's log monitor already streams it all: one more per node would
                # print each log line again.
                include_log_monitor=False,
                min_worker_port=0,
                max_worker_port=0,
                dashboard_port=None,
                dashboard_agent_listen_port=0,
                metrics_export_port=0,
                runtime_env_agent_port=0,
                num_cpus=resources.pop("CPU", 0),
                num_gpus=resources.pop("GPU", 0),
                object_store_memory=resources.pop("object_store_memory", None),
                memory=resources.pop("memory", None),
                resources=resources,
                labels=labels,
                env_vars={
                    # The autoscaler matches nodes to its launches by these ids.
                    "RAY_OVERRIDE_NODE_ID_FOR_TESTING": node_id,
                    "RAY_CLOUD_INSTANCE_ID": node_id,
                    "RAY_NODE_TYPE_NAME": node_type,
                    ray_constants.RESOURCES_ENVIRONMENT_VARIABLE: json.dumps(resources),
                    ray_constants.LABELS_ENVIRONMENT_VARIABLE: json.dumps(labels),
                    # its own GPUs, or none: Ray hands its tasks from this list
                    gpus.VISIBLE: gpus.to_text(given),
                    # its Ray workers' priority on the shared cores (priority.py)
                    **priority.env(node_config.get("worker_niceness", priority.PREPROCESS)),
                },
            )
            with cpu_sets.pinned_to(cores), gpus.visible(given):
                node = ray._private.node.Node(
                    params, head=False, shutdown_at_exit=False, spawn_reaper=False
                )
            self._nodes[node_id] = {
                "tags": {
                    TAG_RAY_NODE_KIND: NODE_KIND_WORKER,
                    TAG_RAY_USER_NODE_TYPE: node_type,
                    TAG_RAY_NODE_NAME: node_id,
                    TAG_RAY_NODE_STATUS: STATUS_UP_TO_DATE,
                    **tags,
                },
                "node": node,
                "cores": cores or [],
                "gpus": given,
                "cgroup": self._limit(node_id, node, node_config.get("cpu_quota")),
            }

    def _limit(self, node_id: str, node, cores: float | None) -> Path | None:
        """Move the new node's processes (and what they started) into a group of their
        own with its CPU quota; what they start later inherits it."""
        if self._cgroup is None or not cores:
            return None
        try:
            group = cpu_quota.node_group(self._cgroup, node_id, cores)
            cpu_quota.move(group, [info.process.pid for infos in node.all_processes.values() for info in infos])
        except OSError as e:  # the cluster's group went (a `down` meanwhile): run unlimited
            print(f"cpu_quota: node {node_id} runs without its quota ({e})", file=sys.stderr, flush=True)
            return None
        return group

    def _terminate_node(self, node):
        super()._terminate_node(node)
        cpu_quota.remove(node.get("cgroup"))  # `down` removes one a lingering process holds
