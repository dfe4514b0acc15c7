"""CPU quotas for the simulated nodes: a node of `cpu_quota: 0.25` runs its processes on a
quarter of a core's time, as a small machine would, so that adding nodes on a 2-core
machine adds real preprocessing throughput (and the autopilot's choices show in images/s).

Through the cgroup CPU controller, whichever the machine has: v1 (`cpu.cfs_quota_us` over
`cpu.cfs_period_us` in /sys/fs/cgroup/cpu) or v2 (`cpu.max` in /sys/fs/cgroup). The
cluster gets a group of its own named after its marker (`raykit-<marker>`), each node a
group inside it; a process started in a group, and all it starts, stays there. `down`
removes them all, a crashed run's too (the marker is derived from the checkout and the
cluster's name, local/names.py). Where the machine will not let the kit write cgroups
(no controller, not root, a read-only mount) the cluster runs as before, without quotas,
and `up` says so in one line.
"""

import os
from pathlib import Path

import psutil

V1_ROOT = Path("/sys/fs/cgroup/cpu")
V2_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the kernel's default period: the quota is cores x this, per period
GROUP_ENV = "RAYKIT_CGROUP"  # the cluster's group, for the head's autoscaler (worker nodes)


def hierarchy() -> tuple[str, Path] | None:
    """("v1", root) or ("v2", root) where a CPU controller is mounted; None where none is."""
    if (V1_ROOT / "cpu.cfs_quota_us").exists():
        return "v1", V1_ROOT
    try:
        if "cpu" in (V2_ROOT / "cgroup.controllers").read_text().split():
            return "v2", V2_ROOT
    except OSError:
        pass
    return None


def cluster_group(marker: str) -> Path | None:
    found = hierarchy()
    return found[1] / f"raykit-{marker}" if found else None


def make_cluster_group(marker: str) -> tuple[Path | None, str]:
    """The cluster's group, made afresh (a crashed run's removed first), or None and why
    not: the one line `up` prints before running without quotas."""
    found = hierarchy()
    if found is None:
        return None, "this machine has no cgroup CPU controller mounted"
    version, root = found
    group = root / f"raykit-{marker}"
    try:
        remove(group)
        if version == "v2":  # a v2 group may limit its children's CPU only where its parent lets it
            (root / "cgroup.subtree_control").write_text("+cpu")
        group.mkdir()
        if version == "v2":
            (group / "cgroup.subtree_control").write_text("+cpu")
    except OSError as e:
        return None, f"the kit cannot write cgroups here ({e.strerror or e}: {root})"
    return group, ""


def node_group(cluster: Path, name: str, cores: float) -> Path:
    """A node's group inside the cluster's, limited to `cores` of CPU time."""
    group = cluster / name
    group.mkdir(exist_ok=True)
    quota = max(1000, round(cores * PERIOD_US))  # the kernel's floor is 1 ms
    if (group / "cpu.max").exists():
        (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
    else:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(quota))
    return group


def enter(group: Path) -> None:
    """Move the calling process into `group` (a child's preexec_fn: what it execs and
    starts stays there)."""
    (group / "cgroup.procs").write_text(str(os.getpid()))


def move(group: Path, pids: list[int]) -> None:
    """Move processes and everything they have started into `group` (a node started by a
    library that forks it for us: what it starts later inherits the group)."""
    every = set(pids)
    for pid in pids:
        try:
            every |= {child.pid for child in psutil.Process(pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
    for pid in sorted(every):
        try:
            (group / "cgroup.procs").write_text(str(pid))
        except ProcessLookupError:
            pass  # it exited meanwhile


def remove(group: Path | None) -> bool:
    """Remove a group and the groups inside it, once no process is left in them; True
    when none is left (or there was none). A group still holding a process stays."""
    if group is None or not group.is_dir():
        return True
    for child in [p for p in group.iterdir() if p.is_dir()]:
        remove(child)
    try:
        group.rmdir()  # cgroupfs: rmdir of an empty group, its control files go with it
    except OSError:
        return False
    return True
