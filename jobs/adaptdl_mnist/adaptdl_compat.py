"""Make adaptdl / adaptdl-sched / adaptdl-ray 0.2.11 (2022, unmaintained) work on Ray 2.60,
torch 2.14, numpy 2, semver 3, pymoo 0.6 and Python 3.11. Every fix is here, in one place.

`apply()` must run before adaptdl is used, in every process that uses it: the launcher
(main.py) calls it first thing, and it is the job's `worker_process_setup_hook`, so Ray runs
it in each worker process (the AdaptDL controller actor and every training replica).
The hook is ignored over Ray Client (`ray://`), which is why the kit launches AdaptDL from a
Ray job on the head instead. `apply()` is idempotent.

Each fix names what broke; all of them are checked against the installed packages by
tests/jobs/test_adaptdl_compat.py, and adaptdl's own unit tests run under them (`make test-adaptdl`).
"""

import importlib.abc
import importlib.machinery
import importlib.metadata
import logging
import os
import sys
import time
import types
import warnings

LOG = logging.getLogger("adaptdl_compat")

# The fixes below are written for exactly these releases; another version may have changed
# any line a fix relies on, so apply() refuses it rather than patch blindly.
WRITTEN_FOR = {"adaptdl": "0.2.11", "adaptdl-sched": "0.2.11", "adaptdl-ray": "0.2.11"}

# Module -> fixes run right after it is imported; each fix registers itself with @fixes.
FIXES: dict[str, list] = {}


def fixes(*modules: str):
    """Register the decorated function as a fix of each named module."""
    def register(fix):
        for name in modules:
            FIXES.setdefault(name, []).append(fix)
        return fix
    return register


class VersionMismatch(RuntimeError):
    """The installed adaptdl packages are not the ones the fixes were written for."""


def check_versions() -> None:
    for dist, wanted in WRITTEN_FOR.items():
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            installed = "none"
        if installed != wanted:
            raise VersionMismatch(
                f"adaptdl_compat's fixes are written for {dist}=={wanted}, but {installed} is "
                "installed; install jobs/adaptdl_mnist/requirements-nodeps.txt (`make setup`), "
                "or review every fix in adaptdl_compat.py before moving the pin")


def apply() -> None:
    """Provide what adaptdl imports, then fix each broken module as it is imported (or now,
    if it already was). Importing nothing heavy here keeps the hook cheap in every worker,
    and fixing modules as they load keeps import order as upstream wrote it (its tests
    replace functions in one module before importing the next)."""
    if any(isinstance(finder, _FixAfterImport) for finder in sys.meta_path):
        return
    check_versions()
    _provide_pkg_resources()
    _provide_semver_isvalid()
    _provide_pymoo_crossover_util()
    sys.meta_path.insert(0, _FixAfterImport())
    for name, fixes in FIXES.items():
        if name in sys.modules:
            for fix in fixes:
                fix(sys.modules[name])


class _FixAfterImport(importlib.abc.MetaPathFinder):
    """Runs FIXES[name] on module `name` right after its code ran, before anyone uses it."""

    def find_spec(self, name, path, target=None):
        if name not in FIXES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_fix(module):
            exec_module(module)
            for fix in FIXES[name]:
                fix(module)

        spec.loader.exec_module = exec_then_fix  # this spec's own loader instance
        return spec


def _provide_pkg_resources() -> None:
    """adaptdl/torch/__init__.py and adaptdl_ray/aws/worker.py import pkg_resources only for
    get_distribution("adaptdl").version. setuptools < 81 (pinned) still ships it, with a
    deprecation warning on import; should it be gone, a two-line stand-in does the job."""
    warnings.filterwarnings("ignore", message="pkg_resources is deprecated",
                            category=UserWarning)
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        shim = types.ModuleType("pkg_resources")
        shim.get_distribution = lambda name: types.SimpleNamespace(
            version=importlib.metadata.version(name))
        sys.modules["pkg_resources"] = shim


def _provide_semver_isvalid() -> None:
    """semver 3 renamed VersionInfo.isvalid to Version.is_valid (VersionInfo is an alias);
    adaptdl.torch.init_process_group calls the old name on every multi-replica start."""
    import semver
    if not hasattr(semver.Version, "isvalid"):
        semver.Version.isvalid = semver.Version.is_valid


def _provide_pymoo_crossover_util() -> None:
    """adaptdl_sched/policy/pollux.py (imported by adaptdl_ray.adaptdl, hence by the AWS
    launcher) does `from pymoo.operators.crossover.util import crossover_mask`, a pymoo 0.5
    module; pymoo 0.6 moved the function to pymoo.util.misc."""
    name = "pymoo.operators.crossover.util"
    try:
        importlib.import_module(name)
    except ImportError:
        from pymoo.util.misc import crossover_mask
        module = types.ModuleType(name)
        module.crossover_mask = crossover_mask
        sys.modules[name] = module


def _from_ray() -> bool:
    """adaptdl.env.from_ray() is meant to say "running as a Ray Tune trial", but 0.2.11 tests
    ray.is_initialized(), which is true in every Ray worker: the AWS launcher's replicas then
    take the Tune branch, init_process_group asserts, and checkpoints go to Tune's paths.
    Upstream fixed it after 0.2.11 (never released) by having the Tune trial scheduler say
    so in ADAPTDL_TUNE_TRIAL_SCHED; same rule here."""
    if os.getenv("ADAPTDL_TUNE_TRIAL_SCHED", "False") != "True":
        return False
    import ray
    return ray.is_initialized()


@fixes("adaptdl.env", "adaptdl.checkpoint")
def _fix_from_ray(module) -> None:
    # adaptdl.env defines it; adaptdl.checkpoint bound it with `from adaptdl.env import`.
    module.from_ray = _from_ray


class _NumpyWithInt(types.ModuleType):
    """numpy as seen by one adaptdl module, plus the `np.int` alias numpy 1.24 removed."""

    def __init__(self, numpy):
        super().__init__("numpy")
        self.__dict__.update(numpy.__dict__)
        self.int = int


@fixes("adaptdl.goodput", "adaptdl_sched.policy.pollux")
def _fix_np_int(module) -> None:
    """adaptdl/goodput.py uses dtype=np.int (gone since numpy 1.24): AttributeError about 30 s
    into a job, the first time the goodput model is optimised; pollux.py does too. Only
    these modules see the alias; numpy itself is left alone."""
    if not hasattr(module.np, "int"):
        module.np = _NumpyWithInt(module.np)


@fixes("adaptdl_ray.adaptdl.config")
def _fix_ray_state(config) -> None:
    """adaptdl_ray/adaptdl/config.py reads ray.state.state._available_resources_per_node(),
    which Ray 2 moved to ray._private.state.available_resources_per_node()."""
    from collections import defaultdict

    import ray
    import ray._private.state

    def _avail_nodes() -> dict:
        alive = {node["NodeID"]: node for node in sorted(ray.nodes(), key=lambda n: n["NodeID"])
                 if node["alive"]}
        for node_id, resources in ray._private.state.available_resources_per_node().items():
            if node_id in alive:  # placement-group resources are not allocatable
                alive[node_id]["Resources"] = defaultdict(
                    float, {k: v for k, v in resources.items() if "group" not in k})
        return alive

    config._avail_nodes = _avail_nodes


@fixes("adaptdl.torch.parallel")
def _fix_torch_load(parallel) -> None:
    """torch >= 2.6 defaults torch.load to weights_only=True, which refuses the optimizer and
    scheduler state adaptdl pickles into its own checkpoint: every restart after a rescale
    failed. The checkpoint is the job's own file, so loading it in full is safe."""
    torch = parallel.torch

    def load(self, fileobj):
        state_dicts, self.gain, self.lr_factor = torch.load(fileobj, weights_only=False)
        self.model.load_state_dict(state_dicts[0])
        self.optimizer.load_state_dict(state_dicts[1])
        if state_dicts[2] is not None:
            self.lr_scheduler.load_state_dict(state_dicts[2])
        if state_dicts[3] is not None:
            self.mp_scaler.load_state_dict(state_dicts[3])

    parallel._AdaptiveDataParallelState.load = load


@fixes("adaptdl_ray.aws.controller")
def _fix_zero_worker_resources(controller) -> None:
    """The launcher's `--gpus 0` yields worker_resources {"CPU": 1, "GPU": 0}. The controller
    then does node["GPU"] -= 0 on CPU-only nodes (KeyError, which silently kills
    rescheduling: the job hangs) and the optimizer divides by the 0 (ZeroDivisionError).
    A resource a replica asks none of is no requirement: drop it."""
    original_init = controller.RayAdaptDLJob.__init__

    def __init__(self, worker_resources, *args, **kwargs):
        wanted = {name: amount for name, amount in (worker_resources or {}).items() if amount}
        original_init(self, wanted or worker_resources, *args, **kwargs)

    controller.RayAdaptDLJob.__init__ = __init__


@fixes("adaptdl_ray.aws.controller")
def _fix_reschedule_during_startup(controller) -> None:
    """update_workers() compares a new allocation with the replicas that have registered.
    Right after a rescale none of the new generation has registered yet (each is still
    importing torch), and a reschedule queued by an earlier hints report runs at once (the
    listener sleeps the time *since* the last deploy, ~0 s): the allocation looks changed,
    the starting replicas are cancelled, and the controller waits --checkpoint-timeout for a
    checkpoint that cannot come, every rescale. An allocation equal to the one the running
    generation was started with, while none of its replicas has ended, is unchanged."""
    import ray
    job_class = controller.RayAdaptDLJob
    create_workers, update_workers = job_class._create_workers, job_class.update_workers

    async def _create_workers(self, allocation):
        self._kit_allocation = sorted(allocation)
        await create_workers(self, allocation)

    async def _update_workers(self, allocation):
        tasks = list(self._worker_tasks.values())
        if (tasks and sorted(allocation) == getattr(self, "_kit_allocation", None)
                and not ray.wait(tasks, num_returns=1, timeout=0)[0]):
            LOG.info("allocation unchanged (its replicas are starting), proceeding")
            return None
        return await update_workers(self, allocation)

    job_class._create_workers = _create_workers
    job_class.update_workers = _update_workers


HINT_INTERVAL_ENV = "RAYKIT_ADAPTDL_HINT_INTERVAL_S"  # the launcher's --hint-interval
UPSTREAM_HINT_INTERVAL_S = 30.0


@fixes("adaptdl.torch._metrics")
def _fix_hint_interval(metrics) -> None:
    """Replica 0 fits its performance model and sends the controller scheduling hints every
    30 s, a number hard-coded in profile_step_commit; the controller rescales only on a
    hint (and first waits as long as the last generation ran). HINT_INTERVAL_ENV sets the
    period (default: upstream's 30 s), so that a short job can rescale within its run. The
    rest of the function is upstream's, line for line; adaptdl/torch/data.py imports it by
    name after this fix ran."""
    import adaptdl.env

    def profile_step_commit(accumulation_step=False):
        state = metrics._metrics_state()
        step_time = time.time() - state.step_start
        key = (adaptdl.env.num_nodes(), adaptdl.env.num_replicas(), state.atomic_bsz)
        if accumulation_step:
            state.profile[key]["accum_step_time"] += step_time
            state.profile[key]["accum_count"] += 1
        else:
            state.profile[key]["optim_step_time"] += step_time
            state.profile[key]["optim_sync_time"] += state.sync_time
            state.profile[key]["optim_count"] += 1
        del state.atomic_bsz
        del state.step_start
        del state.sync_time
        if not accumulation_step:
            if metrics._PREV_REPORT is None:
                metrics._PREV_REPORT = time.time()
            interval = float(os.environ.get(HINT_INTERVAL_ENV, UPSTREAM_HINT_INTERVAL_S))
            if adaptdl.env.replica_rank() == 0 and time.time() - metrics._PREV_REPORT > interval:
                metrics._fit_perf_params()
                metrics._report_sched_hints()
                metrics._PREV_REPORT = time.time()

    metrics.profile_step_commit = profile_step_commit


@fixes("adaptdl_ray.aws.controller")
def _fix_replica_failure(controller) -> None:
    """A replica that dies (its process killed, its node lost) or raises. Upstream's other
    replicas then report FAILED, which ends the whole job; and its controller's own restart
    path (after a 60 s sleep) compares the registered replica IPs with the new allocation,
    finds them equal, and waits forever. Here, as Ray Train's FailureConfig does, the
    controller stops that generation and starts the next from the latest checkpoint it
    holds (train.py hands one over at every epoch's start), up to RAYKIT_ADAPTDL_MAX_FAILURES
    times (the launcher's --max-failures); the failure after that fails the job.

    Checkpoints that arrive while a generation runs only replace the one to restart from:
    the event a rescale waits on is set by a checkpoint asked for (the generation stopped)."""
    import asyncio

    import ray
    from adaptdl_ray.aws.utils import Status

    job_class = controller.RayAdaptDLJob
    register_status = job_class.register_status

    def _register_status(self, status):
        if Status(status) == Status.FAILED and not getattr(self, "_kit_failed", False):
            return  # a replica's own report: _handle_worker_failure decides, when its task ends
        register_status(self, status)

    def _register_checkpoint(self, obj):
        self._checkpoint = obj
        self._checkpoint_ref = ray.put(obj)
        if not self._running:  # force_worker_checkpoint stopped the generation to get it
            self._checkpoint_received.set()

    async def _handle_worker_failure(self, tasks):
        try:
            await asyncio.gather(*tasks)
            return
        except ray.exceptions.TaskCancelledError:
            return  # the controller stopped this generation (a rescale)
        except Exception as error:  # noqa: BLE001 (any replica error is a failure)
            failure = error
        job = self._job
        if (job.status != Status.RUNNING or not job._running
                or set(tasks) != set(job._worker_tasks.values())):
            return  # the job is done, or this generation is already being replaced
        job._kit_failures = getattr(job, "_kit_failures", 0) + 1
        allowed = int(os.environ.get("RAYKIT_ADAPTDL_MAX_FAILURES", "0"))
        lines = str(failure).strip().splitlines()
        reason = lines[0][:200] if lines else ""
        if job._kit_failures > allowed:
            LOG.error("replica failure %d, more than the %d allowed (--max-failures): the job "
                      "fails (%s: %s)", job._kit_failures, allowed, type(failure).__name__, reason)
            job._kit_failed = True
            job._stop_workers()
            job.register_status(Status.FAILED)
            return
        LOG.warning("replica failure %d of %d allowed (%s: %s): restarting its %d replica(s) "
                    "from the latest checkpoint", job._kit_failures, allowed,
                    type(failure).__name__, reason, len(tasks))
        job._kit_replicas = len(tasks)  # optimize() keeps the count (no replica runs now)
        job._stop_workers()
        job._running = False
        await self._enqueue_reschedule(immediate=True)

    job_class.register_status = _register_status
    job_class.register_checkpoint = _register_checkpoint
    # Ray's actor class copied the methods when upstream decorated the class: fix the plain
    # class (upstream keeps it as _test_controller) and decorate it again, as upstream does.
    plain = controller._test_controller
    plain._handle_worker_failure = _handle_worker_failure
    controller.Controller = ray.remote(num_cpus=1)(plain)


@fixes("adaptdl_ray.aws.optimizer")
def _fix_optimizer_allocation(optimizer) -> None:
    """Two fixes to adaptdl_ray/aws/optimizer.py's optimize(job, cluster, max_cluster_size):
    - it builds `[(nodes[0]) * count]`: when a node fits several replicas it concatenates
      the IP string ("10.0.0.510.0.0.5") instead of repeating it; the allocation then has
      fewer entries than replicas and optimize() raises IndexError inside the controller's
      reschedule task, which ends rescheduling for good;
    - it caps the *nodes* it considers at max_cluster_size (upstream runs one replica per
      node), not the replicas: once a node fits several, or the cluster has more nodes than
      that, it allocated more replicas than --max-replicas allows (seen after a replica
      failure: a job launched with -m 1 came back with 2).
    This copy takes max_cluster_size (the launcher's --max-replicas) as the most replicas,
    and keeps upstream's policy; the controller imports `optimize` after this ran."""
    np = optimizer.np

    def optimize(job, cluster, max_cluster_size):
        max_replicas = max(int(max_cluster_size), 1)
        hints = job.hints
        if not hints:
            return ["adaptdl_virtual_node_0"]
        existing_nodes = cluster.get_nodes()
        job_resources = cluster.worker_resources

        # Every replica each node can hold; then one per virtual node (a node the
        # autoscaler may add) up to the cap; never more than --max-replicas in all.
        allocation = []
        for node in existing_nodes:
            resources = node["Resources"]
            fits = int(min(resources.get(name, 0.0) / amount
                           for name, amount in job_resources.items()))
            allocation += [node["NodeManagerAddress"]] * fits  # upstream: [(node) * fits]
        allocation += [f"adaptdl_virtual_node_{i}"
                       for i in range(max_replicas - len(allocation))]
        allocation = allocation[:max_replicas]

        # Upstream's policy: the most replicas whose speedup per node stays above half the
        # one-replica speedup, adopted only if it beats the current speedup by 5%.
        speedup_fn = job.job_info.speedup_fn
        base_speedup = speedup_fn(1, 1)
        workers = np.arange(1, len(allocation) + 1)
        speedups = speedup_fn(workers, workers)
        # none run right after a failed generation was stopped: the count it had
        current_replicas = min(len(job._worker_tasks) or getattr(job, "_kit_replicas", 1),
                               len(allocation))
        current_speedup = speedups[current_replicas - 1]
        best_replicas, best_speedup, nodes_used = 0, 0.0, set()
        for worker, speedup in enumerate(speedups):
            nodes_used.add(allocation[worker])
            if speedup / len(nodes_used) >= base_speedup * 0.5:
                best_replicas, best_speedup = worker + 1, speedup
        if (best_speedup < current_speedup * 1.05
                or abs(best_replicas + 1 - current_replicas) < 0.15 * current_replicas):
            best_replicas = current_replicas
        return allocation[:best_replicas]

    optimizer.optimize = optimize


class _ZeroCpuListener:
    """The controller starts the listener with .options(num_cpus=0.1, node resource). On a node
    with exactly one replica's CPUs that 0.1 CPU, queued while the replica runs, grabs the
    node as soon as the replica exits at a rescale, and the next generation's replica never
    fits again: the job hangs. The listener mostly sleeps; it asks for no CPU."""

    def __init__(self, remote_function):
        self._remote_function = remote_function

    def options(self, **options):
        return self._remote_function.options(**{**options, "num_cpus": 0})

    def remote(self, *args, **kwargs):
        return self.options().remote(*args, **kwargs)


@fixes("adaptdl_ray.aws.worker")
def _fix_spot_listener(worker) -> None:
    """The controller starts one spot-termination listener per replica node. Upstream's polls
    the instance metadata service without a token (IMDSv1); the kit's instances are
    IMDSv2-only (HttpTokens: required), so every poll got 401 and the listener died with
    "endpoint not responding". This one fetches an IMDSv2 token first.
    MOCK=true (local cluster, tests) polls a mock endpoint on the node's own address, as
    upstream did, and takes "nothing listening" as "no notice" instead of logging an error
    every 5 s. ADAPTDL_SPOT_LISTENER=off disables it: it idles until the job ends.
    It returns the node's IP only on a notice (any return makes the controller drop the
    node), or None after `timeout` seconds if one is given."""
    ray = worker.ray

    @ray.remote(num_cpus=0, max_retries=0)
    def listen_for_spot_termination(timeout=None):
        import ray._private.services as services
        ip = services.get_node_ip_address()
        mock = os.environ.get("MOCK", "false").lower() == "true"
        enabled = os.environ.get("ADAPTDL_SPOT_LISTENER", "on").lower() != "off"
        base = f"http://{ip}:8234" if mock else "http://169.254.169.254"
        start = time.time()
        while timeout is None or time.time() - start < timeout:
            if enabled and _spot_notice(base, use_token=not mock):
                LOG.warning("spot termination notice on %s", ip)
                return ip
            time.sleep(1 if timeout else 5)
        return None

    worker.listen_for_spot_termination = _ZeroCpuListener(listen_for_spot_termination)


def _spot_notice(base: str, use_token: bool) -> bool:
    """True when the metadata service at `base` announces this instance's stop or termination."""
    import requests
    headers = {}
    try:
        if use_token:
            token = requests.put(f"{base}/latest/api/token", timeout=1,
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
            token.raise_for_status()
            headers["X-aws-ec2-metadata-token"] = token.text
        resp = requests.get(f"{base}/latest/meta-data/spot/instance-action",
                            headers=headers, timeout=1)
    except requests.RequestException as e:
        LOG.debug("no spot notice from %s: %s", base, e)
        return False
    if resp.status_code != 200:  # 404: no notice scheduled
        return False
    return resp.json().get("action") in ("terminate", "stop")
