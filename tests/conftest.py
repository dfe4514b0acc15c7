"""Shared fixtures. No test reaches AWS: the AWS tests use moto (in-process or a server on
127.0.0.1) with dummy credentials, and in-process sockets may connect to loopback only."""

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness import lanes, network_guard  # noqa: E402

# Dummy credentials for every test: a real ~/.aws profile must never be picked up.
for key, value in {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "RAY_USAGE_STATS_ENABLED": "0",
    "MOTO_IAM_LOAD_MANAGED_POLICIES": "true",  # Ray attaches AmazonEC2FullAccess
    "RAYKIT_IAM_WAIT_S": "0",  # moto's IAM has nothing to propagate: no 15 s sleep per launch
}.items():
    os.environ[key] = value

network_guard.install()

# Under `make test`, make's own flags (its jobserver among them) would reach every `make` a
# test runs, which then warns on stderr ("jobserver unavailable"): each test's make starts
# afresh, as a user's would.
for key in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
    os.environ.pop(key, None)


def moto_get_ebs_default_kms_key_id(self):
    """GetEbsDefaultKmsKeyId, which moto 5.2.5 lacks: AWS answers with the account's
    default EBS key, alias/aws/ebs until ModifyEbsDefaultKmsKeyId (which moto has) sets
    another."""
    from moto.core.responses import ActionResult

    return ActionResult({"KmsKeyId": self.ec2_backend.default_kms_key_id or "alias/aws/ebs"})


from moto.ec2.responses.elastic_block_store import ElasticBlockStore  # noqa: E402

ElasticBlockStore.get_ebs_default_kms_key_id = moto_get_ebs_default_kms_key_id

# What a test makes (values files, jobs, rendered configs, records, results) goes to one
# temporary folder the kit is pointed at (scripts/core/paths.py), never into the checkout:
# a run, even a killed one, leaves the checkout as it found it. Set before any kit module
# is imported (paths are read at import) and inherited by every `make` a test runs.
TEST_DIR = Path(tempfile.mkdtemp(prefix="kit-tests-"))
USER_VALUES, USER_JOBS = TEST_DIR / "values", TEST_DIR / "jobs"
for folder in (USER_VALUES, USER_JOBS):
    folder.mkdir()
os.environ |= {"RAYKIT_VALUES_DIR": str(USER_VALUES), "RAYKIT_JOBS_DIR": str(USER_JOBS),
               "RAYKIT_BUILD_DIR": str(TEST_DIR / "build")}

# The kit refuses to launch from a machine without `ssh` and `rsync` (scripts/commands/
# lifecycle.py's laptop_problem), and this one may lack rsync: where a tool is missing, the
# tests' stand-in (tests/standins: it records, and these tests launch nothing over SSH) is
# put at the END of PATH, so a real one always wins. kubectl is left alone: the KubeRay
# tests name theirs.
TOOLS = TEST_DIR / "tools"
TOOLS.mkdir()
for tool in ("ssh", "rsync"):
    if shutil.which(tool) is None:
        (TOOLS / tool).symlink_to(Path(__file__).parent / "standins" / tool)
os.environ["PATH"] = f"{os.environ.get('PATH', '')}{os.pathsep}{TOOLS}"




def start_checkip_standin(answer: bytes = b"198.51.100.7\n") -> str:
    """A stand-in for AWS's checkip service on 127.0.0.1 (ssh_cidr: auto asks it for this
    machine's address); returns its URL. It answers with a documentation address."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/"


# Every preflight of the session (in this process and in the `make up`s it runs) asks the
# stand-in, never AWS.
CHECKIP_ADDRESS = "198.51.100.7"
os.environ["RAYKIT_CHECKIP_URL"] = start_checkip_standin()


def stop_like_ctrl_c(signum, frame):
    raise KeyboardInterrupt


# A test run stopped with SIGTERM (a CI time-out, `kill`) ends like Ctrl-C: pytest then
# tears its fixtures down, so every cluster a test started is stopped (`make down`).
signal.signal(signal.SIGTERM, stop_like_ctrl_c)
# Ctrl-C too, where the run was started with SIGINT ignored (a background job of a shell
# without job control: nohup, some CI steps), which every process it starts would inherit;
# a handled signal is reset at exec, so each `make` a test runs takes Ctrl-C as a user's does
# (the teardown tests send it). Measured: a `make run` that ignored it ran its job to the end.
signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config):  # after every fixture's teardown
    shutil.rmtree(TEST_DIR, ignore_errors=True)


def load_example(cluster: str) -> dict:
    return yaml.safe_load((REPO / "cluster_templates" / f"{cluster}.yaml").read_text())


@pytest.fixture
def hetero_values() -> dict:
    return copy.deepcopy(load_example("hetero"))


@pytest.fixture
def local_values() -> dict:
    return copy.deepcopy(load_example("local"))


def make(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `make ARGS` in the repo, as a user would; output captured as text."""
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def remove_private_dir(text: str) -> None:
    """Remove the private temp dir (/tmp/raykit-XXXXXXXX) named in `text`, once its
    cluster is stopped: `make down` keeps it for the user's sake (logs), a test need not."""
    import re
    import shutil

    for found in set(re.findall(r"/tmp/raykit-[A-Za-z0-9_]{8}(?=/ray)", text)):
        shutil.rmtree(found, ignore_errors=True)


def processes_of(state: dict) -> list:
    """The live processes of the local cluster that `state` (from local_cluster_up) names."""
    from scripts.providers.local.processes import cluster_processes

    return cluster_processes(state["cluster"], build=Path(state["build_dir"]))


@contextmanager
def local_cluster_up(build_dir: Path, cluster: str = "local", env_extra: dict | None = None):
    """`make up CLUSTER=<cluster>` (a local values file) in a build dir of its own (so its
    own marker, temp dir and ports); yield (env for make, its record + build_dir); on exit
    `make down` and check that nothing of it is left. env_extra: more of the environment
    (a stand-in's settings)."""
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(build_dir), **(env_extra or {}))
    up = make("up", f"CLUSTER={cluster}", env=env, timeout=300)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    state = json.loads((build_dir / "launched" / f"{cluster}.json").read_text())
    state["build_dir"] = str(build_dir)
    try:
        assert processes_of(state)
        yield env, state
    finally:  # a failed test must not leave its cluster running for the next ones
        down = make("down", f"CLUSTER={cluster}", env=env, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert processes_of(state) == []
    assert not (build_dir / "launched" / f"{cluster}.json").exists()
    remove_private_dir(state["temp_dir"])


@pytest.fixture(scope="session")
def shared_local_cluster(tmp_path_factory):
    """One `make up CLUSTER=local` for the tests that only submit to it and read it
    (test_adaptdl_mnist, test_local_cluster, test_own_job, test_vit_synthetic): (env,
    record); `make down` and the check that nothing is left come at the end of the session.
    `make test-cluster` runs its tests in a lane of their own (tests/harness/lanes.py); in any
    other run they come last (pytest_collection_modifyitems), so it never idles beside
    the clusters the other tests start one at a time."""
    with local_cluster_up(tmp_path_factory.mktemp("shared-build")) as up:
        yield up


def publish_dlami(ec2, release: str = "20261020") -> str:
    """Register a Deep Learning Base AMI of that release in moto (in this process, or its
    server thread) and publish its id as AWS's public SSM parameter, as AWS does in every
    region. The parameter goes into moto's store directly: its API refuses /aws/ names, as
    AWS's does. Returns the AMI id."""
    from datetime import datetime, timezone

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import Parameter, ssm_backends

    from scripts import catalog

    region = ec2.meta.region_name
    image_id = ec2.register_image(Name=catalog.DLAMI_NAME + release,
                                  Description="stand-in DLAMI")["ImageId"]
    store = ssm_backends[DEFAULT_ACCOUNT_ID][region]._parameters
    store[catalog.DLAMI_SSM_PARAMETER].append(Parameter(
        account_id=DEFAULT_ACCOUNT_ID, name=catalog.DLAMI_SSM_PARAMETER, value=image_id,
        parameter_type="String", description=None, allowed_pattern=None, keyid=None,
        last_modified_date=datetime.now(timezone.utc), version=1, data_type="aws:ec2:image"))
    return image_id


def pytest_addoption(parser):
    parser.addoption("--lane", choices=lanes.LANES,
                     help="only this lane's tests (tests/harness/lanes.py): `make test-cluster` runs both side by side")


def pytest_collection_modifyitems(session, config, items):
    """Every test that runs a local cluster is marked `cluster` (the slow ones, those on
    the shared cluster, and those marked by hand); the shared local cluster's tests run
    last, and in each lane the `alone` tests first (tests/harness/lanes.py), otherwise in their
    modules' order (a stable sort). With --lane, only that lane's."""
    for item in items:
        if "slow" in item.keywords or lanes.lane_of(item) == "shared":
            item.add_marker(pytest.mark.cluster)
    items[:] = lanes.order(items)
    if LANE:
        config.hook.pytest_deselected(items=[i for i in items if lanes.lane_of(i) != LANE])
        items[:] = [i for i in items if lanes.lane_of(i) == LANE]


LANE = None  # this run's lane (--lane, read in pytest_configure), where `make test-cluster` runs it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """In `make test-cluster`'s two lanes, each test takes its lane's turn (tests/harness/lanes.py)
    for the whole of its run, the fixtures it sets up or tears down included (a module's
    or the session's cluster): an `alone` test runs with the other lane paused, and keeps
    the turn for the lane's next test if that is `alone` too."""
    alone = lanes.is_alone(item)
    keep = alone and nextitem is not None and lanes.is_alone(nextitem)
    with lanes.turn(alone=alone, keep=keep) as waited:
        if waited >= 0.1:
            item.user_properties.append((lanes.WAITED, round(waited, 1)))
        return (yield)


def pytest_runtest_logreport(report):
    if LANE:
        lanes.progress(LANE, report)


def pytest_configure(config):
    global LANE
    LANE = config.getoption("--lane", None)
    config.addinivalue_line(
        "markers", "slow: runs a real cluster for a minute or more (chaos, autostop, bench); "
        "CI runs them, `pytest -m 'not slow'` skips them")
    # `make test` runs the tests that are not `cluster` on two processes side by side
    # (pytest-xdist), then the `cluster` ones in two lanes (tests/harness/lanes.py): those on the
    # shared local cluster, and the others, each lane one test at a time.
    config.addinivalue_line(
        "markers", "cluster: starts or uses a local Ray cluster (every slow test is one); "
        "`make test` runs these in two lanes, after the others")
    config.addinivalue_line(
        "markers", "alone: times something the other lane's load would move (a start within "
        "5 s, a lease, a stall limit): in `make test-cluster`, the other lane waits meanwhile")


def adaptdl_replica_dirs() -> set[str]:
    """adaptdl-ray's per-replica dirs in /tmp (every local node's /tmp is this host's)."""
    import glob

    return set(glob.glob("/tmp/checkpoint-*") + glob.glob("/tmp/share-*"))


def report(capsys, text: str) -> None:
    """A figure the test measured (what a fault cost), shown even when the test passes."""
    with capsys.disabled():
        print(f"\n  [{text}]", flush=True)


@pytest.fixture
def standin_head(tmp_path):
    """A real Ray head on loopback standing in for a cloud's (EC2, a KubeRay pod): auth off,
    as the kit runs it on AWS, with the resources the head and a worker of `hetero` offer. Its
    processes carry a marker of their own, by which they are stopped afterwards."""
    from scripts.core.ray_cli import PORT_TRIES, free_ports, ray_cli, ray_env, taken_by_others
    from scripts.providers.local import names, processes

    private = tempfile.mkdtemp(prefix="raykit-")
    marker = names.cluster_id("standin-head", tmp_path)
    env = ray_env(None, {names.MARKER: marker,
                         "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"})
    started = None
    try:
        # As the local provider does: a start that failed, or a port another program took,
        # is retried on fresh ports; what a failed start left running is stopped first.
        for _ in range(PORT_TRIES):
            ports = free_ports(6)
            gcs, dashboard, client, agent, metrics, runtime_env = ports
            started = subprocess.run(
                [ray_cli(), "start", "--head", "--disable-usage-stats",
                 "--node-ip-address=127.0.0.2", f"--port={gcs}",
                 "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
                 f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
                 f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
                 f"--temp-dir={private}/ray", "--num-cpus=3",
                 "--labels=ray-subcluster=train,raykit-trainer-slots=1,raykit-preprocess=true",
                 "--object-store-memory=500000000"],
                env=env, capture_output=True, text=True, timeout=120, start_new_session=True)
            mine = processes.cluster_processes("standin-head", build=tmp_path)
            if started.returncode == 0 and not taken_by_others(ports, mine):
                break
            processes.stop_processes(mine)
        else:
            pytest.fail("the stand-in head did not start on any of its port tries: "
                        + (started.stderr or started.stdout)[-2000:])
    except BaseException:  # a failed start, a timeout, Ctrl-C: nothing of it left running
        processes.stop_cluster("standin-head", build=tmp_path)
        shutil.rmtree(private, ignore_errors=True)
        raise
    try:
        yield dashboard
    finally:
        # every process, those started while the others stopped too, gone before it returns
        _, alive = processes.stop_cluster("standin-head", build=tmp_path)
        shutil.rmtree(private, ignore_errors=True)
        assert alive == [], f"the stand-in head's processes outlived their stop: {alive}"


STANDIN_NVML = REPO / "tests" / "standins" / "nvml"


def standin_gpus(*names: str, utilization_file: Path | None = None) -> dict:
    """The environment that shows a process the stand-in NVML's GPUs (tests/standins/nvml):
    the kit, and every Ray process it starts, see `names` as this machine's GPUs."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(STANDIN_NVML), os.environ.get("PYTHONPATH")])),
           "STANDIN_GPUS": ",".join(names)}
    return env | ({"STANDIN_GPU_UTIL": str(utilization_file)} if utilization_file else {})


def kept_summary(output: str) -> dict:
    """The job's summary as `make submit`/`run` kept it (the path its `summary kept in`
    line names): the machine-readable record, which the quiet log no longer prints."""
    import re

    found = re.findall(r"^summary kept in (\S+)$", output, re.M)
    assert found, "no summary kept: " + output[-2000:]
    return json.loads(Path(found[-1]).read_text())["result"]
