"""jobs/adaptdl_mnist/adaptdl_compat.py: each fix, against the installed adaptdl 0.2.11,
Ray, torch, numpy, semver and pymoo. Where it helps, the test also shows upstream's code
failing on the same input, so a fix that stops being needed is noticed."""

import importlib.util
import io
import os
import pickle
import subprocess
import sys
import time

import numpy
import pytest

from conftest import REPO
from tests.harness.imds_standin import Imds

COMPAT_DIR = REPO / "jobs" / "adaptdl_mnist"
sys.path.insert(0, str(COMPAT_DIR))
import adaptdl_compat  # noqa: E402

adaptdl_compat.apply()
SITE = os.path.dirname(importlib.util.find_spec("adaptdl_ray").origin)


def upstream(module_path: str, name: str):
    """A fresh, unfixed copy of one of adaptdl-ray's modules (under another name)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(SITE, module_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_apply_is_idempotent_and_installs_one_hook():
    adaptdl_compat.apply()
    hooks = [f for f in sys.meta_path if isinstance(f, adaptdl_compat._FixAfterImport)]
    assert len(hooks) == 1


def test_semver_3_and_pkg_resources_serve_the_version_check():
    import pkg_resources

    import adaptdl.torch
    assert pkg_resources.get_distribution("adaptdl").version == "0.2.11"
    assert adaptdl.torch.version_check("0.2.11")
    assert not adaptdl.torch.version_check("0.0.0")
    assert not adaptdl.torch.version_check("not-a-version")


def test_pkg_resources_stand_in_when_setuptools_no_longer_ships_it():
    code = ("import sys; sys.modules['pkg_resources'] = None; "  # makes `import` fail
            f"sys.path.insert(0, {str(COMPAT_DIR)!r}); import adaptdl_compat; "
            "sys.modules.pop('pkg_resources'); adaptdl_compat.apply(); "
            "import pkg_resources; print(pkg_resources.get_distribution('adaptdl').version)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "0.2.11", out.stderr[-2000:]


def test_launcher_imports_with_pymoo_0_6():
    import adaptdl_ray.aws.launch_job  # noqa: F401 (imports pollux via adaptdl_ray.adaptdl)
    from pymoo.operators.crossover.util import crossover_mask
    a, b = numpy.zeros((2, 3)), numpy.ones((2, 3))
    mixed = crossover_mask(numpy.stack([a, b]), numpy.array([[True, False, True]] * 2))
    assert mixed.shape == (2, 2, 3)


def test_from_ray_only_for_tune_trials(monkeypatch):
    import ray

    import adaptdl.checkpoint
    import adaptdl.env
    assert adaptdl.checkpoint.from_ray is adaptdl.env.from_ray
    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # as in any Ray worker
    monkeypatch.delenv("ADAPTDL_TUNE_TRIAL_SCHED", raising=False)
    assert adaptdl.env.from_ray() is False
    assert upstream("../adaptdl/env.py", "upstream_env").from_ray() is True  # the bug
    monkeypatch.setenv("ADAPTDL_TUNE_TRIAL_SCHED", "True")  # what Tune's trial scheduler sets
    assert adaptdl.env.from_ray() is True


def test_every_fix_is_registered_and_every_registered_module_exists():
    fix_functions = {name for name in dir(adaptdl_compat) if name.startswith("_fix_")}
    registered = {fix.__name__ for fixes in adaptdl_compat.FIXES.values() for fix in fixes}
    assert registered == fix_functions
    for module in adaptdl_compat.FIXES:
        assert importlib.util.find_spec(module) is not None, module


def test_other_adaptdl_versions_are_refused_with_a_clear_message(monkeypatch):
    adaptdl_compat.check_versions()  # the installed ones pass
    monkeypatch.setitem(adaptdl_compat.WRITTEN_FOR, "adaptdl-ray", "0.3.0")
    with pytest.raises(adaptdl_compat.VersionMismatch,
                       match=r"written for adaptdl-ray==0.3.0, but 0.2.11 is installed"):
        adaptdl_compat.check_versions()


def test_reschedule_during_startup_keeps_the_starting_generation(monkeypatch):
    """Right after a rescale no replica of the new generation has registered; a reschedule
    with the same allocation must not cancel it. A different allocation, or one whose
    replicas have ended, goes to upstream's update_workers as before."""
    import asyncio
    import types

    import ray

    calls = []

    class Job:  # upstream's two methods, recording what reaches them
        async def _create_workers(self, allocation):
            calls.append(("create", allocation))
            self._worker_tasks = {i: f"task-{i}" for i, _ in enumerate(allocation)}

        async def update_workers(self, allocation):
            calls.append(("update", allocation))
            return "upstream"

    adaptdl_compat._fix_reschedule_during_startup(types.SimpleNamespace(RayAdaptDLJob=Job))
    ended = []
    monkeypatch.setattr(ray, "wait", lambda tasks, num_returns, timeout: (ended, tasks))
    job = Job()
    asyncio.run(job._create_workers(["10.0.0.4", "10.0.0.3"]))
    assert asyncio.run(job.update_workers(["10.0.0.3", "10.0.0.4"])) is None  # same, starting
    assert asyncio.run(job.update_workers(["10.0.0.3"])) == "upstream"  # changed
    ended.append("task-0")
    assert asyncio.run(job.update_workers(["10.0.0.3", "10.0.0.4"])) == "upstream"  # one ended
    assert calls == [("create", ["10.0.0.4", "10.0.0.3"]), ("update", ["10.0.0.3"]),
                     ("update", ["10.0.0.3", "10.0.0.4"])]


def test_a_failed_replica_restarts_its_generation_until_the_failures_run_out(monkeypatch):
    """A replica's error restarts the generation from the latest checkpoint (the count of
    replicas kept), up to RAYKIT_ADAPTDL_MAX_FAILURES; the next failure fails the job. A
    replica's own FAILED report no longer ends the job, and a checkpoint handed over while
    the generation runs replaces the one to restart from without ending a rescale's wait."""
    import asyncio

    import ray
    from adaptdl_ray.aws.controller import RayAdaptDLJob, _test_controller
    from adaptdl_ray.aws.utils import Status

    monkeypatch.setenv("RAYKIT_ADAPTDL_MAX_FAILURES", "1")
    monkeypatch.setattr(ray, "put", lambda obj: ("ref", obj))
    monkeypatch.setattr(ray, "cancel", lambda task, force: None)

    async def scenario():
        controller = _test_controller.__new__(_test_controller)  # no HTTP server, no Ray
        controller._job = job = RayAdaptDLJob({"CPU": 1}, 0, 10)
        reschedules = []

        async def enqueue(immediate=False):
            reschedules.append(immediate)
        controller._enqueue_reschedule = enqueue

        async def generation(outcome):
            loop = asyncio.get_running_loop()
            tasks = [loop.create_future(), loop.create_future()]
            job._worker_tasks, job._workers, job._running = dict(enumerate(tasks)), {0: "a", 1: "b"}, True
            tasks[0].set_result(None)
            tasks[1].set_exception(outcome)
            await controller._handle_worker_failure(tasks)

        job._running = True
        job.register_checkpoint({"epoch": 2})  # mid-generation: no rescale is waiting
        assert job._checkpoint_ref == ("ref", {"epoch": 2}) and not job._checkpoint_received.is_set()
        job._running = False  # force_worker_checkpoint stopped the generation for this one
        job.register_checkpoint({"epoch": 2, "step": 7})
        assert job._checkpoint_received.is_set()
        job.register_status(Status.FAILED.value)  # a replica's own report
        assert job.status == Status.RUNNING and not job.completed.is_set()

        await generation(ray.exceptions.TaskCancelledError())  # a rescale stopped it
        assert reschedules == [] and job._running
        await generation(RuntimeError("replica killed"))  # failure 1 of 1: restart
        assert reschedules == [True] and job._worker_tasks == {} and not job._running
        assert job._kit_replicas == 2 and job.status == Status.RUNNING
        await generation(RuntimeError("killed again"))  # failure 2 of 1: the job fails
        assert reschedules == [True] and job.status == Status.FAILED and job.completed.is_set()

    asyncio.run(scenario())


def test_the_hint_interval_is_upstreams_30_s_unless_the_launcher_sets_it(monkeypatch):
    """profile_step_commit reports hints after HINT_INTERVAL_ENV seconds, 30 s unset; data.py
    (which imports it by name) gets the fixed one; upstream's copy keeps its fixed 30 s."""
    from types import SimpleNamespace

    import adaptdl.torch._metrics as metrics
    import adaptdl.torch.data as data

    assert data.profile_step_commit is metrics.profile_step_commit
    reports = []
    monkeypatch.setattr(metrics, "_fit_perf_params", lambda: None)
    monkeypatch.setattr(metrics, "_report_sched_hints", lambda: reports.append(time.time()))
    state = SimpleNamespace(profile=metrics.collections.defaultdict(metrics.collections.Counter))

    def step():
        state.step_start, state.sync_time, state.atomic_bsz = time.time(), 0.0, 32
        metrics.profile_step_commit()

    monkeypatch.setattr(metrics, "_metrics_state", lambda: state)
    monkeypatch.setattr(metrics, "_PREV_REPORT", time.time() - 10)
    monkeypatch.delenv(adaptdl_compat.HINT_INTERVAL_ENV, raising=False)
    step()
    assert reports == []  # 10 s since the last report: upstream's 30 s not yet up
    monkeypatch.setenv(adaptdl_compat.HINT_INTERVAL_ENV, "5.0")
    step()
    assert len(reports) == 1 and metrics._PREV_REPORT >= reports[0]
    step()
    assert len(reports) == 1  # the next one 5 s later, not at every step
    assert state.profile[(1, 1, 32)]["optim_count"] == 3  # upstream's bookkeeping, kept
    original = upstream("../adaptdl/torch/_metrics.py", "upstream_metrics")
    assert "> 30:" in __import__("inspect").getsource(original.profile_step_commit)


def test_goodput_optimize_without_accumulation_uses_np_int_alias_only_locally():
    from adaptdl.goodput import GoodputFunction, GradParams, PerfParams
    fn = GoodputFunction(PerfParams(0.1, 0.01, 0.1, 0.01, 0.05, 0.005, 1.0),
                         GradParams(sqr=1.0, var=1.0), init_batch_size=64)
    goodput, bsz, steps = fn.optimize(num_nodes=numpy.array([1, 2]), num_replicas=numpy.array([1, 2]),
                                      max_batch_size=1024, atomic_bsz_range=(32, 128),
                                      accumulation=False)  # the branch with dtype=np.int
    assert numpy.all(goodput > 0) and numpy.all(steps == 0)
    assert not hasattr(numpy, "int")  # numpy itself untouched


def test_checkpoint_of_optimizer_and_scheduler_loads_on_torch_2_6_plus():
    import torch

    from adaptdl.torch.parallel import _AdaptiveDataParallelState
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    state = _AdaptiveDataParallelState(model, optimizer, scheduler, None, name="test-saved")
    state.gain = numpy.float64(1.5)  # adaptdl's gain is a numpy scalar once training ran
    saved = io.BytesIO()
    state.save(saved)

    with pytest.raises(pickle.UnpicklingError):  # what upstream's torch.load(fileobj) hits
        torch.load(io.BytesIO(saved.getvalue()))
    fresh = torch.nn.Linear(4, 2)
    fresh_optimizer = torch.optim.Adadelta(fresh.parameters(), lr=1.0)
    restored = _AdaptiveDataParallelState(
        fresh, fresh_optimizer, torch.optim.lr_scheduler.StepLR(fresh_optimizer, step_size=1), None,
        name="test-restored")
    restored.load(io.BytesIO(saved.getvalue()))
    assert torch.equal(restored.model.weight, model.weight)
    assert restored.lr_scheduler.gamma == 0.7 and restored.gain == 1.5


class _Job:
    """The two things optimize() reads of a job, with a linear speedup model."""
    hints = {"anything": True}
    _worker_tasks = {0: "one running replica"}

    class job_info:
        @staticmethod
        def speedup_fn(nodes, replicas):
            return numpy.asarray(replicas, dtype=float)


class _Cluster:
    worker_resources = {"CPU": 1}

    @staticmethod
    def get_nodes():
        return [{"NodeManagerAddress": "10.0.0.5", "Resources": {"CPU": 2}},
                {"NodeManagerAddress": "10.0.0.6", "Resources": {"CPU": 2}}]


def test_optimizer_repeats_a_node_that_fits_several_replicas():
    import adaptdl_ray.aws.controller as controller
    import adaptdl_ray.aws.optimizer as optimizer
    assert controller.optimize is optimizer.optimize  # the controller uses the fixed one
    assert optimizer.optimize(_Job, _Cluster, 4) == ["10.0.0.5", "10.0.0.5", "10.0.0.6", "10.0.0.6"]
    assert optimizer.optimize(_Job, _Cluster, 5)[-1] == "adaptdl_virtual_node_0"
    unfixed = upstream("aws/optimizer.py", "upstream_optimizer")
    with pytest.raises(IndexError):  # ["10.0.0.510.0.0.5", ...]: fewer entries than replicas
        unfixed.optimize(_Job, _Cluster, 2)


class _FailedJob(_Job):
    """A job right after a replica failure: no replica runs; it had _kit_replicas."""
    _worker_tasks = {}
    _kit_replicas = 1


@pytest.mark.parametrize("job", [_Job, _FailedJob], ids=["running", "after a failure"])
def test_optimizer_never_allocates_more_replicas_than_max_replicas(job):
    """The cluster fits 4 replicas and the speedup model wants them all; --max-replicas
    caps them, on the restart after a failure too (-m 1 once came back with 2)."""
    import adaptdl_ray.aws.optimizer as optimizer
    for max_replicas in (1, 2, 3):
        assert len(optimizer.optimize(job, _Cluster, max_replicas)) <= max_replicas
    assert optimizer.optimize(job, _Cluster, 1) == ["10.0.0.5"]


def test_zero_resources_are_dropped_from_replica_requirements():
    from adaptdl_ray.aws.controller import RayAdaptDLJob
    job = RayAdaptDLJob({"CPU": 1, "GPU": 0}, 0, 10)
    assert job.worker_resources == {"CPU": 1}


@pytest.fixture
def imds():
    with Imds() as server:
        yield server


def test_spot_notice_speaks_imdsv2(imds):
    assert adaptdl_compat._spot_notice(imds.url, use_token=True) is False  # 404: no notice
    imds.schedule("terminate")
    assert adaptdl_compat._spot_notice(imds.url, use_token=False) is False  # 401 without token
    assert adaptdl_compat._spot_notice(imds.url, use_token=True) is True
    assert adaptdl_compat._spot_notice("http://127.0.0.1:9", use_token=True) is False  # nobody


@pytest.fixture(scope="module")
def ray_one_cpu():
    """A one-CPU Ray of this test process, its workers with the compat hook and MOCK=true."""
    import ray
    saved = dict(os.environ)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_cpus=1, include_dashboard=False, runtime_env={
        "worker_process_setup_hook": "adaptdl_compat.apply",
        "env_vars": {"PYTHONPATH": str(COMPAT_DIR), "MOCK": "true"}})
    yield ray
    ray.shutdown()
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.cluster  # a Ray of its own: beside adaptdl-ray's suites it took 80 s, alone 6
def test_in_a_real_ray_worker(ray_one_cpu):
    ray = ray_one_cpu

    @ray.remote(num_cpus=0)
    def inside():
        import adaptdl.env
        import adaptdl_ray.adaptdl.config as config
        nodes = config._avail_nodes()
        return adaptdl.env.from_ray(), [n["Resources"]["CPU"] for n in nodes.values()]

    from_ray, cpus = ray.get(inside.remote(), timeout=120)
    assert from_ray is False  # upstream: True in every Ray worker
    assert cpus == [1.0]


@pytest.mark.cluster  # a Ray of its own: beside adaptdl-ray's suites it took 80 s, alone 6
def test_the_controller_actor_runs_the_fixed_failure_handling(ray_one_cpu):
    # Ray's actor class copies the methods at decoration: the fix must reach the actor itself
    ray = ray_one_cpu
    from adaptdl_ray.aws.controller import Controller

    actor = Controller.remote(1, 10)
    try:
        handler = ray.get(actor.__ray_call__.remote(
            lambda self: type(self)._handle_worker_failure.__qualname__), timeout=120)
    finally:
        ray.kill(actor)
    assert handler == "_fix_replica_failure.<locals>._handle_worker_failure"


def test_controller_cluster_check_on_a_cpu_only_node():
    from adaptdl_ray.aws.controller import Cluster, RayAdaptDLJob

    def one_cpu_node():
        return [{"NodeManagerAddress": "10.0.0.5", "Resources": {"CPU": 4.0}}]

    job = RayAdaptDLJob({"CPU": 1, "GPU": 0}, 0, 10)  # what `--gpus 0` gives
    fixed = Cluster(job.worker_resources, 5)
    fixed.get_nodes = one_cpu_node
    assert fixed._cluster_ready(["10.0.0.5"]) == (True, 1)
    unfixed = Cluster({"CPU": 1, "GPU": 0}, 5)
    unfixed.get_nodes = one_cpu_node
    with pytest.raises(KeyError):  # upstream: kills rescheduling, the job hangs
        unfixed._cluster_ready(["10.0.0.5"])


@pytest.mark.cluster  # a Ray of its own: beside adaptdl-ray's suites it took 80 s, alone 6
def test_spot_listener_takes_no_cpu_from_a_full_node(ray_one_cpu):
    ray = ray_one_cpu
    import adaptdl_ray.aws.controller as controller

    @ray.remote(num_cpus=1)
    def replica():  # holds the node's only CPU, like a replica on a 1-CPU worker
        time.sleep(20)

    busy = replica.remote()
    time.sleep(2)
    # As the controller starts it (num_cpus=0.1); MOCK=true and no mock endpoint: no notice.
    listener = controller.listen_for_spot_termination.options(num_cpus=0.1).remote(timeout=3)
    assert ray.get(listener, timeout=15) is None  # ran beside the replica, did not queue
    ray.cancel(busy, force=True)
