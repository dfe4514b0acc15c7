"""`make image`: the images a KubeRay values file names with images.job_packages: baked,
Ray's own images with the jobs' packages (scripts/core/node_packages.py) baked in. The
Dockerfiles are rendered and read back; Docker itself cannot run here (no engine), so the
builds run against a stand-in `docker` that logs its calls, and the machine's own answer,
an engine that is not there, is one error line."""

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest
import yaml

from conftest import REPO, USER_VALUES, load_example
from scripts import catalog
from scripts.commands import container_image
from scripts.core import node_packages

STANDIN_DOCKER = """#!/bin/sh
echo "$@" >> "$DOCKER_LOG"
case "$1" in
  info) [ "$DOCKER_ENGINE" = up ] && { echo 29.1.0; exit 0; }
        echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
        exit 1 ;;
  build) exit "${DOCKER_BUILD_RC:-0}" ;;
esac
"""


@pytest.mark.parametrize("kind", ["gpu", "cpu"])
def test_the_dockerfile_is_rays_image_plus_the_jobs_pinned_packages(kind):
    text = container_image.dockerfile(kind)
    assert f'ARG BASE="{catalog.DOCKER_IMAGE[kind]}"\nFROM ${{BASE}}\n' in text
    runs = [json.loads(line[4:]) for line in text.splitlines() if line.startswith("RUN ")]
    assert [r[2] for r in runs[:-1]] == node_packages.install_commands(gpu=kind == "gpu")
    assert all(r[:2] == ["/bin/bash", "-c"] for r in runs[:-1])  # exec form: no string is parsed twice
    assert runs[-1][:2] == ["python", "-c"] and "import torch, torchvision, timm, adaptdl" in runs[-1][2]
    cpu_index = [r for r in runs if "--index-url https://download.pytorch.org/whl/cpu" in r[2]]
    assert bool(cpu_index) == (kind == "cpu")  # the CPU image takes PyTorch's CPU build first
    assert "--no-deps adaptdl==0.2.11" in runs[-2][2]


@pytest.mark.parametrize("kind", ["gpu", "cpu"])
def test_a_baked_image_holds_every_jobs_requirements_at_their_pins(kind):
    """A baked image installs nothing when a job starts (an air-gapped cluster has no index):
    every line of every job's requirements.txt is in its install commands, pillow and NVML's
    bindings on the CPU image too, and a user's own job's packages with the kit's."""
    import shlex

    from conftest import USER_JOBS
    from scripts.core.inputs import job_requirements
    from scripts.core.paths import JOBS

    installed = {word for command in node_packages.install_commands(gpu=kind == "gpu")
                 for word in shlex.split(command)}
    wanted = {line for folder in JOBS.iterdir() if (folder / "requirements.txt").is_file()
              for line in job_requirements(folder.name)}
    assert {"pillow==13.0.0", "torch==2.14.1"} <= wanted
    assert wanted <= installed, wanted - installed
    own = USER_JOBS / f"own_{uuid.uuid4().hex[:8]}"  # a user's job (the tests' jobs folder)
    own.mkdir()
    try:
        (own / "main.py").write_text("")
        (own / "requirements.txt").write_text("# mine\nrich==14.2.0\ntorch==2.14.1\n")
        commands = node_packages.install_commands(gpu=kind == "gpu")
        assert "rich==14.2.0" in commands[-2] and commands[-2].count("torch==") == 1
    finally:
        shutil.rmtree(own)


def test_a_baked_cluster_sends_no_pip_runtime_env():
    """images.job_packages: baked: neither `make run`'s RayJob nor `make submit` asks Ray to
    pip-install what the image holds (it did: the pods still needed an index)."""
    from scripts.build import build_text
    from scripts.commands.jobs import job_packages_of
    from scripts.core.submit import JobPackages
    from scripts.providers import kuberay
    from scripts.providers.kuberay import rayjob

    values = load_example("k8s_hetero")
    values["images"] = {"gpu": "registry.example.com/team/jobs:gpu-1",
                        "cpu": "registry.example.com/team/jobs:cpu-1", "job_packages": "baked"}
    built = build_text("k8s_hetero", yaml.safe_dump(values).encode())
    _, job = rayjob.resources(built, "vit_synthetic", [], 600, False, kuberay.job_packages(built.values), "upload")
    assert "pip" not in json.loads(job["spec"]["runtimeEnvYAML"])
    assert job_packages_of(kuberay, {"job_packages": "baked"}) is JobPackages.BAKED
    assert job_packages_of(kuberay, {"job_packages": "install"}) is JobPackages.PIP


@pytest.fixture
def baked(tmp_path):
    """A KubeRay values file naming its own images, and a PATH with a stand-in docker."""
    name = f"baked_{uuid.uuid4().hex[:8]}"
    values = load_example("k8s_hetero")
    values["images"] = {"gpu": "registry.example.com/team/jobs:gpu-1",
                        "cpu": "registry.example.com/team/jobs:cpu-1", "job_packages": "baked"}
    (USER_VALUES / f"{name}.yaml").write_text(yaml.safe_dump(values))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(STANDIN_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    log = tmp_path / "docker.log"
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"), DOCKER_LOG=str(log),
               PATH=f"{bin_dir}:/usr/bin:/bin")

    def kit(*extra, **more):
        done = subprocess.run([sys.executable, "-m", "scripts.kit", "image", "--cluster", name, *extra],
                              cwd=REPO, env=env | more, capture_output=True, text=True, timeout=60)
        done.calls = log.read_text().splitlines() if log.exists() else []
        return done
    kit.tmp, kit.name = tmp_path, name
    yield kit
    (USER_VALUES / f"{name}.yaml").unlink()


def test_image_builds_each_image_the_pods_run_with_the_values_tags(baked):
    done = baked(DOCKER_ENGINE="up")
    assert done.returncode == 0, done.stderr
    context = baked.tmp / "build" / "images-docker" / baked.name  # RAYKIT_BUILD_DIR: outside the checkout
    assert done.calls[1:] == [f"build --tag registry.example.com/team/jobs:gpu-1 {context}/gpu",
                              f"build --tag registry.example.com/team/jobs:cpu-1 {context}/cpu"]
    assert "docker push registry.example.com/team/jobs:gpu-1" in done.stdout
    dockerfile = baked.tmp / "build" / "images-docker" / baked.name / "cpu" / "Dockerfile"
    assert dockerfile.read_text() == container_image.dockerfile("cpu")


def test_without_an_engine_image_says_so_in_one_line_and_where_the_contexts_are(baked):
    done = baked()  # the stand-in answers `docker info` as the client does with no daemon
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("error: docker has no engine here (")
    assert "Cannot connect to the Docker daemon" in done.stderr and "where Docker runs" in done.stderr
    assert done.calls == ["info --format {{.ServerVersion}}"]  # no build was tried
    no_docker = baked(PATH="/nonexistent")
    assert no_docker.stderr.startswith("error: no `docker` on PATH")


def test_a_failed_build_is_one_line_and_dry_run_builds_nothing(baked):
    failed = baked(DOCKER_ENGINE="up", DOCKER_BUILD_RC="1")
    assert failed.returncode == 2 and "error: docker build of registry.example.com/team/jobs:gpu-1 failed" in failed.stderr
    assert len([c for c in failed.calls if c.startswith("build")]) == 1  # stops at the first
    dry = baked("--dry-run", "1", DOCKER_ENGINE="up")
    assert dry.returncode == 0 and "docker build --tag registry.example.com/team/jobs:cpu-1" in dry.stdout
    assert not any(c.startswith("build") for c in dry.calls[len(failed.calls):])


@pytest.mark.parametrize("cluster,said", [("k8s_hetero", "images.job_packages is install"),
                                          ("hetero", "AWS nodes install the jobs' packages at setup"),
                                          ("local", "the local cluster runs .venv, which has")])
def test_image_is_refused_where_no_image_is_baked(cluster, said):
    done = subprocess.run([sys.executable, "-m", "scripts.kit", "image", "--cluster", cluster], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.splitlines()) == 1
