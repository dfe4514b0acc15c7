"""GPUs for the simulated nodes: which of this machine's GPUs each local node trains on.

A node type's `gpus:` is `auto` (the default) or a count. auto gives every train node (a
training head, a train worker type) one GPU per trainer slot where this machine has enough
for all of them at max_workers, and none otherwise (the trainers then run on the CPU, as
on a machine without a GPU); a node that does not train gets none. A count is checked
against the machine before anything starts.

Each node's raylet runs with CUDA_VISIBLE_DEVICES naming its own GPUs (none: empty, so
that its processes never open a CUDA context on another node's GPU): Ray hands a task or
training worker the GPUs its node was given, so several train nodes on one machine split
its GPUs between them (local_multi runs DDP on a multi-GPU box). The head's are set on
its `ray start`; the workers' come from the pool the head's autoscaler hands out
(WORKER_GPUS_ENV), as the cores do (cpu_sets.py).
"""

import os
from contextlib import contextmanager

# The GPU ids the head's autoscaler may hand to workers, in its environment ("1,2").
WORKER_GPUS_ENV = "RAYKIT_WORKER_GPUS"
VISIBLE = "CUDA_VISIBLE_DEVICES"


def machine_gpus() -> list[str]:
    """The GPUs this machine offers, as CUDA device ids: those NVML sees, within
    CUDA_VISIBLE_DEVICES where the user set it (indices or GPU UUIDs); [] where NVML cannot
    be read (no NVIDIA driver: no GPU to use)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 (no library, no driver: no GPU)
        return []
    try:
        count = pynvml.nvmlDeviceGetCount()
        uuids = [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
    except Exception:  # noqa: BLE001
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    ids = [str(i) for i in range(count)]
    visible = os.environ.get(VISIBLE)
    if visible is None:
        return ids
    wanted = [entry.strip() for entry in visible.split(",") if entry.strip()]
    return [entry for entry in wanted if entry in ids or entry in uuids]


def machine_gpu_names() -> list[str]:
    """Each GPU's name as NVML gives it, by index ([] without NVML): for `make status`."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
                    for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        return []


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def trains(node: dict) -> bool:
    """A training head, or a train worker type (roles.py): it holds trainer slots."""
    return node["role"] == "train" and node["trainer_slots"] > 0


def train_nodes(values: dict) -> list[tuple[str, dict, int]]:
    """(where, node, count at max_workers) for every node type that trains."""
    head = values["head"]
    found = [("head", head, 1)] if trains(head) else []
    return found + [(f"workers.{name}", w, w["max_workers"]) for name, w in values["workers"].items()
                    if trains(w)]


def per_node(values: dict, available: int) -> dict[str, int]:
    """GPUs per node by where ("head", "workers.<type>"), auto resolved against
    `available` GPUs: every node type of the values file, 0 for those that do not train."""
    nodes = [("head", values["head"])] + [(f"workers.{n}", w) for n, w in values["workers"].items()]
    training = train_nodes(values)
    wanted = sum(node["trainer_slots"] * count for _, node, count in training
                 if node["gpus"] == "auto")
    explicit = sum(node["gpus"] * count for _, node, count in training if node["gpus"] != "auto")
    auto_fits = wanted and wanted + explicit <= available
    out = {}
    for where, node in nodes:
        if node["gpus"] != "auto":
            out[where] = node["gpus"]
        else:
            out[where] = node["trainer_slots"] if auto_fits and any(w == where for w, _, _ in training) else 0
    return out


def problems(values: dict, available: list[str]) -> list[str]:
    """A count a node cannot use, or more GPUs than this machine has: one line each,
    naming `gpus`."""
    out = []
    training = {where for where, _, _ in train_nodes(values)}
    for where, node in [("head", values["head"])] + [(f"workers.{n}", w) for n, w in values["workers"].items()]:
        gpus = node["gpus"]
        if gpus in ("auto", 0):
            continue
        if where not in training:
            out.append(f"{where}.gpus: a node that does not train would hold {gpus} GPU(s) idle; "
                       "set gpus: 0 (or auto)")
        elif gpus != node["trainer_slots"]:
            out.append(f"{where}.gpus: one training worker per GPU: set gpus: {node['trainer_slots']} "
                       f"(its trainer_slots), or 0 to train on the CPU")
    counts = per_node(values, len(available))
    asked = sum(counts[where] * count for where, _, count in train_nodes(values))
    if asked > len(available):
        seen = f"{len(available)} ({', '.join(available)})" if available else "none (NVML sees no GPU)"
        out.append(f"gpus: the train nodes ask for {asked} GPU(s) at max_workers, this machine "
                   f"offers {seen}; lower gpus or max_workers, or set gpus: auto")
    return out


def head_and_pool(values: dict, available: list[str]) -> tuple[list[str], list[str]]:
    """(the head's GPU ids, the ids the autoscaler hands to workers)."""
    counts = per_node(values, len(available))
    return available[:counts["head"]], available[counts["head"]:]


def to_text(ids: list[str]) -> str:
    return ",".join(ids)


def from_text(text: str) -> list[str]:
    return [entry for entry in text.split(",") if entry]


@contextmanager
def visible(ids: list[str]):
    """CUDA_VISIBLE_DEVICES = `ids` in this process for the block (Ray reads it where it
    starts a node, to know which devices its GPUs are), then as it was. Callers hold the
    node provider's lock: one node starts at a time."""
    before = os.environ.get(VISIBLE)
    os.environ[VISIBLE] = to_text(ids)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(VISIBLE, None)
        else:
            os.environ[VISIBLE] = before
