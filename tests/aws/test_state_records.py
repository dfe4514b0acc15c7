"""State under build/launched/ as hostile input to `make down` (and PURGE): a record or a
launched config that names another cluster's instances, group, roles or placement group,
or that is a link, never steers `ray down` or a deletion onto them, and is never skipped
in silence; every refusal is one line, before any AWS call (there are no credentials here:
one would fail otherwise)."""

import os

import pytest

from scripts import kit
from scripts.core import state

NAME = "rec-test"
RECORD = {"cluster": "rec_test", "provider": "aws", "cluster_name": NAME, "region": "us-east-1",
          "min_workers": {"cpu_worker": 1}, "ready_timeout_s": 600, "security_group": f"ray-{NAME}",
          "ray_key_pair": False, "ray_role": False, "head_role": f"raykit-{NAME}-head",
          "worker_role": None, "placement_group": f"raykit-{NAME}"}
CONFIG = f"cluster_name: {NAME}\nprovider:\n  type: aws\n  region: us-east-1\n"


@pytest.fixture
def saved(monkeypatch):
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def save(record=RECORD, config=CONFIG):
        state.save("rec_test", record, config)
    yield save
    state.forget("rec_test")


def down(capsys, *extra) -> str:
    code = kit.main(["down", "--cluster", "rec_test", *extra])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("key,value", [("head_role", "raykit-other-head"), ("worker_role", "raykit-other-worker"),
                                       ("placement_group", "raykit-other"), ("security_group", "ray-other")])
def test_a_record_naming_another_clusters_resource_steers_nothing(saved, capsys, key, value):
    saved(RECORD | {key: value})
    err = down(capsys, "--purge", "1")
    assert f"names what is not cluster {NAME}'s ({key}: '{value}')" in err and "nothing was stopped" in err


def test_a_launched_config_of_another_cluster_steers_no_ray_down(saved, capsys):
    saved(config=CONFIG.replace(f"cluster_name: {NAME}", "cluster_name: production"))
    assert "rec_test.yaml: cluster 'production' in 'us-east-1'" in down(capsys)
    saved(config=CONFIG.replace("us-east-1", "eu-west-1"))
    assert "cluster 'rec-test' in 'eu-west-1'" in down(capsys)


def test_a_launched_config_that_is_a_link_or_not_yaml_is_refused(saved, capsys, tmp_path):
    saved()
    target = tmp_path / "elsewhere.yaml"
    target.write_text(CONFIG)
    state.config_path("rec_test").unlink()
    state.config_path("rec_test").symlink_to(target)
    assert "is not the config `make up` launched (not a regular file" in down(capsys)
    saved(config="cluster_name: [unclosed\n")
    assert "is not the config `make up` launched" in down(capsys)


def test_a_record_that_is_a_link_to_nothing_is_not_skipped(saved, capsys):
    saved()
    state.record_path("rec_test").unlink()
    state.record_path("rec_test").symlink_to("/nonexistent/record.json")
    err = down(capsys)
    assert "is corrupt ('not a regular file')" in err and "nothing to stop" not in err


def test_the_clusters_own_files_pass_on_to_aws(saved, capsys):
    saved()
    assert "no AWS credentials found" in down(capsys)
