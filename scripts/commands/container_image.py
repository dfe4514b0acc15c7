"""`make image`: the container images a KubeRay values file names (images.gpu, images.cpu,
with images.job_packages: baked), built from Ray's own images with the jobs' packages baked
in, so that a pod starts a job in seconds instead of pip-installing ~3 GB of CUDA wheels.

The build contexts (a Dockerfile each, rendered from cluster_templates/Dockerfile.j2) go to
build/images-docker/<cluster>/<gpu|cpu>/. Docker builds them where an engine answers; where
none does (a laptop without Docker, this kit's CI), the command says so in one line and
leaves the contexts for a machine that has one. Pushing is the user's: the tag names their
registry, and the pods pull from there."""

import shutil
import subprocess

from scripts import catalog
from scripts.build import render
from scripts.commands.checked import checked
from scripts.core import node_packages
from scripts.core.errors import KitError, short
from scripts.core.inputs import flag, shown
from scripts.core.paths import BUILD, REPO
from scripts.core.state import make_dir, write_atomic

CONTEXTS = BUILD / "images-docker"
# imported at build time: a package that failed to install fails the build, not a job
IMPORT_CHECK = {"gpu": "import torch, torchvision, timm, adaptdl, pynvml, PIL",
                "cpu": "import torch, torchvision, timm, adaptdl, pynvml, PIL; assert torch.version.cuda is None"}
DOCKER_INFO_TIMEOUT_S = 20


def cmd_image(a) -> int:
    built = checked(a.cluster)
    try:
        tags = built.provider.images_to_bake(built.values)
    except KitError as e:
        raise KitError(f"CLUSTER={a.cluster}: {e}") from None
    builds = [(kind, tag, context(a.cluster, kind)) for kind, tag in tags.items()]
    commands = [["docker", "build", "--tag", tag, shown(folder)] for _, tag, folder in builds]
    if flag("DRY_RUN", a.dry_run):
        print("dry run: make image would run (nothing is built):")
        print("\n".join("  " + " ".join(c) for c in commands))
        return 0
    require_docker(commands)
    for (kind, tag, _), command in zip(builds, commands):
        print(f"building {tag} ({kind}: {catalog.DOCKER_IMAGE[kind]} + the jobs' packages)", flush=True)
        if subprocess.run(command, cwd=REPO).returncode != 0:
            raise KitError(f"docker build of {tag} failed (its output is above); the context is "
                           f"{command[-1]}")
    print("built " + ", ".join(tag for _, tag, _ in builds) + "; push them where the pods pull from: "
          + "; ".join(f"docker push {tag}" for _, tag, _ in builds))
    return 0


def dockerfile(kind: str) -> str:
    return render("Dockerfile.j2", {"base": catalog.DOCKER_IMAGE[kind],
                                    "commands": node_packages.install_commands(gpu=kind == "gpu"),
                                    "check": IMPORT_CHECK[kind]}, __name__)


def context(cluster: str, kind: str):
    """The build context: a folder holding the rendered Dockerfile alone."""
    folder = CONTEXTS / cluster / kind
    make_dir(folder)
    write_atomic(folder / "Dockerfile", dockerfile(kind), 0o644)
    return folder


def require_docker(commands: list[list[str]]) -> None:
    """A Docker engine that answers, or one line saying there is none and what to run
    where one is."""
    then = "; the build contexts are ready: run " + " && ".join(" ".join(c) for c in commands) + \
           " where Docker runs"
    if shutil.which("docker") is None:
        raise KitError("no `docker` on PATH: no container builder here" + then)
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              text=True, timeout=DOCKER_INFO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise KitError(f"docker info did not answer in {DOCKER_INFO_TIMEOUT_S} s: no container "
                       "engine here" + then) from None
    if info.returncode != 0:
        said = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        raise KitError(f"docker has no engine here ({short(said, 120)})" + then)
