"""Who trains and who preprocesses: the roles of a values file's node types, the same for
every provider. The head trains (role train, the default) or only coordinates (role
coordinate: no Ray CPUs for work, Ray's advice for larger clusters); each worker type
preprocesses (the default) or trains. What each role needs of the hardware (a GPU, a
trainer slot) is the provider's rule; these are the rules across node types."""


def train_types(values: dict) -> list[str]:
    """The worker types with role train."""
    return [name for name, w in values["workers"].items() if w["role"] == "train"]


def preprocess_types(values: dict) -> list[str]:
    """The worker types with role preprocess."""
    return [name for name, w in values["workers"].items() if w["role"] == "preprocess"]


def autopilot_problems(values: dict) -> list[str]:
    """An autopilot has one preprocess worker type to steer, with room between its
    min_workers and max_workers (the $/h ceiling is the pricing's to check)."""
    if not values["autopilot"]["enabled"]:
        return []
    kinds = preprocess_types(values)
    if len(kinds) != 1:
        return [f"autopilot.enabled: the autopilot steers one preprocess worker type, and this mix has "
                f"{len(kinds) or 'none'}{': ' + ', '.join(kinds) if kinds else ''}; keep one, or set "
                "enabled: false"]
    worker = values["workers"][kinds[0]]
    if worker["min_workers"] >= worker["max_workers"]:
        return [f"autopilot.enabled: workers.{kinds[0]} has min_workers = max_workers "
                f"({worker['max_workers']}): nothing to steer; raise max_workers, or set enabled: false"]
    return []


def role_problems(values: dict) -> list[str]:
    """One trainer kind per mix (a training head, or train workers beside a coordinating
    head: the summaries and the planner count one), and a coordinating head that has
    something to coordinate and gives Ray nothing to schedule."""
    head, trains = values["head"], train_types(values)
    problems = autopilot_problems(values)
    if trains and values["mix"] == "homogeneous":
        problems.append("mix: train worker types belong to a heterogeneous mix (train nodes "
                        "fed by preprocess nodes); set mix: heterogeneous")
    problems += [f"workers.{name}.max_workers: 0, so this train type never starts and the job "
                 "never trains while the rest of the cluster bills; raise it, or drop the type"
                 for name in trains if values["workers"][name]["max_workers"] == 0]
    if head["role"] == "train" and trains:
        problems.append(f"head.role: the head trains, and so do worker type(s) {', '.join(trains)}; "
                        "with train workers set role: coordinate (the head then only coordinates)")
    problems += at_min_problems(values)
    if head["role"] == "coordinate":
        if head["preprocess"]:
            problems.append("head.preprocess: a coordinating head gives Ray no CPUs for work; "
                            "set preprocess: false")
        if not trains:
            problems.append("head.role: a coordinating head needs train worker types, and none "
                            "has role: train; add one, or set role: train")
    return problems


def at_min_problems(values: dict) -> list[str]:
    """With every worker type at min_workers, the cluster has a node that trains and one
    that preprocesses: a job checks both before it starts (jobs/raykit/cluster.py's
    check_shape) and exits otherwise, with the GPUs billing. Neither Ray's autoscaler nor
    the autopilot brings up a type from zero for it: Ray Data asks for CPUs by label, which
    the autoscaler does not scale on."""
    head, workers = values["head"], values["workers"]
    problems = []
    preprocess = preprocess_types(values)
    if not head["preprocess"] and not any(workers[name]["min_workers"] for name in preprocess):
        where = (f"workers.{preprocess[0]}.min_workers: 0" if preprocess else "no preprocess worker type")
        problems.append(f"{where} and head.preprocess: false leave no node to preprocess at launch: every "
                        "job would exit with 'no node preprocesses' while the cluster bills; set min_workers "
                        "to 1 or more on a preprocess type, or head.preprocess: true")
    trains = train_types(values)
    if head["role"] == "coordinate" and trains and not any(workers[name]["min_workers"] for name in trains):
        problems.append(f"workers.{trains[0]}.min_workers: 0 leaves no node to train at launch (the head only "
                        "coordinates): every job would exit with 'no node carries the train label'; set it "
                        "to 1 or more")
    return problems
