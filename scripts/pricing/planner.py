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
"""

import argparse
import math
from dataclasses import asdict, dataclass, field

from scripts import catalog
from scripts.core.errors import KitError, short
from scripts.core.inputs import read_json
from scripts.pricing.formulas import usd_per_million_images
from scripts.pricing.output import text_table

MAX_DATA_WAIT = 0.05
# The coordinating head of a mix with several train nodes (multi_g5.yaml's): Ray's own
# services and the job's driver, no work, so no preprocessing vCPUs counted.
COORDINATOR = "m6i.xlarge"
ROOT_VOLUME_TYPE = "gp3"
MAX_PROFILE_BYTES = 1 << 20
SHOWN_OPTIONS = 10


@dataclass(frozen=True)
class Profile:
    gpu_instance: str
    trainer_images_per_s: float  # all GPUs of one gpu_instance together, never waiting
    cpu_images_per_s: float      # per vCPU
    train_nodes: int = 1         # gpu_instance nodes training one job together

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

    @property
    def name(self) -> str:
        gpus = [self.head] if self.train_nodes == 1 else [f"{self.train_nodes} x {self.head}"]
        return " + ".join([self.coordinator] * bool(self.coordinator) + gpus
                          + [f"{w['count']} x {w['instance_type']}" for w in self.workers])


def node_usd(instance_type: str, region: str) -> float:
    gpu = catalog.INSTANCE_TYPES[instance_type].gpus > 0
    return catalog.node_usd_per_hour(instance_type, region, ROOT_VOLUME_TYPE,
                                     catalog.min_root_gb(gpu))


def predicted_images_per_s(trainer_images_per_s: float, cpu_images_per_s: float,
                           preprocess_vcpus: float) -> float:
    """The model: the mix trains as fast as the slower of its two stages."""
    return min(trainer_images_per_s, preprocess_vcpus * cpu_images_per_s)


def option(profile: Profile, head: str, workers: list, region: str) -> Option:
    """`head`'s GPUs fed by `workers`: one GPU head that preprocesses on its spare vCPUs,
    or (profile.train_nodes > 1) that many train nodes of `head`'s type beside the
    coordinator, the CPU workers alone preprocessing."""
    n = profile.train_nodes
    vcpus = (catalog.preprocess_vcpus(head) if n == 1 else 0) + sum(
        w["count"] * catalog.preprocess_vcpus(w["instance_type"]) for w in workers)
    usd = (n * node_usd(head, region) + (node_usd(COORDINATOR, region) if n > 1 else 0)
           + sum(w["count"] * node_usd(w["instance_type"], region) for w in workers))
    return predicted(profile, head, workers, usd, vcpus, COORDINATOR if n > 1 else None)


def alone(profile: Profile, region: str) -> Option:
    """The baseline: the GPU nodes without CPU workers, each preprocessing on its own spare
    vCPUs (one of them the head)."""
    n, gpu = profile.train_nodes, profile.gpu_instance
    return predicted(profile, gpu, [], n * node_usd(gpu, region), n * catalog.preprocess_vcpus(gpu))


def predicted(profile: Profile, head: str, workers: list, usd_per_hour: float, vcpus: int,
              coordinator: str | None = None) -> Option:
    """An option of this $/h and preprocessing vCPUs, with the rate, wait and $/M images
    the model predicts for the profile's trainers."""
    rate = predicted_images_per_s(profile.demand, profile.cpu_images_per_s, vcpus)
    return Option(head, workers, usd_per_hour, vcpus, rate, 1 - rate / profile.demand,
                  usd_per_million_images(usd_per_hour, rate) if rate else math.inf,
                  train_nodes=profile.train_nodes, coordinator=coordinator)


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


def cpu_types() -> list[str]:
    return [t for t, spec in catalog.INSTANCE_TYPES.items()
            if spec.gpus == 0 and catalog.preprocess_vcpus(t) > 0]


def same_gpus(instance_type: str) -> list[str]:
    """The GPU instance and every other with the same GPU model and count."""
    base = catalog.INSTANCE_TYPES[instance_type]
    return [t for t, spec in catalog.INSTANCE_TYPES.items()
            if (spec.gpu_model, spec.gpus) == (base.gpu_model, base.gpus)]


def options(profile: Profile, region: str) -> tuple[list[Option], Option]:
    """(every option that feeds the trainers, best first; the GPU instance alone)."""
    feeding = []
    for head in same_gpus(profile.gpu_instance):
        missing = missing_vcpus(profile, head)
        if missing <= 0:
            feeding.append(option(profile, head, [], region))
            continue
        for cpu in cpu_types():
            count = math.ceil(missing / catalog.preprocess_vcpus(cpu))
            if count <= MAX_WORKERS_PER_TYPE:
                feeding.append(option(profile, head, [{"instance_type": cpu, "count": count}], region))
    if not feeding:
        raise KitError(f"plan: feeding {profile.demand:g} images/s at "
                       f"{profile.cpu_images_per_s:g} images/s per vCPU takes "
                       f"{vcpus_to_feed(profile.demand, profile.cpu_images_per_s)} "
                       f"preprocessing vCPUs, more than {MAX_WORKERS_PER_TYPE} workers of any CPU "
                       "type hold; check the profile's figures")
    feeding.sort(key=lambda o: (o.usd_per_million_images, o.usd_per_hour, o.name))
    return feeding, alone(profile, region)


def cheaper_mix_of_types(chosen: Option, profile: Profile, region: str) -> Option | None:
    """Two CPU types together that cover the chosen option's worker vCPUs for less."""
    if not chosen.workers:
        return None
    missing = missing_vcpus(profile, chosen.head)
    best = None
    for first in cpu_types():
        per_first = catalog.preprocess_vcpus(first)
        for n_first in range(1, min(math.ceil(missing / per_first), MAX_WORKERS_PER_TYPE + 1)):
            rest = missing - n_first * per_first
            for second in cpu_types():
                n_second = math.ceil(rest / catalog.preprocess_vcpus(second))
                if second == first or n_second > MAX_WORKERS_PER_TYPE:
                    continue
                mix = option(profile, chosen.head, [{"instance_type": first, "count": n_first},
                                                    {"instance_type": second, "count": n_second}], region)
                if best is None or mix.usd_per_hour < best.usd_per_hour:
                    best = mix
    return best if best and best.usd_per_hour < chosen.usd_per_hour - 0.005 else None


# --- inputs ---------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, never argparse's usage dump and exit
        raise KitError(f"ARGS: {message}; see `make plan ARGS=--help`")


def parser() -> Parser:
    p = Parser(prog="make plan", add_help=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu-instance", help="the GPU instance the profile was measured on or is "
                   "for (default: g5.xlarge)")
    p.add_argument("--trainer-images-per-s", type=float,
                   help="images/s all GPUs of the instance train when never waiting for data")
    p.add_argument("--cpu-images-per-s", type=float, help="images/s one vCPU preprocesses")
    p.add_argument("--train-nodes", type=int, default=1, help="GPU nodes of --gpu-instance that train "
                   "together, each as fast as the profiled one (default 1; more: a coordinating head)")
    p.add_argument("--region", default="us-east-1", help="whose prices (default us-east-1)")
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
    for key in ("result", "diagnosis"):  # build/results/ -> the job's summary -> its diagnosis
        if isinstance(data, dict) and isinstance(data.get(key), dict):
            data = data[key]
    if not isinstance(data, dict) or not {"trainer_images_per_s",
                                          "preprocess_images_per_s_per_cpu"} <= data.keys():
        raise KitError(f"PROFILE={short(path_text)}: no trainer_images_per_s and "
                       "preprocess_images_per_s_per_cpu in it; pass the summary of a "
                       "vit_synthetic run (build/results/), or give both figures in ARGS")
    return data


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
    if a.region not in catalog.PRICED_REGIONS:
        raise KitError(f"ARGS: --region {short(a.region)} has no prices in scripts/catalog.py; "
                       f"use one of {', '.join(catalog.PRICED_REGIONS)}")
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
    return Profile(gpu, positive(trainer, "trainer images/s"), positive(cpu, "CPU images/s per vCPU"),
                   a.train_nodes), a


# --- output ---------------------------------------------------------------------------

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
        "max_workers": w["count"], "spot": False, "disk": disk(False)}
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
