"""`make up CLUSTER=hetero` runs the real `ray up` against a moto server on 127.0.0.1.

A stand-in `ssh`/`rsync` (tests/standins) is first on PATH: it records what Ray would run
on the head and never connects anywhere. Every AWS call goes to AWS_ENDPOINT_URL.
"""

import base64
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

import boto3
import pytest
from moto.server import ThreadedMotoServer

from conftest import CHECKIP_ADDRESS, REPO, make, publish_dlami

# A laptop with `ssh` and `rsync` (make preflight requires both): the stand-ins, first on PATH,
# for the tests that launch nothing (this machine may lack rsync)
WITH_TOOLS = f"{REPO / 'tests' / 'standins'}:{os.environ['PATH']}"


@pytest.fixture
def moto_server():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)  # the OS's free port, race-free
    server.start()
    yield "http://127.0.0.1:{}".format(server.get_host_and_port()[1])
    server.stop()


def stand_in_autoscaler(endpoint: str, stop: threading.Event) -> None:
    """What the head's autoscaler would do once `ray up` has set the head up (and tagged it
    up-to-date): launch the min_workers and tag each up-to-date when it has joined (here,
    one every few seconds)."""
    ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1")
    head = [{"Name": "tag:ray-cluster-name", "Values": ["hetero"]},
            {"Name": "tag:ray-node-type", "Values": ["head"]},
            {"Name": "tag:ray-node-status", "Values": ["up-to-date"]}]
    while not stop.is_set() and not ec2.describe_instances(Filters=head)["Reservations"]:
        time.sleep(0.5)
    for _ in range(2):
        if stop.wait(3):
            return
        tags = [{"Key": "ray-cluster-name", "Value": "hetero"},
                {"Key": "ray-node-type", "Value": "worker"},
                {"Key": "ray-user-node-type", "Value": "cpu_worker"},
                {"Key": "ray-node-status", "Value": "up-to-date"}]
        ec2.run_instances(ImageId="ami-0bbdd5918468148eb", InstanceType="c5.4xlarge", MinCount=1,
                          MaxCount=1, TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])


def test_make_up_submit_status_and_down_on_aws(moto_server, standin_head, tmp_path):
    """The tunnel to the head (`make dashboard`, `make submit`) runs Ray's `ray dashboard`
    and the real OpenSSH client it starts, with Ray's ControlPersist master, against a real
    sshd on loopback (tests/harness/ssh_testbed.py): the kit once refused that master's listener
    as another program's on every Linux client."""
    from tests.harness import ssh_testbed

    why = ssh_testbed.why_unavailable()
    if why:
        pytest.skip(f"no test sshd: {why}")
    with ssh_testbed.sshd(tmp_path / "sshd") as sshd:
        try:
            up_submit_status_and_down(moto_server, standin_head, tmp_path, sshd)
        finally:
            for master in rays_ssh_masters("hetero"):
                master.kill()


def rays_ssh_masters(cluster: str) -> list:
    import psutil

    from scripts.providers.aws.day2 import rays_ssh_master

    is_master = rays_ssh_master(cluster)
    return [p for p in psutil.process_iter() if is_master(p)]


def up_submit_status_and_down(moto_server, standin_head, tmp_path, sshd):
    log = tmp_path / "remote-commands.log"
    env = dict(os.environ,
               AWS_ENDPOINT_URL=moto_server,
               HOME=str(tmp_path),  # the SSH key ray up creates lands here
               RAYKIT_BUILD_DIR=str(tmp_path / "build"),
               STANDIN_LOG=str(log),
               STANDIN_DASHBOARD_PORT=str(standin_head),  # where the stand-in ssh -L leads
               STANDIN_SSHD=f"{sshd.port} {sshd.user} {sshd.key}",  # through the real OpenSSH
               RAYKIT_IAM_WAIT_S="0",  # moto's IAM has nothing to propagate
               PATH=f"{REPO / 'tests' / 'standins'}:{os.environ['PATH']}")
    dlami = publish_dlami(boto3.client("ec2", endpoint_url=moto_server, region_name="us-east-1"))
    stop = threading.Event()
    autoscaler = threading.Thread(target=stand_in_autoscaler, args=(moto_server, stop))
    autoscaler.start()
    try:
        up = make("up", "CLUSTER=hetero", env=env, timeout=300)
    finally:
        stop.set()
        autoscaler.join()
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    # the instances' list prices plus their EBS volumes (gp3: 350 GB at min_workers)
    assert "launching 'hetero' on AWS: ~$2.40/h with min_workers, up to ~$3.79/h" in up.stdout
    # `make up` returned only once both workers had joined, saying so as they came
    assert "workers joined: cpu_worker 0/2" in up.stdout and "workers joined: cpu_worker 2/2" in up.stdout
    assert up.stdout.index("cpu_worker 2/2") < up.stdout.index("cluster 'hetero' is up")
    # the preflight picked one zone for every node, and the launched config pins it
    assert "preflight: account 123456789012, zone us-east-1a" in up.stdout
    launched = (tmp_path / "build" / "launched" / "hetero.yaml").read_text()
    assert "availability_zone: \"us-east-1a\"" in launched
    # image_id: auto was resolved once, from AWS's public parameter: every node boots that AMI
    assert f"AMI {dlami} (Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20261020" in up.stdout
    assert launched.count(f"ImageId: \"{dlami}\"") == 2 and "resolve:ssm" not in launched

    ec2 = boto3.client("ec2", endpoint_url=moto_server, region_name="us-east-1")
    instances = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    running = [i for i in instances if i["State"]["Name"] in ("pending", "running")]
    # ray up launched the head; the (stand-in) autoscaler the workers
    assert sorted(i["InstanceType"] for i in running) == ["c5.4xlarge", "c5.4xlarge", "g5.xlarge"]
    head = next(i for i in running if i["InstanceType"] == "g5.xlarge")
    assert head["Placement"]["AvailabilityZone"] == "us-east-1a" and head["ImageId"] == dlami
    tags = {t["Key"]: t["Value"] for t in head["Tags"]}
    assert tags["ray-node-type"] == "head" and tags["ray-cluster-name"] == "hetero"
    assert head["MetadataOptions"]["HttpTokens"] == "required"
    assert head["IamInstanceProfile"]["Arn"].endswith(":instance-profile/raykit-hetero-head")
    # the dead-man switch starts at boot (user data), before SSH could fail; off = terminated
    user_data = ec2.describe_instance_attribute(InstanceId=head["InstanceId"], Attribute="userData")
    assert b"systemctl enable --now raykit-deadman.service" in base64.b64decode(user_data["UserData"]["Value"])
    assert ec2.describe_instance_attribute(InstanceId=head["InstanceId"], Attribute="instanceInitiatedShutdownBehavior")[
        "InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    # closed by default: the head's group admits SSH from `make up`'s own address alone
    (group,) = ec2.describe_security_groups(GroupIds=[g["GroupId"] for g in head["SecurityGroups"]])["SecurityGroups"]
    assert [ip["CidrIp"] for rule in group["IpPermissions"] for ip in rule.get("IpRanges", [])] == [
        f"{CHECKIP_ADDRESS}/32"]
    # a head whose host hangs runs none of its own safeguards: CloudWatch terminates it
    cloudwatch = boto3.client("cloudwatch", endpoint_url=moto_server, region_name="us-east-1")
    (alarm,) = cloudwatch.describe_alarms(AlarmNames=["raykit-hetero-head-hung"])["MetricAlarms"]
    assert alarm["Dimensions"] == [{"Name": "InstanceId", "Value": head["InstanceId"]}]
    assert alarm["AlarmActions"] == ["arn:aws:automate:us-east-1:ec2:terminate"]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Period"], alarm["EvaluationPeriods"]) == (
        "AWS/EC2", "StatusCheckFailed", 60, 15)
    assert "hung-head alarm: CloudWatch terminates the head after 15 min" in up.stdout
    volume = ec2.describe_volumes(
        VolumeIds=[head["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]])["Volumes"][0]
    assert (volume["Size"], volume["VolumeType"], volume["Encrypted"]) == (150, "gp3", True)

    remote = log.read_text()
    assert "sudo mkdir -p /mnt/data" in remote  # initialization command, on the host
    assert "docker run" in remote and "rayproject/ray:2.60.0-py311-cpu" in remote
    assert "-v /mnt/data:/data" in remote and "--shm-size=6g" in remote
    assert "pip install -q --no-cache-dir torch==2.14.1" in remote
    assert "--dashboard-host=127.0.0.1" in remote

    # status and jobs go to the head over SSH: `ray exec`, and the kit's `ray dashboard` tunnel
    # the autostop watchdog starts on the head, aimed at the cluster's tag and region
    assert ("raykit_node/autostop.py --address http://127.0.0.1:8265 --minutes 60 "
            "--aws hetero us-east-1") in remote
    status = make("status", "CLUSTER=hetero", env=env, timeout=300)
    assert status.returncode == 0, status.stderr[-3000:]
    assert any("ray status" in line for line in log.read_text().splitlines()[-3:])
    assert "autostop: the cluster stops itself in" in status.stdout, status.stdout[-2000:]
    # day 2: the autoscaler's log and a shell on the head, over SSH; the dashboard's tunnel
    monitor = make("monitor", "CLUSTER=hetero", env=env, timeout=300)
    assert monitor.returncode == 0 and "monitor.log" in log.read_text().splitlines()[-1]
    attach = make("attach", "CLUSTER=hetero", env=env, timeout=300)
    assert attach.returncode == 0 and "docker exec -it" in log.read_text().splitlines()[-1]
    dashboard = subprocess.Popen(["make", "--no-print-directory", "dashboard", "CLUSTER=hetero"],
                                 cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    url = re.search(r"dashboard of 'hetero': (http://127\.0\.0\.1:\d+)", dashboard.stdout.readline())
    assert url, "no URL"
    with urllib.request.urlopen(url.group(1) + "/api/version", timeout=30) as answer:
        assert json.loads(answer.read())["ray_version"] == "2.60.0"  # a dashboard at the end
    os.killpg(dashboard.pid, signal.SIGINT)  # Ctrl-C: make dies of it, the kit closes the tunnel
    assert dashboard.wait(timeout=60) in (0, -signal.SIGINT)  # (checked gone below)
    run = make("submit", "CLUSTER=hetero", "JOB=smoke", "ARGS=--tasks 2 --fail-with 3",
               env=env, timeout=300)
    assert run.returncode != 0 and "FAILED" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    assert "summary kept in" in run.stdout  # the job ran on the head the tunnel leads to
    assert " -L " in log.read_text()
    assert rays_ssh_masters("hetero"), "the forward ran with no ControlPersist master: not Ray's SSH"
    run = make("submit", "CLUSTER=hetero", "JOB=smoke", "ARGS=--tasks 2", env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    import psutil
    tunnels = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
               if {"dashboard", "-L"} & set(p.info["cmdline"] or [])]
    assert tunnels == []  # `ray dashboard` and the ssh it ran are gone with the submit

    down = make("down", "CLUSTER=hetero", "PURGE=1", env=env, timeout=300)
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    states = {i["State"]["Name"]
              for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}
    assert states <= {"shutting-down", "terminated"}
    said = down.stdout.splitlines()[-1]
    assert said.startswith("AWS cluster 'hetero': every instance terminated; left behind: ")
    assert "nothing of security group ray-hetero (deleted)" in said
    assert "key pair ray-autoscaler_us-east-1" in said and "ray-autoscaler-v1" not in said
    # the head's least-privilege role, which `make up` made, goes with PURGE=1; Ray's
    # full-access role was never made
    assert "nothing of IAM role and instance profile raykit-hetero-head (deleted)" in said
    iam = boto3.client("iam", endpoint_url=moto_server, region_name="us-east-1")
    assert not [r for r in iam.list_roles()["Roles"] if r["RoleName"] in ("raykit-hetero-head", "ray-autoscaler-v1")]
    groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["ray-hetero"]}])
    assert groups["SecurityGroups"] == []
    assert not (tmp_path / "build" / "launched" / "hetero.json").exists()
    assert cloudwatch.describe_alarms(AlarmNames=["raykit-hetero-head-hung"])["MetricAlarms"] == []


def test_down_of_a_cluster_never_launched_says_so_and_creates_nothing(moto_server, tmp_path):
    env = dict(os.environ, AWS_ENDPOINT_URL=moto_server, HOME=str(tmp_path),
               RAYKIT_BUILD_DIR=str(tmp_path / "build"))
    ec2 = boto3.client("ec2", endpoint_url=moto_server, region_name="us-east-1")
    iam = boto3.client("iam", endpoint_url=moto_server, region_name="us-east-1")

    def resources():  # moto's state is shared by the tests of this process: compare
        return (str(ec2.describe_instances()["Reservations"]),
                str(ec2.describe_security_groups()["SecurityGroups"]),
                str(ec2.describe_key_pairs()["KeyPairs"]), str(iam.list_roles()["Roles"]))

    before = resources()
    down = make("down", "CLUSTER=hetero", env=env, timeout=120)
    assert down.returncode == 0, down.stderr
    assert "was not launched from this checkout; nothing to stop" in down.stdout
    assert "Traceback" not in down.stdout + down.stderr
    assert resources() == before


def test_up_without_credentials_is_one_line_and_launches_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"HOME": str(tmp_path), "RAYKIT_BUILD_DIR": str(tmp_path / "build"), "PATH": WITH_TOOLS,
            "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true"}  # never ask an instance metadata endpoint
    up = make("up", "CLUSTER=hetero", env=env, timeout=120)
    errors = [line for line in up.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: no AWS credentials found; run `aws configure` (or set AWS_PROFILE), "
                      "then try again"], up.stderr
    assert "Traceback" not in up.stdout + up.stderr
    assert not (tmp_path / "build" / "launched" / "hetero.json").exists()


def test_a_dry_run_without_credentials_says_what_it_can_offline(tmp_path):
    """A first look needs no AWS account: the plan from the values file alone, marked
    offline, with what it could not check; `make up` itself still stops at the line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"HOME": str(tmp_path), "RAYKIT_BUILD_DIR": str(tmp_path / "build"), "PATH": WITH_TOOLS,
            "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true"}
    run = make("up", "CLUSTER=hetero", "DRY_RUN=1", env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "dry run offline (no AWS credentials found; run `aws configure` (or set AWS_PROFILE), then "
        "try again): the account is not checked (zone, subnet, AMI id, key pair, quotas); `make "
        "preflight` checks them",
        "dry run offline: CLUSTER=hetero would launch (nothing is launched):",
        "AWS us-east-1, zone any (Ray picks), AMI resolve:ssm:/aws/service/deeplearning/ami/x86_64/"
        "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
        "  ray.head.default: 1 x g5.xlarge, 150 GB gp3, rayproject/ray:2.60.0-py311-cpu, ~$1.02/h each",
        "  cpu_worker: 2-4 x c5.4xlarge, 100 GB gp3, rayproject/ray:2.60.0-py311-cpu, ~$0.69/h each",
        "total ~$2.40/h with min_workers, up to ~$3.79/h at max_workers"]
    assert not (tmp_path / "build" / "launched" / "hetero.json").exists()
    # `make run` and `make bench` dry runs alike: offline too (they needed credentials)
    run_ = make("run", "CLUSTER=hetero", "DRY_RUN=1", env=env, timeout=120)
    assert run_.returncode == 0 and run_.stdout == run.stdout, run_.stdout + run_.stderr
    bench = make("bench", "CLUSTERS=hetero single", "DRY_RUN=1", env=env, timeout=120)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert bench.stdout.count("dry run offline: CLUSTER=") == 2 and "== single" in bench.stdout


def test_a_dry_run_with_credentials_aws_refuses_falls_back_to_the_offline_plan(moto_server, tmp_path):
    """Expired SSO or a deleted key: the dry run stopped at "AWS rejected the credentials"
    where no credentials at all gave the offline plan. moto refuses an unknown key as AWS
    does (its IAM checks on); `make up` itself still stops at the line."""
    import urllib.request

    env = dict(os.environ, AWS_ENDPOINT_URL=moto_server, HOME=str(tmp_path), PATH=WITH_TOOLS,
               RAYKIT_BUILD_DIR=str(tmp_path / "build"), AWS_ACCESS_KEY_ID="AKIAEXPIREDKEY000000")

    def checks_after(requests: str) -> str:  # moto's switch: IAM checked after this many requests
        asked = urllib.request.Request(f"{moto_server}/moto-api/reset-auth", data=requests.encode(),
                                       method="POST", headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(asked) as answer:
            return json.loads(answer.read())["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"]

    previous = checks_after("0")
    try:
        run = make("up", "CLUSTER=hetero", "DRY_RUN=1", env=env, timeout=120)
        up = make("up", "CLUSTER=hetero", env=env, timeout=120)
    finally:
        checks_after(previous)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("dry run offline (AWS rejected the credentials (An error occurred "
                                 "(InvalidClientTokenId)"), run.stdout
    assert "total ~$2.40/h with min_workers" in run.stdout
    assert up.returncode == 2 and up.stderr.startswith("error: AWS rejected the credentials"), up.stderr


def test_dry_run_says_what_would_launch_and_launches_nothing(moto_server, tmp_path):
    env = dict(os.environ, AWS_ENDPOINT_URL=moto_server, HOME=str(tmp_path), PATH=WITH_TOOLS,
               RAYKIT_BUILD_DIR=str(tmp_path / "build"))
    ec2 = boto3.client("ec2", endpoint_url=moto_server, region_name="us-east-1")
    dlami = publish_dlami(ec2)
    before = str(ec2.describe_instances()["Reservations"])
    run = make("up", "CLUSTER=hetero", "DRY_RUN=1", env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0].startswith(
        "preflight: account 123456789012, zone us-east-1a (picked: it offers every instance type)")
    assert [line for line in run.stdout.splitlines() if not line.startswith("preflight:")] == [
        "dry run: CLUSTER=hetero would launch (nothing is launched):",
        f"AWS us-east-1, zone us-east-1a, AMI {dlami}",
        "  ray.head.default: 1 x g5.xlarge, 150 GB gp3, rayproject/ray:2.60.0-py311-cpu, ~$1.02/h each",
        "  cpu_worker: 2-4 x c5.4xlarge, 100 GB gp3, rayproject/ray:2.60.0-py311-cpu, ~$0.69/h each",
        "total ~$2.40/h with min_workers, up to ~$3.79/h at max_workers"]
    assert str(ec2.describe_instances()["Reservations"]) == before
    assert not (tmp_path / "build" / "launched" / "hetero.json").exists()
