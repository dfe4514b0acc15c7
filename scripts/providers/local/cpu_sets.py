"""CPU sets for the simulated nodes: each local node's processes run on cores of its own.

Without them every simulated node shares all of this machine's cores, so a one-node mix
and a two-node mix run on the same CPUs and a bench between them measures nothing. The
head takes the first cores the kit may use, each worker the next free ones (as many as
its `cpus`), and every process a node starts inherits its set: Linux hands a thread's
CPU affinity down to the processes it forks.
"""

import os
from contextlib import contextmanager

# The worker cores the head's autoscaler may hand out, in its environment ("2,3").
WORKER_CORES_ENV = "RAYKIT_WORKER_CORES"


def host_cores() -> list[int]:
    """The cores this process may run on (a container or `taskset` may allow fewer than
    the machine has)."""
    return sorted(os.sched_getaffinity(0))


def to_text(cores: list[int]) -> str:
    return ",".join(map(str, cores))


def from_text(text: str) -> list[int]:
    return [int(core) for core in text.split(",") if core]


@contextmanager
def pinned_to(cores: list[int] | None):
    """Run the block on `cores` only, so that what it starts inherits them; then restore.
    Affinity 0 is the calling thread's own: other threads of this process are untouched.
    None (or no cores): the block runs as it is, unpinned."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
