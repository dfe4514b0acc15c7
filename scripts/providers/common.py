"""The provider interface's types, beside the interface (scripts/providers/__init__.py), as
SkyPilot keeps provision/common.py beside provision/__init__.py: what the kit and every
provider share without one importing another.

Prices: what a mix bills, in the one shape every provider answers with
(Provider.node_prices) and scripts/pricing/ reads: no pricing code asks which provider a
mix runs on. (The job-submission modes, JobPackages and JobFiles, stay in core/submit.py:
the submission below the providers' layer runs by them.)"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Prices:
    """A mix's cost as its provider prices it (scripts/catalog.py's list prices)."""

    lines: list[str]  # `make cost`: what is priced and how, the table, its notes
    hourly: tuple[float, float] | None  # $/h with min_workers and with max_workers; None: not priced
    # $/h of one node of each type (a pod: its share of its node), by the raykit-node-type
    # label its nodes carry (the run's bill, the autopilot); None: not priced
    node_hour: dict[str, float] | None
    basis: str  # what the prices are, as the run's bill says ("on-demand list prices in ...")
    network_gbps: dict[str, float]  # each type's baseline bandwidth, Gbit/s, by label (known ones)
    bench_refusal: str = ""  # why `make bench` cannot price a run of this mix ('': it can)
