"""The README and docs/ agree with the code: every target `make help` lists is in the
README's table and no other, every linked doc exists, the README stays a first hour's
read, and its example values edit validates."""

import re
import subprocess

import yaml

from conftest import REPO, load_example
from scripts.build import build_text

README = (REPO / "README.md").read_text()


def help_targets() -> set[str]:
    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True,
                         text=True, timeout=60).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("  ") and "=" not in line.split()[0]}


def test_the_readme_lists_every_target_and_only_those():
    table = README.split("## Targets", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`make ([a-z-]+)`", table))
    assert listed == help_targets()


def test_make_help_names_every_values_file_and_job_the_kit_accepts():
    """`make help`'s CLUSTER and JOB lines list exactly the checkout's values files and jobs
    (what the kit's own `choose one of:` offers): the GPU workstation's local_gpu_* files
    and the template job were once missing from them."""
    makefile = (REPO / "Makefile").read_text()

    def listed(variable: str) -> set[str]:
        line = next(line for line in makefile.splitlines() if re.match(rf"{variable} +\?=", line))
        return set(re.search(r"\(([^)]*)\)\s*$", line).group(1).split(", "))

    assert listed("CLUSTER") == {p.stem for p in (REPO / "cluster_templates").glob("*.yaml")}
    assert listed("JOB") == {p.parent.name for p in (REPO / "jobs").glob("*/main.py")}


def test_the_readme_is_a_first_hours_read_and_its_links_exist():
    assert len(README.splitlines()) <= 250
    assert README.splitlines()[3].startswith("make demo") and README.splitlines()[4].startswith("make test")
    for link in re.findall(r"\]\(([^)#]+\.md)\)", README):
        assert (REPO / link).is_file(), link
    for doc in (REPO / "docs").glob("*.md"):
        for link in re.findall(r"\]\(([^)#:]+\.md)\)", doc.read_text()):
            assert (doc.parent / link).resolve().is_file(), (doc.name, link)


def test_the_readmes_mix_example_validates():
    snippet = yaml.safe_load(README.split("```yaml", 1)[1].split("```", 1)[0])
    values = load_example("hetero")
    for name, worker in snippet["workers"].items():
        values["workers"][name] |= worker
    built = build_text("mine", yaml.safe_dump(values).encode())
    assert built.values["workers"]["cpu_worker"]["instance_type"] == "c5.2xlarge"


def test_the_developers_guide_names_every_module():
    """docs/development.md's layout is where a newcomer looks a module up: each module of
    scripts/ and jobs/raykit is named there (it fell ~10 behind the code once)."""
    guide = (REPO / "docs" / "development.md").read_text()
    modules = [p for folder in ("scripts", "jobs/raykit") for p in (REPO / folder).rglob("*.py")
               if p.name != "__init__.py"]
    unnamed = [str(p.relative_to(REPO)) for p in modules if not re.search(rf"\b{p.stem}\b", guide)]
    assert modules and unnamed == []
