"""The jobs' packages on a cluster's nodes: which ones, at which pins, and the commands
that install them over a Ray image. One list for every place they are installed: AWS's
setup commands, the images `make image` bakes (cluster_templates/Dockerfile.j2),
and what a stock image lacks (Ray's images ship Ray and its own dependencies, no torch).

The pins are requirements.txt's (the local cluster runs exactly those). A CPU-only node
takes PyTorch's CPU build: the default wheel is CUDA's, whose torch and nvidia-* wheels
take 4.4 GB installed (measured in .venv), for nothing on a node without a GPU."""

import re
import shlex

from scripts.core.errors import KitError
from scripts.core.paths import JOB_DIRS, JOBS, REPO

# What the kit's jobs import beyond Ray, on every node (a baked image adds every job's own
# requirements.txt: jobs_requirements). NVML's bindings on CPU images too: torch's
# utilization and the stall watch need them on GPU nodes, and a job's requirements name them
# for every node, which a baked image must satisfy with no index to install from.
PACKAGES = ("torch", "torchvision", "timm", "autograd", "pandas", "portpicker",
            "scipy", "semver", "pymoo", "setuptools", "pillow", "nvidia-ml-py")
# adaptdl's own pins downgrade aiohttp and break Ray: it installs only with --no-deps,
# which a job's runtime_env cannot do (jobs/adaptdl_mnist/README.md)
NODEPS_FILE = "requirements-nodeps.txt"
NODEPS_REQUIREMENTS = JOBS / "adaptdl_mnist" / NODEPS_FILE
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's own CPU-only wheels
PYPI = "https://pypi.org/simple"
# A pip that looks in both indexes picks torch==X's CPU build (X+cpu sorts above X; the
# requirement `torch==X` matches both): what a CPU pod's environment says to every pip
# that runs there, Ray's runtime_env installs included.
CPU_PIP_ENV = {"PIP_INDEX_URL": TORCH_CPU_INDEX, "PIP_EXTRA_INDEX_URL": PYPI}


def pinned_requirements(path) -> dict[str, str]:
    """{name: 'name==version'} for every pinned line of a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([A-Za-z0-9_.+!-]+)", line.strip())
        if match:
            pins[match.group(1).lower()] = f"{match.group(1)}=={match.group(3)}"
    return pins


def install_commands(gpu: bool) -> list[str]:
    """The jobs' pinned packages, installed over a Ray image (shell lines). A CPU-only
    node first takes torch and torchvision from PyTorch's CPU index; `torch==X` then
    counts as satisfied by the CPU build (X+cpu), so the second line installs the rest."""
    pins = pinned_requirements(REPO / "requirements.txt")
    missing = [p for p in PACKAGES if p not in pins]
    if missing:
        raise KitError(f"requirements.txt: no pinned version for {', '.join(missing)}")
    nodeps = pinned_requirements(NODEPS_REQUIREMENTS).values()
    commands = [] if gpu else [
        f"pip install -q --no-cache-dir --index-url {TORCH_CPU_INDEX} "
        + shlex.join([pins["torch"], pins["torchvision"]])]
    return commands + [
        "pip install -q --no-cache-dir " + shlex.join([pins[p] for p in PACKAGES] + jobs_requirements(set(PACKAGES))),
        "pip install -q --no-cache-dir --no-deps " + shlex.join(nodeps),
    ]


def jobs_requirements(known: set[str]) -> list[str]:
    """Every job's requirements.txt lines (as `make submit` reads them) naming a package not
    in `known`: a user's job baked in with the kit's."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from scripts.core.inputs import job_requirements

    known = {canonicalize_name(name) for name in known}
    found = []
    jobs = sorted({folder.name for where in JOB_DIRS if where.is_dir() for folder in where.iterdir()
                   if (folder / "main.py").is_file() and (folder / "requirements.txt").is_file()})
    for job in jobs:
        for line in job_requirements(job):
            name = canonicalize_name(Requirement(line).name)
            if name not in known:
                known.add(name)
                found.append(line)
    return found


def needs_built_image(job_folder) -> bool:
    """A job with packages pip may install only without their dependencies (adaptdl):
    no runtime_env can install them, so it runs only where the image holds them."""
    return (job_folder / NODEPS_FILE).is_file()
