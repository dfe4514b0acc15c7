"""The cluster phase's lanes (tests/harness/lanes.py): an `alone` test waits for the other lane's
test under way, and the other lane starts nothing new meanwhile. Real processes and real
flock locks; the order is read from what each process wrote."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from tests.harness import lanes

TAKER = """
import sys, time
from pathlib import Path
from tests.harness import lanes
name, alone, log, release = sys.argv[1], sys.argv[2] == "alone", Path(sys.argv[3]), Path(sys.argv[4])
with lanes.turn(alone=alone):
    with log.open("a") as f:
        f.write(name + " in\\n")
    while release.name != "-" and not release.exists():
        time.sleep(0.02)
    with log.open("a") as f:
        f.write(name + " out\\n")
"""


@pytest.fixture
def taker(tmp_path):
    """Starts a process that takes a turn: it logs `<name> in`, waits for the release file
    (if any), logs `<name> out`. Each is killed at the test's end, passed or failed."""
    started = []

    def start(name: str, alone: bool, tmp: Path, lock: Path, release: str = "-") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", TAKER, name, "alone" if alone else "shared",
                                 str(tmp / "log"), release], cwd=REPO,
                                env=dict(os.environ, **{lanes.LOCK_ENV: str(lock)}))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def until(check, what: str, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def waiting(pid: int) -> bool:
    """Whether the process waits for a flock (a `->` line of /proc/locks)."""
    return any(line.split()[1] == "->" and line.split()[5] == str(pid)
               for line in Path("/proc/locks").read_text().splitlines())


def test_an_alone_test_waits_for_the_other_lanes_test_and_goes_before_its_next(tmp_path, taker):
    lock, log, release = tmp_path / "lanes", tmp_path / "log", tmp_path / "release-a"
    first = taker("a", False, tmp_path, lock, str(release))  # the other lane's test under way
    until(lambda: log.exists() and "a in" in log.read_text(), "a never started")
    alone = taker("b", True, tmp_path, lock)
    until(lambda: waiting(alone.pid), "b never waited for a")
    # the other lane's next test: a shared turn would fit beside a's, but b is waiting
    nxt = taker("c", False, tmp_path, lock)
    until(lambda: waiting(nxt.pid), "c never waited")
    release.touch()
    for proc in (first, alone, nxt):
        assert proc.wait(timeout=60) == 0
    assert log.read_text().split("\n")[:-1] == ["a in", "a out", "b in", "b out", "c in", "c out"]


def test_shared_turns_run_side_by_side(tmp_path, taker):
    lock, log, release = tmp_path / "lanes", tmp_path / "log", tmp_path / "release"
    first = taker("a", False, tmp_path, lock, str(release))
    until(lambda: log.exists() and "a in" in log.read_text(), "a never started")
    second = taker("c", False, tmp_path, lock)  # both lanes' ordinary tests at once
    assert second.wait(timeout=60) == 0
    release.touch()
    assert first.wait(timeout=60) == 0
    assert log.read_text().split("\n")[:-1] == ["a in", "c in", "c out", "a out"]


KEEPER = """
import sys, time
from pathlib import Path
from tests.harness import lanes
log, release, release2 = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

def say(line):
    with log.open("a") as f:
        f.write(line + "\\n")

def wait_for(path):
    while not path.exists():
        time.sleep(0.02)

with lanes.turn(alone=True, keep=True):  # the lane's next test is alone too
    say("a1 in")
say("a1 out")
wait_for(release)  # between the two tests: the turn stays this lane's
with lanes.turn(alone=True, keep=True):
    say("a2 in")
say("a2 out")
with lanes.turn(alone=True, keep=True):  # kept again, for a test that does not come
    say("a3 in")
wait_for(release2)
with lanes.turn(alone=False):  # an ordinary test: the kept turn ends, the other lane's comes in
    say("a4 in")
    while "b in" not in log.read_text():
        time.sleep(0.02)
    say("a4 out")
"""


def test_a_lane_keeps_its_turn_from_one_alone_test_to_the_next_and_gives_it_back_for_an_ordinary_one(
        tmp_path, taker):
    lock, log = tmp_path / "lanes", tmp_path / "log"
    release, release2 = tmp_path / "release", tmp_path / "release2"
    keeper = subprocess.Popen([sys.executable, "-c", KEEPER, str(log), str(release), str(release2)],
                              cwd=REPO, env=dict(os.environ, **{lanes.LOCK_ENV: str(lock)}))
    try:
        until(lambda: log.exists() and "a1 out" in log.read_text(), "a1 never ended")
        other = taker("b", False, tmp_path, lock)  # the other lane's next test, between a1 and a2
        until(lambda: waiting(other.pid), "b never waited")
        release.touch()
        until(lambda: "a3 in" in log.read_text(), "a3 never began")
        time.sleep(0.5)
        assert "b in" not in log.read_text() and other.poll() is None  # still waits: kept
        release2.touch()
        assert keeper.wait(timeout=60) == 0 and other.wait(timeout=60) == 0
    finally:
        keeper.kill()
    said = log.read_text().split("\n")[:-1]
    assert said[:5] == ["a1 in", "a1 out", "a2 in", "a2 out", "a3 in"], said
    # b came in while a4's shared turn was under way: side by side, as ordinary tests run
    assert sorted(said[5:]) == ["a4 in", "a4 out", "b in", "b out"] and said.index("b in") < said.index("a4 out")


COLLECT = """
import json, sys
import pytest

class Order:
    def pytest_collection_finish(self, session):
        print(json.dumps([(i.nodeid, i.get_closest_marker("alone") is not None) for i in session.items]))

sys.exit(pytest.main(["-p", "no:cacheprovider", "--collect-only", "-q", "-m", "cluster",
                      "--lane", sys.argv[1], "tests"], plugins=[Order()]))
"""


@pytest.mark.parametrize("lane", lanes.LANES)
def test_each_lane_runs_its_alone_tests_first_and_the_own_lane_each_module_in_one_piece(lane):
    """The real tree's order, as `make test-cluster` collects it: the `alone` tests run as
    one block, and a module-scoped cluster (the chaos module's) starts once. (In the shared
    lane every test uses the session's cluster, and two modules have tests of both kinds.)"""
    run = subprocess.run([sys.executable, "-c", COLLECT, lane], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    order = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("[")))
    modules = [test_id.split("::")[0] for test_id, _ in order]
    pieces = [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]
    assert lane == "shared" or len(pieces) == len(set(pieces)), pieces
    alone = [is_alone for _, is_alone in order]
    assert alone.count(True) >= 2 and alone == sorted(alone, reverse=True), order


WAITS = '''
import time

def test_waited_then_ran():
    time.sleep(0.3)

def test_ran():
    time.sleep(0.3)
'''


def test_a_test_s_wait_for_its_turn_is_reported_apart_from_its_time(tmp_path, taker):
    """The kit's conftest, in a pytest run in a lane: the other lane's `alone` test holds
    the turn for ~1.5 s; the first test's JUnit time leaves the wait out, its property and
    the slowest tests' list (tests/harness/timing.py) give it."""
    from tests.harness import timing

    lock, release = tmp_path / "lanes", tmp_path / "release"
    other = taker("x", True, tmp_path, lock, str(release))
    until(lambda: (tmp_path / "log").exists(), "x never started")
    (tmp_path / "test_waits.py").write_text(WAITS)
    reports = tmp_path / "reports"
    lane = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                             "-o", "addopts=", f"--junitxml={reports}/cluster-own.xml", str(tmp_path / "test_waits.py")],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO), **{lanes.LOCK_ENV: str(lock)}))
    until(lambda: waiting(lane.pid), "the lane never waited for its turn")
    time.sleep(1.5)
    release.touch()
    out, _ = lane.communicate(timeout=120)
    assert lane.returncode == 0 and other.wait(timeout=60) == 0, out[-2000:]
    found = {name.rpartition("::")[2]: (seconds, waited) for seconds, name, waited in timing.tests(reports)}
    assert 0.3 <= found["test_waited_then_ran"][0] < 1.0 and found["test_waited_then_ran"][1] >= 1.5
    assert 0.3 <= found["test_ran"][0] < 1.0 and found["test_ran"][1] == 0
    listed = "\n".join(timing.lines(reports))
    assert re.search(r"s  \S+test_waited_then_ran \(and \d s waiting for its turn\)", listed), listed


def test_each_test_s_outcome_is_said_the_moment_it_ends_on_the_progress_descriptor(monkeypatch):
    """make holds each lane's output until the lane ends; the lane says each outcome at once
    on the descriptor make leaves on the terminal (the Makefile's 9>&1): a pipe here."""
    from _pytest.reports import TestReport

    def report(when: str, outcome: str, duration: float = 0.0) -> TestReport:
        return TestReport("tests/local/test_x.py::test_y", ("tests/local/test_x.py", 1, "test_y"), {},
                          outcome, None, when, duration=duration)

    read, write = os.pipe()
    monkeypatch.setenv(lanes.PROGRESS_FD_ENV, str(write))
    for r in (report("setup", "passed"), report("call", "passed", 12.34), report("teardown", "passed"),
              report("setup", "skipped"), report("call", "failed", 1.0), report("teardown", "failed")):
        lanes.progress("own", r)
    os.close(write)
    with os.fdopen(read) as said:
        assert said.read().splitlines() == [
            "[own] PASSED tests/local/test_x.py::test_y (12.3 s)",
            "[own] SKIPPED tests/local/test_x.py::test_y (0.0 s)",
            "[own] FAILED tests/local/test_x.py::test_y (1.0 s)",
            "[own] FAILED tests/local/test_x.py::test_y (0.0 s)"]
    monkeypatch.delenv(lanes.PROGRESS_FD_ENV)
    lanes.progress("own", report("call", "passed"))  # a lane run by hand: nothing to say it on
