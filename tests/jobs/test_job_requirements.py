"""Every job declares what it imports beyond Ray, at the kit's pins: a node whose image
lacks a package installs it from the job's requirements.txt (AWS, KubeRay), so an
undeclared import would be a ModuleNotFoundError on the cluster, after the nodes billed.

What a job imports is read with `ast` (function-level imports too), through the modules of
jobs/raykit it uses; a module maps to its distribution through .venv's metadata. What Ray
brings is what `ray[air,default]` depends on, read from the same metadata: Ray's images
hold at least that."""

import ast
import importlib.metadata as metadata
import re
import shutil
import sys

import pytest
from packaging.requirements import Requirement

from conftest import REPO
from scripts.core import node_packages
from scripts.core.inputs import job_dir, job_requirements

JOBS = sorted(p.name for p in (REPO / "jobs").iterdir()
              if (p / "main.py").is_file())
RAYKIT = REPO / "jobs" / "raykit"


def imported_modules(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def job_imports(job: str) -> set[str]:
    """Top-level names the job's files import, and those of the raykit modules they use."""
    folder = job_dir(job)
    local = {p.stem for p in folder.glob("*.py")}
    seen, todo, tops = set(), list(folder.glob("*.py")), set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top == "raykit":
                parts = name.split(".")
                module = RAYKIT / f"{parts[1]}.py" if len(parts) > 1 else RAYKIT / "__init__.py"
                if module.is_file():
                    todo.append(module)
            elif top not in local and top not in sys.stdlib_module_names:
                tops.add(top)
    return tops


def ray_brings() -> set[str]:
    """Distributions `ray[air,default]` depends on, recursively (normalized names)."""
    def norm(name):
        return re.sub(r"[-_.]+", "-", name).lower()
    found, todo = set(), [("ray", {"air", "default"})]
    while todo:
        name, extras = todo.pop()
        if norm(name) in found:
            continue
        found.add(norm(name))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            wanted = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in wanted):
                todo.append((req.name, set(req.extras)))
    return found


def declared(job: str) -> set[str]:
    folder = job_dir(job)
    names = {Requirement(t).name for t in job_requirements(job)}
    if node_packages.needs_built_image(folder):
        names |= set(node_packages.pinned_requirements(folder / node_packages.NODEPS_FILE))
    return {re.sub(r"[-_.]+", "-", n).lower() for n in names}


def undeclared(job: str) -> set[str]:
    """Distributions the job imports that neither Ray brings nor the job declares."""
    distributions = metadata.packages_distributions()
    brought = ray_brings()
    needed = set()
    for top in job_imports(job):
        owners = {re.sub(r"[-_.]+", "-", d).lower() for d in distributions.get(top, [])}
        assert owners, f"jobs/{job} imports {top}, which no installed distribution provides"
        if not owners & brought:
            needed |= owners
    return needed - declared(job)


@pytest.mark.parametrize("job", JOBS)
def test_every_import_beyond_ray_is_declared_by_the_job(job):
    assert not undeclared(job), f"jobs/{job}/requirements.txt lacks {sorted(undeclared(job))}"


@pytest.mark.parametrize("job", JOBS)
def test_a_jobs_pins_are_the_kits(job):
    kit = node_packages.pinned_requirements(REPO / "requirements.txt")
    for text in job_requirements(job):
        req = Requirement(text)
        if req.name.lower() in kit and any(s.operator == "==" for s in req.specifier):
            assert str(req.specifier) == "==" + kit[req.name.lower()].split("==")[1], (job, text)


def test_the_import_check_sees_an_undeclared_package(tmp_path):
    """The check above can fail: a job importing timm inside a function (not one of Ray's
    packages) through raykit without declaring it is caught; declaring it clears it."""
    from conftest import USER_JOBS
    folder = USER_JOBS / f"undeclared_{tmp_path.name[-12:]}"
    folder.mkdir()
    try:
        (folder / "main.py").write_text("import numpy\nfrom raykit import measure\n"
                                        "def model():\n    import timm.models\n")
        assert undeclared(folder.name) == {"timm", "torch"}  # torch: raykit.measure's
        (folder / "requirements.txt").write_text("timm==1.0.31\ntorch==2.14.1\n")
        assert undeclared(folder.name) == set()
    finally:
        shutil.rmtree(folder)
