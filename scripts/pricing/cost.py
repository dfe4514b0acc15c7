"""What a cluster costs per hour: the one place that turns built values into dollars.

Each provider prices what its mix bills (Provider.node_prices, from scripts/catalog.py): AWS
node by node (on-demand list price plus the node's EBS volumes), KubeRay the nodes its
pods need of the instance types their node selectors name (the node groups bill them, not
the kit; their disks and the control plane are not counted). A local mix bills nothing;
with `prices_as` it stands for an AWS values file with its own node counts (each local
worker type priced as the AWS worker type of the same name), which is how `make cost` and
`make bench` price a local mix. A local preprocess node is priced as its share of the type
it stands for: a quarter-core node as a quarter of one of the type's vCPUs, not the whole
instance (its train nodes and head stand for the GPU instance whole: a trainer slot is the
GPU). `make up` and `make up DRY_RUN=1` announce hourly_cost; `make cost` prints
cost_table; `make bench` prices each row with priced(); a job learns its nodes' prices
through node_hour_prices (scripts/job_env.py).
"""

import copy

from scripts import catalog
from scripts.build import Built, build
from scripts.core.errors import KitError
from scripts.core.inputs import values_shown
from scripts.providers.common import Prices
from scripts.core.values import joined


def hourly_cost(built: Built) -> tuple[float, float] | None:
    """What running the cluster bills per hour, with min_workers and with max_workers:
    (0, 0) for a mix that bills nothing (this machine's cores), None for an unpriced
    region or instance type."""
    prices = built.provider.node_prices(built.values)
    return (0.0, 0.0) if prices is None else prices.hourly


def mix_prices(built: Built) -> tuple[Prices | None, str]:
    """The prices of what the mix bills, or of the AWS mix a local one stands for (its
    prices_as, checked), and how they are named ('as hetero, ' for a stand-in); None where
    the mix bills nothing and stands for nothing."""
    prices = built.provider.node_prices(built.values)
    if prices is not None:
        return prices, ""
    theirs = check_prices_as(built)
    if theirs is None:
        return None, ""
    return (theirs.provider.node_prices(stand_in_values(built.values, theirs)),
            f"as {built.values['prices_as']}, ")


def check_prices_as(built: Built) -> Built | None:
    """A mix that bills nothing, priced through its `prices_as`: that file must be an AWS
    values file that validates and has a worker type of each of this mix's names. Returns
    that AWS mix (None where there is none to check); raises KitError naming every problem
    (`make validate` and every pricing command check it)."""
    name, where = built.values.get("prices_as"), values_shown(built.cluster)
    if not name:
        return None
    try:
        theirs = build(name)
    except KitError as e:
        raise KitError(f"{where}: prices_as: {name} does not validate: {e}; fix that file or "
                       "name another") from None
    # a stand-in is priced node by node as the instance types it names (stand_in_values)
    if theirs.provider.node_prices(theirs.values) is None or "instance_type" not in theirs.values["head"]:
        raise KitError(f"{where}: prices_as: {values_shown(name)} is not an AWS values "
                       "file; name one such as hetero")
    problems = [f"workers.{worker}: {name}.yaml has no worker type '{worker}' to price it as; "
                f"name the local worker types as in {name}.yaml"
                for worker in built.values["workers"] if worker not in theirs.values["workers"]]
    # a name alone is no match: a node is priced as the node of the same role it stands for
    # (a train node as a GPU instance, a preprocess node as a CPU one)
    pairs = [("head", built.values["head"], theirs.values["head"])] + [
        (f"workers.{worker}", w, theirs.values["workers"][worker])
        for worker, w in built.values["workers"].items() if worker in theirs.values["workers"]]
    problems += [f"{where_}.role: {ours['role']} here, but {name}.yaml's is {other['role']}: it would be "
                 f"priced as the other kind of node; give both the same role, or name another prices_as"
                 for where_, ours, other in pairs if ours["role"] != other["role"]]
    if problems:
        raise KitError(joined(where, problems))
    return theirs


def stand_in_values(values: dict, aws_mix: Built) -> dict:
    """The AWS values a local cluster stands for: `prices_as`'s mix (checked by
    check_prices_as) with this file's node counts, each local worker type priced as the AWS
    worker type of the same name; a preprocess type carries its `share` of that type
    (local_share), a train type stands for its instance whole."""
    aws_values = copy.deepcopy(aws_mix.values)
    aws_values["workers"] = {
        name: dict(aws_values["workers"][name], min_workers=w["min_workers"],
                   max_workers=w["max_workers"])
        | ({"share": local_share(values, w, aws_values["workers"][name]["instance_type"])}
           if w["role"] == "preprocess" else {})
        for name, w in values["workers"].items()}
    return aws_values


def local_share(values: dict, node: dict, instance_type: str) -> float:
    """The part of `instance_type` a local preprocess node stands for: the cores of time it
    runs on (its cpu_quota; else, pinned, its cores; else its CPUs) over the type's vCPUs,
    at most the whole instance."""
    cores = node["cpu_quota"] or ((node["cores"] or node["cpus"]) if values["pin_cpus"] else node["cpus"])
    return min(1.0, cores / catalog.INSTANCE_TYPES[instance_type].vcpus)


def cost_table(built: Built) -> list[str]:
    """`make cost`: the mix's own table; a local cluster costs nothing, or, with
    `prices_as`, the table of the AWS mix it stands for."""
    values = built.values
    prices, label = mix_prices(built)
    if prices is None:
        return [f"'{values['cluster_name']}' runs on this machine: no cloud cost "
                "(set prices_as to price it like an AWS values file)"]
    if not label:
        return prices.lines
    return [f"'{values['cluster_name']}' runs on this machine; it stands for "
            f"{values_shown(values['prices_as'])}'s node types with its own counts, "
            "priced:"] + prices.lines


def priced(built: Built) -> tuple[str, float]:
    """A bench row's name and $/h: a mix at its own prices; a local one as the AWS mix its
    `prices_as` names, with its own node counts (what it stands for)."""
    name = built.cluster
    prices, label = mix_prices(built)
    if prices is None:
        raise KitError(f"CLUSTERS: {values_shown(name)} sets no prices_as; set it "
                       "to the AWS values file it stands for, e.g. prices_as: hetero")
    if prices.bench_refusal:
        raise KitError(f"CLUSTERS: {values_shown(name)}: {prices.bench_refusal}")
    return (f"{name} as {built.values['prices_as']}" if label else name), prices.hourly[0]


def node_network_gbps(built: Built, mix: tuple[Prices | None, str] | None = None) -> dict[str, float]:
    """Each node type's baseline bandwidth, Gbit/s, by its raykit-node-type label, as
    priced (a local mix's as its prices_as; a KubeRay pod's as its node's); {} where the
    instance types are unknown. `mix`: mix_prices(built), where the caller has it."""
    prices, _ = mix or mix_prices(built)
    return prices.network_gbps if prices else {}


def node_hour_prices(built: Built, mix: tuple[Prices | None, str] | None = None
                     ) -> tuple[dict[str, float], str] | None:
    """$ per hour of one node of each type, keyed by the raykit-node-type label its nodes
    carry, and what they are priced as; None where the mix cannot be priced (a local mix
    without prices_as, an unpriced region or instance type). A KubeRay pod is its node's
    share (the node's price over the pods of its kind a node holds). `mix`: as above."""
    prices, label = mix or mix_prices(built)
    if prices is None or prices.node_hour is None:
        return None
    return prices.node_hour, f"{label}{prices.basis}"
