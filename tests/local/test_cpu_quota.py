"""The simulated nodes' CPU quotas (scripts/providers/local/cpu_quota.py) on this machine's
real cgroup CPU controller: a process in a 0.2-core group gets about a fifth of a core
however hard it spins (the kernel's own throttling count says so), what it starts stays
in the group, a process moved in later is limited too, and every group goes once its
processes have. Where the kit may not write cgroups (here: an unprivileged user), one
reason and no group. The tests need root and a CPU controller, as `make test` has on the
kit's machines; elsewhere they are skipped."""

import os
import subprocess
import sys
import time
import uuid

import pytest

from scripts.providers.local import cpu_quota

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or cpu_quota.hierarchy() is None,
                                reason="needs root and a cgroup CPU controller")

SPIN = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


@pytest.fixture
def cluster():
    group, why = cpu_quota.make_cluster_group(f"test-{uuid.uuid4().hex[:12]}")
    assert group is not None, why
    yield group
    cpu_quota.remove(group)


def cpu_seconds(proc: subprocess.Popen) -> float:
    """The finished child's user + system CPU time, from the kernel (wait4)."""
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime


def test_a_node_of_a_fifth_of_a_core_gets_a_fifth_of_a_core(cluster):
    node = cpu_quota.node_group(cluster, "node-1", 0.2)
    started = time.monotonic()
    spinner = subprocess.Popen([sys.executable, "-c", SPIN.format(s=2.0)],
                               preexec_fn=lambda: cpu_quota.enter(node))
    used = cpu_seconds(spinner)
    wall = time.monotonic() - started
    assert used / wall < 0.3, (used, wall)  # unlimited, it would spin a whole core
    if (node / "cpu.stat").exists():
        stat = dict(line.split() for line in (node / "cpu.stat").read_text().splitlines())
        assert int(stat["nr_throttled"]) > 0  # the kernel held it back, period after period


def test_what_a_node_starts_stays_in_its_group_and_a_moved_process_is_limited(cluster):
    node = cpu_quota.node_group(cluster, "node-2", 0.5)
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time\n"
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
                               "time.sleep(30)\n"])
    try:
        time.sleep(1)  # its child is started
        cpu_quota.move(node, [parent.pid])
        members = {int(pid) for pid in (node / "cgroup.procs").read_text().split()}
        assert parent.pid in members and len(members) == 2  # the parent and the child it started
        assert not cpu_quota.remove(cluster)  # a group holding processes stays
        assert node.is_dir()
    finally:
        for pid in members:
            os.kill(pid, 9)
        parent.wait()
    deadline = time.monotonic() + 10
    while not cpu_quota.remove(cluster):  # the killed child is reaped by init
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert not cluster.exists()


def test_a_crashed_runs_group_is_replaced_and_the_quota_written_as_the_kernel_reads_it(cluster):
    cpu_quota.node_group(cluster, "stale", 1.0)
    marker = cluster.name.removeprefix("raykit-")
    again, why = cpu_quota.make_cluster_group(marker)  # `up` after a crash
    assert again == cluster and not (cluster / "stale").exists(), why
    node = cpu_quota.node_group(cluster, "n", 0.25)
    if (node / "cpu.max").exists():
        assert (node / "cpu.max").read_text().split() == ["25000", "100000"]
    else:
        assert int((node / "cpu.cfs_quota_us").read_text()) == 25000
        assert int((node / "cpu.cfs_period_us").read_text()) == 100000


def test_a_user_who_may_not_write_cgroups_gets_one_reason_and_no_group():
    """In a forked child that has become `nobody`: the kit's own call, its answer piped back."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, ask, report, leave at once
        try:
            os.setgid(65534)
            os.setuid(65534)
            group, why = cpu_quota.make_cluster_group("test-unprivileged")
            os.write(write, f"{group}|{why}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    answer = os.read(read, 4096).decode()
    os.close(read)
    assert answer.startswith("None|the kit cannot write cgroups here (Permission denied"), answer
    assert not cpu_quota.cluster_group("test-unprivileged").exists()


@pytest.mark.alone  # each quarter-core node at work within 5 s of the job's start
@pytest.mark.slow
def test_quota_nodes_run_in_their_groups_and_down_leaves_no_group_even_after_a_crash(tmp_path):
    """A local cluster of two 0.25-core preprocess nodes: each node's raylet (and what it
    started) in its own group under the cluster's, limited to 25 ms per 100 ms; the ViT
    job has both at work within 5 s of its first batch (full width from the start); a
    crash (every process killed, the record left) and `make down` then leaves no group."""
    import signal

    import yaml
    from conftest import USER_VALUES, kept_summary, load_example, local_cluster_up, processes_of, make
    from scripts.providers.local.names import cluster_id

    values = load_example("local_autopilot") | {"cluster_name": "quota_nodes"}
    values["autopilot"]["enabled"] = False
    values["workers"]["cpu_worker"] |= {"cpu_quota": 0.25, "min_workers": 2, "max_workers": 2}
    (USER_VALUES / "quota_nodes.yaml").write_text(yaml.safe_dump(values))
    build_dir = tmp_path / "build"
    group = cpu_quota.cluster_group(cluster_id("quota_nodes", build_dir))
    with local_cluster_up(build_dir, "quota_nodes") as (env, state):
        # A node's raylet registers (and `make up` counts it joined) a moment before the
        # provider moves its processes into its group (loopback_node_provider._limit runs
        # once ray's Node has started them): wait that moment out, a few seconds at most.
        def limited() -> list:
            return [p for p in group.iterdir() if p.is_dir()
                    and "raylet" in [psutil_name(pid) for pid in (p / "cgroup.procs").read_text().split()]]
        deadline = time.monotonic() + 10
        while len(limited()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        nodes = [p for p in group.iterdir() if p.is_dir()]
        assert len(nodes) == 2
        for node in nodes:
            if (node / "cpu.max").exists():
                assert (node / "cpu.max").read_text().split()[0] == "25000"
            else:
                assert (node / "cpu.cfs_quota_us").read_text().strip() == "25000"
            members = [psutil_name(pid) for pid in (node / "cgroup.procs").read_text().split()]
            assert "raylet" in members, members
        # the head and its autoscaler have no quota: they stay where they were
        assert not (group / "head").exists()
        run = make("submit", "CLUSTER=quota_nodes", "JOB=vit_synthetic",
                   "ARGS=--steps 8 --batch-size 8 --batches-per-task 1", env=env, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:]
        # a load both nodes are needed for (8 tasks of 8 images at 224 px, 10 blurs: ~2 s a
        # task at a quarter core), or one node does it all while the other still starts
        started = kept_summary(run.stdout)["preprocess_node_start_s"]
        assert len(started) == 2 and max(started.values()) <= 5, started
        for proc in processes_of(state):  # a crash: every process gone, the record stays
            proc.send_signal(signal.SIGKILL)
    assert not group.exists()  # local_cluster_up's `make down` found no process, and the groups
    assert make("down", "CLUSTER=quota_nodes", env=env).returncode == 0  # nothing left to do


def psutil_name(pid: str) -> str:
    import psutil

    try:
        return psutil.Process(int(pid)).name()
    except psutil.NoSuchProcess:
        return "(gone)"
