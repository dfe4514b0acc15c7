"""Where a job's work runs on the kit's clusters: Ray's node labels, one mechanism.

Every node the kit starts, on AWS, on the local cluster and on KubeRay, carries these labels (the
providers render them from the values file, scripts/providers/):

  ray-subcluster        "train" on a node whose GPUs (locally: trainer slots) train,
                        "preprocess" on a CPU worker, "coordinate" on a head that only
                        coordinates (no Ray CPUs for work). Ray Data budgets its resources by
                        this key alone (ray/data/_internal/cluster_autoscaler/), and Ray's
                        autoscaler v2 scales a node type up for a selector on a label the
                        cluster config declares.
  raykit-trainer-slots  on train nodes: the training workers it holds (one per GPU)
  raykit-preprocess     "true" on a train node whose CPUs preprocess too (a single-node
                        mix, or `preprocess: true` on a head)
  raykit-node-type      the node type's name in the values file (summaries count per type)

and every worker node one unit of a resource named after its type (type_resource): the
autopilot's requests name it, since Ray's v1 autoscaler (the local cluster's) ignores
label selectors, and a bundle of CPUs would reserve them away from Ray Data.

A job places its work with the three selectors below: Ray Data's (in its DataContext and
in Train's DataConfig, which drops the context's), and Ray Train's (ScalingConfig).
"""

SUBCLUSTER = "ray-subcluster"
TRAIN = "train"
PREPROCESS = "preprocess"
COORDINATE = "coordinate"
TRAINER_SLOTS = "raykit-trainer-slots"
TRAIN_NODE_PREPROCESSES = "raykit-preprocess"
NODE_TYPE = "raykit-node-type"
CORES = "raykit-cores"  # a pinned local node: the cores it really has (its CPUs may differ)


def type_resource(node_type: str) -> str:
    """The resource one unit of which each node of worker type `node_type` has, and
    nothing asks for but the autopilot."""
    return f"raykit-node-{node_type}"


def node_labels(node_type: str, trainer_slots: int, preprocess: bool) -> dict[str, str]:
    """The labels of a node of `node_type`: trainer_slots > 0 makes it a train node; with
    neither trainer slots nor preprocessing it only coordinates (a head, Ray's advice for
    larger clusters: the driver runs there, no task or training worker does)."""
    labels = {NODE_TYPE: node_type}
    if trainer_slots:
        labels |= {SUBCLUSTER: TRAIN, TRAINER_SLOTS: str(trainer_slots)}
        if preprocess:
            labels[TRAIN_NODE_PREPROCESSES] = "true"
    else:
        labels[SUBCLUSTER] = PREPROCESS if preprocess else COORDINATE
    return labels


def train_selector() -> dict[str, str]:
    """Ray Train's workers: on train nodes (ScalingConfig(label_selector=...))."""
    return {SUBCLUSTER: TRAIN}


def data_selector(nodes: list[dict]) -> dict[str, str] | None:
    """Ray Data's tasks: the preprocess subcluster. None (anywhere) where a train node
    preprocesses too: then every node preprocesses, and Ray Data's budget is the cluster.
    nodes: ray.nodes() entries."""
    if any(n.get("Labels", {}).get(TRAIN_NODE_PREPROCESSES) == "true" for n in nodes):
        return None
    return {SUBCLUSTER: PREPROCESS}


def preprocesses(labels: dict) -> bool:
    return labels.get(SUBCLUSTER) == PREPROCESS or labels.get(TRAIN_NODE_PREPROCESSES) == "true"


def trainer_slots(labels: dict) -> int:
    """Training workers a node holds (0 off the train subcluster, or a label that is no
    count)."""
    if labels.get(SUBCLUSTER) != TRAIN:
        return 0
    text = labels.get(TRAINER_SLOTS, "0")
    return int(text) if text.isdigit() else 0
