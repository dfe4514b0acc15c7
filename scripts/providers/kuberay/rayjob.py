"""`make run` on KubeRay: the job as a RayJob, whose cluster the operator deletes when the
job ends, or when its time limit passes, whatever happens to this machine.

The job's folder and the kit's job library travel in a ConfigMap, mounted in the RayJob's
submitter pod: its `ray job submit` uploads them as the job's working_dir and py_modules,
as `make submit` does from here. The ConfigMap is owned by the RayJob (Kubernetes deletes
it with it). This machine follows the submitter's log, keeps the job's summary, then
deletes the RayJob and checks that none of its cluster's pods is left; on Ctrl-C it
deletes the RayJob at once (the operator then deletes its cluster).
"""

import base64
import fnmatch
import json
import re
import shlex
import subprocess
import time

from scripts.core import submit
from scripts.core.errors import KitError
from scripts.core.signals import signals_deferred
from scripts.core.inputs import job_dir, job_requirements
from scripts.core.paths import JOB_LIBRARY, RESULTS
from scripts.core.submit import JobFiles, JobPackages
from scripts.providers.kuberay import crd, watchdog
from scripts.providers.kuberay import kubectl as kube
from scripts.providers.kuberay.launch import no_operator_s, ready_timeout_s

CLUSTER_LABEL = "raykit.dev/cluster"  # on every pod of the kit's clusters (render.py)
FILES_MOUNT = "/home/ray/raykit-job"  # in the submitter pod: the job's folder and the library
MAX_FILES_BYTES = 900 * 1024  # a ConfigMap holds 1 MiB at most, its keys and paths included
TTL_AFTER_FINISHED_S = 0  # the operator deletes the cluster as soon as the job ends
# RayJob status.jobDeploymentStatus once it is over: the job ended, failed, or the operator
# refused the RayJob (ValidationFailed: it never creates a cluster, and stays so for ever)
FINISHED = ("Complete", "Failed", "ValidationFailed")
NOT_STARTED = ("", "PENDING")  # status.jobStatus of a Ray job that never began to run
CONFIGMAP_KEY = re.compile(r"[-._A-Za-z0-9]{1,200}")  # what the API server takes as a key


def files(job: str) -> dict[str, tuple[str, bytes]]:
    """{ConfigMap key: (path under FILES_MOUNT, content)}: the job's folder and the job
    library, regular files only (a symlink could lead anywhere on this machine), without
    what submit.EXCLUDES leaves out."""
    found = {}
    for root, prefix in ((job_dir(job), job), (JOB_LIBRARY, "raykit")):
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if any(fnmatch.fnmatch(part, pattern) for part in relative.parts for pattern in submit.EXCLUDES):
                continue
            if path.is_symlink():
                raise KitError(f"{path}: a symlink; a RayJob carries regular files only, copy it in")
            if path.is_file():
                if not CONFIGMAP_KEY.fullmatch(path.name):
                    raise KitError(f"{path}: a ConfigMap carries file names of letters, digits, "
                                   "'-', '_' and '.' only; rename it")
                key = f"{prefix}/{relative}".replace("/", "__")
                found[key] = (f"{prefix}/{relative}", path.read_bytes())
    size = sum(len(k) + len(p) + len(c) for k, (p, c) in found.items())
    if size > MAX_FILES_BYTES:
        raise KitError(f"JOB={job}: its folder and the job library are {size // 1024} KiB; a RayJob "
                       f"carries them in a ConfigMap (at most {MAX_FILES_BYTES // 1024} KiB): read "
                       "data from a volume, or bake large files into the image")
    return found


# `ray job submit` and a log to follow: small, so that it fits beside the head (the head's
# fit rule counts it: values.HEAD_NEIGHBOURS)
SUBMITTER_RESOURCES = {"requests": {"cpu": "200m", "memory": "512Mi", "ephemeral-storage": "1Gi"},
                       "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2Gi"}}


def resources(built, job: str, args: list[str], timeout_s: float, verbose: bool,
              job_packages: JobPackages, job_files: JobFiles, env_vars: dict | None = None) -> tuple[dict, dict]:
    """(the ConfigMap of the job's files, the RayJob), checked against the CRD and the
    operator's rules."""
    cluster = watchdog.without(built.config)
    name = cluster["metadata"]["name"]
    carried = files(job)
    text = {k: c.decode() for k, (_, c) in carried.items() if is_text(c)}
    config_map = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": f"{name}-job-files", "namespace": cluster["metadata"]["namespace"],
                     "labels": kube.MANAGED_BY},
        "data": text,
        "binaryData": {k: base64.b64encode(c).decode() for k, (_, c) in carried.items() if k not in text},
    }
    # as `make submit` sends it, with the folders where the submitter pod has them
    runtime_env = submit.job_runtime_env(job, job_requirements(job), job_packages, job_files, verbose,
                                         env_vars)
    runtime_env |= {"working_dir": f"{FILES_MOUNT}/{job}", "py_modules": [f"{FILES_MOUNT}/raykit"]}
    head_pod = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    submitter = {
        "metadata": {"labels": kube.MANAGED_BY},
        "spec": {
            "restartPolicy": "Never",
            # the head's service account, if the values name one (it may read the data)
            **({"serviceAccountName": head_pod["serviceAccountName"]} if "serviceAccountName" in head_pod else {}),
            "automountServiceAccountToken": False,
            "imagePullSecrets": head_pod["imagePullSecrets"],
            # where the head may run, so may the submitter: without the head's tolerations, on
            # a cluster whose every pool is tainted it stayed Pending while the RayJob ran to
            # its deadline. Beside the head where there is room, but not bound to the head's
            # node type: the head's selector made a node autoscaler buy a GPU node for this
            # 200m pod when the head's node was full
            **({"tolerations": head_pod["tolerations"]} if head_pod.get("tolerations") else {}),
            "affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"ray.io/node-type": "head",
                                                      CLUSTER_LABEL: cluster["metadata"]["name"]}}}}]}},
            "containers": [{
                "name": "ray-job-submitter",
                "image": built.values["images"]["cpu"],
                "resources": SUBMITTER_RESOURCES,
                "securityContext": {"allowPrivilegeEscalation": False},
                "volumeMounts": [{"name": "job-files", "mountPath": FILES_MOUNT, "readOnly": True}],
            }],
            "volumes": [{"name": "job-files", "configMap": {
                "name": config_map["metadata"]["name"],
                "items": [{"key": k, "path": p} for k, (p, _) in carried.items()]}}],
        },
    }
    ray_job = {
        "apiVersion": crd.API_VERSION, "kind": "RayJob",
        "metadata": {"name": name, "namespace": cluster["metadata"]["namespace"],
                     "labels": kube.MANAGED_BY | {"raykit.dev/job": job}},
        "spec": {
            "entrypoint": shlex.join(["python", *submit.WATCHED, submit.ENTRYPOINT, *args]),
            "runtimeEnvYAML": json.dumps(runtime_env),  # JSON is YAML: no string becomes structure
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "activeDeadlineSeconds": max(1, int(timeout_s)),
            # pods that cannot be scheduled fail the job here, not at activeDeadlineSeconds
            "preRunningDeadlineSeconds": built.values["ready_timeout_minutes"] * 60,
            "backoffLimit": 0,
            "submitterPodTemplate": submitter,
            "rayClusterSpec": cluster["spec"],
        },
    }
    problems = crd.problems(ray_job)
    if problems:
        raise KitError(f"the RayJob for JOB={job}: " + "; ".join(problems[:3]))
    return config_map, ray_job


def plan(built, job: str, args: list[str], timeout_s: float, job_packages: JobPackages,
         job_files: JobFiles) -> list[str]:
    """What `run` would create, in lines a person reads (`make run DRY_RUN=1`): checked as
    `run` checks it, created nowhere."""
    config_map, ray_job = resources(built, job, args, timeout_s, False, job_packages, job_files)
    spec, where = ray_job["spec"], kube.target(built.values)
    runtime_env = json.loads(spec["runtimeEnvYAML"])
    size = len(json.dumps(config_map))
    images = sorted({c["image"] for group in [spec["rayClusterSpec"]["headGroupSpec"],
                                              *spec["rayClusterSpec"]["workerGroupSpecs"]]
                     for c in group["template"]["spec"]["containers"]})
    return [
        f"a RayJob '{ray_job['metadata']['name']}' in namespace {where['namespace']} of "
        f"{where['context'] or 'kubectl’s current context'}, running `{spec['entrypoint']}`",
        f"  files: ConfigMap {config_map['metadata']['name']}, {size // 1024} KiB "
        f"({len(config_map['data']) + len(config_map['binaryData'])} files: the job's folder and jobs/raykit)",
        f"  limits: stopped after {spec['activeDeadlineSeconds']} s (TIMEOUT: activeDeadlineSeconds); "
        f"failed if its pods are not running within {spec['preRunningDeadlineSeconds']} s "
        "(ready_timeout_minutes: preRunningDeadlineSeconds)",
        f"  its cluster is deleted when the job ends (ttlSecondsAfterFinished: "
        f"{spec['ttlSecondsAfterFinished']}); images: {', '.join(images)}",
        "  packages: " + (f"pip-installs {', '.join(runtime_env['pip']['packages'])} on each pod as the job "
                          "starts (CPU torch on CPU pods)" if "pip" in runtime_env
                          else "none beyond the image's"),
        "  its cluster's pods, on the node groups their selectors match (those bill, not the kit):",
    ]


def is_text(content: bytes) -> bool:
    try:
        content.decode()
    except UnicodeDecodeError:
        return False
    return True


def run(built, job: str, args: list[str], timeout_s: float, verbose: bool,
        job_packages: JobPackages, job_files: JobFiles, env_vars: dict | None = None) -> tuple[int, dict | None]:
    """Apply the ConfigMap and the RayJob, follow the job to its end, keep its summary,
    delete the RayJob (and with it what the operator has not deleted yet)."""
    config_map, ray_job = resources(built, job, args, timeout_s, verbose, job_packages, job_files, env_vars)
    where = kube.pinned_target(built.values)  # the one cluster, whatever kubectl's current context becomes
    name = ray_job["metadata"]["name"]
    kube.require_rights(where, ["rayjobs.ray.io", "configmaps"])
    if kube.exists(where, "rayjob", name):
        raise KitError(f"a RayJob '{name}' already exists in namespace {where['namespace']}; "
                       f"wait for it, or `kubectl -n {where['namespace']} delete rayjob {name}`")
    if kube.exists(where, "raycluster", name):  # KubeRay would point its service at the job's
        raise KitError(f"a RayCluster '{name}' runs in namespace {where['namespace']} (`make up`?): "
                       f"a RayJob of that name would take over its head service {name}-head-svc; "
                       f"`make submit` to it, or `make down` it first")
    if kube.exists(where, "configmap", config_map["metadata"]["name"]):
        raise KitError(f"a ConfigMap '{config_map['metadata']['name']}' already exists in namespace "
                       f"{where['namespace']} (left by a `make run` that crashed?); `kubectl -n "
                       f"{where['namespace']} delete configmap {config_map['metadata']['name']}`")
    applied = False
    try:
        # created, not applied: client-side `apply` would copy the files into an annotation,
        # which the API server caps at 256 KiB
        kube.run_kubectl(where, "create", "-f", "-", stdin=json.dumps(config_map))
        applied = True
        created = kube.json_object(kube.run_kubectl(where, "create", "-f", "-", "-o", "json",
                                                    stdin=json.dumps(ray_job)).stdout,
                                   "kubectl create -f - -o json")
        own(where, config_map, created)
        print(f"RayJob {name} created in namespace {where['namespace']} (the operator deletes its "
              f"cluster when the job ends, or after {timeout_s:g} s)", flush=True)
        code, summary, job_id = follow(where, name, verbose, ready_timeout_s(built.values))
        if summary is not None:
            submit.keep_result(RESULTS, job_id, job, args, code, summary)
        return code, summary
    finally:
        if applied:
            print(f"deleting RayJob {name}", flush=True)
            with signals_deferred():
                print(delete(where, name, config_map["metadata"]["name"]), flush=True)


def own(where: dict, config_map: dict, ray_job: dict) -> None:
    """Make the RayJob the ConfigMap's owner: Kubernetes deletes the files with the job."""
    owner = [{"apiVersion": crd.API_VERSION, "kind": "RayJob", "name": ray_job["metadata"]["name"],
              "uid": ray_job["metadata"]["uid"], "blockOwnerDeletion": False}]
    kube.run_kubectl(where, "patch", "configmap", config_map["metadata"]["name"], "--type", "merge",
                        "-p", json.dumps({"metadata": {"ownerReferences": owner}}))


class Submitter:
    """The RayJob's submitter pods, as the Job controller makes them: each prints `ray job
    submit`'s lines and then the job's log. A retried pod (the log stream cut, backoffLimit
    2) prints the job's log again from its start, and kubectl's stream of a pod can end
    before the pod does (the API server, log rotation): each pod is followed by name, the
    newest first, and a line already printed as often as now is not printed again."""

    def __init__(self, where: dict, name: str, verbose: bool):
        self.where, self.name, self.verbose = where, name, verbose
        self.printed: dict[str, int] = {}  # each line, as often as it was printed
        self.results: list[str] = []
        self.read_to_end: set[str] = set()  # pods that had ended before their log was read
        self.colour = submit.colour_wanted()

    def pods(self) -> list[dict]:
        """The Job's pods, oldest first (the Job controller labels them job-name)."""
        found = kube.get_json(self.where, "pods", "-l", f"job-name={self.name}").get("items", [])
        return sorted(found, key=lambda p: (p.get("metadata", {}).get("creationTimestamp") or "",
                                            p.get("metadata", {}).get("name", "")))

    @property
    def heard(self) -> bool:
        return bool(self.printed)

    def follow_newest(self) -> None:
        """Stream the newest pod that has a log not yet read to its end."""
        pods = [p for p in self.pods() if p.get("status", {}).get("phase") in ("Running", "Succeeded", "Failed")]
        if not pods or pods[-1]["metadata"]["name"] in self.read_to_end:
            return
        pod = pods[-1]
        ended = pod["status"]["phase"] in ("Succeeded", "Failed")
        if self.stream(pod["metadata"]["name"]) and ended:
            self.read_to_end.add(pod["metadata"]["name"])

    def stream(self, pod: str) -> bool:
        """One pod's log, followed until kubectl's stream ends; whether it printed a line
        (a pod not yet on a node answers 204: nothing, exit 0; kube-apiserver's pod-log
        handler). kubectl's own complaints while the container starts are not the job's."""
        command = kube.kubectl(self.where, "logs", "--follow", f"pod/{pod}")
        this_pod: dict[str, int] = {}
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
            for line in proc.stdout:
                this_pod[line] = this_pod.get(line, 0) + 1
                if this_pod[line] <= self.printed.get(line, 0):
                    continue  # printed already, from an earlier pod or stream
                self.printed[line] = this_pod[line]
                print(submit.for_a_person(line, self.name, self.verbose, self.colour), end="", flush=True)
                if line.startswith(submit.RESULT_PREFIX):
                    self.results.append(line)
        return bool(this_pod)

    def why_not_running(self) -> str:
        """Why no submitter pod ran: the Job's events (a quota's or an admission policy's
        FailedCreate) and each pod's scheduling (Unschedulable), in a few words."""
        reasons = []
        for event in kube.get_json(self.where, "events").get("items", []):
            about = event.get("involvedObject") if isinstance(event.get("involvedObject"), dict) else {}
            if about.get("kind") == "Job" and about.get("name") == self.name and event.get("type") == "Warning":
                reasons.append(f"{event.get('reason')}: {str(event.get('message', ''))[:240]}")
        for pod in self.pods():
            for condition in pod.get("status", {}).get("conditions", []):
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                    reasons.append(f"pod {pod['metadata']['name']} {condition.get('reason', 'unscheduled')}: "
                                   f"{str(condition.get('message', ''))[:240]}")
        return "; ".join(reasons[-2:]) or "no pod of its Job was created, and no event says why"


def follow(where: dict, name: str, verbose: bool, ready_timeout_s: float) -> tuple[int, dict | None, str]:
    """Wait for the submitter, stream its log (the job's), then read how the job ended:
    (exit code, summary or None, the job's submission id). A KitError where no operator
    gives the RayJob a status within no_operator_s() (none installed, crash-looping, or
    watching other namespaces: it would be waited on for ever); exit code 1, with the
    reason, where no submitter pod runs within ready_timeout_s of the RayJob's Running (a
    quota, a LimitRange, an admission policy, a full node: the Job controller records it
    on the Job, and the RayJob stays Running to its deadline)."""
    submitter, shown, status, found = Submitter(where, name, verbose), None, {}, {}
    started, running_since = time.monotonic(), None
    while True:
        answer = kube.run_kubectl(where, "get", "rayjob", name, "-o", "json", check=False)
        if answer.returncode != 0 and kube.missing(answer) and status.get("jobDeploymentStatus"):
            # DELETE_RAYJOB_CR_AFTER_JOB_FINISHES=true: the operator deletes it at its end
            print(f"RayJob {name} was deleted by the KubeRay operator (its "
                  "DELETE_RAYJOB_CR_AFTER_JOB_FINISHES) once it finished; what its log said is kept", flush=True)
            submitter.follow_newest()
            code = 0 if submitter.results and status.get("jobStatus") != "FAILED" else 1
            return code, result_of(submitter, code == 0, name), status.get("jobId", name)
        if answer.returncode != 0:
            raise KitError(f"`kubectl get rayjob {name}` failed: {kube.kubectl_error(answer)}")
        found = kube.json_object(answer.stdout, f"kubectl get rayjob {name} -o json")
        status = found.get("status") or {}
        deployment = status.get("jobDeploymentStatus")
        line = f"RayJob {name}: {deployment or 'New'}" + (
            f", job {status['jobStatus']}" if status.get("jobStatus") else "")
        if line != shown:
            print(line, flush=True)
            shown = line
        if not deployment and time.monotonic() - started > no_operator_s():
            raise KitError(f"RayJob {name} has no status after {no_operator_s():g} s: no KubeRay operator "
                           f"reconciles RayJobs in namespace {where['namespace']} (not installed, crash-"
                           "looping, or watching other namespaces: its watchNamespace); `kubectl get pods "
                           "-A -l app.kubernetes.io/name=kuberay-operator`")
        if deployment in ("Running", "Complete", "Failed"):
            running_since = running_since or time.monotonic()
            submitter.follow_newest()
        if deployment in FINISHED:
            submitter.follow_newest()  # the newest pod, read to its end
            break
        if deployment == "Running" and not submitter.heard and time.monotonic() - running_since > ready_timeout_s:
            print(f"RayJob {name}: its submitter never ran within {ready_timeout_s:g} s "
                  f"(ready_timeout_minutes): {submitter.why_not_running()}", flush=True)
            return 1, None, status.get("jobId", name)
        time.sleep(kube.poll_s())
    succeeded = status.get("jobStatus") == "SUCCEEDED"
    summary = result_of(submitter, succeeded, name)
    if succeeded:
        return 0, summary, status.get("jobId", name)
    print(f"RayJob {name} {ending(found)}", flush=True)
    if status.get("rayClusterName") and status.get("jobStatus", "") in NOT_STARTED:
        # it never ran: the pods' events say why (unschedulable, an image not pulled)
        cluster = where | {"name": status["rayClusterName"]}
        kube.print_events(cluster, [p["metadata"]["name"] for p in kube.pods(cluster)])
    return 1, summary, status.get("jobId", name)


def result_of(submitter: Submitter, succeeded: bool, name: str) -> dict | None:
    """The job's summary from its RESULT line; a job that succeeded without one says so."""
    try:
        return submit.result_line("".join(submitter.results))
    except KitError:
        if succeeded:
            print(f"RayJob {name}: the job SUCCEEDED, but no log of its submitter held its RESULT "
                  "line (the log was cut, or the job printed none): no summary kept", flush=True)
        return None


def ending(ray_job: dict) -> str:
    """How a RayJob that did not succeed ended, in words: refused by the operator, past its
    time limit while running (TIMEOUT), never running within ready_timeout_minutes, or the
    job's own failure."""
    spec, status = ray_job.get("spec", {}), ray_job.get("status", {})
    message = status.get("message", "")[:300]
    if status.get("jobDeploymentStatus") == "ValidationFailed":
        return f"was refused by the KubeRay operator (ValidationFailed): {message}"
    if status.get("reason") == "PreRunningDeadlineExceeded" or (
            status.get("reason") == "DeadlineExceeded" and status.get("jobStatus", "") in NOT_STARTED):
        # the operator's reason for pods never running (KubeRay >= 1.6), and an older one's
        return (f"never ran: its pods were not running within preRunningDeadlineSeconds "
                f"({spec.get('preRunningDeadlineSeconds')} s, ready_timeout_minutes); the "
                "operator deleted it; the pods' events:")
    if status.get("reason") == "DeadlineExceeded":
        return (f"ran past its limit, activeDeadlineSeconds {spec.get('activeDeadlineSeconds')} s "
                "(TIMEOUT), and the operator stopped it")
    return f"{status.get('reason') or status.get('jobStatus') or 'failed'}: {message}"


def delete(where: dict, name: str, config_map: str) -> str:
    """Delete the RayJob (its cluster and ConfigMap go with it), and check no pod of it is left."""
    status = kube.run_kubectl(where, "get", "rayjob", name, "-o", "json", check=False)
    cluster = (kube.json_object(status.stdout, f"kubectl get rayjob {name} -o json").get("status") or {}
               ).get("rayClusterName") if status.returncode == 0 else None
    try:
        kube.delete(where, "rayjob", name)
    except KitError as e:
        if cluster is None:
            raise
        # its finalizer goes only with a running operator, and the RayJob's cluster's name
        # (<name>-<5 random>) is beyond the Role, which may delete `name` alone
        raise KitError(f"{e}; its RayCluster {cluster} still runs and bills: the KubeRay operator removes "
                       f"the RayJob's finalizer, and the namespace's admin can delete the cluster "
                       f"(`kubectl -n {where['namespace']} delete raycluster {cluster}`)") from None
    kube.delete(where, "configmap", config_map)
    if cluster:
        kube.wait_until_no_pods(where, cluster, f"RayJob {name}")
    return f"RayJob {name} deleted" + (f"; none of its cluster {cluster}'s pods is left" if cluster else "")
