"""The price-performance figures, in the published results' units.

One place for the arithmetic that `make plan` (and the bench table) print, so that a
figure computed here and one from a paper mean the same thing:
  $ per 100 steps      = $/h / 3600 x mean step seconds x 100
  $ per million images = $/h / 3600 / images per second x 1e6
  change               = 1 - new cost / baseline cost (positive: cheaper per unit of training)
"""

SECONDS_PER_HOUR = 3600


def usd_per_100_steps(usd_per_hour: float, mean_step_s: float) -> float:
    return usd_per_hour / SECONDS_PER_HOUR * mean_step_s * 100


def usd_per_million_images(usd_per_hour: float, images_per_s: float) -> float:
    return usd_per_hour / SECONDS_PER_HOUR / images_per_s * 1e6


def cost_change(cost: float, baseline: float) -> float:
    """Fraction saved per unit of training against the baseline (0.46: 46% cheaper)."""
    return 1 - cost / baseline
