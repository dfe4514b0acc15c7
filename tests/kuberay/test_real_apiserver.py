"""The kit's kubectl calls against a real API server (tests/kuberay/kube_testbed.py:
kube-apiserver 1.20.2 with RBAC, its garbage collector, a real kubectl 1.34.5), as a user
bound to nothing but the Role the kit renders (role_for). What the stand-in kubectl cannot
show shows here: a call the Role does not grant is Forbidden, a finalizer turns `kubectl
delete --wait` into a list and a watch, owner references delete what the kit never names,
an annotation over 256 KiB is refused, a field the CRD does not know is pruned in silence.

A thread below plays the operator through the admin identity: it makes the pods from the
rendered templates (so the API server admits the kit's real pod specs, ServiceAccount
admission on), marks them Ready through the status subresource, moves a RayJob along with
its submitter Job and that Job's pod (never scheduled), and holds the RayJob's finalizer.
What this cannot check: the operator's own reconcile, anything a kubelet serves (exec,
port-forward, the log of a pod on a node: the calls are authorized, then fail for want of
a node; a pod not on a node answers its log with 204 No Content, as on a real cluster),
and v1.7.0's CEL rules (stripped to load on 1.20; crd.py's offline check covers them)."""

import copy
import json
import os
import subprocess
import sys
import threading
import uuid

import pytest

from conftest import REPO, USER_JOBS
from scripts.build import build
from scripts.providers import kuberay
from scripts.node import autostop
from tests.kuberay import kube_testbed

import yaml

pytestmark = [pytest.mark.xdist_group("kube-apiserver"), pytest.mark.timeout(300)]

CLUSTER, NAME, NAMESPACE = "k8s_hetero", "k8s-hetero", "ray"
FINALIZER = "ray.io/rayjob-finalizer"
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def testbed(tmp_path_factory):
    lacking = kube_testbed.missing()
    if lacking:
        message = (f"the kube testbed lacks {', '.join(lacking)}: `make kube-testbed` builds it "
                   f"once into {kube_testbed.CACHE}")
        if os.environ.get("CI") == "true":  # CI runs every test: make test built it just before
            pytest.fail(message)
        pytest.skip(message)
    bed = kube_testbed.Testbed(tmp_path_factory.mktemp("kube")).start()
    values = build(CLUSTER).values
    bed.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": NAMESPACE}})
    bed.wait_for_account(NAMESPACE)  # the workers' and the submitter's pods run as `default`
    # what the namespace's admin applies once (`make render`'s kubectl-role.yaml)
    for document in yaml.safe_load_all(kuberay.companion_files(CLUSTER, values)["kubectl-role.yaml"]):
        plural = {"Role": "roles", "RoleBinding": "rolebindings"}[document["kind"]]
        bed.api("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/{plural}", document)
    bed.api("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "raykit-user"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"raykit-{NAME}"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": kube_testbed.USER}]})
    operator = PlayedOperator(bed)
    operator.start()
    yield bed
    operator.stopped.set()
    operator.join(timeout=10)
    bed.stop()


@pytest.fixture
def kit(testbed, tmp_path):
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"), KUBECONFIG=str(testbed.kubeconfig),
               RAYKIT_KUBECTL_POLL_S="0.2", RAYKIT_WATCHDOG_WAIT_S="1",  # no kubelet serves its log
               PATH=f"{testbed.bin}:{REPO / '.venv' / 'bin'}:{os.environ['PATH']}")

    def run(*args, **extra):
        return subprocess.run([sys.executable, "-m", "scripts.kit", *args], cwd=REPO, env=env | extra,
                              capture_output=True, text=True, timeout=180)
    run.env = env
    return run


def user_kubectl(testbed, *args, stdin=None, timeout=60):
    return subprocess.run([str(testbed.bin / "kubectl"), "--kubeconfig", str(testbed.kubeconfig),
                           "--namespace", NAMESPACE, *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def items(testbed, path: str) -> list[dict]:
    return testbed.api("GET", path)["items"]


def ours(testbed, kind_path: str) -> list[str]:
    return [o["metadata"]["name"] for o in items(testbed, f"{kind_path}")]


# How long the played operator keeps a RayJob Running (ticks of 0.2 s): long enough for
# the kit to ask for the submitter's log several times
RUNNING_TICKS = 15
# KubeRay v1.7.0 common/pod.go BuildAutoscalerContainer: the head's autoscaler sidecar
AUTOSCALER_RESOURCES = {"cpu": "500m", "memory": "512Mi"}


class PlayedOperator(threading.Thread):
    """What KubeRay's operator (v1.7.0) does that the kit's commands wait on, done through
    the admin identity, each object made where it is missing (a refusal is tried again at
    the next tick, as the operator retries):
    - a RayCluster: its head and min-replica pods, built from the rendered templates as
      the operator builds them (the head with its autoscaler sidecar, running as the
      account the operator makes, named after the cluster), so the API server admits the
      kit's real pod specs (ServiceAccount admission on); owned by the RayCluster, so the
      garbage collector deletes them with it; Ready through the status subresource; its
      head Service and its token Secret;
    - a RayJob: the finalizer, a RayCluster of its own; then Running with the submitter, a
      batch Job built from submitterPodTemplate (rayjob_controller.go createNewK8sJob)
      and, as no Job controller runs here, its pod (played Running, then Succeeded, as a
      kubelet would report it; never on a node, so its log is 204 No Content: nothing
      printed, kubectl exits 0), or, where the API server refuses the pod (a quota), the
      Job controller's FailedCreate event on the Job; Complete only once the submitter's
      pod finished (rayjob_controller.go: the Job's end, then the Ray job's), its cluster
      deleted, and the RayJob too where the operator runs with
      DELETE_RAYJOB_CR_AFTER_JOB_FINISHES (delete_at_complete); a RayJob being deleted
      loses its finalizer."""

    def __init__(self, testbed):
        super().__init__(daemon=True)
        self.bed, self.stopped = testbed, threading.Event()
        self.ticks: dict[str, int] = {}
        self.running_since: dict[str, int] = {}
        self.delete_at_complete = False

    def run(self):
        while not self.stopped.wait(0.2):
            try:
                self.reconcile_clusters()
                self.reconcile_jobs()
            except RuntimeError:
                pass  # refused (a 404, a 409, an account without its token yet): look again next tick

    def ensure(self, path: str, body: dict) -> None:
        """Create the object unless it exists (409 AlreadyExists)."""
        try:
            self.bed.api("POST", path, body)
        except RuntimeError as e:
            if not str(e).startswith("409"):
                raise

    def reconcile_clusters(self):
        api, ns = self.bed.api, f"/api/v1/namespaces/{NAMESPACE}"
        pods = {p["metadata"]["name"]: p for p in items(self.bed, f"{ns}/pods")}
        for cluster in items(self.bed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters"):
            meta, spec = cluster["metadata"], cluster["spec"]
            if meta.get("deletionTimestamp"):
                continue
            owner = [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": meta["name"],
                      "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]
            autoscaled = bool(spec.get("enableInTreeAutoscaling"))
            if autoscaled and not spec["headGroupSpec"]["template"]["spec"].get("serviceAccountName"):
                self.ensure(f"{ns}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                      "metadata": {"name": meta["name"], "ownerReferences": owner}})
            groups = [("head", "headgroup", 1, spec["headGroupSpec"])] + [
                ("worker", g["groupName"], g.get("minReplicas", 0), g) for g in spec.get("workerGroupSpecs", [])]
            for node_type, group, count, group_spec in groups:
                for i in range(count):
                    name = f"{meta['name']}-head" if node_type == "head" else f"{meta['name']}-{group}-{i}"
                    if name not in pods:
                        template = group_spec["template"]
                        pod_spec = copy.deepcopy(template["spec"])
                        if node_type == "head" and autoscaled:
                            pod_spec["containers"].append({
                                "name": "autoscaler", "image": pod_spec["containers"][0]["image"],
                                "resources": {"requests": AUTOSCALER_RESOURCES, "limits": AUTOSCALER_RESOURCES}})
                            pod_spec.setdefault("serviceAccountName", meta["name"])
                        labels = (template.get("metadata") or {}).get("labels", {}) | {
                            "ray.io/cluster": meta["name"], "ray.io/node-type": node_type, "ray.io/group": group}
                        api("POST", f"{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
                            "name": name, "ownerReferences": owner, "labels": labels}, "spec": pod_spec})
                    if not ready(pods.get(name, {})):
                        api("PATCH", f"{ns}/pods/{name}/status", {"status": {
                            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}, MERGE)
            self.ensure(f"{ns}/services", {"apiVersion": "v1", "kind": "Service", "metadata": {
                "name": f"{meta['name']}-head-svc", "ownerReferences": owner},
                "spec": {"ports": [{"port": 8265}], "selector": {"ray.io/cluster": meta["name"]}}})
            self.ensure(f"{ns}/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {
                "name": meta["name"], "ownerReferences": owner}, "stringData": {"auth_token": "t0ken"}})

    def reconcile_jobs(self):
        api, jobs = self.bed.api, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
        for job in items(self.bed, jobs):
            meta, name = job["metadata"], job["metadata"]["name"]
            if meta.get("deletionTimestamp"):
                api("PATCH", f"{jobs}/{name}", {"metadata": {"finalizers": None}}, MERGE)
                continue
            if FINALIZER not in meta.get("finalizers", []):
                api("PATCH", f"{jobs}/{name}", {"metadata": {"finalizers": [FINALIZER]}}, MERGE)
                continue
            uid, state = meta["uid"], (job.get("status") or {}).get("jobDeploymentStatus")
            tick = self.ticks[uid] = self.ticks.get(uid, 0) + 1
            cluster = f"{name}-{uid[:5]}"
            if not state:
                self.ensure(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters", {
                    "apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": job["spec"]["rayClusterSpec"],
                    "metadata": {"name": cluster, "ownerReferences": [{
                        "apiVersion": "ray.io/v1", "kind": "RayJob", "name": name, "uid": uid,
                        "controller": True, "blockOwnerDeletion": True}]}})
                status = {"jobDeploymentStatus": "Initializing", "rayClusterName": cluster}
            elif state == "Initializing" and tick >= 3:
                self.start_submitter(job, cluster)
                self.running_since[uid] = tick
                status = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "jobId": name}
            elif state == "Running":
                pod = self.submitter_pod(job, cluster, tick - self.running_since.get(uid, tick))
                if pod is None or pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                    continue  # K8sJobMode: Complete only once the submitter finished
                try:
                    api("DELETE", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters/{cluster}")
                except RuntimeError as e:
                    if not str(e).startswith("404"):
                        raise
                status = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
                if self.delete_at_complete:  # within the same reconcile: no poll of the kit's sees Complete
                    api("PATCH", f"{jobs}/{name}", {"metadata": {"finalizers": None}}, MERGE)
                    api("DELETE", f"{jobs}/{name}")
                    continue
            else:
                continue
            api("PATCH", f"{jobs}/{name}/status", {"status": status}, MERGE)

    def start_submitter(self, job: dict, cluster: str) -> None:
        """The submitter Job of a RayJob in K8sJobMode, as the operator makes it (named
        after the RayJob, owned by it, backoffLimit 2, the template with the submit
        command), and the pod a Job controller would make of it."""
        meta, ns = job["metadata"], f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
        template = copy.deepcopy(job["spec"].get("submitterPodTemplate") or {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "ray-job-submitter",
                                                               "image": "rayproject/ray:2.60.0"}]}})
        template["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", (
            f"ray job submit --address http://{cluster}-head-svc:8265 --submission-id {meta['name']} "
            f"-- {job['spec']['entrypoint']}")]
        made_by = {"ray.io/originated-from-cr-name": meta["name"], "ray.io/originated-from-crd": "RayJob",
                   "app.kubernetes.io/created-by": "kuberay-operator"}
        template.setdefault("metadata", {})["labels"] = template["metadata"].get("labels", {}) | made_by
        self.ensure(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": meta["name"], "labels": made_by, "ownerReferences": [{
                "apiVersion": "ray.io/v1", "kind": "RayJob", "name": meta["name"], "uid": meta["uid"],
                "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"backoffLimit": 2, "template": template}})

    def submitter_pod(self, job: dict, cluster: str, ticks_running: int) -> dict | None:
        """The Job controller's and the kubelet's part: the Job's pod made (or, refused by
        the API server, a FailedCreate event on the Job, as the Job controller records
        it), then Running, then Succeeded after RUNNING_TICKS. None while it has none."""
        meta, api = job["metadata"], self.bed.api
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        name = f"{meta['name']}-submitter"
        try:
            pod = api("GET", f"{pods}/{name}")
        except RuntimeError as e:
            if not str(e).startswith("404"):
                raise
            submitter = api("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{meta['name']}")
            try:  # with the selector labels the API server added to the Job's template
                pod = api("POST", pods, {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "labels": submitter["spec"]["template"]["metadata"]["labels"],
                                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                                      "uid": submitter["metadata"]["uid"], "controller": True,
                                                      "blockOwnerDeletion": True}]},
                    "spec": submitter["spec"]["template"]["spec"]})
            except RuntimeError as refused:
                said = str(refused)[4:]
                try:  # the API server's Status: its message is what the Job controller records
                    said = json.loads(said).get("message", said)
                except ValueError:
                    pass
                self.ensure(f"/api/v1/namespaces/{NAMESPACE}/events", {
                    "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "FailedCreate",
                    "metadata": {"name": f"{meta['name']}.failedcreate"},
                    "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                       "namespace": NAMESPACE, "uid": submitter["metadata"]["uid"]},
                    "message": f"Error creating: {said[:300]}", "source": {"component": "job-controller"}})
                return None
        phase = (pod.get("status") or {}).get("phase")
        wanted = "Succeeded" if ticks_running >= RUNNING_TICKS else "Running"
        if phase != wanted and phase not in ("Succeeded", "Failed"):
            pod = api("PATCH", f"{pods}/{name}/status", {"status": {"phase": wanted}}, MERGE)
        return pod


def ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions", []))


def leaves(node, path=()):
    """(path, value) of every scalar in a JSON document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from leaves(value, path + (i,))
    else:
        yield path, node


def at(node, path):
    for key in path:
        node = node[key]
    return node


def test_up_status_monitor_and_down_as_a_user_with_only_the_rendered_role(testbed, kit, tmp_path):
    up = kit("up", "--cluster", CLUSTER)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "preflight: Kubernetes v1.20.2" in up.stdout and "cluster 'k8s_hetero' is up" in up.stdout
    # the API server kept every field the kit rendered: none pruned as unknown to the CRD
    applied = json.loads((tmp_path / "build" / "launched" / f"{CLUSTER}.yaml").read_text())
    stored = testbed.api("GET", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters/{NAME}")
    pruned = []
    for path, value in leaves(applied["spec"]):
        try:
            kept = at(stored["spec"], path)
        except (KeyError, IndexError, TypeError):
            kept = "<pruned>"
        if kept != value:
            pruned.append(f"spec.{'.'.join(map(str, path))}: {value!r} -> {kept!r}")
    assert not pruned, pruned

    status = kit("status", "--cluster", CLUSTER)
    assert status.returncode == 0, status.stderr
    assert f"{NAME}-head" in status.stdout and f"{NAME}-cpu-worker-0" in status.stdout
    # the autoscaler's log (pods/log): authorized by the Role; with no kubelet behind the
    # pod, the API server answers with no lines
    monitor = kit("monitor", "--cluster", CLUSTER)
    assert monitor.returncode == 0 and "Forbidden" not in monitor.stderr, monitor.stderr

    down = kit("down", "--cluster", CLUSTER)
    assert down.returncode == 0, down.stdout + down.stderr
    # the pods, the head Service and the Secret: deleted by the garbage collector, never
    # named by the kit (nor could it: the Role may not delete them)
    assert "none of its pods is left" in down.stdout
    ns = f"/api/v1/namespaces/{NAMESPACE}"
    assert ours(testbed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters") == []
    assert ours(testbed, f"{ns}/pods") == []
    # (the `default` account's token stays: the namespace's own; the cluster's account and
    # its token go with the RayCluster)
    wait_until(lambda: ours(testbed, f"{ns}/services") == [] and [
        s["metadata"]["name"] for s in items(testbed, f"{ns}/secrets")
        if s["metadata"].get("annotations", {}).get("kubernetes.io/service-account.name") != "default"] == []
        and ours(testbed, f"{ns}/serviceaccounts") == ["default"])


def wait_until(condition, timeout_s: float = 60):
    import time
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time-out"
        time.sleep(0.3)


def test_run_deletes_its_finalized_rayjob_with_the_roles_rights(testbed, kit):
    """Problem 2 of issue 33 on a real API server: the RayJob carries the operator's
    finalizer, `kubectl delete --wait` then needs list and watch, which the Role does not
    grant; `make run` deletes with what it has, and succeeds."""
    run = kit("run", "--cluster", CLUSTER, "--job", "smoke", "--timeout", "900")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "RayJob k8s-hetero: Complete, job SUCCEEDED" in run.stdout
    # no kubelet serves the submitter's log here: a success without its RESULT line is said
    assert ("RayJob k8s-hetero: the job SUCCEEDED, but no log of its submitter held its RESULT line "
            "(the log was cut, or the job printed none): no summary kept") in run.stdout
    assert "Forbidden" not in run.stdout + run.stderr
    assert f"RayJob {NAME} deleted; none of its cluster {NAME}-" in run.stdout
    # Issue 45's problem 1: the submitter's pod is not on a node, so its log is 204 No
    # Content, kubectl prints nothing and exits 0. The kit asked again while the job ran
    # (it once took that for the whole log, and never asked again).
    reads = [e for e in testbed.log_reads() if e["objectRef"].get("name") == f"{NAME}-submitter"]
    assert len(reads) >= 2, reads
    assert {(e["user"]["username"], e["responseStatus"]["code"]) for e in reads} == {(kube_testbed.USER, 204)}
    ns = f"/api/v1/namespaces/{NAMESPACE}"
    assert ours(testbed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs") == []
    wait_until(lambda: ours(testbed, f"{ns}/pods") == [])  # the submitter's: its Job's, the RayJob's
    assert ours(testbed, f"{ns}/configmaps") == []  # owned by the RayJob, and deleted by the kit

    # the same deletion the way kubectl does it by default: the Role's user cannot wait
    created = testbed.api("POST", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs", {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": NAME},
        "spec": {"entrypoint": "true", "shutdownAfterJobFinishes": True,
                 "rayClusterSpec": {"headGroupSpec": {"template": {"spec": {
                     "containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}}}}})
    wait_until(lambda: FINALIZER in testbed.api(
        "GET", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs/{NAME}")["metadata"].get("finalizers", []))
    testbed.api("PATCH", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs/{NAME}/status",
                {"status": {"jobDeploymentStatus": "Complete"}}, MERGE)
    waited = user_kubectl(testbed, "delete", "rayjob", NAME, "--wait=true", "--timeout=20s")
    assert waited.returncode != 0 and "timed out waiting" in waited.stderr, waited.stderr
    assert 'User \\"raykit-user\\" cannot list resource \\"rayjobs\\"' in waited.stderr
    assert created["metadata"]["name"] == NAME
    wait_until(lambda: ours(testbed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs") == [])
    wait_until(lambda: ours(testbed, f"{ns}/pods") == [])


def test_the_role_grants_the_kits_names_only(testbed):
    """Another team's RayCluster in the namespace: the Role's user can neither read, list
    nor delete it; its own names it may."""
    other = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "other-team"},
             "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
                 {"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}}}}
    testbed.api("POST", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters", other)
    try:
        for args in (("get", "raycluster", "other-team"), ("delete", "raycluster", "other-team"),
                     ("get", "rayclusters"), ("delete", "pods", "other-team-head"),
                     ("get", "secret", "other-team")):
            refused = user_kubectl(testbed, *args)
            assert refused.returncode != 0 and "Forbidden" in refused.stderr, (args, refused.stderr)
        assert user_kubectl(testbed, "auth", "can-i", "delete", f"rayclusters.ray.io/{NAME}").stdout.strip() == "yes"
    finally:
        testbed.api("DELETE", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters/other-team")
        wait_until(lambda: ours(testbed, f"/api/v1/namespaces/{NAMESPACE}/pods") == [])


def test_job_files_past_the_annotation_cap_are_created_not_applied(testbed, kit):
    """The API server caps an object's annotations at 256 KiB: client-side `kubectl apply`
    of the job-files ConfigMap with 300 KiB of files is refused; the kit creates it, and a
    run with such a job folder goes through."""
    files = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{NAME}-job-files"},
             "data": {"weights.txt": "x" * (300 * 1024)}}
    applied = user_kubectl(testbed, "apply", "-f", "-", stdin=json.dumps(files))
    assert applied.returncode != 0 and "Too long: must have at most 262144 bytes" in applied.stderr
    assert ours(testbed, f"/api/v1/namespaces/{NAMESPACE}/configmaps") == []

    job = USER_JOBS / f"k8s_real_{uuid.uuid4().hex[:6]}"
    job.mkdir()
    (job / "main.py").write_text("print('hello')\n")
    (job / "weights.bin").write_bytes(os.urandom(300 * 1024))
    run = kit("run", "--cluster", CLUSTER, "--job", job.name)
    assert run.returncode == 0, run.stdout + run.stderr
    assert ours(testbed, f"/api/v1/namespaces/{NAMESPACE}/configmaps") == []


def test_an_idle_clusters_watchdog_may_delete_it_and_nothing_else(testbed, kit, tmp_path, capsys):
    """The watchdog's DELETE (scripts/node/autostop.py) with the head pod's own account
    token, over TLS checked against the API server's certificate: the Role `make render`
    writes lets it delete its RayCluster (the pods go with it) and refuses it another's."""
    assert kit("up", "--cluster", CLUSTER).returncode == 0
    account = tmp_path / "serviceaccount"
    account.mkdir()
    minted = testbed.api("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{NAME}/token",
                         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    (account / "token").write_text(minted["status"]["token"])
    (account / "ca.crt").write_bytes((testbed.folder / "certs" / "apiserver.crt").read_bytes())
    other = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "other-team"},
             "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
                 {"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}}}}
    testbed.api("POST", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters", other)
    try:
        # the watchdog's first line: a dry-run DELETE proves its right, and deletes nothing
        assert autostop.delete_right(testbed.server, NAMESPACE, NAME, str(account)) == (
            f"autostop: may delete RayCluster {NAMESPACE}/{NAME} (a dry-run DELETE was allowed)")
        assert NAME in ours(testbed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters")
        assert autostop.delete_right(testbed.server, NAMESPACE, "other-team", str(account)).startswith(
            f"autostop: cannot delete RayCluster {NAMESPACE}/other-team (HTTP 403 Forbidden): after "
            "autostop_minutes with no job it bills on until `make down`")
        assert not autostop.delete_raycluster(testbed.server, NAMESPACE, "other-team", str(account),
                                              attempts=1, retry_s=0)
        assert "deleting failed (HTTP 403 Forbidden)" in capsys.readouterr().out  # not a TLS error
        assert autostop.delete_raycluster(testbed.server, NAMESPACE, NAME, str(account), attempts=1, retry_s=0)
        wait_until(lambda: not any(p.startswith(f"{NAME}-") for p in ours(testbed, f"/api/v1/namespaces/{NAMESPACE}/pods")))
        status = kit("status", "--cluster", CLUSTER)
        assert status.returncode == 2 and f"RayCluster {NAME} is gone" in status.stderr
        assert kit("down", "--cluster", CLUSTER).returncode == 0
    finally:
        testbed.api("DELETE", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters/other-team")
        wait_until(lambda: ours(testbed, f"/api/v1/namespaces/{NAMESPACE}/pods") == [])


def test_a_submitter_a_quota_refuses_fails_the_run_within_ready_timeout_with_the_quotas_words(testbed, kit):
    """A namespace quota sized to the RayCluster (as docs/kubernetes.md recommends) refuses
    the submitter's pod: the API server's own quota admission here, the Job controller's
    FailedCreate on the Job played. The RayJob stays Running; the kit fails in
    ready_timeout_minutes with the quota's words and deletes it, instead of billing to
    activeDeadlineSeconds."""
    quotas = f"/api/v1/namespaces/{NAMESPACE}/resourcequotas"
    testbed.api("POST", quotas, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "ray-quota"},
                                 "spec": {"hard": {"count/pods": "3"}}})  # the head and two workers
    try:
        wait_until(lambda: testbed.api("GET", f"{quotas}/ray-quota").get("status", {}).get("hard"))
        run = kit("run", "--cluster", CLUSTER, "--job", "smoke", "--timeout", "900", RAYKIT_READY_TIMEOUT_S="20")
    finally:
        testbed.api("DELETE", f"{quotas}/ray-quota")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "RayJob k8s-hetero: its submitter never ran within 20 s (ready_timeout_minutes): FailedCreate: " \
           "Error creating: pods \"k8s-hetero-submitter\" is forbidden: exceeded quota: ray-quota" in run.stdout
    assert ours(testbed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs") == []
    wait_until(lambda: ours(testbed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters") == [])


def test_a_rayjob_the_operator_deletes_at_complete_ends_the_run_without_an_error(testbed, kit):
    """DELETE_RAYJOB_CR_AFTER_JOB_FINISHES=true: the next `get rayjob` is NotFound; the run
    said `kubectl get rayjob ... failed: NotFound` and exited non-zero."""
    operator = next(t for t in threading.enumerate() if isinstance(t, PlayedOperator))
    operator.delete_at_complete = True
    try:
        run = kit("run", "--cluster", CLUSTER, "--job", "smoke", "--timeout", "900")
    finally:
        operator.delete_at_complete = False
    assert "NotFound" not in run.stdout + run.stderr and "Traceback" not in run.stderr, run.stdout + run.stderr
    assert "RayJob k8s-hetero was deleted by the KubeRay operator" in run.stdout
    assert run.returncode == 1  # no kubelet serves its log here: no RESULT read, no success claimed
    wait_until(lambda: ours(testbed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs") == [])


def test_a_cluster_is_reached_in_its_own_context_after_kubectl_switched_to_another(testbed, kit, tmp_path):
    """Its record pins the context and its server: after `use-context` to another cluster
    (unreachable here) status and down still reach this one, as its Role's user; the
    recorded context pointed at another server is refused before any call."""
    config = json.loads(testbed.kubeconfig.read_text())
    config["clusters"].append({"name": "staging", "cluster": {"server": "https://127.0.0.1:1"}})
    config["contexts"].append({"name": "staging", "context": {"cluster": "staging", "user": "user"}})
    mine = tmp_path / "kubeconfig"
    mine.write_text(json.dumps(config))
    up = kit("up", "--cluster", CLUSTER, KUBECONFIG=str(mine))
    assert up.returncode == 0, up.stdout + up.stderr
    record = json.loads((tmp_path / "build" / "launched" / f"{CLUSTER}.json").read_text())
    assert (record["context"], record["server"]) == ("user", testbed.server)
    mine.write_text(json.dumps(config | {"current-context": "staging"}))
    status = kit("status", "--cluster", CLUSTER, KUBECONFIG=str(mine))
    assert status.returncode == 0 and f"{NAME}-head" in status.stdout, status.stderr
    moved = copy.deepcopy(config)
    moved["contexts"][-2:] = [{"name": "user", "context": {"cluster": "staging", "user": "user"}}]
    (tmp_path / "moved").write_text(json.dumps(moved))
    refused = kit("down", "--cluster", CLUSTER, KUBECONFIG=str(tmp_path / "moved"))
    assert refused.returncode == 2 and "now points at 'https://127.0.0.1:1'" in refused.stderr, refused.stderr
    down = kit("down", "--cluster", CLUSTER, KUBECONFIG=str(mine))
    assert down.returncode == 0, down.stdout + down.stderr
    assert ours(testbed, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters") == []
