"""Where the kit's files live. BUILD holds what the kit writes: rendered configs
(build/clusters/), the records of launched clusters (build/launched/), jobs' summaries
(build/results/), benches (build/bench/) and logs; tests
point RAYKIT_BUILD_DIR elsewhere so that they never touch a cluster a user has up."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "cluster_templates"
SCHEMAS = TEMPLATES / "schema"
JOBS = REPO / "jobs"
JOB_LIBRARY = JOBS / "raykit"  # shipped to every job (py_modules)
# the programs that run on the cluster's nodes; `make up` on AWS mounts this folder alone
NODE_PROGRAMS = REPO / "scripts" / "node"
BUILD = Path(os.environ.get("RAYKIT_BUILD_DIR") or REPO / "build").resolve()
RENDERED = BUILD / "clusters"
LAUNCHED = BUILD / "launched"
LOGS = BUILD / "logs"
RESULTS = BUILD / "results"  # a copy of every submitted job's summary; `make clean` keeps it
BENCH = BUILD / "bench"      # `make bench` tables (JSON, CSV, PNG); `make clean` keeps them
