"""The README and docs/ agree with the code: every target `make help` lists is in the
README's table and no other, every linked doc exists, the README stays a first hour's
read, and its example values edit validates."""

import re
import subprocess
from pathlib import Path

import yaml

from conftest import REPO
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
    """The first screen answers what it is, what ran for real and where to start, with the
    user's command (`make demo`); the contributor's (`make test`) is under Developing."""
    lines = README.splitlines()
    assert len(lines) <= 250
    assert lines[3].startswith("make demo")
    first_screen = "\n".join(lines[:60])
    assert "## Start here" in first_screen and "What has run for real" in first_screen
    for situation in ("A laptop, no cloud", "An AWS account", "An EKS cluster", "A GPU workstation"):
        assert situation in first_screen, situation
    assert "make test" not in "\n".join(lines[:30])
    assert "make test" in README.split("## Developing", 1)[1].split("\n## ", 1)[0]
    for link in re.findall(r"\]\(([^)#]+\.md)\)", README):
        assert (REPO / link).is_file(), link
    for doc in (REPO / "docs").glob("*.md"):
        for link in re.findall(r"\]\(([^)#:]+\.md)\)", doc.read_text()):
            assert (doc.parent / link).resolve().is_file(), (doc.name, link)


def test_the_readmes_mix_example_is_a_copy_then_edit_that_validates(tmp_path):
    """The "Change the mix" recipe as a user follows it: the `cp` line run, the YAML lines
    changed in the copy (every key the snippet names, cluster_name too), then `make validate`."""
    import os
    import shlex

    section = README.split("## Change the mix", 1)[1].split("\n## ", 1)[0]
    (copy,) = [line for line in section.splitlines() if line.startswith("cp cluster_templates/")]
    _, source, target = shlex.split(copy)
    snippet = yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])
    values = yaml.safe_load((REPO / source).read_text())

    def merged(into: dict, change: dict) -> dict:
        for key, value in change.items():
            into[key] = merged(into.get(key, {}), value) if isinstance(value, dict) else value
        return into
    (tmp_path / Path(target).name).write_text(yaml.safe_dump(merged(values, snippet)))
    name = Path(target).stem
    run = subprocess.run(["make", "--no-print-directory", "validate", f"CLUSTER={name}"], cwd=REPO,
                         env=dict(os.environ, RAYKIT_VALUES_DIR=str(tmp_path)), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    built = build_text(name, (tmp_path / f"{name}.yaml").read_bytes())
    assert built.values["cluster_name"] == name and built.values["workers"]["cpu_worker"]["min_workers"] == 3
    assert built.values["workers"]["cpu_worker"]["instance_type"] == "c5.2xlarge"


def test_the_developers_guide_names_every_module():
    """docs/development.md's layout is where a newcomer looks a module up: each module of
    scripts/ and jobs/raykit is named there (it fell ~10 behind the code once)."""
    guide = (REPO / "docs" / "development.md").read_text()
    modules = [p for folder in ("scripts", "jobs/raykit") for p in (REPO / folder).rglob("*.py")
               if p.name != "__init__.py"]
    unnamed = [str(p.relative_to(REPO)) for p in modules if not re.search(rf"\b{p.stem}\b", guide)]
    assert modules and unnamed == []


def test_the_launcher_install_is_the_requirements_launcher_block_without_torch(tmp_path):
    """`make setup-launcher` installs requirements.txt's launcher block only (the same pins,
    no torch: ~0.8 GB against ~6); the launch targets run on it, and the rest (demo, run,
    bench, test) depend on the full .venv. Checked on the Makefile's own awk line and rules."""
    makefile = (REPO / "Makefile").read_text()
    (awk,) = [line.strip() for line in makefile.splitlines() if line.strip().startswith("awk '/^# --- the launcher")]
    program = awk.split("'")[1]
    block = subprocess.run(["awk", program, str(REPO / "requirements.txt")], capture_output=True, text=True,
                           check=True).stdout
    names = {re.split(r"[\[=<>]", line.split("#")[0].strip())[0] for line in block.splitlines()
             if line.split("#")[0].strip()}
    assert {"ray", "boto3", "jinja2", "pyyaml"} <= names and not names & {"torch", "torchvision", "timm", "moto"}
    full = (REPO / "requirements.txt").read_text()
    assert all(line in full for line in block.splitlines())  # the same pins, one file
    rules = makefile + (REPO / "tests" / "test.mk").read_text()  # the test targets: included
    assert "include tests/test.mk" in makefile
    ready = {m.group(1) for m in re.finditer(r"^([a-z-]+): \$\(READY\) ##", rules, re.M)}
    stamped = {m.group(1) for m in re.finditer(r"^([a-z-]+): \$\(STAMP\) ##", rules, re.M)}
    assert {"validate", "up", "down", "submit", "fetch", "plan", "cost"} <= ready
    assert {"demo", "run", "bench", "test", "test-changed"} <= stamped
