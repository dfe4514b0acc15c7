"""One entrance: `make up` records the job environment it launched with (the nodes' prices,
the autopilot's settings, the stall limit: build/launched/job_env/<cluster>.json), and `make
submit` passes that record, checked against the values file as it is now. An edit that
changes what the job would see is refused in one line naming it; an edit the job does not
see passes; a file that no longer builds leaves the launched environment in force (said).
Before, submit rebuilt the environment from the file and, where it no longer built,
silently passed none: no prices, no autopilot."""

import json

import pytest
import yaml

from conftest import USER_VALUES, load_example
from jobs.raykit import contract
from scripts.build import build
from scripts.commands import jobs, lifecycle
from scripts.core import state
from scripts.core.errors import KitError
from scripts.core.inputs import values_shown
from scripts.job_env import job_env

CLUSTER = "lenv"


def write(values: dict) -> None:
    (USER_VALUES / f"{CLUSTER}.yaml").write_text(yaml.safe_dump(values, sort_keys=False))


@pytest.fixture
def launched():
    """local_autopilot's mix, as `make up` would have recorded its job environment."""
    values = load_example("local_autopilot") | {"cluster_name": CLUSTER}
    write(values)
    state.save_job_env(CLUSTER, job_env(build(CLUSTER)))
    yield values
    state.forget(CLUSTER)
    (USER_VALUES / f"{CLUSTER}.yaml").unlink(missing_ok=True)


def test_launch_records_the_environment_before_the_provider_starts_anything(monkeypatch):
    values = load_example("local_autopilot") | {"cluster_name": CLUSTER}
    write(values)
    built = build(CLUSTER)
    seen = {}

    def up(cluster, text, values):  # the provider's launch, stood in: what it finds on disk
        seen["env"] = state.load_job_env(cluster)
        raise KitError("stopped here")

    monkeypatch.setattr(built.provider, "up", up)
    try:
        with pytest.raises(KitError, match="stopped here"):
            lifecycle.launch(built)
        assert seen["env"] == job_env(built) and contract.AUTOPILOT_ENV in seen["env"]
    finally:
        state.forget(CLUSTER)
        (USER_VALUES / f"{CLUSTER}.yaml").unlink(missing_ok=True)
    assert not state.job_env_path(CLUSTER).exists()  # forgotten with the record


def test_submit_passes_what_was_launched(launched):
    assert jobs.launched_env(CLUSTER) == state.load_job_env(CLUSTER)


@pytest.mark.parametrize("edit,named", [
    (lambda v: v["autopilot"].update(target_wait_share=0.3), "the autopilot's settings"),
    (lambda v: v["workers"]["cpu_worker"].update(max_workers=2), "the autopilot's settings"),
    (lambda v: v.update(stall_minutes=5), "stall_minutes"),
    (lambda v: v.update(prices_as="p4d_hetero"), "the nodes' prices"),
    (lambda v: v["autopilot"].update(enabled=False), "the autopilot's switch for Ray Data's own autoscaler"),
], ids=["target", "bounds", "stall", "prices", "autopilot off"])
def test_an_edit_the_job_would_see_is_refused_naming_it(launched, edit, named):
    edit(launched)
    write(launched)
    with pytest.raises(KitError) as refused:
        jobs.launched_env(CLUSTER)
    said = str(refused.value)
    assert said.startswith(f"{values_shown(CLUSTER)} changed since `make up CLUSTER={CLUSTER}` in what the job would see: ")
    assert named in said and "undo the edit, or `make down" in said


def test_an_edit_the_job_does_not_see_passes(launched):
    launched["idle_timeout_minutes"] = 5
    write(launched)
    assert jobs.launched_env(CLUSTER) == state.load_job_env(CLUSTER)


def test_a_file_that_no_longer_builds_leaves_the_launched_environment_in_force(launched, capsys):
    (USER_VALUES / f"{CLUSTER}.yaml").write_text("cluster_name: [unclosed\n")
    assert jobs.launched_env(CLUSTER) == state.load_job_env(CLUSTER)
    assert capsys.readouterr().out.startswith(f"note: {values_shown(CLUSTER)} no longer builds (")
    state.job_env_path(CLUSTER).unlink()  # a cluster launched by an older kit: validate's refusal
    with pytest.raises(KitError):
        jobs.launched_env(CLUSTER)


@pytest.mark.parametrize("text", ["{", "[1]", json.dumps({"RAYKIT_STALL_S": 5})])
def test_a_recorded_environment_that_is_not_the_kits_is_one_error_line(launched, text):
    state.job_env_path(CLUSTER).write_text(text)
    with pytest.raises(KitError, match=r"job_env/lenv.json is corrupt .*delete it"):
        jobs.launched_env(CLUSTER)


def test_a_recorded_environment_is_no_record_of_a_cluster(launched):
    """`make clean` and the twin check list clusters by their records: the environment
    beside them is not one."""
    assert CLUSTER not in state.launched_clusters() and f"{CLUSTER}.env" not in state.launched_clusters()
