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
"""

import json
import os
from dataclasses import dataclass, field

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
