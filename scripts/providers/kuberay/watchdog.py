"""The head pod's watchdog: scripts/node/autostop.py in a container beside Ray's. It stops
a `make submit` job past its TIMEOUT (recorded with the job), this machine closed or not,
and with no job for autostop_minutes (0: never) it deletes its own RayCluster (the
garbage collector then deletes every pod; a node autoscaler then removes their nodes); a
`make run` RayJob's cluster carries none (without, below): the operator deletes that one
when the job ends.

Its right to delete: the head pod runs as the operator's autoscaler account (the values'
kubernetes.service_account, else one named after the cluster, which the operator
creates); `make render` writes, for the namespace's admin to apply once, a Role that may
delete this one RayCluster and a RoleBinding of it to that account (rbac)."""

import base64
import copy

from scripts.core.paths import NODE_PROGRAMS
from scripts.core.restart_loop import RESTART_S, restart_loop  # noqa: F401 (RESTART_S: the loop's, said here)

NAME = "raykit-watchdog"  # the head pod's container that runs scripts/node/autostop.py
# The program travels in the container's arguments, base64-encoded (it never meets a
# shell, and no ConfigMap has to be created and deleted with the cluster): `python -c`
# takes the first argument off and runs it as autostop.py's __main__.
BOOT = ("import base64, sys; "
        "exec(compile(base64.b64decode(sys.argv.pop(1)), 'autostop.py', 'exec'))")
RESOURCES = {"cpu": "100m", "memory": "512Mi"}  # Python, Ray's job client, a poll every 10 s
# The operator gives a head pod of autoscaler v2 restartPolicy Never (v1.7.0 common/pod.go),
# so the kubelet never restarts an exited container: a shell loop does, RESTART_S after any
# exit but its teardown's (0). bash -c's $0 is BOOT, "$@" the program and its arguments.
LOOP = restart_loop('python -c "$0" "$@"')


def container(values: dict, dashboard_port: int) -> dict:
    """The kit's autostop watchdog beside the head's Ray: no job for autostop_minutes, and
    it deletes its own RayCluster through the in-cluster API (scripts/node/autostop.py).
    It reads the jobs through Ray's job API on the pod's loopback, with Ray's token from
    the operator's Secret (the operator sets it only on its own containers)."""
    program = base64.b64encode((NODE_PROGRAMS / "autostop.py").read_bytes()).decode()
    return {
        "name": NAME,
        "image": values["images"]["gpu" if values["head"]["pod"]["gpus"] else "cpu"],
        "command": ["bash", "-c", LOOP, BOOT, program,
                    "--address", f"http://127.0.0.1:{dashboard_port}",
                    "--minutes", str(values["autostop_minutes"]),
                    "--kuberay", values["kubernetes"]["namespace"], values["cluster_name"]],
        "env": [{"name": "RAY_AUTH_MODE", "value": "token"},
                {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {
                    "name": values["cluster_name"], "key": "auth_token"}}}],
        # local disk asked for too: a namespace quota on ephemeral-storage refuses a pod
        # any container of which leaves it out
        "resources": {"requests": RESOURCES | {"ephemeral-storage": "1Gi"},
                      "limits": RESOURCES | {"ephemeral-storage": "1Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }


def without(cluster: dict) -> dict:
    """The RayCluster without the watchdog: a RayJob's cluster is the operator's to delete
    when the job ends (a RayJob's cluster deleted under it would be a RayJob failed, not stopped)."""
    cluster = copy.deepcopy(cluster)
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    head["containers"] = [c for c in head["containers"] if c["name"] != NAME]
    return cluster


def rbac_name(values: dict) -> str:
    """The watchdog's Role and RoleBinding, both named after the cluster."""
    return f"raykit-{values['cluster_name']}-watchdog"


def head_account(values: dict) -> str:
    """The head pod's ServiceAccount as the operator sets it (utils.GetHeadGroupServiceAccountName)."""
    return values["kubernetes"]["service_account"] or values["cluster_name"]


def rbac(values: dict, labels: dict) -> list[dict]:
    """A Role that may delete this one RayCluster, bound to the head pod's account: the
    watchdog's only right beyond the operator's autoscaler Role (get, patch)."""
    name, namespace = rbac_name(values), values["kubernetes"]["namespace"]
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": metadata,
         "rules": [{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["delete"],
                    "resourceNames": [values["cluster_name"]]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": head_account(values), "namespace": namespace}]},
    ]
