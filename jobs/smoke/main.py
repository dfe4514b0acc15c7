"""Cluster smoke test: which nodes run what. `make submit JOB=smoke`

Runs tasks that select the preprocess subcluster (the CPU workers) and one that selects
the train subcluster (the GPU head, or its local stand-in) by node label
(raykit.placement), then reports where each ran and at which niceness (a local cluster
puts its trainers first on the shared cores: scripts/providers/local/priority.py): a line
for a person (`smoke: ...`), and `RESULT {...}` with the node IPs for the kit (kept in
build/results/). `--fail-with N` exits with code N after the
report, to check that failures reach `make submit`'s exit code; `--sleep S` waits S seconds
after the report, so that a test can interrupt a running job.
"""

import argparse
import json
import os
import socket
import sys
import time

import ray
from raykit import placement


@ray.remote(num_cpus=1)
def preprocess_task(i: int) -> tuple[str, int]:
    time.sleep(0.5)  # long enough that the tasks spread over the workers
    return ray.util.get_node_ip_address(), os.nice(0)


@ray.remote(num_cpus=1, label_selector=placement.train_selector())
def trainer_task() -> tuple[str, int]:
    return ray.util.get_node_ip_address(), os.nice(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=8, help="preprocess tasks to run")
    parser.add_argument("--fail-with", type=int, default=0, help="exit with this code")
    parser.add_argument("--sleep", type=float, default=0, help="seconds to wait after the report")
    args = parser.parse_args()
    if args.tasks < 1:
        parser.error("--tasks must be at least 1")
    if not 0 <= args.sleep <= 3600:
        parser.error("--sleep must be between 0 and 3600 seconds")

    ray.init()
    head_ip = ray.util.get_node_ip_address()
    # the preprocess subcluster; anywhere where a train node preprocesses too (one node)
    selector = placement.data_selector(ray.nodes())
    task = preprocess_task.options(label_selector=selector) if selector else preprocess_task
    preprocessed = ray.get([task.remote(i) for i in range(args.tasks)])
    trainer_ip, trainer_niceness = ray.get(trainer_task.remote())
    result = {
        "driver_node": head_ip,
        "driver_host": socket.gethostname(),
        "trainer_task_node": trainer_ip,
        "trainer_task_niceness": trainer_niceness,
        "preprocess_task_nodes": sorted({ip for ip, _ in preprocessed}),
        "preprocess_task_niceness": sorted({niceness for _, niceness in preprocessed}),
        "alive_nodes": sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]),
    }
    print(f"smoke: {args.tasks} preprocess task(s) ran on {', '.join(result['preprocess_task_nodes'])} "
          f"(nice {', '.join(map(str, result['preprocess_task_niceness']))}), the trainer task on "
          f"{trainer_ip} (nice {trainer_niceness})", flush=True)
    print("RESULT " + json.dumps(result), flush=True)
    time.sleep(args.sleep)
    return args.fail_with


if __name__ == "__main__":
    sys.exit(main())
