"""Autostop: the watchdog's arithmetic, its AWS teardown in moto, where the template starts
it, and a real local cluster that a running job holds up and that is gone after its limit."""

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import boto3
import pytest
import yaml
from moto import mock_aws

from conftest import REPO, USER_VALUES, load_example, make, report
from scripts.node.autostop import (
    JOB_LIMIT_KEY,
    seconds_left,
    stop_overdue,
    supervisors_running,
    teardown_aws,
    terminate_tagged,
    watch,
)
from scripts.build import build, build_text
from scripts.providers.local.processes import cluster_processes


def test_a_running_or_pending_job_holds_the_cluster_up():
    assert seconds_left([("SUCCEEDED", 100.0), ("RUNNING", None)], 0, 10_000, 60) is None
    assert seconds_left([("PENDING", None)], 0, 10_000, 60) is None


def test_the_clock_starts_at_the_start_or_the_last_jobs_end():
    assert seconds_left([], idle_from=1000, now=1030, limit_s=60) == 30
    assert seconds_left([("SUCCEEDED", 1020.0), ("FAILED", 1010.0)], 1000, 1050, 60) == 30
    assert seconds_left([("STOPPED", 1000.0)], 900, 1100, 60) == -40  # past due


class JobsStandIn:
    """Ray's JobSubmissionClient as the watchdog uses it: list_jobs gives Ray's own
    JobDetails, stop_job records the id."""

    def __init__(self, jobs):
        self.jobs, self.stopped = jobs, []

    def list_jobs(self):
        return self.jobs

    def stop_job(self, submission_id):
        self.stopped.append(submission_id)
        return True


def job(submission_id: str, status: str, started_s_ago: float, limit: str | None, now: float):
    from ray.dashboard.modules.job.pydantic_models import JobDetails, JobType

    return JobDetails(type=JobType.SUBMISSION, submission_id=submission_id, entrypoint="python main.py",
                      status=status, start_time=int((now - started_s_ago) * 1000),
                      metadata={JOB_LIMIT_KEY: limit} if limit is not None else {})


def test_a_job_past_the_limit_recorded_with_it_is_stopped_by_the_watchdog():
    """`make submit` records TIMEOUT with the job; the head's watchdog stops the job past
    it, with the user's machine gone or not. Jobs within their limit, without one, or
    already ended are left alone; a limit that is no number is none."""
    now = 1_000_000.0
    client = JobsStandIn([
        job("overdue", "RUNNING", 7300, "7200", now),
        job("pending-overdue", "PENDING", 100, "60", now),
        job("within", "RUNNING", 100, "7200", now),
        job("no-limit", "RUNNING", 10**6, None, now),
        job("ended", "SUCCEEDED", 10**5, "60", now),
        job("garbage", "RUNNING", 10**5, "soon", now),
    ])
    assert stop_overdue(client, now) == ["overdue", "pending-overdue"]
    assert client.stopped == ["overdue", "pending-overdue"]


def test_a_job_that_ignores_its_stop_no_longer_holds_the_cluster_up(monkeypatch, capsys):
    """Past its limit, asked to stop, still RUNNING after the grace: the idle clock counts
    from the first stop asked, and autostop tears the cluster down as for an idle one."""
    from scripts.node import autostop

    now = time.time()
    wedged = JobsStandIn([job("wedged", "RUNNING", 100, "10", now)])  # its stop changes nothing
    monkeypatch.setattr(autostop, "job_client", lambda address: wedged)
    torn = []
    watch("http://127.0.0.1:1", limit_s=0.5, teardown=lambda: torn.append(time.time()), poll_s=0.05,
          stop_grace_s=0.3)
    assert torn and "wedged" in wedged.stopped
    out = capsys.readouterr().out
    assert "job wedged has not stopped" in out and "it no longer holds the cluster up" in out
    assert "tearing the cluster down" in out


def test_while_the_job_api_is_down_a_running_supervisor_holds_the_cluster_up(capsys):
    """The dashboard died, the job's supervisor (a detached actor) runs on: no teardown
    under a healthy job; once it is gone, the clock runs out as before."""
    supervisor = subprocess.Popen([sys.executable, "-c", "import time, ray._raylet as r; "
                                   "r.setproctitle('ray::JobSupervisor'); time.sleep(120)"])
    try:
        deadline = time.monotonic() + 30
        while not supervisors_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert supervisors_running() >= 1
        torn = []
        threading.Thread(target=watch, args=("http://127.0.0.1:1", 1.0, lambda: torn.append(1)),
                         kwargs={"poll_s": 0.1}, daemon=True).start()
        time.sleep(3)
        assert not torn  # a job runs: busy, though its API cannot be asked
    finally:
        supervisor.kill()
        supervisor.wait()
    deadline = time.monotonic() + 10
    while not torn and time.monotonic() < deadline:
        time.sleep(0.1)
    assert torn
    assert "job supervisor(s) running here: busy" in capsys.readouterr().out


def test_a_dashboard_that_accepts_and_never_answers_does_not_hang_the_watchdog(monkeypatch, capsys, tmp_path):
    """A listening socket that never answers (a wedged dashboard): each round's job API
    call gives up after API_TIMEOUT_S, and the watchdog goes on beating; the bare client
    blocked past it (requests passes no timeout)."""
    import socket

    from scripts.node import autostop

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)  # connections queue, nothing is ever read or answered
    address = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setattr(autostop, "API_TIMEOUT_S", 1.0)
    heartbeat = tmp_path / "beat"
    try:
        class Ended(Exception):
            pass

        def watching():
            try:
                watch(address, None, lambda: None, poll_s=0.1, heartbeat=str(heartbeat))
            except Ended:
                pass

        watcher = threading.Thread(target=watching, daemon=True)
        watcher.start()
        time.sleep(4)
        beats = heartbeat.stat().st_mtime
        time.sleep(2)
        assert heartbeat.stat().st_mtime > beats  # still beating: no round hung
        assert "job API unreachable (" in capsys.readouterr().out
        from ray.job_submission import JobSubmissionClient

        def bare_client():
            try:
                JobSubmissionClient(address)
            except OSError:  # ConnectionError, Ray's or requests'
                pass  # it fails once the server below closes: only its blocking matters here

        bare = threading.Thread(target=bare_client, daemon=True)
        bare.start()
        bare.join(timeout=3)
        assert bare.is_alive()  # what the watchdog used to do: blocked for good
    finally:
        def ended(path):
            raise Ended  # the watch's next round ends its thread

        monkeypatch.setattr(autostop, "beat", ended)
        watcher.join(timeout=10)  # else it would print into the tests after this one
        server.close()
    assert not watcher.is_alive()


def test_make_submit_records_the_jobs_limit_with_the_job(monkeypatch):
    """What the watchdog reads is what `make submit` writes: TIMEOUT in the job's metadata."""
    from ray import job_submission

    from scripts.core import submit

    seen = {}

    class Client:
        def __init__(self, address):
            pass

        def submit_job(self, **kwargs):
            seen.update(kwargs)
            raise RuntimeError("stand-in: nothing is submitted")

    monkeypatch.setattr(job_submission, "JobSubmissionClient", Client)
    from scripts.core.errors import KitError

    with pytest.raises(KitError, match="could not submit"):
        submit.submit("http://127.0.0.1:1", "smoke", [], "python", None, timeout_s=21600,
                      job_packages=submit.JobPackages.INSTALLED, job_files=submit.JobFiles.IN_PLACE)
    assert seen["metadata"] == {JOB_LIMIT_KEY: "21600"}


@mock_aws
def test_teardown_retries_a_failing_terminate_and_sweeps_workers_before_the_head():
    """Throttled twice, then through; a worker launched in flight (it shows up after the
    first sweep) is found by the next; the head, this instance, goes last."""
    from botocore.exceptions import ClientError

    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]

    def launch(node_type: str) -> str:
        return ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="c5.large",
                                 TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                     {"Key": "ray-kit-cluster", "Value": "hetero"},
                                     {"Key": "ray-node-type", "Value": node_type}]}])["Instances"][0]["InstanceId"]

    head, worker = launch("head"), launch("worker")
    terminate, calls, failures = ec2.terminate_instances, [], [2]

    def flaky_terminate(**kwargs):
        if failures[0]:
            failures[0] -= 1
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}},
                              "TerminateInstances")
        calls.append(kwargs["InstanceIds"])
        if len(calls) == 1:
            in_flight.append(launch("worker"))  # the autoscaler's last launch lands late
        return terminate(**kwargs)

    in_flight: list[str] = []
    ec2.terminate_instances = flaky_terminate
    done = teardown_aws(ec2, "hetero", lambda: "ray stopped", retry_s=0)
    assert calls == [[worker], in_flight, [head]]
    assert sorted(done) == sorted([head, worker, *in_flight])
    states = {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"]
              for i in r["Instances"]}
    assert all(states[i] == "terminated" for i in done)


@mock_aws
def test_teardown_terminates_every_instance_of_the_cluster_and_nothing_else():
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]

    def launch(tags: dict, count: int = 1) -> list[str]:
        spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
        out = ec2.run_instances(ImageId=image, MinCount=count, MaxCount=count, InstanceType="c5.large",
                                TagSpecifications=spec)
        return [i["InstanceId"] for i in out["Instances"]]

    ours = launch({"ray-kit-cluster": "hetero", "ray-node-type": "head"}) + launch(
        {"ray-kit-cluster": "hetero", "ray-node-type": "worker"}, count=2)
    stopped = launch({"ray-kit-cluster": "hetero"})
    ec2.stop_instances(InstanceIds=stopped)  # stopped instances bill for their EBS
    others = launch({"ray-kit-cluster": "hetero2"}) + launch({})

    assert sorted(terminate_tagged(ec2, "hetero")) == sorted(ours + stopped)
    states = {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"]
              for i in r["Instances"]}
    assert all(states[i] == "terminated" for i in ours + stopped)
    assert all(states[i] == "running" for i in others)
    assert terminate_tagged(ec2, "hetero") == []  # nothing left: a second run does nothing


@mock_aws
def test_teardown_stops_the_heads_autoscaler_before_it_terminates_an_instance():
    """A stand-in of the head's autoscaler tops the cluster up to min_workers (2) whenever
    it looks, while it runs (Ray's does every 5 s); here it looks right after each
    terminate call. Stopped first, it relaunches nothing: no instance of the cluster is
    left billing. Terminated first, it would relaunch both workers."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = {"ray-kit-cluster": "hetero", "ray-node-type": "worker"}

    def launch(count: int) -> None:
        ec2.run_instances(ImageId=image, MinCount=count, MaxCount=count, InstanceType="c5.large",
                          TagSpecifications=[{"ResourceType": "instance", "Tags": [
                              {"Key": k, "Value": v} for k, v in tags.items()]}])

    def live(node_type: str | None = None) -> list[str]:
        filters = [{"Name": "tag:ray-kit-cluster", "Values": ["hetero"]},
                   {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        filters += [{"Name": "tag:ray-node-type", "Values": [node_type]}] if node_type else []
        return [i["InstanceId"] for r in ec2.describe_instances(Filters=filters)["Reservations"]
                for i in r["Instances"]]

    launch(3)
    autoscaler = {"running": True}
    terminate = ec2.terminate_instances

    def terminate_then_the_autoscaler_looks(**kwargs):
        result = terminate(**kwargs)
        if autoscaler["running"] and len(live("worker")) < 2:
            launch(2 - len(live("worker")))
        return result

    def stop_ray() -> str:
        autoscaler["running"] = False
        return "ray stopped"

    ec2.terminate_instances = terminate_then_the_autoscaler_looks
    assert len(teardown_aws(ec2, "hetero", stop_ray, retry_s=0)) == 3
    assert live() == []


def test_the_aws_head_starts_the_watchdog_with_the_clusters_tag_and_region():
    config = build("hetero").config
    command = config["head_start_ray_commands"][-1]
    assert "setsid nohup bash -c " in command and " python ~/raykit_node/autostop.py " in command
    assert "--minutes 60 --aws hetero us-east-1 " in command  # under its restart loop (test_watchdog_loop.py)
    assert config["file_mounts"] == {"~/raykit_node": str(REPO / "scripts" / "node")}
    # autostop off: the watchdog still runs, to stop jobs past their time limit
    off = dict(load_example("hetero"), autostop_minutes=0)
    config = build_text("hetero", yaml.safe_dump(off).encode()).config
    assert config["file_mounts"] == {"~/raykit_node": str(REPO / "scripts" / "node")}
    assert "--minutes 0 --aws hetero us-east-1 " in config["head_start_ray_commands"][-1]


def test_the_watchdog_terminates_by_the_tag_the_kit_puts_on_every_instance():
    from scripts.node import autostop
    from scripts.providers.aws import names

    assert autostop.KIT_TAG == names.KIT_TAG  # spelled twice: a node program imports no kit module


def test_every_aws_mix_autostops_by_default_and_local_ones_do_not():
    for name in ("hetero", "single", "p4d_hetero"):
        assert build(name).values["autostop_minutes"] == 60
    for name in ("local", "local_single", "local_hetero"):
        assert build(name).values["autostop_minutes"] == 0


LIMIT_S = 15


@pytest.fixture
def autostop_cluster(tmp_path):
    """A values file `local` with autostop on, its limit LIMIT_S seconds (RAYKIT_AUTOSTOP_S:
    a whole minute of idling would be most of this test's time); removed afterwards."""
    name = f"autostop_{uuid.uuid4().hex[:8]}"
    values = dict(load_example("local"), cluster_name=name, autostop_minutes=1)  # on
    path = USER_VALUES / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"), RAYKIT_AUTOSTOP_POLL_S="2",
               RAYKIT_AUTOSTOP_S=str(LIMIT_S))
    try:
        yield name, env
    finally:
        make("down", f"CLUSTER={name}", env=env, timeout=120)
        path.unlink(missing_ok=True)


@pytest.mark.slow
def test_a_job_holds_the_local_cluster_up_and_then_it_stops_itself(autostop_cluster, capsys):
    name, env = autostop_cluster
    build_dir = Path(env["RAYKIT_BUILD_DIR"]).resolve()
    up = make("up", f"CLUSTER={name}", env=env, timeout=300)
    assert up.returncode == 0 and f"autostop: the cluster stops after {LIMIT_S} s" in up.stdout, up.stdout + up.stderr
    status = make("status", f"CLUSTER={name}", env=env, timeout=120)
    assert "autostop: the cluster stops itself in " in status.stdout, status.stdout + status.stderr
    assert f"({LIMIT_S} s with no job;" in status.stdout
    # a job longer than the limit: the cluster stays up through it
    started = time.monotonic()
    run = make("submit", f"CLUSTER={name}", "JOB=smoke", f"ARGS=--tasks 2 --sleep {LIMIT_S + 8}",
               env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    assert time.monotonic() - started > LIMIT_S + 8 and cluster_processes(name, build_dir)
    # then, with no job, it is gone within the limit and a few polls
    job_ended = time.monotonic()
    while cluster_processes(name, build_dir) and time.monotonic() - job_ended < 4 * LIMIT_S:
        time.sleep(1)
    gone_after = time.monotonic() - job_ended
    report(capsys, f"autostop: gone {gone_after:.0f} s after the last job (limit {LIMIT_S} s)")
    assert not cluster_processes(name, build_dir)
    assert LIMIT_S - 5 < gone_after < 3 * LIMIT_S
    assert not (build_dir / "launched" / f"{name}.json").exists()  # its record is cleared
    status = make("status", f"CLUSTER={name}", env=env, timeout=60)
    assert status.returncode != 0 and f"cluster '{name}' is not up" in status.stderr


@mock_aws
def test_the_teardown_deletes_the_clusters_hung_head_alarm_with_the_rights_the_head_has():
    """A cluster that ended itself left its alarm ($0.10 a month) until the user's next
    `make up` or `make down`, maybe never. The head's role may delete that alarm alone,
    and the two programs name it alike."""
    from scripts.node.autostop import delete_head_alarm, head_alarm_name
    from scripts.providers.aws import iam, names
    from conftest import load_example

    assert head_alarm_name("hetero") == names.head_alarm_name("hetero")
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for cluster in ("hetero", "other"):
        cloudwatch.put_metric_alarm(AlarmName=names.head_alarm_name(cluster), MetricName="StatusCheckFailed",
                                    Namespace="AWS/EC2", Statistic="Maximum", Period=60, EvaluationPeriods=15,
                                    Threshold=1, ComparisonOperator="GreaterThanOrEqualToThreshold")
    assert delete_head_alarm(cloudwatch, "hetero") == "autostop: deleted the alarm raykit-hetero-head-hung"
    assert [a["AlarmName"] for a in cloudwatch.describe_alarms()["MetricAlarms"]] == ["raykit-other-head-hung"]
    (right,) = [s for s in iam.head_policy(load_example("hetero"))["Statement"]
                if s["Action"] == "cloudwatch:DeleteAlarms"]
    assert right["Resource"] == "arn:aws:cloudwatch:us-east-1:*:alarm:raykit-hetero-head-hung"

    class Refused:
        def delete_alarms(self, **kwargs):
            raise RuntimeError("AccessDenied")
    assert "stays (RuntimeError); the next `make up` or `make down` deletes it" in delete_head_alarm(Refused(), "x")
