"""`make plan`: the cheapest mix whose preprocessing feeds the trainers.

The model is a two-stage pipeline. The trainers consume T images/s when they never wait
(all GPUs of the instance together); the CPUs that preprocess deliver S = vCPUs x C
images/s (C per vCPU). The mix trains at min(T, S) images/s, and the trainers wait
1 - min(T, S) / T of each step. A mix *feeds* the trainers when that predicted wait is
below 5%. Preprocessing vCPUs are counted as scripts/catalog.py's preprocess_vcpus does:
a GPU node keeps one per GPU and one for Ray's head processes, a CPU node one for its
raylet and object transfers; the rest preprocess.

Two levers are weighed, alone and together:
  - CPU-only workers: for every CPU type in the catalog, the fewest nodes of that type
    that cover the missing vCPUs (so never a whole node more than needed);
  - a larger instance with the same GPUs (model and count): more vCPUs per GPU. The
    trainers stay as profiled; a different GPU count would be a different training job.
Options are ranked by $ per million images (a feeding mix trains at 95-100% of T), then
$/h. Prices are on-demand list prices plus each node's minimal root EBS volume (gp3).

Several train nodes (--train-nodes N, from one node's profile): the trainers consume N x T,
the mix is the recipe of multi_g5.yaml (a coordinating CPU head, N train nodes whose CPUs
stay with their training processes, CPU workers that preprocess for all of them), so the
preprocessing demand, and the CPU workers, scale with N.

Where more CPUs stop paying, two limits the linear model misses:
  - the network: every image a CPU worker preprocesses crosses the train nodes' network
    (and leaves its worker's). Given the bytes per image (a job summary records what its
    trainers received; or --bytes-per-image), the workers deliver at most the train
    nodes' baseline bandwidth (scripts/catalog.py's NETWORK_GBPS) over it;
  - the measured curve: from measured points (--points FILE: preprocess vCPUs against
    images/s, from `make bench` or an autopilot run, or published), a saturating fit
    r(v) = R - (R - r0) e^(-k (v - v0)) replaces vCPUs x C, with its ceiling R.
For each CPU type the planner buys the fewest nodes that feed the trainers; where no count
does (a limit caps the mix below the trainers' demand), the count with the lowest $ per
million images, which stops at the knee: CPUs past a limit add cost and no images. The
choice says which limit holds it: the trainers (fed), the CPUs, the network, the curve.
"""

import argparse
import difflib
import math
import sys
from dataclasses import asdict, dataclass, field

from scripts import catalog
from scripts.core.errors import KitError, short
from scripts.core.inputs import OneLineParser, read_json
from scripts.core.results import summary_of
from scripts.pricing.formulas import usd_per_million_images
from scripts.core.tables import text_table

MAX_DATA_WAIT = 0.05
# The coordinating head of a mix with several train nodes (multi_g5.yaml's): Ray's own
# services and the job's driver, no work, so no preprocessing vCPUs counted.
COORDINATOR = "m6i.xlarge"
ROOT_VOLUME_TYPE = "gp3"
MAX_PROFILE_BYTES = 1 << 20
SHOWN_OPTIONS = 10


@dataclass(frozen=True)
class Curve:
    """Images/s preprocessing delivers against its vCPUs, fitted to measured points:
    r(v) = ceiling - (ceiling - r0) * exp(-k (v - v0)); ceiling None: no flattening seen
    (two points, or points on a line), then the slope alone: r0 + slope (v - v0)."""
    v0: float
    r0: float
    k: float
    ceiling: float | None
    slope: float

    def rate(self, vcpus: float) -> float:
        if self.ceiling is None:
            return max(0.0, self.r0 + self.slope * (vcpus - self.v0))
        return max(0.0, self.ceiling - (self.ceiling - self.r0) * math.exp(-self.k * (vcpus - self.v0)))

    def knee(self, share: float = 0.95) -> float | None:
        """The vCPUs past which more stop paying: where the fit reaches `share` of its
        ceiling (None without a ceiling)."""
        if self.ceiling is None:
            return None
        if self.r0 >= share * self.ceiling:
            return self.v0
        return self.v0 + math.log((self.ceiling - self.r0) / ((1 - share) * self.ceiling)) / self.k


@dataclass(frozen=True)
class Profile:
    gpu_instance: str
    trainer_images_per_s: float  # all GPUs of one gpu_instance together, never waiting
    cpu_images_per_s: float      # per vCPU
    train_nodes: int = 1         # gpu_instance nodes training one job together
    bytes_per_image: float | None = None  # what reaches the trainers per image (None: unknown)
    curve: Curve | None = None   # measured images/s against preprocess vCPUs (None: linear)

    def delivered(self, vcpus: float) -> float:
        """Images/s `vcpus` preprocessing vCPUs deliver: the measured curve, else linear."""
        return self.curve.rate(vcpus) if self.curve else vcpus * self.cpu_images_per_s

    @property
    def demand(self) -> float:
        """Images/s every train node's GPUs take together, never waiting."""
        return self.train_nodes * self.trainer_images_per_s


@dataclass
class Option:
    head: str
    workers: list = field(default_factory=list)  # [{"instance_type": t, "count": n}]
    usd_per_hour: float = 0.0
    preprocess_vcpus: int = 0
    images_per_s: float = 0.0
    data_wait: float = 0.0
    usd_per_million_images: float = 0.0
    train_nodes: int = 1            # of `head`'s type; more than one: beside a coordinator
    coordinator: str | None = None  # the coordinating head where train_nodes > 1
    limit: str = "trainers"         # what holds its rate: trainers (fed), cpus, network, curve
    network_images_per_s: float | None = None  # what the network carries from the workers

    @property
    def name(self) -> str:
        gpus = [self.head] if self.train_nodes == 1 else [f"{self.train_nodes} x {self.head}"]
        return " + ".join([self.coordinator] * bool(self.coordinator) + gpus
                          + [f"{w['count']} x {w['instance_type']}{' (spot)' if w.get('spot') else ''}"
                             for w in self.workers])


def node_usd(instance_type: str, region: str, spot: bool = False) -> float:
    """A node's $/h with its root disk: on-demand, or spot (the highest of the region's
    zones, as `make prices` read them)."""
    gpu = catalog.INSTANCE_TYPES[instance_type].gpus > 0
    price = catalog.node_usd_per_hour(instance_type, region, ROOT_VOLUME_TYPE, catalog.min_root_gb(gpu),
                                      spot=spot)
    if price is None:  # a fetched price list has only what its region offers
        raise KitError(f"plan: {instance_type} has no price in {region} (its price list from "
                       "`make prices` lacks it: the region does not offer it); pick another "
                       "--gpu-instance, or --region")
    return price


def predicted_images_per_s(trainer_images_per_s: float, cpu_images_per_s: float,
                           preprocess_vcpus: float) -> float:
    """The model: the mix trains as fast as the slower of its two stages."""
    return min(trainer_images_per_s, preprocess_vcpus * cpu_images_per_s)


def network_images_per_s(profile: Profile, head: str, workers: list) -> float | None:
    """Images/s the network carries from the CPU workers to the train nodes: the train
    nodes' baseline bandwidth in, the workers' out, over the bytes of an image; None
    where the bytes or a bandwidth are unknown (not counted)."""
    if not profile.bytes_per_image or not workers:
        return None
    inbound = catalog.network_gbps(head)
    outbound = [catalog.network_gbps(w["instance_type"]) for w in workers]
    if inbound is None or None in outbound:
        return None
    gbps = min(profile.train_nodes * inbound, sum(w["count"] * g for w, g in zip(workers, outbound)))
    return gbps * 1e9 / 8 / profile.bytes_per_image


def option(profile: Profile, head: str, workers: list, region: str) -> Option:
    """`head`'s GPUs fed by `workers`: one GPU head that preprocesses on its spare vCPUs,
    or (profile.train_nodes > 1) that many train nodes of `head`'s type beside the
    coordinator, the CPU workers alone preprocessing. What the workers preprocess reaches
    the trainers at most as fast as the network carries it; the head's own does not cross it."""
    n = profile.train_nodes
    own = catalog.preprocess_vcpus(head) if n == 1 else 0
    vcpus = own + sum(w["count"] * catalog.preprocess_vcpus(w["instance_type"]) for w in workers)
    usd = (n * node_usd(head, region) + (node_usd(COORDINATOR, region) if n > 1 else 0)
           + sum(w["count"] * node_usd(w["instance_type"], region, w.get("spot", False)) for w in workers))
    cpu_rate = profile.delivered(vcpus)
    remote = cpu_rate * (vcpus - own) / vcpus if vcpus else 0.0
    carried = network_images_per_s(profile, head, workers)
    supply = cpu_rate - remote + (min(remote, carried) if carried is not None else remote)
    limit = ("trainers" if supply >= profile.demand else
             "network" if carried is not None and remote > carried else
             "curve" if profile.curve and profile.curve.ceiling is not None else "cpus")
    return predicted(profile, head, workers, usd, vcpus, COORDINATOR if n > 1 else None,
                     supply=supply, limit=limit, carried=carried)


def alone(profile: Profile, region: str) -> Option:
    """The baseline: the GPU nodes without CPU workers, each preprocessing on its own spare
    vCPUs (one of them the head)."""
    n, gpu = profile.train_nodes, profile.gpu_instance
    vcpus = n * catalog.preprocess_vcpus(gpu)
    supply = profile.delivered(vcpus)
    return predicted(profile, gpu, [], n * node_usd(gpu, region), vcpus, supply=supply,
                     limit="trainers" if supply >= profile.demand else "cpus")


def predicted(profile: Profile, head: str, workers: list, usd_per_hour: float, vcpus: int,
              coordinator: str | None = None, supply: float | None = None, limit: str = "trainers",
              carried: float | None = None) -> Option:
    """An option of this $/h and preprocessing vCPUs, with the rate, wait and $/M images
    the model predicts for the profile's trainers (supply: what its preprocessing delivers
    to them; default the linear model's)."""
    if supply is None:
        supply = vcpus * profile.cpu_images_per_s
    rate = min(profile.demand, supply)
    return Option(head, workers, usd_per_hour, vcpus, rate, 1 - rate / profile.demand,
                  usd_per_million_images(usd_per_hour, rate) if rate else math.inf,
                  train_nodes=profile.train_nodes, coordinator=coordinator, limit=limit,
                  network_images_per_s=carried)


MAX_POINTS = 50


def fit_curve(points: list[tuple[float, float]]) -> Curve:
    """The saturating curve through the first point that fits the rest best (least
    squares on the rates, its ceiling searched from just above the highest rate to 3x
    it); with two points, or where a line fits as well, the slope alone (no ceiling)."""
    points = sorted(points)
    (v0, r0), rest = points[0], points[1:]
    slope = sum((v - v0) * (r - r0) for v, r in rest) / sum((v - v0) ** 2 for v, _ in rest)
    line = Curve(v0, r0, 0.0, None, slope)
    line_sse = sum((line.rate(v) - r) ** 2 for v, r in points)
    if len(points) < 3:
        return line
    top, best = max(r for _, r in points), None
    for step in range(1, 2001):
        ceiling = top * (1 + step / 1000)
        xs = [v - v0 for v, _ in rest]
        ys = [math.log((ceiling - r) / (ceiling - r0)) for _, r in rest]
        k = -sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
        if k <= 0:
            continue
        curve = Curve(v0, r0, k, ceiling, slope)
        sse = sum((curve.rate(v) - r) ** 2 for v, r in points)
        if best is None or sse < best[0]:
            best = (sse, curve)
    return best[1] if best and best[0] < line_sse else line


# A timeline rate counts where the trainers waited at least this share of the window: fed
# trainers set the rate themselves (their demand), which says nothing of what the CPUs deliver.
MIN_STARVED_SHARE = MAX_DATA_WAIT


def timeline_points(summary: dict, path_text: str) -> list[dict]:
    """Measured points from an autopilot run's summary (build/results/<id>.json): for each
    count of the steered type's nodes, the median images/s of the timeline's windows that
    count held throughout, while the trainers waited for data. vCPUs are Ray's CPUs of
    those nodes (the planner's preprocess vCPUs: the AWS template offers Ray exactly those)."""
    where = f"ARGS: --points {short(path_text)}"
    s = summary_of(summary, where)
    report = s.autopilot
    if not isinstance(report, dict) or not isinstance(report.get("timeline"), list):
        raise KitError(f"{where}: a summary with no autopilot timeline; pass the summary of a run "
                       "on a values file with an autopilot: block, or a list of points")
    node_type = report.get("node_type")
    use = s.cpu_use_by_node_type.get(node_type) if isinstance(node_type, str) else None
    try:
        cores_per_node = float(use["cores"]) / int(use["nodes"])
        window = float(report.get("window_s", 30.0))
        rows = [(float(p["t"]), int(p["preprocess_nodes"]), p["wait_share"], p["images_per_s"])
                for p in report["timeline"]]
    except (TypeError, KeyError, ValueError, ZeroDivisionError, OverflowError):
        raise KitError(f"{where}: its autopilot timeline or its node type's cores are not what a "
                       "raykit job writes; pass the summary as the job kept it") from None
    by_count: dict[int, list[float]] = {}
    since: dict[int, float] = {}  # when the current count began
    previous = None
    for t, nodes, share, rate in rows:
        if nodes != previous:
            since, previous = {nodes: t}, nodes
        held = t - since[nodes] >= window  # the whole window saw this count
        if held and nodes > 0 and isinstance(rate, (int, float)) and rate > 0 \
                and isinstance(share, (int, float)) and share >= MIN_STARVED_SHARE:
            by_count.setdefault(nodes, []).append(float(rate))
    if len(by_count) < 2:
        seen = ", ".join(str(n) for n in sorted(by_count)) or "none"
        raise KitError(f"{where}: its timeline holds starved, steady windows for {len(by_count)} "
                       f"node count(s) ({seen}), and a curve needs 2; run longer or on a load "
                       "that moves the autopilot (docs/autopilot.md)")
    return [{"preprocess_vcpus": round(n * cores_per_node, 3),
             "images_per_s": sorted(rates)[len(rates) // 2]} for n, rates in sorted(by_count.items())]


def read_points(path_text: str) -> list[tuple[float, float]]:
    """Measured points, [{"preprocess_vcpus": v, "images_per_s": r}, ...]: 2 to MAX_POINTS,
    vCPUs distinct and >= 0, rates positive and not falling as vCPUs grow (a fall is a
    noisy or mislabelled measurement: the fit would be fiction)."""
    hint = ("a JSON list of {\"preprocess_vcpus\": N, \"images_per_s\": R}, or the summary of "
            "an autopilot run (docs/price-performance.md)")
    data = read_json("ARGS: --points", path_text, hint, MAX_PROFILE_BYTES)
    if isinstance(data, dict):
        data = timeline_points(data, path_text)
    if not isinstance(data, list) or not 2 <= len(data) <= MAX_POINTS:
        raise KitError(f"ARGS: --points {short(path_text)}: not a list of 2 to {MAX_POINTS} points "
                       "(one point has no slope); " + hint)
    points = []
    for i, row in enumerate(data):
        if not isinstance(row, dict) or set(row) != {"preprocess_vcpus", "images_per_s"}:
            raise KitError(f"ARGS: --points: points[{i}]: not an object of preprocess_vcpus and "
                           "images_per_s alone; " + hint)
        v = row["preprocess_vcpus"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100_000:
            raise KitError(f"ARGS: --points: points[{i}].preprocess_vcpus: {short(v)} is not a "
                           "number of vCPUs from 0 to 100000")
        points.append((float(v), positive(row["images_per_s"], f"ARGS: --points: points[{i}].images_per_s")))
    points.sort()
    if len({v for v, _ in points}) < len(points):
        raise KitError("ARGS: --points: two points with the same preprocess_vcpus; keep one of each")
    falls = [(a, b) for a, b in zip(points, points[1:]) if b[1] < a[1]]
    if falls:
        (v1, r1), (v2, r2) = falls[0]
        raise KitError(f"ARGS: --points: images/s fall from {r1:g} at {v1:g} vCPUs to {r2:g} at "
                       f"{v2:g}: more CPUs cannot deliver less; measure again (a noisy run?)")
    return points


def vcpus_to_feed(trainer_images_per_s: float, cpu_images_per_s: float) -> int:
    """The fewest vCPUs whose predicted data wait is below MAX_DATA_WAIT."""
    return math.floor((1 - MAX_DATA_WAIT) * trainer_images_per_s / cpu_images_per_s) + 1


def missing_vcpus(profile: Profile, head: str) -> int:
    """Preprocessing vCPUs the trainers lack (<= 0: none): a GPU head's own spare vCPUs
    count; several train nodes' do not (theirs stay with the training processes)."""
    return (vcpus_to_feed(profile.demand, profile.cpu_images_per_s)
            - (catalog.preprocess_vcpus(head) if profile.train_nodes == 1 else 0))


# A values file holds at most this many workers of a type (worker_count in
# cluster_templates/schema/aws.schema.yaml): a mix needing more is no plan the kit can launch.
MAX_WORKERS_PER_TYPE = 100


def priced_in(region: str, instance_type: str) -> bool:
    """The type has a price in the region (a fetched price list has what the region offers)."""
    return catalog.instance_usd_per_hour(instance_type, region) is not None


def cpu_types(region: str, spot: bool = False) -> list[str]:
    """The CPU types that can preprocess, priced in the region (spot: at a spot price read)."""
    return [t for t, spec in catalog.INSTANCE_TYPES.items()
            if spec.gpus == 0 and catalog.preprocess_vcpus(t) > 0 and priced_in(region, t)
            and (not spot or catalog.spot_usd_per_hour(t, region) is not None)]


def same_gpus(instance_type: str, region: str) -> list[str]:
    """The GPU instance and every other with the same GPU model and count, priced in the region."""
    base = catalog.INSTANCE_TYPES[instance_type]
    return [t for t, spec in catalog.INSTANCE_TYPES.items()
            if (spec.gpu_model, spec.gpus) == (base.gpu_model, base.gpus) and priced_in(region, t)]


def feeds(o: Option) -> bool:
    return o.data_wait < MAX_DATA_WAIT


def workers_of(profile: Profile, head: str, cpu: str, region: str, spot: bool = False) -> Option | None:
    """The fewest `cpu` workers beside `head` that feed the trainers; where no count up
    to MAX_WORKERS_PER_TYPE does, the count with the lowest $ per million images (a limit
    holds the mix: CPUs past it add cost, not images). None where the type adds nothing."""
    best = None
    linear = math.ceil(max(1, missing_vcpus(profile, head)) / catalog.preprocess_vcpus(cpu))
    start = linear if profile.curve is None and not profile.bytes_per_image else 1
    for count in range(max(1, min(start, MAX_WORKERS_PER_TYPE)), MAX_WORKERS_PER_TYPE + 1):
        o = option(profile, head, [{"instance_type": cpu, "count": count, "spot": spot}], region)
        if feeds(o):
            return o
        if best is None or o.usd_per_million_images < best.usd_per_million_images:
            best = o
        elif o.images_per_s <= best.images_per_s * 1.0001:  # flat: past a limit
            break
    return best


def options(profile: Profile, region: str, spot: bool = False) -> tuple[list[Option], Option]:
    """(every option that feeds the trainers, best first; or, where a limit lets none
    feed them, every CPU type's best count, by $ per million images; the GPU instance
    alone). spot: the CPU workers priced at the spot prices `make prices` read."""
    node_usd(profile.gpu_instance, region)  # priced in the region, or one line saying it is not
    found = []
    for head in same_gpus(profile.gpu_instance, region):
        if missing_vcpus(profile, head) <= 0 and feeds(option(profile, head, [], region)):
            found.append(option(profile, head, [], region))
            continue
        found += [o for cpu in cpu_types(region, spot) if (o := workers_of(profile, head, cpu, region, spot))]
    feeding = [o for o in found if feeds(o)]
    limited = profile.curve is not None or bool(profile.bytes_per_image)  # a limit may hold every mix
    ranked = feeding or ([o for o in found if o.images_per_s > 0] if limited else [])
    if not ranked:
        raise KitError(f"plan: feeding {profile.demand:g} images/s at "
                       f"{profile.cpu_images_per_s:g} images/s per vCPU takes "
                       f"{vcpus_to_feed(profile.demand, profile.cpu_images_per_s)} "
                       f"preprocessing vCPUs, more than {MAX_WORKERS_PER_TYPE} workers of any CPU "
                       "type hold; check the profile's figures")
    ranked.sort(key=lambda o: (o.usd_per_million_images, o.usd_per_hour, o.name))
    return ranked, alone(profile, region)


def cheaper_mix_of_types(chosen: Option, profile: Profile, region: str) -> Option | None:
    """Two CPU types together that cover the chosen option's worker vCPUs for less (and
    feed the trainers as it does)."""
    if not chosen.workers or chosen.limit != "trainers":
        return None
    missing = missing_vcpus(profile, chosen.head)
    spot = chosen.workers[0].get("spot", False)
    best = None
    for first in cpu_types(region, spot):
        per_first = catalog.preprocess_vcpus(first)
        for n_first in range(1, min(math.ceil(missing / per_first), MAX_WORKERS_PER_TYPE + 1)):
            rest = missing - n_first * per_first
            for second in cpu_types(region, spot):
                n_second = math.ceil(rest / catalog.preprocess_vcpus(second))
                if second == first or n_second > MAX_WORKERS_PER_TYPE:
                    continue
                mix = option(profile, chosen.head, [
                    {"instance_type": first, "count": n_first, "spot": spot},
                    {"instance_type": second, "count": n_second, "spot": spot}], region)
                if feeds(mix) and (best is None or mix.usd_per_hour < best.usd_per_hour):
                    best = mix
    return best if best and best.usd_per_hour < chosen.usd_per_hour - 0.005 else None


# --- inputs ---------------------------------------------------------------------------

def parser() -> OneLineParser:
    p = OneLineParser(see="make plan ARGS=--help", prog="make plan", add_help=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu-instance", help="the GPU instance the profile was measured on or is "
                   "for (default: g5.xlarge)")
    p.add_argument("--trainer-images-per-s", type=float,
                   help="images/s all GPUs of the instance train when never waiting for data")
    p.add_argument("--cpu-images-per-s", type=float, help="images/s one vCPU preprocesses")
    p.add_argument("--bytes-per-image", type=float, help="bytes of one preprocessed image as the "
                   "trainers receive it (a job summary records it): caps what the network carries")
    p.add_argument("--points", metavar="FILE", help="measured points, preprocess vCPUs against "
                   "images/s (a JSON list, or an autopilot run's build/results/<id>.json): "
                   "the planner fits a curve that can flatten")
    p.add_argument("--train-nodes", type=int, default=1, help="GPU nodes of --gpu-instance that train "
                   "together, each as fast as the profiled one (default 1; more: a coordinating head)")
    p.add_argument("--region", default="us-east-1", help="whose prices (default us-east-1)")
    p.add_argument("--spot", action="store_true", help="price the CPU workers at the region's spot "
                   "prices as `make prices` read them (the highest zone's), and write them spot: "
                   "a spot worker may be reclaimed (the job goes on with fewer)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--write", metavar="NAME", help="write cluster_templates/NAME.yaml for the choice")
    p.add_argument("--help", action="store_true", help="this help")
    return p


# The range of images/s a figure may take: past it the arithmetic overflows, underflows to
# zero or asks for more nodes than any region has (a planner loop that never ends).
MIN_IMAGES_PER_S, MAX_IMAGES_PER_S = 1e-3, 1e7


def positive(value, what: str) -> float:
    """A measured rate, as data: a number (never a bool), compared before any conversion
    (an integer of 400 digits has no float), within the planner's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not MIN_IMAGES_PER_S <= value <= MAX_IMAGES_PER_S:
        raise KitError(f"{what}: {short(value)} is not a number of images/s from "
                       f"{MIN_IMAGES_PER_S:g} to {MAX_IMAGES_PER_S:g}; measure it "
                       "(PROFILE=build/results/<job>.json) or pass such a figure")
    return float(value)


def read_profile(path_text: str) -> dict:
    """The figures of a job summary: build/results/<id>.json, the job's --results file, or
    {"trainer_images_per_s": ..., "preprocess_images_per_s_per_cpu": ...}."""
    data = read_json("PROFILE", path_text, "pass a job summary such as "
                     "build/results/<submission id>.json", MAX_PROFILE_BYTES)
    if isinstance(data, dict) and any(isinstance(data.get(k), dict) for k in ("result", "diagnosis")):
        s = summary_of(data, f"PROFILE={short(path_text)}")  # build/results/<id>.json, or a summary
        data = {k: v for k, v in (("bytes_per_image", s.bytes_per_image), ("device", s.device),
                                  ("gpu_model", s.gpu_model), ("model", s.model)) if v is not None}
        if s.diagnosis.keys() >= {"trainer_images_per_s", "preprocess_images_per_s_per_cpu"}:
            data |= {"trainer_images_per_s": s.trainer_images_per_s,
                     "preprocess_images_per_s_per_cpu": s.preprocess_images_per_s_per_cpu}
    if not isinstance(data, dict) or not {"trainer_images_per_s",
                                          "preprocess_images_per_s_per_cpu"} <= data.keys():
        raise KitError(f"PROFILE={short(path_text)}: no trainer_images_per_s and "
                       "preprocess_images_per_s_per_cpu in it; pass the summary of a "
                       "vit_synthetic run (build/results/), or give both figures in ARGS")
    return data


def trainer_warning(found: dict, gpu: str, from_args: bool) -> str | None:
    """Where the profile's trainer rate was measured on another device than the GPU type
    planned for (a CPU, or another GPU model): one warning line; None where it matches,
    the summary does not say, or ARGS gave the rate."""
    device, model = str(found.get("device") or ""), str(found.get("gpu_model") or "")
    planned = catalog.INSTANCE_TYPES[gpu].gpu_model or ""
    if from_args or not device:
        return None
    if not device.startswith("cuda"):
        return (f"warning: the profile's trainer ran on {device} ({found.get('model') or 'its model'}), not a "
                f"{planned} GPU: the plan prices a {gpu} mix on a CPU's rate; measure on the GPU planned "
                "for, or give its rate with ARGS=\"--trainer-images-per-s N\"")
    if model and planned and planned.lower() not in model.lower():
        return (f"warning: the profile's trainer ran on a {model}, not {gpu}'s {planned}: its rate is "
                f"that GPU's; plan with ARGS=\"--gpu-instance <a type with that GPU>\", or measure on a {planned}")
    return None


def profile_from(args: list[str], profile_path: str) -> tuple[Profile | None, argparse.Namespace]:
    """The profile and the options; (None, options) for --help, which needs no profile."""
    a = parser().parse_args(args)
    if a.help:
        return None, a
    found = read_profile(profile_path) if profile_path else {}
    gpu = a.gpu_instance or "g5.xlarge"
    spec = catalog.INSTANCE_TYPES.get(gpu)
    if spec is None or not spec.gpus:
        raise KitError(f"ARGS: --gpu-instance {short(gpu)} is not a GPU type of scripts/catalog.py; "
                       f"use one such as g5.xlarge")
    if catalog.gpu_support_problem(gpu):
        raise KitError(f"ARGS: --gpu-instance {gpu}: {catalog.gpu_support_problem(gpu)}; "
                       "use one such as g5.xlarge")
    if a.region not in catalog.priced_regions():
        # a region with prices first: of two as close (us-est-1), the one the plan can price
        hint = (difflib.get_close_matches(str(a.region), catalog.priced_regions(), n=1, cutoff=0.8)
                or difflib.get_close_matches(str(a.region), catalog.REGIONS, n=1, cutoff=0.6))
        typo = f"{short(a.region)} is no AWS region (did you mean {hint[0]}?)" if a.region not in catalog.REGIONS \
            and hint else f"{short(a.region)} has no prices"
        raise KitError(f"ARGS: --region {typo}; use one of "
                       f"{', '.join(catalog.priced_regions())}, or read its prices from AWS with "
                       "`make prices CLUSTER=<a values file of that region>`")
    if a.spot and catalog.spot_source(a.region) is None:
        raise KitError(f"ARGS: --spot: no spot prices were read for {a.region}; `make prices "
                       "CLUSTER=<a values file of that region>` reads them from AWS (free)")
    trainer = a.trainer_images_per_s if a.trainer_images_per_s is not None else found.get("trainer_images_per_s")
    cpu = a.cpu_images_per_s if a.cpu_images_per_s is not None else found.get("preprocess_images_per_s_per_cpu")
    for key, figure in (("trainer_images_per_s", trainer), ("preprocess_images_per_s_per_cpu", cpu)):
        if figure is None and key in found:
            raise KitError(f"PROFILE={short(profile_path)}: {key} is null (the job measured no "
                           "such figure); pass a summary of a run that trained, or the figure in ARGS")
    if trainer is None or cpu is None:
        raise KitError("plan needs a profile: PROFILE=build/results/<id>.json, or "
                       "ARGS=\"--trainer-images-per-s N --cpu-images-per-s M\"")
    if not 1 <= a.train_nodes <= MAX_WORKERS_PER_TYPE:
        raise KitError(f"ARGS: --train-nodes must be from 1 to {MAX_WORKERS_PER_TYPE} (got {a.train_nodes})")
    size = a.bytes_per_image if a.bytes_per_image is not None else found.get("bytes_per_image")
    if size is not None and (isinstance(size, bool) or not isinstance(size, (int, float))
                             or not 1 <= size <= 1e9):
        raise KitError(f"bytes per image: {short(size)} is not a number of bytes from 1 to 1e9; "
                       "measure it (a job summary records it) or pass --bytes-per-image N")
    curve = fit_curve(read_points(a.points)) if a.points else None
    said = trainer_warning(found, gpu, a.trainer_images_per_s is not None)
    if said:
        print(said, file=sys.stderr, flush=True)
    return Profile(gpu, positive(trainer, "trainer images/s"), positive(cpu, "CPU images/s per vCPU"),
                   a.train_nodes, float(size) if size is not None else None, curve), a


# --- output ---------------------------------------------------------------------------

def limit_text(chosen: Option, profile: Profile) -> str:
    """What holds the chosen mix's rate, in one line, and what the planner did not count."""
    if chosen.limit == "network":
        head = catalog.network_gbps(chosen.head)
        text = (f"held by the network: {chosen.train_nodes} x {chosen.head}'s {head:g} Gbit/s baseline "
                f"carries {chosen.network_images_per_s:.0f} images/s of {profile.bytes_per_image / 1e3:.0f} kB "
                "from the workers; more CPU workers would add cost and no images")
    elif chosen.limit == "curve":
        text = (f"held by the measured curve: its ceiling is {profile.curve.ceiling:.0f} images/s, and "
                f"more CPUs stop paying past ~{profile.curve.knee():.0f} preprocess vCPUs")
    elif chosen.limit == "cpus":
        text = "held by its CPUs: a limit stops more of them from paying (see the options below)"
    else:
        text = "the trainers are fed: their own speed holds the rate"
    if not profile.bytes_per_image:
        text += ("; the network is not counted (no bytes per image: a job summary records it, or "
                 "--bytes-per-image N)")
    return text



def table(rows: list[Option], baseline: Option) -> list[str]:
    cells = [("option", "$/h", "images/s", "data wait", "$/M images", "$/M vs alone")]
    for o in rows:
        cells.append((o.name, f"{o.usd_per_hour:.3f}", f"{o.images_per_s:.1f}", f"{o.data_wait:.0%}",
                      f"{o.usd_per_million_images:.2f}",
                      f"{o.usd_per_million_images / baseline.usd_per_million_images - 1:+.0%}"))
    return text_table(cells)


def plan_json(chosen: Option, ranked: list[Option]) -> dict:
    def public(o: Option) -> dict:
        d = asdict(o)
        return {"head": d.pop("head"), "workers": d.pop("workers"), **d}
    return {"chosen": public(chosen), "options": [public(o) for o in ranked]}


def values_for(name: str, chosen: Option, region: str) -> dict:
    def disk(gpu: bool) -> dict:
        return {"root_gb": catalog.min_root_gb(gpu), "volume_type": ROOT_VOLUME_TYPE, "data_gb": 0}

    workers = {f"cpu_worker{'' if i == 0 else i + 1}": {
        "role": "preprocess", "instance_type": w["instance_type"], "min_workers": w["count"],
        "max_workers": w["count"], "spot": w.get("spot", False), "disk": disk(False)}
        for i, w in enumerate(chosen.workers)}
    if chosen.train_nodes > 1:  # multi_g5.yaml's recipe
        return {"cluster_name": name, "provider": "aws", "mix": "heterogeneous",
                "aws": {"region": region},
                "head": {"role": "coordinate", "instance_type": chosen.coordinator,
                         "preprocess": False, "disk": disk(False)},
                "workers": {"gpu_worker": {"role": "train", "instance_type": chosen.head,
                                           "min_workers": chosen.train_nodes,
                                           "max_workers": chosen.train_nodes, "spot": False,
                                           "disk": disk(True)}} | workers}
    return {"cluster_name": name, "provider": "aws",
            "mix": "heterogeneous" if workers else "homogeneous",
            "aws": {"region": region},
            "head": {"role": "train", "instance_type": chosen.head, "preprocess": True, "disk": disk(True)},
            "workers": workers}
