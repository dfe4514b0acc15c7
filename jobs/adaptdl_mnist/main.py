"""AdaptDL MNIST on the kit's cluster: `make submit JOB=adaptdl_mnist ARGS="-m 2"`

This is the Ray job's entrypoint; it runs on the head. It plays the part of adaptdl-ray's
`adaptdl_on_ray_aws` launcher (run_adaptdl_on_ray_cluster), without Ray Client: it starts
AdaptDL's Controller actor, which places the replicas (train.py) on the other nodes, starts
with one and rescales as AdaptDL's goodput model decides, up to --max-replicas.

What the kit adds around adaptdl-ray 0.2.11: the compatibility fixes in every process
(adaptdl_compat, as the worker_process_setup_hook); every flag checked before Ray starts
work; a controller placed where it does not take a replica's node (AdaptDL never places
replicas on its controller's node); a replica that fails costs at most its epoch (the
job restarts from the latest epoch's checkpoint, up to --max-failures times); a hard time
limit (a replica that dies before it registers would otherwise hang the controller
forever); the summary as JSON.
"""

import json
import os
import sys
import time
from pathlib import Path

import ray

import flags
import ports

TRAIN_SCRIPT = "train.py"
SETUP_HOOK = "adaptdl_compat.apply"


def main(argv) -> int:
    args = flags.parse(argv)  # exits 2 with the problem before any Ray work

    import adaptdl_compat
    try:
        adaptdl_compat.apply()
    except adaptdl_compat.VersionMismatch as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from adaptdl_ray.aws.controller import Controller
    from adaptdl_ray.aws.utils import Status
    from summary import JOB_START_ENV
    from train import SUMMARY_ACTOR

    job_start = time.time()  # each epoch's end_s counts from here (summary.py)
    # The hook reaches every worker process of this job (job level only: Ray ignores it on
    # a single actor or task); the fixes are then in place before adaptdl is imported there.
    ray.init(address="auto", runtime_env={"worker_process_setup_hook": SETUP_HOOK})
    nodes = [n for n in ray.nodes() if n["alive"]]
    gpus = args.gpus if args.gpus >= 0 else int(any(n["Resources"].get("GPU") for n in nodes))
    replica = {"CPU": args.cpus, "GPU": gpus}
    controller_node = pick_controller_node(nodes, needs_gpu=gpus > 0)
    if args.trainer == "fixed":
        return train_fixed(args, argv, nodes, replica, controller_node, job_start)
    listener = choose_spot_listener(args.spot_listener, nodes)
    port_offset = args.port_offset if args.port_offset >= 0 else ports.pick_offset()
    print(f"[launcher] replicas need {replica}; up to {args.max_replicas}; controller on "
          f"{controller_node['NodeManagerAddress']}; spot listener: {listener}; "
          f"ports from {47000 + port_offset}", flush=True)
    warn_if_no_room(nodes, controller_node, replica)

    # read by the controller's failure handling (adaptdl_compat._fix_replica_failure)
    env_vars = {"RAYKIT_ADAPTDL_MAX_FAILURES": str(args.max_failures),
                adaptdl_compat.HINT_INTERVAL_ENV: repr(args.hint_interval),
                JOB_START_ENV: repr(job_start)}
    if listener == "mock":
        env_vars["MOCK"] = "true"
    if listener == "off":
        env_vars["ADAPTDL_SPOT_LISTENER"] = "off"
    summary_box = SummaryBox.options(name=SUMMARY_ACTOR).remote()
    controller = Controller.options(
        name="AdaptDLController",  # the name adaptdl-ray's replicas look up
        scheduling_strategy=NodeAffinitySchedulingStrategy(controller_node["NodeID"], soft=False),
        runtime_env={"env_vars": env_vars},  # inherited by the replicas and listeners it starts
    ).remote(args.max_replicas, args.rescale_timeout)
    controller.run_controller.remote()

    start = time.monotonic()
    status_ref = controller.create_job.remote(
        replica, port_offset, args.checkpoint_timeout, path=TRAIN_SCRIPT, argv=argv)
    try:
        done = wait_for(status_ref, args.timeout)
        if not done:
            print(f"[launcher] ERROR: the job did not finish within --timeout {args.timeout:.0f} s; "
                  "stopping it. A replica that cannot be placed or dies before it registers "
                  "stalls AdaptDL: check the replicas' logs above and `make status`.",
                  file=sys.stderr, flush=True)
            return 1
        if Status(ray.get(status_ref)) != Status.SUCCEEDED:
            print("[launcher] ERROR: AdaptDL reports the job FAILED; see the replica's "
                  "traceback above", file=sys.stderr, flush=True)
            return 1
        summary = ray.get(summary_box.get.remote())
        if summary is None:
            print("[launcher] ERROR: AdaptDL reports success but replica 0 sent no summary",
                  file=sys.stderr, flush=True)
            return 1
    finally:
        job_id = adaptdl_job_id(controller)
        stop_replicas(controller)
        # Killing the controller ends the replicas it owns; nothing of the job outlives it.
        ray.kill(controller)
        if job_id:
            remove_replica_dirs(job_id)
    summary["wall_s"] = round(time.monotonic() - start, 1)
    write_results(args.results, summary)
    return 0


def train_fixed(args, argv: list[str], nodes: list, replica: dict, controller_node: dict,
                job_start: float) -> int:
    """--trainer fixed: Ray Train on exactly --max-replicas workers (fixed.py), where
    AdaptDL's replicas would go; the same summary, results file and RESULT line. Ray Train
    waits forever for workers it cannot place, so --timeout bounds it here too: fit() runs
    in a thread, and the job ends with an error when the thread has not finished by then
    (the driver's exit ends the trainer and its workers). Ray Train's run storage is this
    run's own temp dir, removed here on every way out. Past the time limit its controller
    may be starting still, and writes a marker there as it starts: the driver leaves Ray
    first (which ends the controller), then removes the dir again."""
    import shutil
    import tempfile

    storage = tempfile.mkdtemp(prefix="raykit-mnist-fixed-")
    print(f"[launcher] Ray Train on {args.max_replicas} fixed worker(s), each {replica}, at "
          f"global batch {args.batch_size} (its storage {storage}, removed at the end)", flush=True)
    try:
        code = run_fixed(args, argv, nodes, replica, controller_node, job_start, storage)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    if code:  # fit() may still be running in its thread
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)
    return code


def run_fixed(args, argv: list[str], nodes: list, replica: dict, controller_node: dict,
              job_start: float, storage: str) -> int:
    """train_fixed's run: fit() in a thread, bounded by --timeout; 0, or 1 with the error."""
    import threading

    import fixed

    warn_if_no_room(nodes, controller_node, replica)
    start = time.monotonic()
    outcome = {}

    def train() -> None:
        try:
            outcome["summary"] = fixed.run(args, argv, replica, controller_node, job_start,
                                           SummaryBox.remote(), storage)
        except Exception as e:  # noqa: BLE001 (said below, with the workers' tracebacks above)
            outcome["error"] = e

    trainer = threading.Thread(target=train, name="ray-train-fit", daemon=True)
    trainer.start()
    trainer.join(args.timeout)
    if trainer.is_alive():
        print(f"[launcher] ERROR: Ray Train did not finish within --timeout {args.timeout:.0f} s; "
              "stopping it. Workers that cannot be placed wait forever: check `make status` "
              "and --cpus/--gpus.", file=sys.stderr, flush=True)
        return 1
    if "error" in outcome:
        print(f"[launcher] ERROR: Ray Train failed: {str(outcome['error']).splitlines()[0][:300]}; "
              "the workers' tracebacks are above", file=sys.stderr, flush=True)
        return 1
    summary = outcome["summary"]
    summary["wall_s"] = round(time.monotonic() - start, 1)
    write_results(args.results, summary)
    return 0


def pick_controller_node(nodes: list, needs_gpu: bool) -> dict:
    """AdaptDL never puts a replica on its controller's node. Keep the controller off the
    nodes replicas need: on the head (this driver's node) for CPU replicas; for GPU replicas
    on a node without GPUs when there is one, so a GPU head (the `hetero` mix) can train."""
    head = next(n for n in nodes if n["NodeManagerAddress"] == ray.util.get_node_ip_address())
    if needs_gpu and head["Resources"].get("GPU"):
        cpu_only = [n for n in nodes if not n["Resources"].get("GPU")
                    and n["Resources"].get("CPU", 0) >= 1]
        if cpu_only:
            return cpu_only[0]
    return head


def choose_spot_listener(choice: str, nodes: list) -> str:
    """auto: nodes on loopback addresses are the local simulated cluster: no metadata
    service there, so the mock endpoint (MOCK=true); anywhere else AWS IMDSv2."""
    if choice != "auto":
        return choice
    local = all(n["NodeManagerAddress"].startswith("127.") for n in nodes)
    return "mock" if local else "imds"


def warn_if_no_room(nodes: list, controller_node: dict, replica: dict) -> None:
    others = [n for n in nodes if n["NodeID"] != controller_node["NodeID"]]
    room = sum(int(min(n["Resources"].get(k, 0) / v for k, v in replica.items() if v))
               for n in others)
    if room == 0:
        print(f"[launcher] WARNING: no node besides the controller's has room for a replica "
              f"({replica}); the job waits for the autoscaler to add one (up to --timeout). "
              "Use a cluster with worker nodes, or --cpus/--gpus that fit them.",
              file=sys.stderr, flush=True)


def wait_for(ref, timeout_s: float) -> bool:
    """Whether `ref` is ready within timeout_s. A second at a time: `ray job stop` (make
    submit's TIMEOUT, make stop-job) sends SIGTERM, which Ray's handler turns into
    SystemExit in this thread, and SIGKILL 3 s later; a wait of the whole --timeout in
    Ray's C++ would hold the exception, and the clean-up after it (the controller, the
    replicas' dirs), until the kill."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        done, _ = ray.wait([ref], timeout=min(1.0, left))
        if done:
            return True
    return False


def adaptdl_job_id(controller) -> str | None:
    """The id adaptdl-ray gave the job (a process-wide random one, in the controller)."""
    try:
        return ray.get(controller.__ray_call__.remote(lambda self: self._job.job_id), timeout=30)
    except Exception:  # noqa: BLE001 (the controller died, or never created the job)
        return None


def stop_replicas(controller, timeout_s: float = 1.5) -> None:
    """Kill the job's replicas at once, and wait (up to timeout_s: a stopped job has 3 s in
    all) until they are gone, before their dirs are removed. Ended by the controller's
    death instead, a replica got SIGTERM, which adaptdl answers by saving a checkpoint into
    its dir (/tmp/checkpoint-<id>-<rank>/checkpoint-0): where that came after the removal,
    a stopped job left the dir behind."""
    def stop(self) -> list:  # in the controller, which owns the replicas' tasks
        if self._job is None:
            return []
        tasks = list(self._job._worker_tasks.values())
        self._job._stop_workers()  # adaptdl-ray's own: ray.cancel(force=True), a SIGKILL each
        return tasks

    deadline = time.monotonic() + timeout_s  # one for both: the removal needs the rest of the 3 s
    try:
        tasks = ray.get(controller.__ray_call__.remote(stop), timeout=timeout_s)
        if tasks:
            ray.wait(tasks, num_returns=len(tasks), timeout=max(0.0, deadline - time.monotonic()))
    except Exception:  # noqa: BLE001 (the controller died, or never started a replica)
        pass


def remove_replica_dirs(job_id: str) -> None:
    """adaptdl-ray's replicas keep a checkpoint dir and a share dir in /tmp on their nodes,
    named after the job's id and their rank (/tmp/checkpoint-<id>-<rank>: the model and
    optimizer, ~15 MB here), and never remove them. Remove this job's from every node:
    this one's first, here (a stopped job has 3 s: all of a local cluster's), then the
    others' by a task on each."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def remove() -> None:
        import glob
        import shutil
        for path in glob.glob(f"/tmp/checkpoint-{job_id}-*") + glob.glob(f"/tmp/share-{job_id}-*"):
            shutil.rmtree(path, ignore_errors=True)

    remove()
    here = ray.get_runtime_context().get_node_id()
    elsewhere = ray.remote(num_cpus=0, max_retries=0)(remove)
    try:
        ray.get([elsewhere.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node["NodeID"], soft=False)).remote() for node in ray.nodes()
            if node["Alive"] and node["NodeID"] != here], timeout=60)
    except Exception as e:  # noqa: BLE001 (a node gone since: nothing more to remove there)
        print(f"[launcher] could not remove every replica's /tmp dirs: {type(e).__name__}",
              file=sys.stderr, flush=True)


def write_results(path: str, summary: dict) -> None:
    """Say how the run went, write the summary where --results names (nowhere by default:
    the kit keeps it in build/results/) and print the RESULT line the kit keeps."""
    first, last = summary["history"][0], summary["history"][-1]
    print(f"[launcher] done: {summary['epochs']} epochs in {summary['wall_s']} s; "
          f"replicas per epoch {summary['replicas_per_epoch']}, global batch sizes "
          f"{summary['global_batch_size_per_epoch']}; test accuracy "
          f"{first['test_accuracy']:.3f} -> {last['test_accuracy']:.3f}", flush=True)
    if path:
        target = Path(os.path.expanduser(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"[launcher] summary written to {target}", flush=True)
    print("RESULT " + json.dumps(summary), flush=True)


@ray.remote(num_cpus=0)
class SummaryBox:
    """Replica 0 puts the job's summary here (the fixed trainer's rank 0: its history); the
    launcher gets it at the end."""

    def __init__(self):
        self.summary = None

    def put(self, summary: dict) -> None:
        self.summary = summary

    def get(self) -> dict | None:
        return self.summary


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
