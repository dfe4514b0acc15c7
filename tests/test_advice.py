"""`note:` lines for valid but unwise mixes (scripts/commands/advice.py): said by `make
validate` and `make up`, never refused, each naming the key and what to do."""

import os
import uuid

import yaml

from conftest import USER_VALUES, load_example
from scripts import kit
from scripts.build import build_text
from scripts.commands.advice import notes


def built_from(name: str, values: dict):
    return build_text(name, yaml.safe_dump(values).encode())


def test_a_disk_dearer_than_its_instance_is_a_note():
    values = load_example("hetero")
    values["head"]["disk"]["data_gb"], values["cluster_name"] = 16000, "bigdisk"
    (note,) = notes(built_from("bigdisk", values))
    assert note.startswith("note: bigdisk: head.disk: 16") and "more than the g5.xlarge itself ($1.01/h)" in note


def test_gpus_fed_by_too_few_vcpus_are_a_note():
    values = load_example("multi_g5") | {"cluster_name": "starved"}
    values["workers"]["cpu_worker"] |= {"instance_type": "c5.xlarge", "min_workers": 1}  # 4 vCPU: 3 preprocess
    (note,) = notes(built_from("starved", values))  # the head coordinates only
    assert "8 GPU(s) fed by 3 preprocessing vCPU(s) at min_workers" in note and "make plan PROFILE=" in note
    assert notes(built_from("hetero", load_example("hetero"))) == []


def test_a_cluster_name_shared_with_another_values_file_is_a_note(capsys):
    twin = f"twin_{uuid.uuid4().hex[:6]}"
    values = load_example("hetero")
    (USER_VALUES / f"{twin}.yaml").write_text(yaml.safe_dump(values))  # cluster_name: hetero, as hetero.yaml's
    try:
        assert kit.main(["validate", "--cluster", twin]) == 0
        out = capsys.readouterr().out
        assert f"note: {twin}: cluster_name: hetero is also hetero's: the two are one cluster" in out
    finally:
        (USER_VALUES / f"{twin}.yaml").unlink()


def test_a_local_mix_asking_more_cpus_than_cores_is_a_note(capsys):
    built = built_from("local_gpu_hetero", load_example("local_gpu_hetero"))
    said = notes(built)
    if (os.cpu_count() or 1) < 16:
        (note,) = said
        assert f"its nodes ask 16 CPUs and this machine has {os.cpu_count()} cores" in note
    else:
        assert said == []
    single = load_example("local_single")  # 1 core: no note on any machine
    assert notes(built_from("local_single", single)) == []
