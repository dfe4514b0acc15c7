# The kit's front door. `make` or `make help` lists every target and variable.
# Every target that needs Python depends on .venv (built from requirements.txt by `make setup`).

CLUSTER ?= local#        a values file in cluster_templates/ (local, local_single, local_hetero, local_multi, local_autopilot, local_gpu_single, local_gpu_hetero, hetero, single, p4d_hetero, multi_g5, multi_p4d, k8s_hetero, k8s_multi)
JOB     ?= vit_synthetic#   a directory in jobs/ (vit_synthetic, adaptdl_mnist, template, smoke)
ARGS    ?=#              flags for the job, split as a shell would: ARGS="--steps 20 --batch-size 16"
TIMEOUT ?=#              stop a submitted job after this many seconds (empty: 6 h on AWS, no limit locally)
DRY_RUN ?=#              1: `make up`, `run`, `bench` and `image` print what they would do, and do nothing
PURGE   ?=#              1: `make down` on AWS also deletes the cluster's security group
ID      ?=#              a job's id, for `make logs`, `make stop-job` and `make fetch` (`make jobs` lists them)
FOLLOW  ?=#              1: `make logs` follows the job until it ends, `make monitor` the autoscaler
VERBOSE ?=#              1: `make submit`, `run` and `demo` show Ray's own INFO lines in the job's log
PROFILE ?=#              a job summary for `make plan`, e.g. build/results/<id>.json
CLUSTERS ?=#             values files `make bench` runs in turn (empty: local_single local_hetero)
FROM    ?=#              rows.json for `make bench` to re-print and plot (saved or published rows)
PYTHON  ?= python3#      the interpreter that creates .venv (3.11)
DETACH  ?=#              1: `make submit` returns once the job is submitted, which runs on (Ctrl-C otherwise stops it)

# The variables reach the kit through its environment, never through a shell line: their
# raw text ($(value ...): make expands nothing in it) is exported as KIT_*, so quotes, `$`,
# backticks and `;` are data. The originals are not exported: make would expand them on
# the way (running a `$(shell ...)` in them). scripts/core/inputs.py checks each one.
unexport CLUSTER JOB ARGS TIMEOUT DRY_RUN PURGE ID FOLLOW VERBOSE PROFILE CLUSTERS FROM PYTHON DETACH
# Make exports every variable set on its command line, expanding it on the way: any other
# name given there (or an attempt to replace the kit's own variables below) could run
# shell code before a recipe starts. Refuse it before anything runs.
USER_VARIABLES := CLUSTER JOB ARGS TIMEOUT DRY_RUN PURGE ID FOLLOW VERBOSE PROFILE CLUSTERS FROM PYTHON DETACH
$(foreach v,$(.VARIABLES),$(if $(and $(filter command line,$(origin $(v))),$(filter-out $(USER_VARIABLES),$(v))),\
  $(error error: $(v) is not a variable of this Makefile; use $(USER_VARIABLES), see `make help`)))
export KIT_CLUSTER := $(value CLUSTER)
export KIT_JOB     := $(value JOB)
export KIT_ARGS    := $(value ARGS)
export KIT_TIMEOUT := $(value TIMEOUT)
export KIT_DRY_RUN := $(value DRY_RUN)
export KIT_PURGE   := $(value PURGE)
export KIT_ID      := $(value ID)
export KIT_FOLLOW  := $(value FOLLOW)
export KIT_VERBOSE := $(value VERBOSE)
export KIT_PROFILE := $(value PROFILE)
export KIT_CLUSTERS := $(value CLUSTERS)
export KIT_FROM    := $(value FROM)
export KIT_PYTHON  := $(value PYTHON)
export KIT_DETACH  := $(value DETACH)

VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# `make setup-launcher` installs only requirements.txt's launcher block (no torch): then the
# commands that launch, submit to and price AWS and KubeRay clusters run on it; the rest
# (demo, run, bench, test) need `make setup`'s full .venv, and build it first.
LAUNCHER := $(VENV)/.launcher-only
READY := $(if $(wildcard $(LAUNCHER)),$(LAUNCHER),$(STAMP))
KIT   := $(PY) -m scripts.kit

.DEFAULT_GOAL := help
.PHONY: help setup setup-launcher validate render preflight up status submit jobs logs stop-job fetch dashboard attach monitor down run demo images image cost prices plan bench test test-offline test-cluster test-changed test-adaptdl test-upstream kube-testbed bench-data bench-wait bench-autopilot simulate clean

help: ## list targets and variables
	@echo "usage: make TARGET [CLUSTER=local] [JOB=vit_synthetic] [ARGS=...] [TIMEOUT=s] [DRY_RUN=1]"
	@echo
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'
	@echo
	@grep -hE '^[A-Z_]+ +\?=' $(MAKEFILE_LIST) | sed -E 's/^([A-Z_]+) +\?= *([^#]*)# *(.*)/  \1=\2  \3/'

setup: $(STAMP) ## create .venv with the pinned requirements (run by every target)

$(STAMP): requirements.txt jobs/adaptdl_mnist/requirements-nodeps.txt
	test -x $(PY) || "$$KIT_PYTHON" -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r jobs/adaptdl_mnist/requirements-nodeps.txt
	rm -f $(LAUNCHER)
	touch $@

setup-launcher: ## a .venv that only launches AWS and KubeRay clusters (no torch: ~1 GB, not ~6); `make setup` completes it
	test -x $(PY) || "$$KIT_PYTHON" -m venv $(VENV)
	awk '/^# --- the launcher/{on=1; next} /^# ---/{on=0} on' requirements.txt > $(VENV)/launcher-requirements.txt
	$(PY) -m pip install -q -r $(VENV)/launcher-requirements.txt
	test -f $(STAMP) || touch $(LAUNCHER)

validate: $(READY) ## check CLUSTER's values file and rendered config; writes nothing, launches nothing
	@$(KIT) validate

render: $(READY) ## the same checks, then write build/clusters/CLUSTER.yaml (AWS: + the head's IAM policy; KubeRay: + the user's Role)
	@$(KIT) render

preflight: $(READY) ## check CLUSTER and, on AWS, the account (read-only: credentials, zone, subnet, key pair, AMI, quotas)
	@$(KIT) preflight

up: $(READY) ## preflight, then start CLUSTER and wait until ready (DRY_RUN=1: only say what it would launch)
	@$(KIT) up

status: $(READY) ## show nodes and resources of CLUSTER
	@$(KIT) status

submit: $(READY) ## run JOB on CLUSTER with ARGS; exits with the job's code; keeps its summary in build/results/
	@$(KIT) submit

jobs: $(READY) ## the jobs of CLUSTER: id, status, start, duration
	@$(KIT) jobs

logs: $(READY) ## a job's logs: the latest, or ID=...; FOLLOW=1 follows it
	@$(KIT) logs

stop-job: $(READY) ## stop the job ID=... on CLUSTER
	@$(KIT) stop-job

fetch: $(READY) ## copy job ID=...'s run folder (checkpoints, model.pt) into build/runs/ID/ (from S3, or the head)
	@$(KIT) fetch

dashboard: $(READY) ## CLUSTER's dashboard URL (AWS: an SSH tunnel, KubeRay: kubectl port-forward, kept until Ctrl-C)
	@$(KIT) dashboard

attach: $(READY) ## a shell on CLUSTER's head (local: a shell aimed at the cluster)
	@$(KIT) attach

monitor: $(READY) ## the autoscaler's log of CLUSTER: the last lines; FOLLOW=1 follows it
	@$(KIT) monitor

down: $(READY) ## stop what `make up` started, check nothing runs (AWS: PURGE=1 deletes its security group)
	@$(KIT) down

run: $(STAMP) ## up + submit + down; tears down only what it launched, through Ctrl-C too (KubeRay: a RayJob)
	@$(KIT) run

demo: $(STAMP) ## the ViT job end to end on the local simulated cluster
	@$(MAKE) --no-print-directory run CLUSTER=local JOB=vit_synthetic ARGS= TIMEOUT= VERBOSE="$$KIT_VERBOSE"

images: $(STAMP) ## a JPEG image set for a job's --data (default build/images; see ARGS=--help)
	@$(KIT) images

image: $(READY) ## build the container images a KubeRay CLUSTER names, jobs' packages baked in (needs Docker)
	@$(KIT) image

cost: $(READY) ## CLUSTER's $/h per node type at min and max workers, EBS included, and totals
	@$(KIT) cost

prices: $(READY) ## an AWS CLUSTER's region's list and spot prices from AWS (your credentials, free), for cost/plan/bench
	@$(KIT) prices

plan: $(READY) ## cheapest mix feeding the GPUs, from PROFILE=<job summary> or ARGS (see ARGS=--help)
	@$(KIT) plan

bench: $(STAMP) ## ViT job on each of CLUSTERS: $/100 steps table + JSON/CSV/PNG; JOB=adaptdl_mnist: AdaptDL vs fixed Ray Train
	@$(KIT) bench

# The test targets (test, test-offline, test-cluster, test-changed, test-adaptdl, ...):
# tests/test.mk, beside the tests they run
include tests/test.mk

bench-data: $(STAMP) ## preprocessing throughput: Ray Data vs its limit vs DataLoader (ratios); ARGS=--help: rounds, waves
	@$(PY) -m scripts.benchmarks.bench_data

bench-wait: $(STAMP) ## the trainer's data wait with light preprocessing on CLUSTER (< 5%, no stalls)
	@$(PY) -m scripts.benchmarks.bench_wait

bench-autopilot: $(STAMP) ## the autopilot vs fixed_min, fixed_max, the autopilot off (raydata) and held at min on CLUSTER (default local_autopilot)
	@KIT_CLUSTER_ORIGIN="$(origin CLUSTER)" $(PY) -m scripts.benchmarks.bench_autopilot

simulate: $(STAMP) ## the autopilot vs fixed mixes, the planner's, the autopilot off and an oracle at AWS prices and start times, simulated (ARGS=--help; --map; --phases)
	@$(PY) -m scripts.sim.simulate

clean: $(READY) ## remove build/, keeping records of clusters that may be running, job summaries and benches
	@$(KIT) clean
