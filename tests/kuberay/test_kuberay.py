"""The KubeRay target, offline: the rendered RayCluster against KubeRay v1.7.0's CRD and the
operator's rules ported from validation.go (each rule broken once, by a test that fails if
the rule is dropped), where each value lands, and `make up/status/down/run` against a
stand-in `kubectl` (tests/standins/kubectl) that records every call and answers as kubectl
and the operator would. `make submit` through `kubectl port-forward` to a real Ray
dashboard is in test_own_job.py (it needs the shared local cluster)."""

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import uuid

import pytest

from conftest import REPO, USER_JOBS, USER_VALUES, kept_summary, load_example
from jobs.raykit import placement
from scripts.build import build, build_text
from scripts.providers.kuberay import crd, rayjob, watchdog

import yaml

KUBERAY_FILES = sorted(p.stem for p in (REPO / "cluster_templates").glob("*.yaml")
                       if "provider: kuberay" in p.read_text())


@pytest.mark.parametrize("release", crd.SUPPORTED_RELEASES)
def test_the_vendored_crds_are_the_pinned_releases_byte_for_byte(release):
    table = (crd.crd_dir(release) / "SOURCE.md").read_text()
    for name in crd.CRD_FILES.values():
        digest = hashlib.sha256((crd.crd_dir(release) / name).read_bytes()).hexdigest()
        assert re.search(rf"\| {re.escape(name)} \| \S+ \| {digest} \|", table), name
    assert f"at tag {release}" in table


def test_a_field_only_the_newest_release_knows_is_refused_naming_the_oldest():
    """The minimum release is checked too: v1.7.0's networkPolicy would be refused by a v1.6
    API server (strict field validation), so it is refused here, naming v1.6.0."""
    resource = copy.deepcopy(build("k8s_hetero").config)
    assert crd.schema_problems(resource) == []
    resource["spec"]["networkPolicy"] = {"mode": "DenyAll"}
    problems = crd.schema_problems(resource)
    assert problems and all("v1.6.0's RayCluster CRD, the oldest release the kit supports" in p
                            for p in problems), problems


def test_kuberay_mixes_exist():
    assert {"k8s_hetero", "k8s_multi"} <= set(KUBERAY_FILES)


@pytest.mark.parametrize("cluster", KUBERAY_FILES)
def test_every_kuberay_mix_passes_the_crd_and_the_operators_rules(cluster):
    resource = build(cluster).config
    assert crd.schema_problems(resource) == []
    assert crd.rule_problems(resource) == []


@pytest.mark.parametrize("cluster", KUBERAY_FILES)
def test_the_jobs_selectors_match_the_rendered_groups(cluster):
    """Ray Train's selector picks exactly the train groups (or a training head), Ray Data's
    exactly the preprocess groups: jobs/ runs unchanged on KubeRay."""
    values, spec = build(cluster).values, build(cluster).config["spec"]
    labels = {"head": spec["headGroupSpec"]["labels"]} | {
        g["groupName"]: g["labels"] for g in spec["workerGroupSpecs"]}
    matches = lambda selector: {n for n, lab in labels.items()  # noqa: E731
                                if all(lab.get(k) == v for k, v in selector.items())}
    trains = {n for n, w in values["workers"].items() if w["role"] == "train"}
    assert matches(placement.train_selector()) == (trains or {"head"})
    assert matches(placement.data_selector([])) == {n for n, w in values["workers"].items()
                                                    if w["role"] == "preprocess"}
    for name, group_labels in labels.items():  # one trainer slot per GPU of a train pod
        pod = values["head"]["pod"] if name == "head" else values["workers"][name]["pod"]
        assert placement.trainer_slots(group_labels) == (pod["gpus"] if name in trains or
                                                         (name == "head" and not trains) else 0)


def test_values_land_where_kuberay_reads_them():
    spec = build("k8s_multi").config["spec"]
    head, (gpu, cpu) = spec["headGroupSpec"], spec["workerGroupSpecs"]
    assert spec["autoscalerOptions"] == {"version": "v2", "upscalingMode": "Default", "idleTimeoutSeconds": 600,
                                         "resources": {  # local disk too: a quota on it refuses the head
                                             "requests": {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"},
                                             "limits": {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"}}}
    # no node autoscaler may evict a pod mid-job (the head's eviction ends the cluster)
    for template in [head["template"], gpu["template"], cpu["template"]]:
        assert template["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true",
                                                       "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    (watchdog_sidecar,) = [c for c in head["template"]["spec"]["containers"] if c["name"] != "ray-head"]
    assert watchdog_sidecar["resources"]["requests"]["ephemeral-storage"] == "1Gi"
    assert spec["enableInTreeAutoscaling"] is True and spec["authOptions"] == {"mode": "token"}
    assert head["resources"] == {"CPU": "0"}  # a coordinating head: Ray schedules nothing there
    # GPUs and CPUs from the container's limits; the group's resources: only its own, which
    # the autopilot's requests name (the operator passes it to ray start --resources)
    assert gpu["resources"] == {"raykit-node-gpu-worker": "1"} and gpu["rayStartParams"] == {}
    container = gpu["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "44", "memory": "160Gi", "nvidia.com/gpu": "4",
                                                 "ephemeral-storage": "40Gi"}
    # CPU and memory requested as limited (Guaranteed); local disk for a first install
    # (CUDA packages and wheels) asked for, so a 20 GiB node root or a LimitRange's default
    # limit does not evict the pod
    assert container["resources"]["requests"] == container["resources"]["limits"] | {"ephemeral-storage": "12Gi"}
    cpu_container = cpu["template"]["spec"]["containers"][0]["resources"]
    assert (cpu_container["requests"]["ephemeral-storage"], cpu_container["limits"]["ephemeral-storage"]) == (
        "4Gi", "20Gi")
    assert container["image"] == "rayproject/ray:2.60.0-py311-cpu"  # CUDA comes with torch's wheel
    assert cpu["template"]["spec"]["containers"][0]["image"].endswith("-cpu")
    assert gpu["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "g5.12xlarge"}
    assert gpu["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert (gpu["minReplicas"], gpu["maxReplicas"], cpu["minReplicas"], cpu["maxReplicas"]) == (2, 2, 2, 8)
    # only the head's autoscaler talks to the API server
    assert head["template"]["spec"]["automountServiceAccountToken"] is True
    assert gpu["template"]["spec"]["automountServiceAccountToken"] is False
    shm = gpu["template"]["spec"]["volumes"][0]
    assert shm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}
    assert {"name": "data-1", "mountPath": "/data", "readOnly": True} not in container["volumeMounts"]
    assert {"name": "data-0", "mountPath": "/data", "readOnly": True} in container["volumeMounts"]


def test_a_hostile_string_stays_one_value():
    values = load_example("k8s_hetero")
    values["workers"]["cpu-worker"]["node_selector"] = {"team": "a\nb"}
    with pytest.raises(Exception) as refused:
        build_text("k8s_hetero", yaml.safe_dump(values).encode())
    assert "workers.cpu-worker.node_selector.team" in str(refused.value)


# --- the operator's rules, one broken at a time --------------------------------------

def broken(change) -> dict:
    resource = copy.deepcopy(build("k8s_multi").config)
    change(resource["spec"], resource["metadata"])
    return resource


def head_env(spec, env):
    spec["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = env


RULES = [
    ("RayCluster name longer than 53", lambda s, m: m.update(name="a" * 54), "no more than 53 characters"),
    ("RayCluster name not DNS-1035", lambda s, m: m.update(name="9lives"), "valid DNS1035 label"),
    ("head without containers", lambda s, m: s["headGroupSpec"]["template"]["spec"].update(containers=[]),
     "headGroupSpec should have at least one container"),
    ("worker group without containers",
     lambda s, m: s["workerGroupSpecs"][0]["template"]["spec"].update(containers=[]),
     "workerGroupSpec should have at least one container"),
    ("minReplicas above maxReplicas", lambda s, m: s["workerGroupSpecs"][1].update(minReplicas=9),
     "worker group cpu-worker has minReplicas 9 greater than maxReplicas 8"),
    ("negative minReplicas", lambda s, m: s["workerGroupSpecs"][1].update(minReplicas=-1),
     "negative minReplicas -1"),
    ("replicas unset with autoscaling off",
     lambda s, m: (s.update(enableInTreeAutoscaling=False), s["workerGroupSpecs"][1].pop("maxReplicas")),
     "must set both minReplicas and maxReplicas when autoscaling is disabled"),
    ("resources in rayStartParams and top-level", lambda s, m: s["headGroupSpec"]["rayStartParams"].update(
        {"num-cpus": "0"}), "should not be set in both rayStartParams and Resources for Head group"),
    ("labels in rayStartParams", lambda s, m: s["workerGroupSpecs"][0]["rayStartParams"].update(
        labels="ray-subcluster=train"), "rayStartParams['labels'] is not supported for gpu-worker group"),
    ("label key not a qualified name", lambda s, m: s["workerGroupSpecs"][0]["labels"].update({"bad key": "x"}),
     "invalid label key for gpu-worker group: 'bad key'"),
    ("label value with a slash", lambda s, m: s["workerGroupSpecs"][0]["labels"].update({"ray-subcluster": "a/b"}),
     "invalid label value for key 'ray-subcluster' in gpu-worker group"),
    ("idleTimeoutSeconds without autoscaler v2",
     lambda s, m: (s["autoscalerOptions"].pop("version"), s["workerGroupSpecs"][0].update(idleTimeoutSeconds=60)),
     "idleTimeoutSeconds is set, but autoscaler v2 is not enabled"),
    ("negative group idleTimeoutSeconds", lambda s, m: s["workerGroupSpecs"][0].update(idleTimeoutSeconds=-5),
     "idleTimeoutSeconds must be non-negative, got -5"),
    ("v2 env with autoscaling off", lambda s, m: (s.update(enableInTreeAutoscaling=False),
                                                 head_env(s, [{"name": "RAY_enable_autoscaler_v2", "value": "1"}])),
     "cannot be set to '1' when enableInTreeAutoscaling is false"),
    ("v2 env beside autoscalerOptions.version",
     lambda s, m: head_env(s, [{"name": "RAY_enable_autoscaler_v2", "value": "true"}]),
     "both .spec.autoscalerOptions.version and head Pod env var RAY_enable_autoscaler_v2 are set"),
    ("suspended group with autoscaling", lambda s, m: s["workerGroupSpecs"][1].update(suspend=True),
     "worker group cpu-worker cannot be suspended with Autoscaler enabled"),
    ("restartPolicy Always under v2 (head)",
     lambda s, m: s["headGroupSpec"]["template"]["spec"].update(restartPolicy="Always"),
     "restartPolicy for head Pod should be Never or unset when using autoscaler V2"),
    ("restartPolicy OnFailure under v2 (worker)",
     lambda s, m: s["workerGroupSpecs"][1]["template"]["spec"].update(restartPolicy="OnFailure"),
     "restartPolicy for worker group cpu-worker should be Never or unset"),
    ("negative autoscaler idle timeout", lambda s, m: s["autoscalerOptions"].update(idleTimeoutSeconds=-1),
     "autoscalerOptions.idleTimeoutSeconds must be non-negative, got -1"),
    ("autoscaler env shadows KubeRay's command",
     lambda s, m: s["autoscalerOptions"].update(env=[{"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": "x"}]),
     "autoscalerOptions.env must not contain KUBERAY_GEN_AUTOSCALER_START_CMD"),
    ("token auth on Ray older than 2.52", lambda s, m: s.update(rayVersion="2.51.0"),
     "minimum Ray version is 2.52.0, got 2.51.0"),
    ("token auth without rayVersion", lambda s, m: s.pop("rayVersion"), "RayVersion was not specified"),
    ("k8s token auth without token mode", lambda s, m: s.update(authOptions={"enableK8sTokenAuth": True}),
     "enableK8sTokenAuth is enabled but authOptions.mode not set to 'token'"),
    ("priority on Ray older than 2.56", lambda s, m: (s.update(rayVersion="2.55.0"),
                                                      s["workerGroupSpecs"][0].update(priority=5)),
     "priority is set, but minimum Ray version is 2.56.0"),
    ("priority without autoscaler v2", lambda s, m: (s["autoscalerOptions"].pop("version"),
                                                     s["workerGroupSpecs"][0].update(priority=5)),
     "priority is set to 5, but autoscaler v2 is not enabled"),
]


@pytest.mark.parametrize("name,change,message", RULES, ids=[r[0] for r in RULES])
def test_each_operator_rule_refuses_what_it_should(name, change, message):
    problems = crd.rule_problems(broken(change))
    assert any(message in p for p in problems), problems


def test_the_crd_schema_refuses_unknown_fields_and_wrong_types():
    resource = broken(lambda s, m: (s["workerGroupSpecs"][0].update(minReplica=1),
                                    s["headGroupSpec"]["template"]["spec"].update(nodeSelector="gpu")))
    problems = crd.schema_problems(resource)
    assert any("spec.workerGroupSpecs.0" in p and "'minReplica' was unexpected" in p for p in problems), problems
    assert any("spec.headGroupSpec.template.spec.nodeSelector: 'gpu' is not of type 'object'" in p
               for p in problems), problems
    assert crd.schema_problems({"apiVersion": "v1", "kind": "Pod"})[0].startswith("apiVersion/kind")


RAYJOB_RULES = [
    ("suspend without shutdown", {"suspend": True, "shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 0},
     "shutdownAfterJobFinishes set to false is not allowed to be suspended"),
    ("ttl without shutdown", {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 60},
     "cannot have TTLSecondsAfterFinished"),
    ("negative ttl", {"ttlSecondsAfterFinished": -1}, "TTLSecondsAfterFinished must be a non-negative integer"),
    ("no cluster", {"rayClusterSpec": None}, "one of RayClusterSpec or ClusterSelector must be set"),
    ("zero deadline", {"activeDeadlineSeconds": 0}, "activeDeadlineSeconds must be a positive integer"),
    ("negative backoff", {"backoffLimit": -1}, "backoffLimit must be a positive integer"),
    ("runtime env not a mapping", {"runtimeEnvYAML": "- a\n- b"}, "runtimeEnvYAML is not a YAML mapping"),
    ("deletion strategy without its gate", {"deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}}},
     "RayJobDeletionPolicy feature gate must be enabled"),
]


@pytest.fixture(scope="module")
def ray_job():
    return rayjob.resources(build("k8s_hetero"), "smoke", ["--steps", "2"], 600, False, "pip", "upload")


@pytest.mark.parametrize("name,change,message", RAYJOB_RULES, ids=[r[0] for r in RAYJOB_RULES])
def test_each_rayjob_rule_refuses_what_it_should(ray_job, name, change, message):
    resource = copy.deepcopy(ray_job[1])
    resource["spec"].update(change)
    assert crd.rule_problems(ray_job[1]) == []
    assert any(message in p for p in crd.rule_problems(resource))


def test_the_rayjob_carries_the_job_and_its_cluster(ray_job):
    config_map, job = ray_job
    assert crd.problems(job) == []
    assert job["spec"]["rayClusterSpec"] == watchdog.without(build("k8s_hetero").config)["spec"]
    assert job["spec"]["entrypoint"] == "python -m raykit.entry main.py --steps 2"
    assert job["spec"]["shutdownAfterJobFinishes"] is True and job["spec"]["activeDeadlineSeconds"] == 600
    runtime_env = json.loads(job["spec"]["runtimeEnvYAML"])
    assert runtime_env["working_dir"] == f"{rayjob.FILES_MOUNT}/smoke"
    assert runtime_env["py_modules"] == [f"{rayjob.FILES_MOUNT}/raykit"]
    # every file of the job and of the job library, under the paths the runtime env names
    items = job["spec"]["submitterPodTemplate"]["spec"]["volumes"][0]["configMap"]["items"]
    paths = {i["path"] for i in items}
    assert {"smoke/main.py", "raykit/placement.py"} <= paths
    assert not any("__pycache__" in p for p in paths)
    assert config_map["data"]["smoke__main.py"] == (REPO / "jobs" / "smoke" / "main.py").read_text()


def test_a_hostile_job_arg_stays_one_word(ray_job):
    _, job = rayjob.resources(build("k8s_hetero"), "smoke", ["$(touch /tmp/x)", "a b"], 60, False,
                                   "pip", "upload")
    assert job["spec"]["entrypoint"] == "python -m raykit.entry main.py '$(touch /tmp/x)' 'a b'"


# --- the jobs' packages on stock images (images.job_packages) ----------------------

def test_cpu_pods_take_cpu_torch_and_gpu_pods_cuda_torch():
    """Every pip on a CPU pod (Ray's runtime_env installs) looks in PyTorch's CPU index
    first, where torch==X's CPU build (X+cpu) sorts above X; GPU pods take PyPI's CUDA build."""
    spec = build("k8s_hetero").config["spec"]
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert [e["name"] for e in head["env"]] == ["RAY_JOB_START_TIMEOUT_SECONDS"]  # the GPU head: no CPU index
    assert worker["env"] == [{"name": "PIP_INDEX_URL", "value": "https://download.pytorch.org/whl/cpu"},
                             {"name": "PIP_EXTRA_INDEX_URL", "value": "https://pypi.org/simple"}]
    from packaging.specifiers import SpecifierSet
    assert SpecifierSet("==2.14.1").contains("2.14.1+cpu")  # the pin accepts the CPU build


def test_the_rayjob_installs_the_jobs_packages_with_time_for_cuda_wheels():
    _, job = rayjob.resources(build("k8s_hetero"), "vit_synthetic", [], 600, False, "pip", "upload")
    runtime_env = json.loads(job["spec"]["runtimeEnvYAML"])
    assert {"torch==2.14.1", "torchvision==0.29.1", "timm==1.0.31"} <= set(runtime_env["pip"]["packages"])
    assert runtime_env["config"] == {"setup_timeout_seconds": 1800}


def test_baked_images_must_not_be_the_stock_ones():
    values = load_example("k8s_hetero")
    values["images"]["job_packages"] = "baked"
    with pytest.raises(Exception) as refused:
        build_text("k8s_hetero", yaml.safe_dump(values).encode())
    assert "images.gpu: rayproject/ray:2.60.0-py311-cpu is a stock Ray image" in str(refused.value)
    assert "images.cpu: rayproject/ray:2.60.0-py311-cpu is a stock Ray image" in str(refused.value)
    values["images"] |= {"gpu": "registry.example.com/team/raykit-jobs:2.60.0-gpu",
                         "cpu": "registry.example.com/team/raykit-jobs:2.60.0-cpu"}
    build_text("k8s_hetero", yaml.safe_dump(values).encode())  # accepted


# --- make up / status / down / run against the stand-in kubectl ----------------------

@pytest.fixture
def kube(tmp_path):
    log = tmp_path / "kubectl.log"
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"), STANDIN_LOG=str(log),
               STANDIN_KUBE_DIR=str(tmp_path / "kube"), RAYKIT_KUBECTL_POLL_S="0.05",
               PATH=f"{REPO / 'tests' / 'standins'}:{REPO / '.venv' / 'bin'}:{os.environ['PATH']}")

    def kit(*args, **extra):
        return subprocess.run([sys.executable, "-m", "scripts.kit", *args], cwd=REPO, env=env | extra,
                              capture_output=True, text=True, timeout=120)

    def logged():
        """Every call that reaches the API server (`kubectl config` reads a local file)."""
        entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return [e for e in entries if e["args"][:1] != ["config"]]

    kit.calls = lambda: [entry["args"] for entry in logged()]
    kit.logged, kit.env, kit.tmp = logged, env, tmp_path
    return kit


def verbs(calls) -> list[str]:
    return [" ".join(c[2:4]) for c in calls]  # past --namespace NS


def test_up_status_and_down_through_kubectl(kube):
    up = kube("up", "--cluster", "k8s_hetero")
    assert up.returncode == 0, up.stdout + up.stderr
    calls = kube.calls()
    assert all(c[:2] == ["--namespace", "ray"] for c in calls)  # its namespace, every call
    # read-only preflight first, then the apply, then the wait
    assert verbs(calls)[:10] == ["version -o", *["explain " + f for f, _, _ in crd.VERSIONED_FIELDS],
                                 "get namespace", "auth can-i", "get rolebinding", "get raycluster", "apply -f"]
    assert "preflight: Kubernetes v1.33.5-eks-3cfe0ce" in up.stdout
    assert "pods ready: headgroup 0/1, cpu-worker 0/2" in up.stdout
    assert up.stdout.index("pods ready: headgroup 1/1, cpu-worker 2/2") < up.stdout.index("cluster 'k8s_hetero' is up")
    applied = json.loads((kube.tmp / "kube" / "ray.RayCluster.k8s-hetero.json").read_text())
    record = json.loads((kube.tmp / "build" / "launched" / "k8s_hetero.json").read_text())
    assert applied["metadata"]["labels"]["raykit.dev/launch-id"] == record["launch_id"]
    assert crd.problems(applied) == []

    status = kube("status", "--cluster", "k8s_hetero")
    assert status.returncode == 0 and "k8s-hetero-cpu-worker-worker-00001" in status.stdout

    down = kube("down", "--cluster", "k8s_hetero")
    assert down.returncode == 0, down.stderr
    assert "none of its pods is left" in down.stdout
    assert ["--namespace", "ray", "delete", "raycluster", "k8s-hetero", "--ignore-not-found",
            "--wait=false"] in kube.calls()  # then polled with get: no list/watch right needed
    assert not (kube.tmp / "build" / "launched" / "k8s_hetero.json").exists()
    assert not list((kube.tmp / "kube").glob("ray.Pod.*"))


def test_up_refuses_a_raycluster_it_did_not_launch_and_down_leaves_it(kube):
    kube.tmp.joinpath("kube").mkdir()
    foreign = {"kind": "RayCluster", "metadata": {"name": "k8s-hetero", "labels": {}}, "spec": {}}
    (kube.tmp / "kube" / "ray.RayCluster.k8s-hetero.json").write_text(json.dumps(foreign))
    up = kube("up", "--cluster", "k8s_hetero")
    assert up.returncode == 2 and "already exists in namespace ray, not launched from this checkout" in up.stderr
    assert "apply" not in verbs(kube.calls())[-1]
    # a record whose launch id is not on the RayCluster: down deletes nothing
    record = {"cluster": "k8s_hetero", "provider": "kuberay", "name": "k8s-hetero", "namespace": "ray",
              "context": None, "launch_id": "0123456789abcdef", "expected_pods": {"headgroup": 1},
              "ready_timeout_minutes": 1}
    (kube.tmp / "build" / "launched").mkdir(parents=True, exist_ok=True)
    (kube.tmp / "build" / "launched" / "k8s_hetero.json").write_text(json.dumps(record))
    down = kube("down", "--cluster", "k8s_hetero")
    assert down.returncode == 2 and "is not the one this checkout launched" in down.stderr
    assert not any("delete" in c for c in kube.calls())


def test_pods_the_namespaces_pod_security_refuses_fail_up_at_once(kube):
    """A namespace enforcing Pod Security `restricted`: the operator's pod creations are
    refused, and it says so in a Warning event on the RayCluster. `up` fails on it at the
    first look, naming the level, instead of after ready_timeout_minutes."""
    up = kube("up", "--cluster", "k8s_hetero", STANDIN_POD_STATE="Forbidden", RAYKIT_READY_TIMEOUT_S="600")
    assert up.returncode == 2 and len(up.stderr.strip().splitlines()) == 1, up.stderr
    assert ("RayCluster k8s-hetero: the operator cannot create it: FailedToCreateHeadPod: "
            "Failed to create head Pod") in up.stderr
    assert "violates PodSecurity" in up.stderr and "enforce=baseline" in up.stderr
    assert "RayCluster k8s-hetero deleted" in up.stdout
    assert not (kube.tmp / "kube" / "ray.RayCluster.k8s-hetero.json").exists()


@pytest.mark.parametrize("reason,message,said", [
    # KubeRay v1.7's words (raycluster_controller.go): a RayJob of the same name holds the Service
    ("FailedToCreateService", 'Failed creating service ray/NAME-head-svc, services "NAME-head-svc" already exists',
     "a Service of that name is another's (a RayJob or RayService named k8s-hetero in the namespace?)"),
    ("AutoscalerServiceAccountNotFound", "Failed to reconcile RayCluster ray/NAME. If users specify "
     "ServiceAccountName for the head Pod, they need to create a ServiceAccount themselves. However, "
     "ServiceAccount NAME is not found. Please create one.",
     "kubernetes.service_account: create that ServiceAccount in namespace ray, or set it to null"),
    ("FailedToCreateRoleBinding", "Failed to create role binding ray/NAME, forbidden", "forbidden"),
])
def test_every_refusal_of_the_operator_fails_up_at_once(kube, reason, message, said):
    """The operator retries a refusal for ever, with a Warning on the RayCluster: `up`
    waited 20-30 minutes in silence on those it did not list. Every create or validate
    failure now fails it at the first look, in one line, the fix named where it is known."""
    up = kube("up", "--cluster", "k8s_hetero", STANDIN_OPERATOR_EVENT=f"{reason}|{message}",
              RAYKIT_READY_TIMEOUT_S="600")
    assert up.returncode == 2 and len(up.stderr.strip().splitlines()) == 1, up.stderr
    assert f"RayCluster k8s-hetero: the operator cannot create it: {reason}: " in up.stderr
    assert said in up.stderr
    assert not (kube.tmp / "kube" / "ray.RayCluster.k8s-hetero.json").exists()


def test_an_earlier_clusters_refusal_of_the_same_name_is_not_this_ones(kube):
    """Events live an hour: a refusal of a RayCluster of the same name deleted since (another
    uid) does not fail this launch."""
    up = kube("up", "--cluster", "k8s_hetero", STANDIN_OPERATOR_EVENT="FailedToCreateHeadPod|refused",
              STANDIN_EVENT_UID="0a1b2c3d-old")
    assert up.returncode == 0, up.stderr


@pytest.mark.parametrize("state", ["ImagePullBackOff", "InitImagePullBackOff"])
def test_a_stuck_pod_fails_up_with_its_events_and_deletes_what_was_applied(kube, state):
    """InitImagePullBackOff: KubeRay's wait-gcs-ready init container pulls the worker's
    image first; its back-off was not read, and `up` waited its whole time-out."""
    up = kube("up", "--cluster", "k8s_hetero", STANDIN_POD_STATE=state)
    assert up.returncode == 2
    assert "is stuck in ImagePullBackOff" in up.stderr and len(up.stderr.splitlines()) == 1
    assert "RayCluster k8s-hetero deleted" in up.stdout
    assert not (kube.tmp / "kube" / "ray.RayCluster.k8s-hetero.json").exists()


@pytest.mark.parametrize("setting,message", [
    ({"STANDIN_KUBERAY": "v1.4.2"}, "the installed KubeRay is older than v1.5.0: it has no "
                                    "spec.headGroupSpec.labels (the groups' labels"),
    # v1.5.0 has group labels but no authOptions: "KubeRay >= 1.5" was not the floor
    ({"STANDIN_KUBERAY": "v1.5.0"}, "older than v1.5.1: it has no spec.authOptions (Ray's token "
                                    "authentication); the kit needs KubeRay >= v1.6.0"),
    ({"STANDIN_KUBERAY": "v1.5.1"}, "older than v1.6.0: it has no spec.preRunningDeadlineSeconds"),
    ({"STANDIN_KUBERAY": "none"}, "the cluster has no rayclusters resource; install the KubeRay operator v1.7.0"),
    # an explain that fails for another reason than a missing field is not "too old"
    ({"STANDIN_KUBERAY": "unpublished"}, "could not read the API's schema of rayclusters (`kubectl "
                                         "explain rayclusters.spec.headGroupSpec.labels`): error: "
                                         "couldn\\'t find resource for"),
    ({"STANDIN_NAMESPACES": "default"}, "kubernetes.namespace: ray does not exist"),
    # no kubeconfig: kubectl's localhost:8080 is no cluster of the user's; say to pick one
    ({"STANDIN_NO_KUBECONFIG": "1"}, "kubectl has no cluster to talk to (no kubeconfig or no "
                                     "current context: it tried localhost:8080)"),
    ({"STANDIN_CAN_I": "no"}, "this identity may not create rayclusters.ray.io in namespace ray"),
    # text where JSON was asked for (a wrapper script named kubectl): one line, no traceback
    ({"STANDIN_TEXT_FOR_JSON": "1"}, "`kubectl version -o json` printed no JSON object where it was "
                                     "asked for one (it printed 'Client Version: v1.34.5"),
])
def test_preflight_refuses_before_anything_is_applied(kube, setting, message):
    up = kube("up", "--cluster", "k8s_hetero", **setting)
    assert up.returncode == 2 and message in up.stderr, up.stderr
    assert not any(c[2] in ("apply", "create") for c in kube.calls())


def test_run_is_a_rayjob_the_operator_tears_down(kube):
    # the RayJob's cluster runs no watchdog: its RoleBinding, not applied here, is not asked for
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--args", "--steps 2", "--timeout", "900",
               STANDIN_NO_WATCHDOG_BINDING="1")
    assert run.returncode == 0, run.stdout + run.stderr
    assert not any(c[2:4] == ["get", "rolebinding"] for c in kube.calls())
    calls = kube.calls()
    created = [c for c in calls if c[2] == "create"]
    assert len(created) == 2 and not any(c[2] == "apply" for c in calls)  # the ConfigMap, the RayJob
    assert "RayJob k8s-hetero: Running, job RUNNING" in run.stdout
    assert "RESULT " not in run.stdout  # for machines: kept, not shown (VERBOSE=1 shows it)
    kept = list((kube.tmp / "build" / "results").glob("k8s-hetero-q8w3z.json"))
    assert kept and json.loads(kept[0].read_text())["result"] == {"job": "smoke", "steps": 2}
    assert ["--namespace", "ray", "patch", "configmap", "k8s-hetero-job-files"] == calls[-6][:5] or any(
        c[2:4] == ["patch", "configmap"] for c in calls)
    assert any(c[2:5] == ["delete", "rayjob", "k8s-hetero"] for c in calls)
    assert not list((kube.tmp / "kube").glob("ray.*"))  # RayJob, ConfigMap and pods: all gone


def test_the_submitter_pod_may_go_where_the_head_goes():
    """Tainted pools: the submitter tolerates what the head does, or it stays Pending while
    the RayJob runs to its deadline; it prefers the head's node, but is not bound to the
    head's node type (a node autoscaler bought a GPU node for this 200m pod)."""
    values = load_example("k8s_hetero")
    values["head"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "ray", "effect": "NoSchedule"}]
    built = build_text("k8s_hetero", yaml.safe_dump(values).encode())
    _, job = rayjob.resources(built, "smoke", ["--steps", "2"], 600, False, "pip", "upload")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    submitter = job["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["tolerations"] == head["tolerations"] and submitter["tolerations"][0]["key"] == "dedicated"
    assert "nodeSelector" not in submitter and head["nodeSelector"] != {}
    (near,) = submitter["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert near["podAffinityTerm"]["labelSelector"]["matchLabels"] == {"ray.io/node-type": "head",
                                                                        "raykit.dev/cluster": "k8s-hetero"}
    head_labels = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]
    assert head_labels["raykit.dev/cluster"] == "k8s-hetero"  # what the affinity selects, with the operator's


def test_a_submitter_not_yet_on_a_node_is_streamed_once_it_is_and_its_summary_kept(kube):
    """kubectl logs of a pod not yet scheduled prints nothing and exits 0: the kit took that
    for the whole log, never streamed again, kept no summary and deleted the RayJob."""
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--args", "--steps 2", "--timeout", "900",
               STANDIN_SUBMITTER="unscheduled")
    assert run.returncode == 0, run.stdout + run.stderr
    follows = [c for c in kube.calls() if c[2:4] == ["logs", "--follow"]]
    assert len(follows) == 2  # the empty answer, then the log
    assert "Job 'k8s-hetero-q8w3z' succeeded" in run.stdout
    kept = list((kube.tmp / "build" / "results").glob("k8s-hetero-q8w3z.json"))
    assert kept and json.loads(kept[0].read_text())["result"] == {"job": "smoke", "steps": 2}


@pytest.mark.parametrize("job,said,events", [
    # the operator refuses a RayJob it cannot validate and never moves it on: the kit ends
    # (it used to wait for ever for Complete or Failed)
    ("invalid", "RayJob k8s-hetero was refused by the KubeRay operator (ValidationFailed): "
                "The RayJob spec is invalid", False),
    # past activeDeadlineSeconds while running: TIMEOUT, not "never ran"
    ("deadline", "RayJob k8s-hetero ran past its limit, activeDeadlineSeconds 900 s (TIMEOUT), "
                 "and the operator stopped it", False),
    ("never-ran", "RayJob k8s-hetero never ran: its pods were not running within "
                  "preRunningDeadlineSeconds (1200 s, ready_timeout_minutes)", True),
])
def test_a_rayjob_that_ends_without_its_job_succeeding_says_how(kube, job, said, events):
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--timeout", "900", STANDIN_JOB=job)
    assert run.returncode == 1, run.stdout + run.stderr
    assert said in run.stdout
    assert ("the pods' events" in run.stdout) == events  # only where they never ran
    assert not list((kube.tmp / "kube").glob("ray.*"))  # deleted all the same


def test_a_failed_rayjob_exits_non_zero_and_is_still_deleted(kube):
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", STANDIN_JOB="fail")
    assert run.returncode == 1
    assert "RayJob k8s-hetero AppFailed: Job entrypoint command failed with exit code 1" in run.stdout
    assert not list((kube.tmp / "kube").glob("ray.*"))


def test_submit_reaches_the_head_through_kubectl_port_forward(kube, standin_head):
    """`make submit` on a KubeRay cluster: Ray's token read from the operator's Secret, the
    dashboard reached through `kubectl port-forward`, the job's log streamed and its summary
    kept. Behind the stand-in's port-forward is a real Ray head (conftest's stand-in for a
    cloud head, `python` on its PATH as in Ray's image)."""
    name = f"k8s_hello_{uuid.uuid4().hex[:6]}"
    (USER_JOBS / name).mkdir()
    (USER_JOBS / name / "main.py").write_text(
        "import json, sys\nimport ray\nimport raykit\n\nray.init()\n"
        "print('RESULT ' + json.dumps({'args': sys.argv[1:], 'cpus': ray.cluster_resources()['CPU']}))\n")
    forward = {"STANDIN_DASHBOARD_PORT": str(standin_head)}
    try:
        assert kube("up", "--cluster", "k8s_hetero", **forward).returncode == 0
        run = kube("submit", "--cluster", "k8s_hetero", "--job", name, "--args", "--steps '2 3'",
                   "--timeout", "120", **forward)
        assert run.returncode == 0, run.stdout + run.stderr
        assert kept_summary(run.stdout)["args"] == ["--steps", "2 3"]
        calls = kube.calls()
        assert ["--namespace", "ray", "get", "secret", "k8s-hetero", "-o", "json"] in calls
        forwards = [c for c in calls if c[2] == "port-forward"]
        assert forwards and forwards[0][3] == "service/k8s-hetero-head-svc"
        assert forwards[0][4].endswith(":8265") and forwards[0][5:] == ["--address", "127.0.0.1"]
        listed = kube("jobs", "--cluster", "k8s_hetero", **forward)
        assert listed.returncode == 0 and f"{name}-" in listed.stdout and "SUCCEEDED" in listed.stdout
    finally:
        shutil.rmtree(USER_JOBS / name, ignore_errors=True)
        assert kube("down", "--cluster", "k8s_hetero").returncode == 0


def test_a_pod_that_never_schedules_times_up_out_with_its_events(kube):
    up = kube("up", "--cluster", "k8s_hetero", STANDIN_POD_STATE="Unschedulable", RAYKIT_READY_TIMEOUT_S="1")
    assert up.returncode == 2 and "not ready within 20 min" in up.stderr
    assert ("event Pod/k8s-hetero-head-00000: FailedScheduling: 0/3 nodes are available: "
            "3 Insufficient nvidia.com/gpu.") in up.stdout
    # Karpenter keeps a GPU node whose GPUs never registered: said, not "the autoscaler removes it"
    assert "without a running NVIDIA device plugin a GPU node never advertises them, and Karpenter " \
           "keeps a node it launched for them, billing: `kubectl get nodeclaims`" in up.stderr
    assert not (kube.tmp / "kube" / "ray.RayCluster.k8s-hetero.json").exists()


# --- least privilege: the Role `make render` writes covers every call, and no more ----

def rights_used(entry: dict) -> set[tuple[str, str, str, str | None]]:
    """(API group, resource, verb, name) each kubectl call needs, as the API server checks
    them (apply: get, then create; port-forward to a service: the service, its pods, the
    pod's portforward subresource)."""
    args, obj = entry["args"][2:], entry["object"]
    verb = args[0]
    kinds = {"raycluster": ("ray.io", "rayclusters"), "rayjob": ("ray.io", "rayjobs"),
             "RayCluster": ("ray.io", "rayclusters"), "RayJob": ("ray.io", "rayjobs"),
             "configmap": ("", "configmaps"), "ConfigMap": ("", "configmaps"), "secret": ("", "secrets"),
             "rolebinding": ("rbac.authorization.k8s.io", "rolebindings")}
    if verb in ("version", "explain", "auth") or args[:2] == ["get", "namespace"]:
        return set()  # discovery, self-review: every identity may; a namespace is read only where allowed
    if verb in ("apply", "create"):
        kind, name = obj.split("/")
        return {(*kinds[kind], "create", None)} | ({(*kinds[kind], "get", name)} if verb == "apply" else set())
    if verb == "get" and args[1] in ("pods", "events"):
        return {("", args[1], "list", None)}
    if verb == "delete":
        return delete_rights(*kinds[args[1]], args[2], wait="--wait=false" not in args)
    if verb in ("get", "patch"):
        return {(*kinds[args[1]], verb, args[2])}
    if verb == "port-forward":
        return {("", "services", "get", args[1].split("/")[1]), ("", "pods", "list", None),
                ("", "pods/portforward", "create", None)}
    if verb == "logs" and args[-1].startswith("job/"):
        return {("batch", "jobs", "get", args[-1][4:]), ("", "pods", "list", None), ("", "pods/log", "get", None)}
    if verb == "logs":
        return {("", "pods", "get", args[1]), ("", "pods/log", "get", None)}
    if verb == "exec":
        return {("", "pods", "get", args[2]), ("", "pods/exec", "create", None)}
    raise AssertionError(f"a kubectl call the test does not know: {args}")


# KubeRay v1.7.0 puts a finalizer on every RayJob (ray.io/rayjob-finalizer); a RayCluster
# carries one only with GCS fault tolerance, which the kit never renders.
FINALIZED = {"rayjobs"}


def delete_rights(group: str, resource: str, name: str, wait: bool) -> set:
    """What `kubectl delete` asks the API server for. With --wait (kubectl's default) it
    then gets the object and, where it is still there (a finalizer holds it), lists and
    watches it by a metadata.name field selector: `list` and `watch`, authorized by name."""
    rights = {(group, resource, "delete", name)}
    if wait:
        rights |= {(group, resource, "get", name)}
        if resource in FINALIZED:
            rights |= {(group, resource, "list", name), (group, resource, "watch", name)}
    return rights


def test_kubectls_delete_waits_through_a_list_and_a_watch_where_a_finalizer_holds_the_object():
    """The model above, on the calls that broke `make run` for a user with the rendered Role:
    `kubectl delete rayjob NAME --wait=true` needed list and watch, which it did not grant."""
    assert ("ray.io", "rayjobs", "watch", "j") in delete_rights("ray.io", "rayjobs", "j", wait=True)
    assert delete_rights("ray.io", "rayjobs", "j", wait=False) == {("ray.io", "rayjobs", "delete", "j")}
    assert delete_rights("", "configmaps", "c", wait=True) == {("", "configmaps", "delete", "c"),
                                                               ("", "configmaps", "get", "c")}


def granted(role: dict, right) -> list[int]:
    group, resource, verb, name = right
    return [i for i, r in enumerate(role["rules"]) if group in r["apiGroups"] and resource in r["resources"]
            and verb in r["verbs"] and ("resourceNames" not in r or name in r["resourceNames"])]


def test_the_rendered_role_allows_every_call_of_every_command_and_nothing_unused(kube, monkeypatch):
    from scripts.providers import kuberay

    for command in (["up"], ["status"], ["monitor"], ["attach"], ["down"], ["run", "--job", "smoke"]):
        assert kube(*command, "--cluster", "k8s_hetero").returncode == 0, command
    # the dashboard's port-forward (make submit/jobs/logs/dashboard), in this process
    assert kube("up", "--cluster", "k8s_hetero").returncode == 0
    for key, value in kube.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("STANDIN_DASHBOARD_PORT", "9")  # nothing connects through it here
    record = json.loads((kube.tmp / "build" / "launched" / "k8s_hetero.json").read_text())
    with kuberay.job_address(record) as (address, _, token):
        assert address.startswith("http://127.0.0.1:") and token == "token"
    assert kube("down", "--cluster", "k8s_hetero").returncode == 0
    # a failed `up` reads the pods' events
    assert kube("up", "--cluster", "k8s_hetero", STANDIN_POD_STATE="ImagePullBackOff").returncode == 2

    render = kube("render", "--cluster", "k8s_hetero")
    role, *watchdogs = yaml.safe_load_all((kube.tmp / "build" / "clusters" / "k8s_hetero.kubectl-role.yaml").read_text())
    assert [w["kind"] for w in watchdogs] == ["Role", "RoleBinding"]  # the head's, not the user's
    assert render.returncode == 0 and role["kind"] == "Role" and role["metadata"]["namespace"] == "ray"
    used = set().union(*(rights_used(entry) for entry in kube.logged()))
    assert [right for right in used if not granted(role, right)] == []
    # every verb on every resource the Role grants is needed by some call
    offered = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert offered == {(g, r, v) for g, r, v, _ in used}
    assert ("", "secrets", "get", "k8s-hetero") in used and granted(role, ("", "secrets", "get", "other")) == []


def test_run_is_refused_before_anything_is_created_without_the_right_to_create_rayjobs(kube):
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", STANDIN_CAN_I="no")
    assert run.returncode == 2 and "may not create rayclusters.ray.io" in run.stderr
    assert not any(c[2] in ("apply", "create") for c in kube.calls())


def test_a_job_folder_beyond_the_annotation_cap_still_runs_and_one_beyond_a_configmap_is_refused(kube):
    """A ConfigMap holds 1 MiB; client-side `kubectl apply` would also copy it into an
    annotation, capped at 256 KiB: 400 KiB of job files must travel (created, not applied),
    1.2 MiB is refused before anything is created."""
    import os

    for name, size in (("k8s_big_job", 400 * 1024), ("k8s_huge_job", 1200 * 1024)):
        (USER_JOBS / name).mkdir()
        (USER_JOBS / name / "main.py").write_text("print('hello')\n")
        (USER_JOBS / name / "weights.bin").write_bytes(os.urandom(size))
    run = kube("run", "--cluster", "k8s_hetero", "--job", "k8s_big_job")
    assert run.returncode == 0, run.stdout + run.stderr
    assert ["create", "-f", "-"] in [c[2:5] for c in kube.calls()]
    before = len(kube.calls())
    huge = kube("run", "--cluster", "k8s_hetero", "--job", "k8s_huge_job")
    assert huge.returncode == 2 and "JOB=k8s_huge_job: its folder and the job library are" in huge.stderr
    assert not any(c[2] in ("apply", "create") for c in kube.calls()[before:])


def test_run_beside_a_running_cluster_of_the_same_name_is_refused(kube):
    """`make up` made RayCluster k8s-hetero: a RayJob k8s-hetero would take over its head
    service (k8s-hetero-head-svc), so `make run` creates nothing and leaves it running."""
    assert kube("up", "--cluster", "k8s_hetero").returncode == 0
    before = len(kube.calls())
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke")
    assert run.returncode == 2 and "a RayCluster 'k8s-hetero' runs in namespace ray" in run.stderr
    assert "take over its head service k8s-hetero-head-svc" in run.stderr
    assert not any(c[2] in ("apply", "create", "delete") for c in kube.calls()[before:])
    assert (kube.tmp / "kube" / "ray.RayCluster.k8s-hetero.json").exists()
    assert kube("down", "--cluster", "k8s_hetero").returncode == 0


def test_dry_run_says_what_would_be_applied_and_applies_nothing(kube):
    dry = kube("up", "--cluster", "k8s_multi", "--dry-run", "1")
    assert dry.returncode == 0, dry.stderr
    assert "gpu-worker: 2-2 pod(s) x 44 CPUs, 160 GiB, 4 GPU(s) (train) on node.kubernetes.io/instance-type=g5.12xlarge" in dry.stdout
    # the nodes its pods need, priced as the node groups bill them
    assert "total ~$12.90/h with min_workers, up to ~$16.98/h at max_workers" in dry.stdout
    assert not any(c[2] in ("apply", "create") for c in kube.calls())


def test_run_dry_run_says_what_the_rayjob_would_be_and_creates_nothing(kube):
    """`make run DRY_RUN=1` on KubeRay is the RayJob's plan (it used to print the
    RayCluster `make up` would apply): its limits, files, images, then its cluster."""
    dry = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--args", "--tasks 2",
               "--timeout", "600", "--dry-run", "1")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert "a RayJob 'k8s-hetero' in namespace ray of kubectl’s current context, running `python -m raykit.entry main.py --tasks 2`" in lines
    assert ("  limits: stopped after 600 s (TIMEOUT: activeDeadlineSeconds); failed if its pods are not "
            "running within 1200 s (ready_timeout_minutes: preRunningDeadlineSeconds)") in lines
    assert any(line.startswith("  files: ConfigMap k8s-hetero-job-files, ") for line in lines)
    assert any("rayproject/ray:2.60.0-py311-cpu" in line for line in lines)
    assert any(line.startswith("  cpu-worker: 2-4 pod(s)") for line in lines)  # then its cluster
    assert not any(c[2] in ("apply", "create", "delete") for c in kube.calls())


def test_a_job_no_runtime_env_can_install_is_refused_on_stock_images_before_anything_runs(kube):
    """adaptdl installs only with --no-deps: on stock images it would die of a
    ModuleNotFoundError after the pods billed. `make run` and `make submit` refuse it with
    one line; with baked images (named in the values) the RayJob is planned."""
    for command in (["run", "--cluster", "k8s_hetero", "--job", "adaptdl_mnist"],
                    ["run", "--cluster", "k8s_hetero", "--job", "adaptdl_mnist", "--dry-run", "1"]):
        refused = kube(*command)
        assert refused.returncode == 2
        assert refused.stderr.startswith("error: JOB=adaptdl_mnist: its requirements-nodeps.txt installs "
                                         "only with --no-deps"), refused.stderr
        assert len(refused.stderr.splitlines()) == 1
    assert not any(c[2] in ("apply", "create") for c in kube.calls())
    up = kube("up", "--cluster", "k8s_hetero")
    assert up.returncode == 0, up.stderr
    submitted = kube("submit", "--cluster", "k8s_hetero", "--job", "adaptdl_mnist")
    assert submitted.returncode == 2 and "images.job_packages: baked" in submitted.stderr
    assert "port-forward" not in " ".join(" ".join(c) for c in kube.calls())  # refused before any tunnel
    assert kube("down", "--cluster", "k8s_hetero").returncode == 0

    values = load_example("k8s_hetero") | {"cluster_name": "k8s-baked"}
    values["images"] = {"gpu": "registry.example.com/raykit-jobs:gpu",
                        "cpu": "registry.example.com/raykit-jobs:cpu", "job_packages": "baked"}
    name = f"baked_{uuid.uuid4().hex[:8]}"
    path = USER_VALUES / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    try:
        dry = kube("run", "--cluster", name, "--job", "adaptdl_mnist", "--dry-run", "1")
    finally:
        path.unlink()
    assert dry.returncode == 0, dry.stderr
    assert "registry.example.com/raykit-jobs:gpu" in dry.stdout


def test_up_dry_run_says_when_the_cluster_deletes_itself_and_run_dry_run_does_not(kube):
    up = kube("up", "--cluster", "k8s_hetero", "--dry-run", "1")
    assert "  autostop: the head's watchdog deletes it (and so every pod) after 60 min with no job" \
        in up.stdout.splitlines()
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--dry-run", "1")
    assert run.returncode == 0 and "autostop" not in run.stdout  # the operator ends a RayJob's cluster


@pytest.mark.parametrize("printed", ["", "[]", '"text"', "null", "Client Version: v1.34.5", "{"])
def test_whatever_kubectl_prints_where_json_was_asked_is_an_object_or_one_error_line(printed):
    from scripts.core.errors import KitError
    from scripts.providers.kuberay.kubectl import json_object

    with pytest.raises(KitError, match=r"^`kubectl get pods -o json` printed no JSON object"):
        json_object(printed, "kubectl get pods -o json")
    assert json_object('{"items": []}', "kubectl get pods -o json") == {"items": []}


# --- the context a launch is pinned to, and the submitter as KubeRay runs it ---------------

def kubeconfig(path, current: str, servers: dict) -> str:
    path.write_text(json.dumps({
        "kind": "Config", "current-context": current,
        "contexts": [{"name": c, "context": {"cluster": f"{c}-cluster", "user": "u"}} for c in servers],
        "clusters": [{"name": f"{c}-cluster", "cluster": {"server": s}} for c, s in servers.items()]}))
    return str(path)


def test_a_launch_is_pinned_to_its_context_whatever_kubectls_current_one_becomes(kube):
    """Both example files leave kubernetes.context null: after `kubectl config use-context`,
    `make down` read NotFound in the other context, said the cluster was deleted, forgot it,
    and it billed on; `make up` there started a second one."""
    config = kube.tmp / "kubeconfig"
    env = {"KUBECONFIG": kubeconfig(config, "staging", {"staging": "https://staging.example",
                                                         "prod": "https://prod.example"})}
    assert kube("up", "--cluster", "k8s_hetero", **env).returncode == 0
    record = json.loads((kube.tmp / "build" / "launched" / "k8s_hetero.json").read_text())
    assert (record["context"], record["server"]) == ("staging", "https://staging.example")
    kubeconfig(config, "prod", {"staging": "https://staging.example", "prod": "https://prod.example"})
    before = len(kube.logged())
    status = kube("status", "--cluster", "k8s_hetero", **env)
    assert status.returncode == 0 and "k8s-hetero-head" in status.stdout
    down = kube("down", "--cluster", "k8s_hetero", **env)
    assert down.returncode == 0, down.stderr
    assert {e["context"] for e in kube.logged()[before:]} == {"staging"}  # never the current one
    assert not list((kube.tmp / "kube").glob("ray.RayCluster.*"))


def test_a_context_that_now_points_elsewhere_or_is_gone_is_refused_and_the_record_kept(kube):
    config = kube.tmp / "kubeconfig"
    env = {"KUBECONFIG": kubeconfig(config, "eks", {"eks": "https://a.example"})}
    assert kube("up", "--cluster", "k8s_hetero", **env).returncode == 0
    kubeconfig(config, "eks", {"eks": "https://b.example"})  # update-kubeconfig for another cluster
    before = len(kube.logged())
    for command in ("down", "status", "dashboard"):
        refused = kube(command, "--cluster", "k8s_hetero", **env)
        assert refused.returncode == 2 and refused.stderr.startswith(
            "error: the kubectl context 'eks' now points at 'https://b.example', not 'https://a.example' "
            "where 'k8s_hetero' was launched"), refused.stderr
    assert len(kube.logged()) == before  # nothing reached any API server
    kubeconfig(config, "other", {"other": "https://a.example"})
    gone = kube("down", "--cluster", "k8s_hetero", **env)
    assert gone.returncode == 2 and "the kubectl context 'eks' that 'k8s_hetero' was launched in is no " \
                                    "longer in your kubeconfig" in gone.stderr
    assert (kube.tmp / "build" / "launched" / "k8s_hetero.json").exists()
    kubeconfig(config, "other", {"eks": "https://a.example", "other": "https://a.example"})
    assert kube("down", "--cluster", "k8s_hetero", **env).returncode == 0


def test_a_submitter_retried_by_its_job_is_streamed_by_pod_and_its_summary_kept_once(kube):
    """The submitter's log WebSocket closed (kuberay#4921): its pod failed after a step, the
    Job started another, which prints the job's log again from its start. The kit stopped
    at the first pod's end, said SUCCEEDED and kept no summary."""
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--args", "--steps 2", "--timeout", "900",
               STANDIN_SUBMITTER="restart")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("step 1/2 loss 2.301") == 1 and run.stdout.count("step 2/2 loss 2.254") == 1
    assert run.stdout.count("submitted successfully") == 1
    followed = [c[-1] for c in kube.calls() if c[2:4] == ["logs", "--follow"]]
    assert followed[0] == "pod/k8s-hetero-sub00" and "pod/k8s-hetero-sub01" in followed
    kept = list((kube.tmp / "build" / "results").glob("k8s-hetero-q8w3z.json"))
    assert kept and json.loads(kept[0].read_text())["result"] == {"job": "smoke", "steps": 2}


def test_a_submitter_that_never_runs_fails_the_run_in_ready_timeout_with_the_jobs_reason(kube):
    """A namespace quota sized to the RayCluster refuses the submitter pod: the Job records
    FailedCreate, the RayJob stays Running, and the cluster billed to activeDeadlineSeconds
    (6 h) before the kit said its pods 'never ran'."""
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--timeout", "900",
               STANDIN_SUBMITTER="never", RAYKIT_READY_TIMEOUT_S="2")
    assert run.returncode == 1, run.stdout + run.stderr
    assert ("RayJob k8s-hetero: its submitter never ran within 2 s (ready_timeout_minutes): FailedCreate: "
            "Error creating: pods \"k8s-hetero-sub00\" is forbidden: exceeded quota") in run.stdout
    assert not list((kube.tmp / "kube").glob("ray.*"))  # the RayJob deleted, its cluster with it


def test_a_rayjob_the_operator_deletes_at_its_end_keeps_its_summary(kube):
    """DELETE_RAYJOB_CR_AFTER_JOB_FINISHES=true: the RayJob vanished at Complete, `get
    rayjob` raised NotFound and `make run` exited non-zero without the summary it had read."""
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--args", "--steps 2", "--timeout", "900",
               STANDIN_OPERATOR_DELETES="1")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "RayJob k8s-hetero was deleted by the KubeRay operator" in run.stdout
    kept = list((kube.tmp / "build" / "results").glob("k8s-hetero-q8w3z.json"))
    assert kept and json.loads(kept[0].read_text())["result"] == {"job": "smoke", "steps": 2}


def test_no_operator_reconciling_the_namespace_is_said_not_waited_on_for_ever(kube):
    run = kube("run", "--cluster", "k8s_hetero", "--job", "smoke", "--timeout", "900",
               STANDIN_NO_OPERATOR="1", RAYKIT_NO_OPERATOR_S="1")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "no KubeRay operator reconciles RayJobs in namespace ray" in run.stderr
    assert not list((kube.tmp / "kube").glob("ray.RayJob.*"))


def test_up_with_no_operator_reconciling_the_namespace_says_so_soon(kube):
    """CRDs present, no operator (uninstalled, crash-looping, another watchNamespace): `up`
    printed "pods ready: headgroup 0/1" for ready_timeout_minutes and blamed the pods."""
    up = kube("up", "--cluster", "k8s_hetero", STANDIN_NO_OPERATOR="1", RAYKIT_NO_OPERATOR_S="1")
    assert up.returncode == 2, up.stdout + up.stderr
    assert "no KubeRay operator reconciles RayClusters in namespace ray" in up.stderr
    assert not (kube.tmp / "kube" / "ray.RayCluster.k8s-hetero.json").exists()  # deleted again


@pytest.mark.parametrize("right,said", [
    ("", "the watchdog may delete RayCluster ray/k8s-hetero (a dry-run DELETE was allowed)"),
    ("refused", "warning: the watchdog cannot delete RayCluster ray/k8s-hetero (HTTP 403 Forbidden)"),
])
def test_up_and_status_say_whether_the_watchdog_may_delete_its_cluster(kube, right, said):
    """A default-deny egress NetworkPolicy or a webhook made every DELETE fail, visible only
    in a container log nobody reads: the watchdog's dry-run DELETE at its start is shown."""
    up = kube("up", "--cluster", "k8s_hetero", STANDIN_WATCHDOG_RIGHT=right)
    assert up.returncode == 0 and said in up.stdout, up.stdout + up.stderr
    status = kube("status", "--cluster", "k8s_hetero", STANDIN_WATCHDOG_RIGHT=right)
    assert status.returncode == 0 and said in status.stdout
    assert kube("down", "--cluster", "k8s_hetero").returncode == 0
