"""The checks a KubeRay resource meets before `kubectl` sees it, offline: the pinned
release's CRD schema (what the API server enforces) and the operator's own rules (what it
refuses after the API server accepted the resource, as an event nobody reads).

The CRDs are those of the newest and the oldest supported release (v1.7.0 and v1.6.0),
vendored unchanged (cluster_templates/schema/kuberay-<release>/, SOURCE.md says from
where); a resource must pass both, so that what the kit renders runs on every release it
claims. kubectl validates strictly by default (`--validate=strict`):
an unknown field is an error, not silently dropped, so the schema check adds
`additionalProperties: false` wherever the CRD lists an object's fields and does not
preserve unknown ones.

The rules are ported from ray-operator/controllers/ray/utils/validation.go at v1.7.0, one
function per rule, each named after the Go code it ports and quoting its message. Only the
rules that concern fields the kit renders or a user could add to them are ported; rules of
features the kit never renders (GCS fault tolerance, history server, TLS, network policy,
RayService, RayCronJob) are left out and named in docs/kubernetes.md.
"""

import functools
import re

import jsonschema
import yaml

from scripts.core.paths import SCHEMAS

KUBERAY_VERSION = "v1.7.0"  # the CRDs vendored and checked against, the newest supported
MIN_KUBERAY_VERSION = "v1.6.0"  # the oldest operator that knows every field below
# What the kit renders that older operators' CRDs lack, with the release that added it:
# an older API server refuses the object (strict field validation) or drops the field.
# The preflight asks the API's own schema for each (`kubectl explain`).
VERSIONED_FIELDS = [
    ("rayclusters.spec.headGroupSpec.labels", "v1.5.0", "the groups' labels, by which the jobs place their work"),
    ("rayclusters.spec.headGroupSpec.resources", "v1.5.0", "a coordinating head's CPU: 0"),
    ("rayclusters.spec.authOptions", "v1.5.1", "Ray's token authentication"),
    ("rayjobs.spec.preRunningDeadlineSeconds", "v1.6.0", "`make run`'s limit for pods that never run"),
]
SUPPORTED_RELEASES = (MIN_KUBERAY_VERSION, KUBERAY_VERSION)  # the CRDs checked against
CRD_DIR = SCHEMAS / f"kuberay-{KUBERAY_VERSION}"
CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml"}
API_VERSION = "ray.io/v1"
MAX_RAYCLUSTER_NAME = 53  # utils.MaxRayClusterNameLength
MAX_NAME = {"RayCluster": MAX_RAYCLUSTER_NAME, "RayJob": MAX_RAYCLUSTER_NAME - 6}  # utils.MaxRayJobNameLength
AUTOSCALER_V2_ENV = "RAY_enable_autoscaler_v2"  # utils.RAY_ENABLE_AUTOSCALER_V2

# k8s.io/apimachinery/pkg/util/validation
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


# --- the CRD schema -----------------------------------------------------------------

def crd_dir(release: str):
    return SCHEMAS / f"kuberay-{release}"


@functools.cache
def crd_validator(kind: str, release: str = KUBERAY_VERSION) -> jsonschema.protocols.Validator:
    crd = yaml.load((crd_dir(release) / CRD_FILES[kind]).read_text(), Loader=yaml.CSafeLoader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def strict(schema):
    """The schema with unknown fields refused, as kubectl's strict field validation does."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def schema_problems(resource: dict) -> list[str]:
    """Every place the resource breaks its kind's CRD schema in a supported release, as
    'path: message (release)'; the newest release's first, then what only an older one refuses."""
    kind = resource.get("kind")
    if kind not in CRD_FILES or resource.get("apiVersion") != API_VERSION:
        return [f"apiVersion/kind: {resource.get('apiVersion')}/{kind} is not one of "
                f"{', '.join(f'{API_VERSION}/{k}' for k in CRD_FILES)}"]
    problems = []
    for release in reversed(SUPPORTED_RELEASES):
        errors = sorted(crd_validator(kind, release).iter_errors(resource), key=lambda e: list(map(str, e.path)))
        for e in errors:
            where = f"{'.'.join(map(str, e.path)) or '(top level)'}: {e.message[:200]}"
            if not any(p.startswith(where + " (") for p in problems):
                problems.append(f"{where} (KubeRay {release}'s {kind} CRD"
                                + ("" if release == KUBERAY_VERSION else
                                   ", the oldest release the kit supports") + ")")
    return problems


# --- Kubernetes name and label syntax ------------------------------------------------

def dns1035_label_problems(name) -> list[str]:
    if not isinstance(name, str) or len(name) > 63 or not DNS1035_LABEL.fullmatch(name):
        return ["a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character"]
    return []


def qualified_name_problems(key: str) -> list[str]:
    """validation.IsQualifiedName: [prefix/]name, a DNS-1123 subdomain prefix."""
    prefix, _, name = key.rpartition("/")
    problems = []
    if "/" in key and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        problems.append("prefix part must be a DNS-1123 subdomain")
    if not name or len(name) > 63 or not QUALIFIED_NAME.fullmatch(name):
        problems.append("name part must consist of alphanumeric characters, '-', '_' or '.', "
                        "and must start and end with an alphanumeric character (at most 63)")
    return problems


def label_value_problems(value) -> list[str]:
    """validation.IsValidLabelValue."""
    if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        return ["a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character (at most 63)"]
    return []


# --- the operator's rules -----------------------------------------------------------

def rule_problems(resource: dict) -> list[str]:
    """The operator's rules for a RayCluster or a RayJob (its cluster spec included)."""
    meta, spec = resource.get("metadata") or {}, resource.get("spec") or {}
    if resource.get("kind") == "RayJob":
        problems = metadata_problems(meta, "RayJob") + rayjob_spec(spec)
        cluster = spec.get("rayClusterSpec")
        if isinstance(cluster, dict):
            problems += [f"The RayJob spec is invalid: {p}"
                         for p in raycluster_spec(cluster, meta.get("annotations") or {})]
        return problems
    return metadata_problems(meta, "RayCluster") + raycluster_spec(spec, meta.get("annotations") or {})


def metadata_problems(meta: dict, kind: str) -> list[str]:
    """ValidateRayClusterMetadata and ValidateRayJobMetadata: a DNS-1035 name, short enough
    for what the operator names after it."""
    name, limit = meta.get("name", ""), MAX_NAME[kind]
    prefix = "The RayJob metadata is invalid: " if kind == "RayJob" else ""
    if len(name) > limit:
        return [f"{prefix}{kind} name should be no more than {limit} characters"]
    return [f"{prefix}{kind} name should be a valid DNS1035 label: {p}" for p in dns1035_label_problems(name)]


def groups(spec: dict) -> list[tuple[str, dict]]:
    """(group name as the operator's messages say it, group spec): the head, then workers."""
    head = [("Head", spec.get("headGroupSpec") or {})]
    return head + [(w.get("groupName", ""), w) for w in spec.get("workerGroupSpecs") or []]


def containers(group: dict) -> list[dict]:
    return ((group.get("template") or {}).get("spec") or {}).get("containers") or []


def head_env(spec: dict) -> dict[str, str]:
    """The Ray container's (the first's) environment on the head: {name: value}."""
    ray_container = (containers(spec.get("headGroupSpec") or {}) or [{}])[0]
    return {e.get("name"): e.get("value", "") for e in ray_container.get("env") or []}


def autoscaling(spec: dict) -> bool:
    """utils.IsAutoscalingEnabled."""
    return spec.get("enableInTreeAutoscaling") is True


def autoscaler_v2(spec: dict) -> bool:
    """utils.IsAutoscalingV2Enabled."""
    return (spec.get("autoscalerOptions") or {}).get("version") == "v2"


def raycluster_spec(spec: dict, annotations: dict) -> list[str]:
    """ValidateRayClusterSpec, the rules that concern what the kit renders."""
    return (containers_present(spec) + replica_counts(spec) + group_resources(spec)
            + group_labels(spec) + idle_timeouts(spec) + autoscaler_v2_env(spec)
            + suspended_groups(spec) + restart_policies(spec) + autoscaler_options(spec)
            + auth_options(spec) + group_priorities(spec))


def containers_present(spec: dict) -> list[str]:
    problems = []
    if not containers(spec.get("headGroupSpec") or {}):
        problems.append("headGroupSpec should have at least one container")
    if any(not containers(w) for _, w in groups(spec)[1:]):
        problems.append("workerGroupSpec should have at least one container")
    return problems


def replica_counts(spec: dict) -> list[str]:
    problems = []
    for name, w in groups(spec)[1:]:
        low, high = w.get("minReplicas"), w.get("maxReplicas")
        if not autoscaling(spec) and (low is None or high is None):
            problems.append(f"worker group {name} must set both minReplicas and maxReplicas "
                            "when autoscaling is disabled")
        if isinstance(low, int) and low < 0:
            problems.append(f"worker group {name} has negative minReplicas {low}")
        if isinstance(high, int) and high < 0:
            problems.append(f"worker group {name} has negative maxReplicas {high}")
        if isinstance(low, int) and isinstance(high, int) and low > high:
            problems.append(f"worker group {name} has minReplicas {low} greater than maxReplicas {high}")
    return problems


def group_resources(spec: dict) -> list[str]:
    """validateRayGroupResources: resources in rayStartParams or in `resources`, not both."""
    problems = []
    for name, group in groups(spec):
        params = group.get("rayStartParams") or {}
        in_params = any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources"))
        if in_params and group.get("resources"):
            problems.append(f"resource fields should not be set in both rayStartParams and "
                            f"Resources for {name} group; please use only one")
    return problems


def group_labels(spec: dict) -> list[str]:
    """validateRayGroupLabels: labels in the top-level field only, in Kubernetes syntax."""
    problems = []
    for name, group in groups(spec):
        if "labels" in (group.get("rayStartParams") or {}):
            problems.append(f"rayStartParams['labels'] is not supported for {name} group; "
                            "please use the top-level Labels field instead")
        for key, value in (group.get("labels") or {}).items():
            problems += [f"invalid label key for {name} group: '{key}', error: {p}"
                         for p in qualified_name_problems(key)]
            problems += [f"invalid label value for key '{key}' in {name} group: '{value}', error: {p}"
                         for p in label_value_problems(value)]
    return problems


def env_turns_on_v2(spec: dict) -> bool:
    return head_env(spec).get(AUTOSCALER_V2_ENV) in ("1", "true")


def idle_timeouts(spec: dict) -> list[str]:
    """validateWorkerGroupIdleTimeout: per-group idle timeouts are autoscaler v2's."""
    problems = []
    for name, w in groups(spec)[1:]:
        timeout = w.get("idleTimeoutSeconds")
        if timeout is None:
            continue
        if timeout < 0:
            problems.append(f"worker group {name}: idleTimeoutSeconds must be non-negative, got {timeout}")
        elif not (autoscaler_v2(spec) or env_turns_on_v2(spec)):
            problems.append(f"worker group {name}: idleTimeoutSeconds is set, but autoscaler v2 is "
                            "not enabled. Please set .spec.autoscalerOptions.version to 'v2'")
    return problems


def autoscaler_v2_env(spec: dict) -> list[str]:
    """RAY_enable_autoscaler_v2 needs the autoscaler on, and is not set beside
    autoscalerOptions.version."""
    value = head_env(spec).get(AUTOSCALER_V2_ENV)
    if not autoscaling(spec) and value in ("1", "true"):
        return [f"environment variable {AUTOSCALER_V2_ENV} cannot be set to '{value}' when "
                "enableInTreeAutoscaling is false. Please set enableInTreeAutoscaling: true to "
                "use autoscaler v2"]
    if (autoscaling(spec) and (spec.get("autoscalerOptions") or {}).get("version") is not None
            and AUTOSCALER_V2_ENV in head_env(spec)):
        return [f"both .spec.autoscalerOptions.version and head Pod env var {AUTOSCALER_V2_ENV} "
                "are set, please only use the former"]
    return []


def suspended_groups(spec: dict) -> list[str]:
    """A suspended worker group needs the autoscaler off (and a feature gate the kit does
    not assume: refused either way)."""
    return [f"worker group {name} cannot be suspended with Autoscaler enabled"
            if autoscaling(spec) else
            f"worker group {name} can be suspended only when the RayJobDeletionPolicy feature "
            "gate is enabled"
            for name, w in groups(spec)[1:] if w.get("suspend") is True]


def restart_policies(spec: dict) -> list[str]:
    """Under autoscaler v2 a pod is never restarted in place: the autoscaler replaces it."""
    if not (autoscaling(spec) and autoscaler_v2(spec)):
        return []
    problems = []
    for name, group in groups(spec):
        policy = ((group.get("template") or {}).get("spec") or {}).get("restartPolicy", "")
        if policy not in ("", "Never"):
            problems.append("restartPolicy for head Pod should be Never or unset when using "
                            "autoscaler V2" if name == "Head" else
                            f"restartPolicy for worker group {name} should be Never or unset "
                            "when using autoscaler V2")
    return problems


def autoscaler_options(spec: dict) -> list[str]:
    options = spec.get("autoscalerOptions") or {}
    problems = []
    timeout = options.get("idleTimeoutSeconds")
    if isinstance(timeout, int) and timeout < 0:
        problems.append(f"autoscalerOptions.idleTimeoutSeconds must be non-negative, got {timeout}")
    if any(e.get("name") == "KUBERAY_GEN_AUTOSCALER_START_CMD" for e in options.get("env") or []):
        problems.append("autoscalerOptions.env must not contain KUBERAY_GEN_AUTOSCALER_START_CMD: "
                        "it is managed by KubeRay and injected automatically into the autoscaler container")
    return problems


def ray_version(spec: dict) -> tuple[int, int, int] | None:
    match = VERSION.fullmatch(spec.get("rayVersion") or "")
    return tuple(int(part or 0) for part in match.groups()) if match else None


def auth_options(spec: dict) -> list[str]:
    """Token authentication needs Ray 2.52.0 or later, named in rayVersion."""
    options = spec.get("authOptions") or {}
    k8s_tokens = options.get("enableK8sTokenAuth") is True
    if options.get("mode") != "token":
        return (["authOptions.enableK8sTokenAuth is enabled but authOptions.mode not set to 'token'"]
                if k8s_tokens else [])
    if not spec.get("rayVersion"):
        return ["authOptions.mode is 'token' but RayVersion was not specified. Ray version "
                "2.52.0 or later is required"]
    version = ray_version(spec)
    if version is None:
        return [f"authOptions.mode is 'token' but RayVersion format is invalid: {spec['rayVersion']}"]
    if version < (2, 52, 0):
        return [f"authOptions.mode is 'token' but minimum Ray version is 2.52.0, got {spec['rayVersion']}"]
    if k8s_tokens and version < (2, 55, 0):
        return [f"authOptions.enableK8sTokenAuth is enabled but minimum Ray version is 2.55.0, "
                f"got {spec['rayVersion']}"]
    return []


def group_priorities(spec: dict) -> list[str]:
    """validateWorkerGroupPriority: priorities need Ray 2.56.0 and autoscaler v2."""
    problems = []
    for name, w in groups(spec)[1:]:
        priority = w.get("priority")
        if not priority:
            continue
        version = ray_version(spec)
        if version is None or version < (2, 56, 0):
            problems.append(f"worker group {name}: priority is set, but minimum Ray version is "
                            f"2.56.0, got {spec.get('rayVersion') or 'none'}")
        elif not (autoscaler_v2(spec) or env_turns_on_v2(spec)):
            problems.append(f"worker group {name}: priority is set to {priority}, but autoscaler "
                            "v2 is not enabled. Priority is only supported with autoscaler v2 enabled")
    return problems


def rayjob_spec(spec: dict) -> list[str]:
    """ValidateRayJobSpec, for a RayJob that brings its own cluster (the kit's `make run`)."""
    invalid = "The RayJob spec is invalid: "
    problems = []
    shutdown = spec.get("shutdownAfterJobFinishes") is True
    if spec.get("suspend") is True and not shutdown:
        problems.append(invalid + "a RayJob with shutdownAfterJobFinishes set to false is not "
                        "allowed to be suspended")
    ttl = spec.get("ttlSecondsAfterFinished", 0)
    if ttl < 0:
        problems.append(invalid + "TTLSecondsAfterFinished must be a non-negative integer")
    if not shutdown and ttl > 0:
        problems.append(invalid + "a RayJob with shutdownAfterJobFinishes set to false cannot "
                        "have TTLSecondsAfterFinished")
    if spec.get("deletionStrategy") is not None:
        problems.append("RayJobDeletionPolicy feature gate must be enabled to use DeletionStrategy")
    if spec.get("rayClusterSpec") is None and not spec.get("clusterSelector"):
        problems.append(invalid + "one of RayClusterSpec or ClusterSelector must be set")
    try:
        runtime_env = yaml.safe_load(spec.get("runtimeEnvYAML") or "") or {}
    except yaml.YAMLError:
        runtime_env = None
    if not isinstance(runtime_env, dict):
        problems.append("runtimeEnvYAML is not a YAML mapping of a runtime environment")
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if isinstance(spec.get(field), int) and spec[field] <= 0:
            problems.append(invalid + f"{field} must be a positive integer")
    if isinstance(spec.get("backoffLimit"), int) and spec["backoffLimit"] < 0:
        problems.append(invalid + "backoffLimit must be a positive integer")
    return problems


def problems(resource: dict) -> list[str]:
    """The CRD schema first; the operator's rules only on a resource the API server would
    accept (they read its fields as the schema types them)."""
    return schema_problems(resource) or rule_problems(resource)
