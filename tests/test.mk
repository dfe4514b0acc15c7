# The kit's test targets, included by the Makefile (the user's front door lists them in
# `make help` with the rest). Variables from the Makefile: PY, STAMP.

# The tests that need no local cluster run on two processes (pytest-xdist), side by side
# with adaptdl's shipped tests of the modules the kit's fixes patch: together they keep both
# cores busy, where each alone waits (on moto, on Ray's start-up) or runs one thread. Then
# the local-cluster tests in two lanes side by side (tests/harness/lanes.py: those on the shared
# local cluster, and the others), each lane one test at a time; a test that times what the
# other lane's load would move is marked `alone` and runs with that lane paused. At the end, each phase's time and the 15 slowest tests (tests/harness/timing.py).
# The real-API-server tests (tests/kuberay/test_real_apiserver.py) need kube-apiserver
# built once into ~/.cache/raykit (kube-testbed: ~7 minutes the first time, as root for
# apt-get); where this machine cannot build it, make test says so in one line and skips
# them, and under CI=true that is an error. The same holds for Debian's openssh-server, the
# real sshd the tests of `ray dashboard`'s SSH tunnel run against (tests/harness/ssh_testbed.py).
REPORTS := build/test-reports
test: $(STAMP) ## run every test (the local Ray cluster, AWS through moto, KubeRay against a real API server); prints the slowest
	@$(PY) -m tests.kuberay.kube_testbed ensure
	@$(PY) -m tests.harness.ssh_testbed ensure
	@rm -rf $(REPORTS) && mkdir -p $(REPORTS) && date +%s > $(REPORTS)/start
	@echo "== test-offline and test-adaptdl side by side (each one's output when it ends), then test-cluster"
	@export RAYKIT_TEST_REPORTS=$(REPORTS); \
	  $(MAKE) --no-print-directory -j6 --output-sync=target test-offline $(addprefix adaptdl-suite/,$(ADAPTDL_SUITES)); \
	  status=$$?; date +%s > $(REPORTS)/offline-end; \
	  if [ $$status = 0 ]; then $(MAKE) --no-print-directory test-cluster; status=$$?; date +%s > $(REPORTS)/cluster-end; fi; \
	  $(PY) -m tests.harness.timing $(REPORTS); exit $$status

# RAYKIT_TEST_REPORTS (set by `make test`): where each pytest run writes its JUnit report
JUNIT = $${RAYKIT_TEST_REPORTS:+--junitxml=$$RAYKIT_TEST_REPORTS/$(1).xml}

# --dist loadgroup: the real-API-server tests share one API server, on one process
test-offline: $(STAMP) ## the tests that start no local cluster (moto for AWS), on 2 processes
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadgroup --durations=10 -m "not cluster" $(call JUNIT,offline) tests

kube-testbed: $(STAMP) ## build kube-apiserver 1.20 and fetch kubectl 1.34 for the KubeRay tests, once (root: apt-get)
	@$(PY) -m tests.kuberay.kube_testbed build

test-cluster: $(STAMP) ## the tests that run a local Ray cluster (pytest -m cluster), in two lanes side by side
	@lock=$$(mktemp -d)/lanes; trap 'rm -rf "$${lock%/lanes}"' EXIT; \
	  RAYKIT_TEST_LANE_LOCK=$$lock RAYKIT_TEST_PROGRESS_FD=9 \
	  $(MAKE) --no-print-directory -j2 --output-sync=target cluster-lane/shared cluster-lane/own 9>&1

# One lane of the cluster phase (tests/harness/lanes.py): `shared`, the tests on the session's
# shared local cluster, or `own`, the others; each lane runs its tests one at a time, and
# a test marked `alone` pauses the other lane.
cluster-lane/%: $(STAMP)
	@echo "== cluster lane $*"
	@$(PY) -m pytest -p no:cacheprovider --durations=10 -m cluster --lane $* $(call JUNIT,cluster-$*) tests

test-changed: $(STAMP) ## the quick loop: the fast tests of what changed since main (files and the tests importing them)
	@$(PY) -m tests.harness.changed

# adaptdl 0.2.11's own unit tests, under the kit's compatibility fixes. `make test` runs
# those of the modules the fixes patch (jobs/adaptdl_mnist/adaptdl_compat.py: checkpoint,
# goodput, torch._metrics, torch.parallel (in the order pytest collects them: _metrics_test
# needs a process no parallel_test has run in), adaptdl-ray's controller and worker);
# `make test-upstream` runs all of them, adaptdl's scaling rules' optimisations included
# (~2.5 CPU minutes of rules the kit never changes). Each of adaptdl-ray's test modules
# replaces functions in adaptdl-ray's modules before it imports the others, so each runs in
# a process of its own. --timeout 900: a hang guard.
ADAPTDL_SUITES := adaptdl.checkpoint_test+adaptdl.goodput_test+adaptdl.torch._metrics_test+adaptdl.torch.parallel_test \
                  adaptdl_ray.aws.test_controller adaptdl_ray.aws.test_controller_mocked_ray adaptdl_ray.aws.test_worker
ADAPTDL_UPSTREAM := adaptdl adaptdl.torch.scaling_rules_test adaptdl_ray.aws.test_controller \
                    adaptdl_ray.aws.test_controller_mocked_ray adaptdl_ray.aws.test_worker
ADAPTDL_SPLIT_OFF := --ignore-glob=*/adaptdl/torch/scaling_rules_test.py

test-adaptdl: $(STAMP) ## adaptdl's shipped tests of the modules the kit's fixes patch (as in make test)
	@$(MAKE) --no-print-directory -j5 --output-sync=target $(addprefix adaptdl-suite/,$(ADAPTDL_SUITES))

test-upstream: $(STAMP) ## every unit test adaptdl 0.2.11 ships (784), under the kit's fixes
	@$(MAKE) --no-print-directory -j5 --output-sync=target $(addprefix adaptdl-suite/,$(ADAPTDL_UPSTREAM))

# One suite (modules joined by +); --output-sync keeps each suite's output in one piece.
adaptdl-suite/%: $(STAMP)
	@echo "== $*"
	@$(PY) -m pytest -q -p tests.harness.adaptdl_shipped_plugin -p no:cacheprovider -o asyncio_mode=auto \
	  -o asyncio_default_fixture_loop_scope=function --timeout 900 $(call JUNIT,adaptdl-$*) \
	  $(if $(filter adaptdl,$*),$(ADAPTDL_SPLIT_OFF)) --pyargs $(subst +, ,$*)
