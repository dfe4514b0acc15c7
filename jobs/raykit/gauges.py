"""The kit's signals as Ray metrics, so they reach each node's metrics endpoint, Ray's
dashboard and its Grafana panels beside Ray Train's own "Data ingestion" row. Every name
begins raykit_; each is tagged with the job's name (RAYKIT_JOB).

  raykit_data_wait_share          the trainers' wait for data over their step time, last 30 s
  raykit_images_per_second        images the trainers consumed per second, last 30 s
  raykit_step_seconds             the trainers' mean step, last 30 s
  raykit_cluster_usd_per_hour     the nodes up now at the run's prices (RAYKIT_NODE_PRICES)
  raykit_usd_per_million_images   that rate over the images/s: what an image costs now
  raykit_autopilot_nodes_asked    the autopilot's preprocess nodes asked for
  raykit_autopilot_nodes_up       its preprocess nodes up (those being drained left out)

The step figures are set by the job's step log (steps.StepLog, on the head: every rank's
steps reach it), at most once a second; the autopilot's by the autopilot (the driver).
Ray exports a process's metrics from its node's metrics agent every few seconds, in its own
namespace (ray_raykit_data_wait_share, ...): scrape
`http://<node>:<metrics_export_port>/metrics` (Ray's Prometheus service discovery file
lists them; docs/jobs.md says how)."""

import os
import time

from raykit import contract, placement
from raykit.rates import images_per_s, wait_share

WINDOW_S = 30.0      # the step figures' window
PUBLISH_EVERY_S = 1.0
NODES_EVERY_S = 15.0  # the $/h of the nodes up is read from Ray's node table this often

DESCRIPTIONS = {
    "raykit_data_wait_share": "Trainers' wait for data over their step time, last 30 s (0-1)",
    "raykit_images_per_second": "Images the trainers consumed per second, last 30 s",
    "raykit_step_seconds": "Trainers' mean step time, last 30 s",
    "raykit_cluster_usd_per_hour": "The nodes up now at the run's prices, USD per hour",
    "raykit_usd_per_million_images": "USD per million images at the current rate and nodes",
    "raykit_autopilot_nodes_asked": "Preprocess nodes the autopilot asked for",
    "raykit_autopilot_nodes_up": "Preprocess nodes of the autopilot's type up, not draining",
}

_gauges: dict = {}


def gauge(name: str):
    """The Ray gauge `name` (made once per process), tagged with the job."""
    if name not in _gauges:
        from ray.util.metrics import Gauge

        _gauges[name] = Gauge(name, description=DESCRIPTIONS[name], tag_keys=("job",))
    return _gauges[name]


def tags() -> dict[str, str]:
    return {"job": os.environ.get(contract.JOB_ENV) or "job"}


def step_figures(steps: list[tuple[float, float, float, int]], now: float,
                 window_s: float = WINDOW_S) -> dict[str, float] | None:
    """Over the steps (end time, step s, wait s, images) that ended in the last window:
    the wait share, images/s and mean step; None where none ended."""
    recent = [s for s in steps if s[0] >= now - window_s]
    if not recent:
        return None
    return {"raykit_data_wait_share": wait_share([s[:3] for s in recent], now, window_s) or 0.0,
            "raykit_images_per_second": images_per_s(recent) or 0.0,
            "raykit_step_seconds": sum(s[1] for s in recent) / len(recent)}


def usd_per_hour(nodes: list[dict], prices: dict[str, float]) -> float | None:
    """What the alive nodes (Ray's node table) bill per hour at `prices` (per node type,
    by the nodes' type label); None where a node's type has no price."""
    total = 0.0
    for node in nodes:
        if not node.get("Alive"):
            continue
        labels = node.get("Labels") or {}
        kind = labels.get(placement.NODE_TYPE) or ("head" if "node:__internal_head__" in node.get("Resources", {})
                                                   else None)
        if kind not in prices:
            return None
        total += prices[kind]
    return total


class StepGauges:
    """In the step log: publishes the step figures and the cost per image, throttled."""

    def __init__(self):
        self.published_at = 0.0
        self.nodes_at, self.rate = -NODES_EVERY_S, None
        try:
            found = contract.node_prices()
        except ValueError:
            found = None
        self.prices = found.usd_per_hour if found else None

    def publish(self, steps: list[tuple[float, float, float, int]], now: float | None = None) -> None:
        now = time.time() if now is None else now
        if now - self.published_at < PUBLISH_EVERY_S:
            return
        self.published_at = now
        figures = step_figures(steps, now)
        if figures is None:
            return
        if self.prices is not None and now - self.nodes_at >= NODES_EVERY_S:
            import ray

            self.nodes_at, self.rate = now, usd_per_hour(ray.nodes(), self.prices)
        if self.rate is not None:
            figures["raykit_cluster_usd_per_hour"] = self.rate
            if figures["raykit_images_per_second"] > 0:
                figures["raykit_usd_per_million_images"] = (
                    self.rate / 3600 / figures["raykit_images_per_second"] * 1e6)
        for name, value in figures.items():
            gauge(name).set(value, tags=tags())


def publish_autopilot(asked: int, up: int) -> None:
    """The autopilot's nodes asked for and up, after each of its ticks."""
    gauge("raykit_autopilot_nodes_asked").set(asked, tags=tags())
    gauge("raykit_autopilot_nodes_up").set(up, tags=tags())
