"""The one entrance for a values file: every check any command makes of it, so that
validate, render, preflight, up, run, submit, cost and bench refuse the same file with the
same line, before anything is written, launched or billed.

build() is the values' schema and the provider's rules; the pricing adds what only it can
judge: a local mix's `prices_as` (the AWS file it stands for must build, with matching
roles) and the job's environment (an autopilot's $/h ceiling against its mix's prices,
the stall limit). They come last because they need a built file."""

from scripts.build import Built, build
from scripts.job_env import job_env


def checked(cluster: str) -> Built:
    built = build(cluster)
    job_env(built)  # its prices check the prices_as file (pricing/cost.py's check_prices_as)
    return built
