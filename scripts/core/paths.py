"""Where the kit's files live. BUILD holds what the kit writes: rendered configs
(build/clusters/), the records of launched clusters (build/launched/), jobs' summaries
(build/results/), benches (build/bench/) and logs; tests
point RAYKIT_BUILD_DIR elsewhere so that they never touch a cluster a user has up.

Values files are looked up in cluster_templates/ and jobs in jobs/, and first in the
folders RAYKIT_VALUES_DIR and RAYKIT_JOBS_DIR name, where set: tests write the values
files and jobs they make there (temporary dirs), so a run, even a killed one, leaves the
checkout as it found it; a user may keep their own mixes and jobs outside the checkout."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "cluster_templates"
SCHEMAS = TEMPLATES / "schema"
JOBS = REPO / "jobs"
JOB_LIBRARY = JOBS / "raykit"  # shipped to every job (py_modules)
# the programs that run on the cluster's nodes; `make up` on AWS mounts this folder alone
NODE_PROGRAMS = REPO / "scripts" / "node"


def searched(variable: str, default: Path) -> tuple[Path, ...]:
    """The folder `variable` names (first: new files go there), then `default`."""
    extra = os.environ.get(variable)
    return tuple(dict.fromkeys([Path(extra).resolve()] if extra else []) | {default: None})


VALUES_DIRS = searched("RAYKIT_VALUES_DIR", TEMPLATES)
JOB_DIRS = searched("RAYKIT_JOBS_DIR", JOBS)
BUILD = Path(os.environ.get("RAYKIT_BUILD_DIR") or REPO / "build").resolve()
RENDERED = BUILD / "clusters"
LAUNCHED = BUILD / "launched"
LOGS = BUILD / "logs"
RESULTS = BUILD / "results"  # a copy of every submitted job's summary; `make clean` keeps it
RUNS = BUILD / "runs"        # `make fetch`: runs' folders copied home; `make clean` keeps them
BENCH = BUILD / "bench"      # `make bench` tables (JSON, CSV, PNG); `make clean` keeps them
