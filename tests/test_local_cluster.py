"""The simulated cluster for real: make up, submit, down; nothing of it survives down."""

import os
import re

import pytest

from conftest import local_cluster_up, make
from scripts import local_cluster
from scripts.submit import result_line


@pytest.fixture(scope="module")
def cluster_env(tmp_path_factory):
    with local_cluster_up(tmp_path_factory.mktemp("build")) as (env, state):
        yield env, state


def test_up_reports_every_node(cluster_env):
    env, state = cluster_env
    status = make("status", "CLUSTER=local", env=env)
    assert " 1 ray.head.default" in status.stdout and " 2 cpu_worker" in status.stdout


def test_tasks_spread_over_workers_and_trainer_lands_on_head(cluster_env):
    env, state = cluster_env
    run = make("submit", "CLUSTER=local", "JOB=smoke", env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    result = result_line(run.stdout)
    assert result["alive_nodes"] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert result["trainer_task_node"] == "127.0.0.2" == result["driver_node"]
    assert result["preprocess_task_nodes"] == ["127.0.0.3", "127.0.0.4"]


def test_a_failing_job_fails_make_submit(cluster_env):
    env, _ = cluster_env
    run = make("submit", "CLUSTER=local", "JOB=smoke", "ARGS=--fail-with 3", env=env, timeout=300)
    assert run.returncode != 0
    assert "FAILED" in run.stdout


def test_a_second_up_is_refused(cluster_env):
    env, state = cluster_env
    again = make("up", "CLUSTER=local", env=env, timeout=120)
    assert again.returncode != 0
    assert "already up" in again.stderr


def test_run_tears_down_after_a_failing_job(tmp_path):
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path))
    run = make("run", "CLUSTER=local", "JOB=smoke", "ARGS=--fail-with 3", env=env, timeout=400)
    assert run.returncode != 0
    assert "RESULT " in run.stdout and "tearing down 'local'" in run.stdout
    temp_dir = re.search(r"logs (/tmp/raykit-\S+)/session_latest", run.stdout).group(1)
    assert not (tmp_path / "local" / "local.json").exists()
    assert local_cluster.cluster_processes(temp_dir) == []
