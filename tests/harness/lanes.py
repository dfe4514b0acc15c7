"""The cluster phase's two lanes (`make test-cluster`): the tests on the session's shared
local cluster in one pytest process, every other cluster test in another, side by side.

Alone, one test at a time, the phase kept the two cores ~52% busy: its tests wait on
purpose (a node starting, an autoscaler's poll, a job's sleep). A test whose check times
something the other lane's load would move (a node at work within 5 s of the job's start,
a drained node's lease, a step against a 4 s stall limit) is marked `alone`: it waits for
the other lane's test under way to end, and that lane starts no test until it is done.
Each lane runs its `alone` tests first (order()), while the other lane's are its only
tests under way: placed where they fell, they waited ~290 s in all for long tests of the
other lane to end, ~190 s when first. First, each in a turn of its own, they still lost
minutes: the other lane's test came in between two of them (the quota test then waited 90 s
for an AdaptDL run), or while a lane's cluster started outside any turn. So a lane keeps its
exclusive turn from one `alone` test to the next, and a test's turn covers the fixtures it
sets up and tears down (a module's or the session's cluster): each lane's `alone` tests
run as one block, the other lane's before or after it, and wait only for that block.
Both lanes take their turns through one lock file (RAYKIT_TEST_LANE_LOCK, set by `make
test-cluster`); without it, as in any other pytest run, nothing waits.

make keeps each lane's output until the lane ends (--output-sync: two pytest runs' lines
interleaved would be unreadable), ~16 minutes of nothing on the terminal; each lane also
says every test's outcome the moment it ends, one line on the descriptor make leaves on
the terminal (RAYKIT_TEST_PROGRESS_FD)."""

import fcntl
import os
import time
from contextlib import contextmanager

LOCK_ENV = "RAYKIT_TEST_LANE_LOCK"
PROGRESS_FD_ENV = "RAYKIT_TEST_PROGRESS_FD"
LANES = ("shared", "own")
# A test's JUnit property: the seconds it waited for its turn, before its setup: its JUnit
# time leaves them out, and tests/harness/timing.py says them beside it
WAITED = "lane_wait_s"
_kept = None  # the open (gate, lock) files of an exclusive turn kept for the lane's next test


def lane_of(item) -> str:
    """`shared`: the test runs on the session's shared local cluster; `own`: any other."""
    return "shared" if "shared_local_cluster" in getattr(item, "fixturenames", ()) else "own"


def is_alone(item) -> bool:
    return item.get_closest_marker("alone") is not None


def order(items: list) -> list:
    """The run's order: the shared lane's tests last (its cluster then never idles beside
    the others'), and in each lane the `alone` tests first. A module with tests of both
    kinds in a lane has its `alone` ones last of them and its others right after: a
    module-scoped cluster then starts once (the chaos module's started twice, ~15 s).
    Otherwise the modules' order (a stable sort). Called before `-m` deselects: a module's
    kinds are those of its tests in the cluster phase (marked `cluster`)."""
    def module(item):  # (lane, file)
        return lane_of(item), item.nodeid.split("::")[0]

    phase = [i for i in items if i.get_closest_marker("cluster")]
    both = {module(i) for i in phase if is_alone(i)} & {module(i) for i in phase if not is_alone(i)}

    def key(item):
        both_kinds = module(item) in both
        if is_alone(item):
            rank = 1 if both_kinds else 0  # the last of the `alone` tests...
        else:
            rank = 2 if both_kinds else 3  # ...and their module's others right after
        return lane_of(item) == "shared", rank

    return sorted(items, key=key)


@contextmanager
def turn(alone: bool, keep: bool = False):
    """Hold this lane's turn: the lock exclusively for an `alone` test, shared otherwise;
    yields the seconds it waited. A gate in front of the lock lets a waiting `alone` test
    in before the other lane's next test (flock alone would let a lane that releases and
    takes it again run first). keep (an `alone` test whose lane's next test is `alone`
    too): hold the turn on after it, for that test. An ordinary test's turn gives back a
    kept one first (one kept for an `alone` test that did not come: skipped, deselected);
    the last test's ends with the process."""
    global _kept
    path = os.environ.get(LOCK_ENV)
    if not path:
        yield 0.0
        return
    asked = time.monotonic()
    if _kept and not alone:
        _release(_kept)
        _kept = None
    files, _kept = _kept or _take(path, alone), None
    try:
        yield time.monotonic() - asked
    finally:
        if keep and alone:
            _kept = files
        else:
            _release(files)


def _take(path: str, alone: bool):
    gate, lock = open(path + ".gate", "a"), open(path, "a")
    fcntl.flock(gate, fcntl.LOCK_EX)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)
    return gate, lock


def _release(files) -> None:
    gate, lock = files
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()
    gate.close()


def progress(lane: str, report) -> None:
    """A test's outcome, as it ends, on RAYKIT_TEST_PROGRESS_FD (where it is set): its
    call's, or a setup's or teardown's that did not pass. One write of one short line: a
    pipe takes it whole, and the other lane's lines never split it."""
    fd = os.environ.get(PROGRESS_FD_ENV)
    if not fd or not (report.when == "call" or (report.outcome != "passed")):
        return
    line = f"[{lane}] {report.outcome.upper()} {report.nodeid} ({report.duration:.1f} s)\n"
    try:
        os.write(int(fd), line.encode())
    except (OSError, ValueError):  # not open here (a lane run by hand): nothing to say it on
        pass
