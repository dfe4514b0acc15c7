"""Who trains and who preprocesses: the roles of a values file's node types, the same for
every provider. The head trains (role train, the default) or only coordinates (role
coordinate: no Ray CPUs for work, Ray's advice for larger clusters); each worker type
preprocesses (the default) or trains. What each role needs of the hardware (a GPU, a
trainer slot) is the provider's rule; these are the rules across node types."""


def train_types(values: dict) -> list[str]:
    """The worker types with role train."""
    return [name for name, w in values["workers"].items() if w["role"] == "train"]


def role_problems(values: dict) -> list[str]:
    """One trainer kind per mix (a training head, or train workers beside a coordinating
    head: the summaries and the planner count one), and a coordinating head that has
    something to coordinate and gives Ray nothing to schedule."""
    head, trains = values["head"], train_types(values)
    problems = []
    if trains and values["mix"] == "homogeneous":
        problems.append("mix: train worker types belong to a heterogeneous mix (train nodes "
                        "fed by preprocess nodes); set mix: heterogeneous")
    if head["role"] == "train" and trains:
        problems.append(f"head.role: the head trains, and so do worker type(s) {', '.join(trains)}; "
                        "with train workers set role: coordinate (the head then only coordinates)")
    if head["role"] == "coordinate":
        if head["preprocess"]:
            problems.append("head.preprocess: a coordinating head gives Ray no CPUs for work; "
                            "set preprocess: false")
        if not trains:
            problems.append("head.role: a coordinating head needs train worker types, and none "
                            "has role: train; add one, or set role: train")
    return problems
