"""`make test`'s closing lines: each phase's wall time and the slowest tests of the run, from
the JUnit reports its pytest runs wrote and the times the Makefile stamped.

    python -m tests.harness.timing build/test-reports

The reports folder holds `*.xml` (pytest --junitxml: each test's duration) and the stamps
`start`, `offline-end`, `cluster-end` (epoch seconds, one per line, as `date +%s` writes).
"""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.harness.lanes import WAITED

SLOWEST = 15


def stamp(folder: Path, name: str) -> float | None:
    try:
        return float((folder / name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tests(folder: Path) -> list[tuple[float, str, float]]:
    """(seconds, test id, seconds waited) of every test case in the folder's reports: a
    cluster test's JUnit time (its setup, call and teardown), and apart from it what it
    waited for its lane's turn before them (tests/harness/lanes.py)."""
    found = []
    for report in sorted(folder.glob("*.xml")):
        try:
            root = ET.parse(report).getroot()
        except ET.ParseError:  # a phase killed while writing: its cases are lost, not the rest
            continue
        for case in root.iter("testcase"):
            # tests/x/test_y.py's class name is tests.x.test_y; a shipped package's test
            # (--pyargs) is .venv.lib.python3.11.site-packages.adaptdl.x_test
            classname = case.get("classname", "").rpartition("site-packages.")[2]
            name = f"{classname.replace('.', '/')}.py::{case.get('name')}"
            waited = sum(float(p.get("value") or 0) for p in case.iter("property")
                         if p.get("name") == WAITED)
            found.append((float(case.get("time") or 0), name, waited))
    return found


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def lines(folder: Path) -> list[str]:
    start, offline, cluster = (stamp(folder, n) for n in ("start", "offline-end", "cluster-end"))
    out = []
    if start and offline:
        out.append(f"offline phase (offline tests and adaptdl's suites side by side): {minutes(offline - start)}")
    if offline and cluster:
        out.append(f"cluster phase (local Ray clusters, two lanes side by side): {minutes(cluster - offline)}")
    if start and (cluster or offline):
        out.append(f"make test's tests in all: {minutes((cluster or offline) - start)} (the one-time "
                   "kube-testbed build and .venv's install not counted)")
    ranked = sorted(tests(folder), reverse=True)[:SLOWEST]
    if ranked:
        out.append(f"the {len(ranked)} slowest tests:")
        out += [f"  {seconds:7.1f} s  {name}" + (f" (and {waited:.0f} s waiting for its turn)" if waited >= 1 else "")
                for seconds, name, waited in ranked]
    return out


if __name__ == "__main__":
    print("\n".join(["== times"] + lines(Path(sys.argv[1]))))
