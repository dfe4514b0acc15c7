"""The cluster phase's two lanes (`make test-cluster`): the tests on the session's shared
local cluster in one pytest process, every other cluster test in another, side by side.

Alone, one test at a time, the phase kept the two cores ~52% busy: its tests wait on
purpose (a node starting, an autoscaler's poll, a job's sleep). A test whose check times
something the other lane's load would move (a node at work within 5 s of the job's start,
a drained node's lease, a step against a 4 s stall limit) is marked `alone`: it waits for
the other lane's test under way to end, and that lane starts no test until it is done.
Each lane runs its `alone` tests first (conftest.py), while the other lane's are its only
tests under way: placed where they fell, they waited ~290 s in all for long tests of the
other lane to end, ~190 s when first (the chaos module's cluster, whose tests they split,
starts twice).
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
# A test's JUnit property: the seconds it waited for its turn, which its time includes
# and tests/timing.py takes out of the slowest tests' times
WAITED = "lane_wait_s"
_holding = False  # this process holds its turn already (a cluster started inside a test)


def lane_of(item) -> str:
    """`shared`: the test runs on the session's shared local cluster; `own`: any other."""
    return "shared" if "shared_local_cluster" in getattr(item, "fixturenames", ()) else "own"


@contextmanager
def turn(alone: bool):
    """Hold this lane's turn: the lock exclusively for an `alone` test, shared otherwise;
    yields the seconds it waited. A gate in front of the lock lets a waiting `alone` test
    in before the other lane's next test (flock alone would let a lane that releases and
    takes it again run first)."""
    global _holding
    path = os.environ.get(LOCK_ENV)
    if not path or _holding:
        yield 0.0
        return
    with open(path + ".gate", "a") as gate, open(path, "a") as lock:
        asked = time.monotonic()
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        _holding = True
        try:
            yield time.monotonic() - asked
        finally:
            _holding = False
            fcntl.flock(lock, fcntl.LOCK_UN)


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
