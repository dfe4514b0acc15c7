"""Run a command at the lowest CPU priority this machine offers, for `make test`'s tests that
need no local cluster: they run beside the cluster tests and take only the CPU those leave.

    python -m tests.idle_priority COMMAND [ARG...]

The cluster tests time what they check (a fault's cost, an idle limit, a node's start), yet
alone they left the two cores ~45% idle (a node starting, an autoscaler's poll, a job's
sleep). Two things keep the offline tests out of their way, both inherited by everything
the command starts:
- a cgroup of its own with the CPU controller's smallest weight (v1 `cpu.shares` 2, v2
  `cpu.weight` 1), where the kit may write cgroups (root, as for `cpu_quota`). Without it
  the cluster tests ran 40-50% slower beside the offline ones: Ray runs its workers at nice
  15 (`RAY_worker_niceness`), whose weight (36) the offline tests' SCHED_IDLE processes
  (3 each, six or more of them) nearly matched;
- Linux's SCHED_IDLE (elsewhere nice 19), so a waking cluster test preempts them at once.
The group is removed when the command ends; a process the tests left running keeps it, and
is named.
"""

import os
import subprocess
import sys
from pathlib import Path

from scripts.providers.local import cpu_quota


def background_group() -> Path | None:
    """Enter a new cgroup of the smallest CPU weight; None where this machine has none to give."""
    found = cpu_quota.hierarchy()
    if found is None:
        return None
    version, root = found
    group = root / f"raykit-offline-tests-{os.getpid()}"
    try:
        if version == "v2":  # a v2 group gets a weight only where its parent enables the controller
            (root / "cgroup.subtree_control").write_text("+cpu")
        group.mkdir()
        (group / ("cpu.shares" if version == "v1" else "cpu.weight")).write_text("2" if version == "v1" else "1")
        cpu_quota.enter(group)
    except OSError:  # not root, a read-only mount
        cpu_quota.remove(group)
        return None
    return group


def lower_priority() -> tuple[Path | None, str]:
    """Put this process, and what it starts, at the lowest priority there is; say how."""
    group = background_group()
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        policy = "SCHED_IDLE"
    except (AttributeError, OSError):  # not Linux
        os.nice(19)
        policy = "nice 19"
    return group, policy + (f", in cgroup {group.name}" if group else "")


def leave(group: Path | None) -> str:
    """Move this process back to the root group and remove `group`; a line naming what the
    command left running in it, if anything."""
    if group is None:
        return ""
    (group.parent / "cgroup.procs").write_text(str(os.getpid()))
    if cpu_quota.remove(group):
        return ""
    left = (group / "cgroup.procs").read_text().split()
    return f"idle_priority: the tests left {len(left)} process(es) running: {' '.join(left)}"


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit("usage: python -m tests.idle_priority COMMAND [ARG...]")
    group, how = lower_priority()
    print(f"== {' '.join(argv[:2])}... at idle priority ({how})", flush=True)
    proc = subprocess.Popen(argv)
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # the terminal's Ctrl-C reached the command too: let it end
        code = proc.wait()
    left = leave(group)
    if left:
        print(left, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
