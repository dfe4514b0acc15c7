"""`note:` lines for local values that are valid but unwise (scripts/commands/advice.py
says them): nodes asking more CPUs than this machine has cores."""

import os


def value_notes(values: dict) -> list[str]:
    """Nodes whose CPUs outnumber this machine's cores share them: a heterogeneous row's
    gain over a single one would be overstated (the local_gpu files assume 16 cores)."""
    wanted = values["head"]["cpus"] + sum(w["cpus"] * w["max_workers"] for w in values["workers"].values())
    cores = os.cpu_count() or 1
    if wanted > cores and not values.get("pin_cpus"):
        return [f"its nodes ask {wanted:g} CPUs and this machine has {cores} cores: they share them (the "
                "simulated CPUs are Ray's slots, not cores), so a bench on it overstates what more CPU nodes buy; "
                "scale the cpus down, or run it on a machine with that many cores"]
    return []
