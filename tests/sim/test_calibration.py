"""The simulator's calibration (scripts/sim/calibrate.py): fitted on fixed_min and
fixed_max of `make bench-autopilot`'s 2026-11-27 set, it plays the set's other rows.
What it reproduces is held here; what it misses is printed by `make simulate` (NOT
CALIBRATED) and written in docs/autopilot.md, never tuned away."""

import pytest

from scripts.sim import calibrate

PREDICTED = calibrate.predict(seeds=6)
CHECKS = {name: (ok, said) for name, ok, said in calibrate.checks(PREDICTED)}


def test_the_fit_reads_the_trainer_the_nodes_and_the_start_from_the_two_fixed_rows_only():
    f = calibrate.fit()
    with_one, with_three = 71.3 / (1 - 0.47), 110.5 / (1 - 0.02)  # the trainers never waiting, beside 1 and 3 nodes
    assert f.trainer_images_per_s * (1 - f.slowdown_per_node) == pytest.approx(with_one)
    assert f.trainer_images_per_s * (1 - 3 * f.slowdown_per_node) == pytest.approx(with_three)
    assert f.node_images_per_s == pytest.approx(tuple(with_one * (1 - w) for w in (0.40, 0.50, 0.47)))
    assert f.start_s == pytest.approx(((80 - 3840 / 71.3) + (67 - 3840 / 110.5)) / 2)
    changed = dict(calibrate.MEASURED, raydata=calibrate.Row(1, 1, 0.9, (0.9, 0.9, 0.9), 1, 1),
                   autopilot=calibrate.Row(1, 1, 0.9, (0.9, 0.9, 0.9), 1, 1))
    assert calibrate.fit(changed) == f  # the predicted rows take no part in the fit


@pytest.mark.parametrize("check", ["(b) fixed_min $/M images", "(b) fixed_min wall s", "(b) fixed_max $/M images",
                                   "(b) fixed_max wall s", "(b) raydata $/M images", "(b) raydata wall s",
                                   "(c) the autopilot asks for 2 nodes"])
def test_what_the_simulator_reproduces_of_the_set(check):
    """The fixed rows within 20% (the start, the trainer, the shared host and one node's
    supply, fitted, make both walls); Ray Data's rule's row within 20%; and the autopilot's
    first ask at the second it made it (the checkout's own Steering: a copy of the policy
    could match the rows and not this)."""
    ok, said = CHECKS[check]
    assert ok, f"{check}: {said}"


def test_every_check_is_reported_with_both_figures():
    assert len(CHECKS) == 1 + 2 * len(calibrate.MEASURED) + len(calibrate.AUTOPILOT_ASKS)
    passed, lines = calibrate.report(seeds=2)
    assert lines[0].startswith("calibration on make bench-autopilot of 2026-11-27 (fitted on fixed_min and fixed_max")
    assert all(line.startswith(("  pass  ", "  MISS  ")) and "measured" in line for line in lines[1:])
    assert passed == all(line.startswith("  pass") for line in lines[1:])
