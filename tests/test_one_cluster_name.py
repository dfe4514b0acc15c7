"""Two values files with one cluster_name are one cluster to the platform (AWS: its tag,
security group and IAM roles; KubeRay: a RayCluster is its name in its namespace). While
one is launched from this checkout, up and run of the other (dry runs too) are refused
in one line, before any cloud or cluster call (no credentials, no
kubectl here: a call would fail otherwise). A local cluster is its own processes and
ports: two local files with one cluster_name run apart."""

import yaml
import pytest

from conftest import USER_VALUES, load_example
from scripts import kit
from scripts.core import state

AWS_RECORD = {"cluster": "twin_a", "provider": "aws", "cluster_name": "twin-name", "region": "us-east-1",
              "min_workers": {"cpu_worker": 1}, "ready_timeout_s": 600, "security_group": None,
              "ray_key_pair": False, "ray_role": False}
KUBERAY_RECORD = {"cluster": "twin_k", "provider": "kuberay", "name": "twin-name", "namespace": "ray",
                  "context": "eks", "launch_id": "0123456789abcdef", "expected_pods": {"head": 1},
                  "ready_timeout_minutes": 10}


@pytest.fixture
def launched():
    made = []

    def save(record: dict, example: str, twin: str, **values) -> None:
        state.save(record["cluster"], record, "launched: true\n")
        made.append(record["cluster"])
        text = load_example(example) | {"cluster_name": "twin-name"}
        for dotted, value in values.items():
            section, key = dotted.split("__")
            text[section][key] = value
        (USER_VALUES / f"{twin}.yaml").write_text(yaml.safe_dump(text))
        made.append(twin)
    yield save
    for name in made:
        state.forget(name)
        (USER_VALUES / f"{name}.yaml").unlink(missing_ok=True)


def refusal(capsys, *argv) -> str:
    code = kit.main(list(argv))
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("command", [["up"], ["up", "--dry-run", "1"], ["run", "--job", "smoke"],
                                     ["run", "--job", "smoke", "--dry-run", "1"]])
def test_an_aws_values_file_naming_a_launched_clusters_cluster_name_is_refused(launched, capsys, command,
                                                                               monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # a call past the check would fail differently
    launched(AWS_RECORD, "hetero", "twin_b")
    err = refusal(capsys, *command, "--cluster", "twin_b")
    assert err.startswith("error: cluster_name: 'twin-name' is the cluster CLUSTER=twin_a launched"), err
    assert "give twin_b.yaml its own cluster_name, or `make down CLUSTER=twin_a` first" in err


def test_a_kuberay_cluster_is_its_name_in_its_namespace(launched, capsys):
    launched(KUBERAY_RECORD, "k8s_hetero", "twin_c", kubernetes__namespace="ray")
    assert "is the cluster CLUSTER=twin_k launched" in refusal(capsys, "up", "--cluster", "twin_c")
    launched(KUBERAY_RECORD, "k8s_hetero", "twin_d", kubernetes__namespace="team-b")
    err = refusal(capsys, "up", "--cluster", "twin_d")  # another namespace: on to kubectl's own checks
    assert "CLUSTER=twin_k" not in err


def test_two_local_files_with_one_cluster_name_run_apart(launched, capsys):
    record = {"cluster": "twin_l", "provider": "local", "gcs_address": "127.0.0.2:6380",
              "dashboard_url": "http://127.0.0.1:8266", "temp_dir": "/tmp/raykit-abcdefgh/ray",
              "auth_token": "0" * 64, "expected_nodes": 3}
    launched(record, "local", "twin_m")
    assert kit.main(["up", "--cluster", "twin_m", "--dry-run", "1"]) == 0
    assert "dry run: CLUSTER=twin_m would launch" in capsys.readouterr().out


def test_a_record_that_cannot_be_read_is_said_not_skipped(launched, capsys):
    launched(AWS_RECORD, "hetero", "twin_e")
    state.record_path("twin_a").write_text("{not json")
    err = refusal(capsys, "up", "--dry-run", "1", "--cluster", "twin_e")
    assert "cannot tell whether it is this cluster" in err and "CLUSTER=twin_a" in err
