"""What a job learns from the kit, through its environment: each name, and each JSON
shape, defined once here. The kit writes them (scripts/job_env.py's job_env, and
scripts/core/submit.py's quiet mode); raykit reads them through this module alone.

  RAYKIT_NODE_PRICES   {"usd_per_hour": {node type: $/h}, "network_gbps": {node type:
                       Gbit/s}, "basis": "as hetero, on-demand list prices ..."}: the run's
                       bill (summary.py) and the priced verdict (verdict.py)
  RAYKIT_AUTOPILOT     the autopilot's settings (autopilot.py's settings_from_env)
  RAYKIT_STALL_S       the stall limit in seconds, empty or 0: off (stall.py)
  RAYKIT_VERBOSE       "1": Ray Train's INFO lines too (cluster.py)
  RAYKIT_JOB           the job's folder name under jobs/ (checkpoint.py names its runs
                       and summary.py its summary by it; scripts/core/submit.py sets it)
  RAYKIT_ENTRY_WATCHES set by the kit's entrypoint itself (entry.py): the job's autopilot
                       leaves the stall watch to it

And what the kit reads back: a job's RESULT line, as RunSummary (run_summary, the one
loader: the kit's benches, planner and charts read a summary through it alone).
"""

import json
import math
import os
import types
from dataclasses import dataclass, field, fields

NODE_PRICES_ENV = "RAYKIT_NODE_PRICES"
AUTOPILOT_ENV = "RAYKIT_AUTOPILOT"
STALL_ENV = "RAYKIT_STALL_S"
VERBOSE_ENV = "RAYKIT_VERBOSE"
ENTRY_WATCHES_ENV = "RAYKIT_ENTRY_WATCHES"
JOB_ENV = "RAYKIT_JOB"


@dataclass(frozen=True)
class NodePrices:
    usd_per_hour: dict[str, float]
    basis: str = ""
    network_gbps: dict[str, float] = field(default_factory=dict)


def node_prices_json(usd_per_hour: dict[str, float], basis: str, network_gbps: dict[str, float]) -> str:
    """RAYKIT_NODE_PRICES's text, as the kit writes it."""
    return json.dumps({"usd_per_hour": usd_per_hour, "basis": basis, "network_gbps": network_gbps})


def node_prices(text: str | None = None) -> NodePrices | None:
    """The prices the kit passed (RAYKIT_NODE_PRICES, or `text`); None where it passed
    none (a local cluster without prices_as). ValueError where the text is not the kit's."""
    text = os.environ.get(NODE_PRICES_ENV, "") if text is None else text
    if not text:
        return None
    try:
        found = json.loads(text)
        return NodePrices(usd_per_hour={str(k): float(v) for k, v in found["usd_per_hour"].items()},
                          basis=str(found.get("basis", "")),
                          network_gbps={str(k): float(v) for k, v in (found.get("network_gbps") or {}).items()})
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"{NODE_PRICES_ENV} is not the kit's prices") from e


def finite(value):
    """`value` with each non-finite number (a rate over a time measured as zero, say) as
    None: JSON has no Infinity, and the kit reads every JSON strictly. The one definition:
    a job's summary and metrics (summary.emit, measure.report) and the kit's own files
    (scripts/core/inputs.py's json_text) go through it."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


# --- the RESULT line, as the kit reads it back ------------------------------------------
SUMMARY_VERSION = 1  # summary.assemble writes it; a line without one is an older job's (0)


@dataclass(frozen=True)
class RunSummary:
    """A job's summary as the kit reads it (its RESULT line, or the copy `make submit` kept
    in build/results/): the figures the kit uses, typed; a figure the line lacks (an older
    job, a run that measured none) is its default. The stall watch's line has `status`
    "stalled" and its `reason` instead. `steady`, `diagnosis` and `autopilot` are the
    shapes steady.py, diagnosis.py and autopilot.py (Pilot.report) write."""
    version: int = 0
    job: str | None = None
    status: str | None = None                 # "stalled": the stall watch's line
    reason: str | None = None
    steps: int = 0
    workers: int = 1
    batch_size: int = 0
    wall_s: float | None = None
    warmup_s: float = 0.0                     # the first step (the pipeline's fill)
    images_per_s: float | None = None         # over every step after the first
    mean_step_s: float | None = None
    mean_data_wait_s: float | None = None
    max_data_wait_s: float | None = None
    data_wait_fraction: float | None = None
    trainer_utilization: float | None = None
    preprocess_cpus: float | None = None
    preprocess_shares_trainer_cpus: bool = False
    bytes_per_image: float | None = None
    device: str | None = None
    gpu_model: str | None = None
    model: str | None = None
    steady: dict = field(default_factory=dict)
    diagnosis: dict = field(default_factory=dict)
    cpu_use_by_node_type: dict = field(default_factory=dict)
    node_seconds: dict = field(default_factory=dict)
    bill: dict = field(default_factory=dict)
    phases: list = field(default_factory=list)
    autopilot: dict | None = None
    outputs: dict = field(default_factory=dict)  # checkpoint.outputs: the run's folder, its model

    @property
    def run_folder(self) -> str | None:
        """Where the run left its checkpoints and model (a path on its head, or s3://)."""
        folder = self.outputs.get("run_folder")
        return folder if isinstance(folder, str) else None

    @property
    def reached_steady(self) -> bool:
        return bool(self.steady.get("steady"))

    def _steady(self, key: str) -> float | None:
        return self.steady.get(key)

    # the steady flow (steady.py), where the run reached it; else None (steps_needed: the
    # steps a run needs to reach it)
    steady_step_s = property(lambda self: self._steady("steady_step_s"))
    steady_wait_share = property(lambda self: self._steady("steady_wait_share"))
    steady_images_per_s = property(lambda self: self._steady("steady_images_per_s"))
    steps_needed = property(lambda self: self._steady("steps_needed"))
    first_step_s = property(lambda self: self._steady("first_step_s"))
    ramp_s = property(lambda self: self._steady("ramp_s"))
    # the rates the diagnosis measured: what the trainers take never waiting, and one CPU makes
    trainer_images_per_s = property(lambda self: self.diagnosis.get("trainer_images_per_s"))
    preprocess_images_per_s_per_cpu = property(lambda self: self.diagnosis.get("preprocess_images_per_s_per_cpu"))

    @property
    def usd(self) -> float | None:
        """The run's bill, where it was priced."""
        return self.bill.get("usd")

    @property
    def images(self) -> int:
        """Every rank's trained images."""
        return self.steps * self.batch_size * self.workers

    @property
    def cpu_utilization(self) -> dict[str, float]:
        return {kind: use["utilization"] for kind, use in self.cpu_use_by_node_type.items()}


WORDS = {int: "a whole number", float: "a number", str: "text", bool: "true or false", dict: "an object",
         list: "a list"}


def run_summary(data) -> RunSummary:
    """A summary (or a kept copy, {"result": summary, ...}) as RunSummary; ValueError naming
    the key where it is none, or a newer shape than this kit reads."""
    if isinstance(data, dict) and isinstance(data.get("result"), dict):
        data = data["result"]
    if not isinstance(data, dict):
        raise ValueError("a summary is a JSON object")
    found = {}
    for f in fields(RunSummary):
        value = data.get("summary_version" if f.name == "version" else f.name)
        if value is None:
            continue
        base = f.type.__args__[0] if isinstance(f.type, types.UnionType) else f.type  # X | None: X
        kind = (int, float) if base is float else base
        if (isinstance(value, bool) and base is not bool) or not isinstance(value, kind) \
                or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(f"{f.name}: {json.dumps(value)[:40]} is not {WORDS[base]}")
        found[f.name] = value
    if found.get("version", 0) > SUMMARY_VERSION:
        raise ValueError(f"a summary of shape {found['version']}, newer than this kit reads "
                         f"({SUMMARY_VERSION}): update the kit")
    return RunSummary(**found)
