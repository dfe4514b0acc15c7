"""`make test`'s closing lines: each phase's wall time and the slowest tests of the run, from
the JUnit reports its pytest runs wrote and the times the Makefile stamped.

    python -m tests.timing build/test-reports

The reports folder holds `*.xml` (pytest --junitxml: each test's duration) and the stamps
`start`, `offline-end`, `cluster-end` (epoch seconds, one per line, as `date +%s` writes):
both phases start together, the offline one at idle CPU priority beside the cluster one.
"""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SLOWEST = 15  # of the cluster phase
OFFLINE_SLOWEST = 5


def stamp(folder: Path, name: str) -> float | None:
    try:
        return float((folder / name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tests(folder: Path, reports: str = "*.xml") -> list[tuple[float, str]]:
    """(seconds, test id) of every test case in the folder's reports matching `reports`."""
    found = []
    for report in sorted(folder.glob(reports)):
        try:
            root = ET.parse(report).getroot()
        except ET.ParseError:  # a phase killed while writing: its cases are lost, not the rest
            continue
        for case in root.iter("testcase"):
            # tests/x/test_y.py's class name is tests.x.test_y; a shipped package's test
            # (--pyargs) is .venv.lib.python3.11.site-packages.adaptdl.x_test
            classname = case.get("classname", "").rpartition("site-packages.")[2]
            name = f"{classname.replace('.', '/')}.py::{case.get('name')}"
            found.append((float(case.get("time") or 0), name))
    return found


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def lines(folder: Path) -> list[str]:
    start, offline, cluster = (stamp(folder, n) for n in ("start", "offline-end", "cluster-end"))
    out = []
    if start and cluster:
        out.append(f"cluster phase (local Ray clusters, one test at a time): {minutes(cluster - start)}")
    if start and offline:
        out.append(f"offline phase (the offline tests and adaptdl's suites, beside it at idle "
                   f"priority): {minutes(offline - start)}")
    ends = [end for end in (offline, cluster) if end]
    if start and ends:
        out.append(f"make test's tests in all: {minutes(max(ends) - start)} (the one-time "
                   "kube-testbed build and .venv's install not counted)")
    # the cluster phase's tests make up make test's time; the offline phase's, at idle
    # priority, count the seconds they waited for a core the cluster tests held
    ranked = sorted(tests(folder, "cluster.xml"), reverse=True)[:SLOWEST]
    if ranked:
        out.append(f"the cluster phase's {len(ranked)} slowest tests:")
        out += [f"  {seconds:7.1f} s  {name}" for seconds, name in ranked]
    behind = sorted(case for report in folder.glob("*.xml") if report.name != "cluster.xml"
                    for case in tests(folder, report.name))[::-1][:OFFLINE_SLOWEST]
    if behind:
        out.append(f"the offline phase's {len(behind)} slowest (at idle priority: waits for a core included):")
        out += [f"  {seconds:7.1f} s  {name}" for seconds, name in behind]
    return out


if __name__ == "__main__":
    print("\n".join(["== times"] + lines(Path(sys.argv[1]))))
