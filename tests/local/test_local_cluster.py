"""The simulated cluster for real: up, submit, down; nothing of it survives down, and
nothing that is not of it is touched."""

import fcntl
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, kept_summary, make, processes_of, remove_private_dir


@pytest.fixture
def cluster_env(shared_local_cluster):
    return shared_local_cluster


def test_up_reports_every_node(cluster_env):
    """`make up` returned once every node was alive in the GCS; `make status` shows the
    autoscaler's report, which trails it by an update (a second here)."""
    env, state = cluster_env
    deadline = time.monotonic() + 15
    while True:
        status = make("status", "CLUSTER=local", env=env)
        if " 2 cpu_worker" in status.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert " 1 ray.head.default" in status.stdout and " 2 cpu_worker" in status.stdout, status.stdout


def test_tasks_spread_over_workers_and_trainer_lands_on_head(cluster_env):
    env, state = cluster_env
    run = make("submit", "CLUSTER=local", "JOB=smoke", env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    result = kept_summary(run.stdout)
    assert result["alive_nodes"] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert result["trainer_task_node"] == "127.0.0.2" == result["driver_node"]
    assert result["preprocess_task_nodes"] == ["127.0.0.3", "127.0.0.4"]
    # on the shared cores the trainer comes first: its node's Ray workers at the driver's
    # niceness, the preprocess nodes' at Ray's default (scripts/providers/local/priority.py)
    assert result["trainer_task_niceness"] == 0 and result["preprocess_task_niceness"] == [15], result


def test_hostile_args_reach_the_job_as_text(cluster_env, tmp_path):
    env, _ = cluster_env
    mark = tmp_path / "injected"
    run = make("submit", "CLUSTER=local", "JOB=smoke", f"ARGS=--tasks 1 --sleep '0' $(touch {mark}) ;",
               env=env, timeout=300)
    assert run.returncode != 0  # the job's own argparse refuses the extra words...
    assert f"unrecognized arguments: $(touch {mark}) ;" in run.stdout  # ...as the text typed
    assert not mark.exists()


def test_summaries_are_kept_and_jobs_and_logs_are_listed(cluster_env):
    env, state = cluster_env
    run = make("submit", "CLUSTER=local", "JOB=smoke", "ARGS=--tasks 2", env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    kept_path = re.search(r"^summary kept in (\S+)$", run.stdout, re.M).group(1)
    kept = json.load(open(kept_path))
    assert kept_path.startswith(os.path.join(state["build_dir"], "results"))
    assert kept["job"] == "smoke" and kept["exit_code"] == 0 and kept["args"] == ["--tasks", "2"]
    assert kept["result"] == kept_summary(run.stdout)
    assert "smoke: 2 preprocess task(s)" in run.stdout and "RESULT " not in run.stdout  # for a person
    submission = kept["submission_id"]

    jobs = make("jobs", "CLUSTER=local", env=env)
    header, newest = jobs.stdout.splitlines()[:2]
    assert jobs.returncode == 0 and header.split() == ["ID", "STATUS", "STARTED", "DURATION"]
    assert newest.split()[:2] == [submission, "SUCCEEDED"]
    for by in ([], [f"ID={submission}"]):  # the latest job, or one by its id
        logs = make("logs", "CLUSTER=local", *by, env=env)
        assert logs.returncode == 0 and "RESULT " in logs.stdout
    unknown = make("logs", "CLUSTER=local", "ID=smoke-00000000", env=env)
    errors = [line for line in unknown.stderr.splitlines() if line.startswith("error:")]
    assert unknown.returncode != 0 and len(errors) == 1 and "Traceback" not in unknown.stderr
    verbose = make("submit", "CLUSTER=local", "JOB=smoke", "ARGS=--tasks 1", "VERBOSE=1", env=env, timeout=300)
    assert verbose.returncode == 0 and "RESULT {" in verbose.stdout  # the machine line, asked for


def test_stop_job_stops_a_running_job(cluster_env):
    env, _ = cluster_env
    proc = subprocess.Popen(["make", "--no-print-directory", "submit", "CLUSTER=local", "JOB=smoke",
                             "ARGS=--tasks 1 --sleep 120"], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    submission = None
    for line in proc.stdout:
        started = re.match(r"job (\S+): ", line)
        if started and submission is None:
            submission = started.group(1)
        if line.startswith("smoke: "):
            break
    stop = make("stop-job", "CLUSTER=local", f"ID={submission}", env=env)
    assert stop.returncode == 0 and f"job {submission}: stop requested" in stop.stdout
    proc.stdout.read()
    assert proc.wait(timeout=120) != 0
    jobs = make("jobs", "CLUSTER=local", env=env)
    assert [line.split()[1] for line in jobs.stdout.splitlines() if line.startswith(submission)] == ["STOPPED"]


def test_a_detached_job_runs_on_and_make_logs_keeps_its_summary(cluster_env):
    """DETACH=1: `make submit` returns once the job is submitted (Ctrl-C would stop it
    otherwise); `make logs ID=... FOLLOW=1` follows it to its end and keeps its summary as
    `make submit` would have, with its args and exit code."""
    env, _ = cluster_env
    started = time.monotonic()
    run = make("submit", "CLUSTER=local", "JOB=smoke", "ARGS=--tasks 2 --sleep 4", "DETACH=1", env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    submission = re.search(r"detached: job (\S+) runs on", run.stdout).group(1)
    assert "summary kept" not in run.stdout and time.monotonic() - started < 60
    logs = make("logs", "CLUSTER=local", f"ID={submission}", "FOLLOW=1", env=env, timeout=180)
    assert logs.returncode == 0 and "smoke: " in logs.stdout, logs.stdout + logs.stderr
    kept = json.loads((Path(env["RAYKIT_BUILD_DIR"]) / "results" / f"{submission}.json").read_text())
    assert (kept["job"], kept["args"], kept["exit_code"]) == ("smoke", ["--tasks", "2", "--sleep", "4"], 0)
    assert kept["result"]["preprocess_task_nodes"]  # the summary the job printed
    again = make("logs", "CLUSTER=local", f"ID={submission}", env=env)
    assert again.returncode == 0 and "summary kept" not in again.stdout  # kept once


def test_a_failing_job_fails_make_submit(cluster_env):
    env, _ = cluster_env
    run = make("submit", "CLUSTER=local", "JOB=smoke", "ARGS=--fail-with 3", env=env, timeout=300)
    assert run.returncode != 0
    assert "FAILED" in run.stdout


def test_the_cluster_requires_its_auth_token(cluster_env):
    env, state = cluster_env
    bare = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")} | {"RAY_AUTH_MODE": "disabled"}
    ray = str(REPO / ".venv" / "bin" / "ray")
    refused = subprocess.run([ray, "job", "list", f"--address={state['dashboard_url']}"], env=bare,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "authentication" in (refused.stdout + refused.stderr).lower()
    allowed = subprocess.run([ray, "job", "list", f"--address={state['dashboard_url']}"],
                             env=bare | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": state["auth_token"]},
                             capture_output=True, text=True, timeout=120)
    assert allowed.returncode == 0, allowed.stderr[-2000:]


def test_temp_dir_and_record_are_private(cluster_env):
    _, state = cluster_env
    assert re.fullmatch(r"/tmp/raykit-[A-Za-z0-9_]{8}/ray", state["temp_dir"])
    assert stat.S_IMODE(os.stat(os.path.dirname(state["temp_dir"])).st_mode) == 0o700
    record = os.path.join(state["build_dir"], "launched", "local.json")
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o600  # it holds the auth token


def test_a_second_up_and_a_run_leave_the_running_cluster_alone(cluster_env):
    env, state = cluster_env
    again = make("up", "CLUSTER=local", env=env, timeout=120)
    assert again.returncode != 0 and "already up" in again.stderr
    run = make("run", "CLUSTER=local", "JOB=smoke", env=env, timeout=120)
    assert run.returncode != 0 and "already up" in run.stderr
    assert "tearing down" not in run.stdout
    assert make("status", "CLUSTER=local", env=env).returncode == 0


def test_render_and_clean_leave_the_running_cluster_alone(cluster_env):
    env, state = cluster_env
    launched = os.path.join(state["build_dir"], "launched", "local.yaml")
    before = open(launched).read()
    assert make("render", "CLUSTER=local", env=env).returncode == 0
    clean = make("clean", env=env)
    assert clean.returncode == 0 and "kept" in clean.stdout and "local" in clean.stdout
    assert open(launched).read() == before
    assert not os.path.exists(os.path.join(state["build_dir"], "clusters"))
    assert make("status", "CLUSTER=local", env=env).returncode == 0


@pytest.mark.cluster
def test_run_tears_down_after_a_failing_job(tmp_path):
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path))
    run = make("run", "CLUSTER=local", "JOB=smoke", "ARGS=--fail-with 3", env=env, timeout=400)
    assert run.returncode != 0
    assert "summary kept in" in run.stdout and "tearing down 'local'" in run.stdout
    assert re.search(r"logs (/tmp/raykit-\S+)/session_latest", run.stdout)
    assert not (tmp_path / "launched" / "local.json").exists()
    assert processes_of({"cluster": "local", "build_dir": str(tmp_path)}) == []
    remove_private_dir(run.stdout)


# `make up` with its first choice of the dashboard's port taken by another program before
# Ray binds it (a race the OS allows): `ray start` succeeds anyway, its dashboard elsewhere.
UP_WITH_A_TAKEN_PORT = """
import sys
from scripts import kit
from scripts.providers.local import launch
real, offered = launch.free_ports, []
def first_with_a_taken_port(count):
    ports = real(count)
    if not offered:  # the port at index argv[2] (gcs, dashboard, client, agent, metrics, runtime_env)
        ports[int(sys.argv[2])] = int(sys.argv[1])
    offered.append(ports)
    return ports
launch.free_ports = first_with_a_taken_port
sys.exit(kit.main(["up"]))
"""


@pytest.mark.cluster
def test_a_head_port_another_program_took_is_given_up_for_fresh_ones(tmp_path):
    """The dashboard the kit records is its own cluster's, never the program's that took
    the port: Ray only logs that it could not bind it. (local_single: a head alone)"""
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path), KIT_CLUSTER="local_single")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = subprocess.run([sys.executable, "-c", UP_WITH_A_TAKEN_PORT, str(port), "1"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=300)
        try:
            assert up.returncode == 0, up.stdout + up.stderr
            assert f"port {port} was taken by another program; starting the head again" in up.stdout
            state = json.loads((tmp_path / "launched" / "local_single.json").read_text())
            assert not state["dashboard_url"].endswith(f":{port}")
            jobs = make("jobs", "CLUSTER=local_single", env=env)  # through the dashboard, with the token
            assert jobs.returncode == 0, jobs.stdout + jobs.stderr
        finally:
            down = make("down", "CLUSTER=local_single", env=env, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert processes_of({"cluster": "local_single", "build_dir": str(tmp_path)}) == []
    remove_private_dir(up.stdout)


@pytest.mark.cluster
def test_a_port_held_without_listening_fails_ray_start_and_is_given_up_for_fresh_ones(tmp_path):
    """A port bound by another program but not listening (a connection's ephemeral port):
    the dashboard agent cannot bind its metrics port, dies, and the raylet with it, and
    `ray start` fails (a fresh clone's make test met this once); the kit starts the head
    again on other ports, as soon as it sees the agent gone (Ray itself waits out 30 s)."""
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path), KIT_CLUSTER="local_single")
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        port = held.getsockname()[1]
        up = subprocess.run([sys.executable, "-c", UP_WITH_A_TAKEN_PORT, str(port), "4"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=300)
        try:
            assert up.returncode == 0, up.stdout + up.stderr
            assert ("a port was taken by another program as Ray started (its agent died of it); "
                    "starting the head again") in up.stdout
        finally:
            down = make("down", "CLUSTER=local_single", env=env, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert processes_of({"cluster": "local_single", "build_dir": str(tmp_path)}) == []
    remove_private_dir(up.stdout)


@pytest.mark.cluster
def test_teardown_finishes_through_repeated_sigint_and_sigterm(tmp_path):
    """Ctrl-C twice, then `kill` twice, while `make run` tears down: it still finishes."""
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path))
    proc = subprocess.Popen(["make", "--no-print-directory", "run", "CLUSTER=local", "JOB=smoke",
                             "ARGS=--tasks 1 --sleep 120"], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    output = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        output.append(line)
        if line.startswith("smoke: "):
            break
        assert time.monotonic() < deadline, "".join(output)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the job is stopped, teardown begins
    for line in proc.stdout:
        output.append(line)
        if "tearing down" in line:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
                time.sleep(0.3)
                os.killpg(proc.pid, sig)
            break
    output += proc.stdout.readlines()
    proc.wait(timeout=120)
    text = "".join(output)
    assert "tearing down 'local'" in text and "processes stopped" in text, text[-3000:]
    assert not (tmp_path / "launched" / "local.json").exists()
    assert processes_of({"cluster": "local", "build_dir": str(tmp_path)}) == []
    remove_private_dir(text)


def test_up_is_refused_while_another_holds_the_lock(tmp_path):
    (tmp_path / "launched").mkdir()
    with open(tmp_path / "launched" / "local.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        up = make("up", "CLUSTER=local", env=dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path)))
    assert up.returncode != 0
    assert "another `make up`/`make down`/`make run` of CLUSTER=local is running" in up.stderr
    assert not (tmp_path / "launched" / "local.json").exists()


RECORD = {"cluster": "local", "provider": "local", "gcs_address": "127.0.0.2:6379",
          "dashboard_url": "http://127.0.0.1:8265", "temp_dir": "/tmp/raykit-abcd1234/ray",
          "auth_token": "0" * 64, "expected_nodes": 3}


@pytest.mark.parametrize("name,content,message", [
    ("not JSON", "{not json", "is corrupt"),
    ("a list", "[1, 2]", "is corrupt (cluster or provider)"),
    ("unknown provider", json.dumps(RECORD | {"provider": "gcp"}), "is corrupt (cluster or provider)"),
    ("another cluster's", json.dumps(RECORD | {"cluster": "hetero"}), "is corrupt (cluster or provider)"),
    ("temp dir of the whole /tmp", json.dumps(RECORD | {"temp_dir": "/tmp"}), "is corrupt (temp_dir)"),
    ("a remote dashboard", json.dumps(RECORD | {"dashboard_url": "http://10.0.0.1:8265"}),
     "is corrupt (dashboard_url)"),
    ("a missing key", json.dumps({k: v for k, v in RECORD.items() if k != "auth_token"}), "is corrupt"),
    ("an extra key", json.dumps(RECORD | {"python": "/bin/sh -c 'id'"}), "is corrupt"),
    ("huge", json.dumps(RECORD | {"pad": "x" * 100000}), "is corrupt"),
])
def test_a_corrupt_record_is_one_line_and_down_still_stops_nothing_else(tmp_path, name, content, message):
    (tmp_path / "launched").mkdir()
    record = tmp_path / "launched" / "local.json"
    record.write_text(content)
    # an unrelated process that names the record's temp dir must survive `make down`
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                  "/tmp/raykit-abcd1234/ray", "/tmp"])
    try:
        env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path))
        status = make("status", "CLUSTER=local", env=env)
        errors = [line for line in status.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0] and "Traceback" not in status.stderr
        down = make("down", "CLUSTER=local", env=env)
        assert down.returncode == 0, down.stderr
        assert "ignoring the corrupt record" in down.stdout and "0 processes stopped" in down.stdout
        assert not record.exists() and bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_day2_dashboard_monitor_and_attach(cluster_env):
    env, state = cluster_env
    dashboard = make("dashboard", "CLUSTER=local", env=env)
    assert dashboard.returncode == 0 and state["dashboard_url"] in dashboard.stdout
    monitor = make("monitor", "CLUSTER=local", env=env)
    assert monitor.returncode == 0 and re.search(r"INFO (monitor|autoscaler)\.py", monitor.stdout)
    # the shell `make attach` opens reaches the cluster with its own Ray CLI
    attach = subprocess.run(["make", "--no-print-directory", "attach", "CLUSTER=local"], cwd=REPO,
                            env=dict(env, SHELL="/bin/bash"), input='ray status\nexit 7\n',
                            capture_output=True, text=True, timeout=120)
    assert attach.returncode != 0 and "Error 7" in attach.stderr  # the shell's own exit code
    assert " 1 ray.head.default" in attach.stdout, attach.stdout + attach.stderr


@pytest.mark.parametrize("target", ["dashboard", "attach", "monitor", "status", "jobs", "logs"])
def test_day2_commands_say_when_the_cluster_is_not_up(tmp_path, target):
    run = make(target, "CLUSTER=local", env=dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path)))
    assert run.returncode != 0
    assert "error: cluster 'local' is not up; run `make up CLUSTER=local`" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr


def test_the_ports_a_local_head_takes_are_distinct():
    """`ray start` refuses one port for two components: ports taken one after another
    could repeat (CI once saw it), so they are taken all at once."""
    from scripts.core.ray_cli import free_ports

    for _ in range(20):
        ports = free_ports(6)
        assert len(set(ports)) == 6 and all(1024 < port < 65536 for port in ports)
