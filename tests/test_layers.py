"""The kit's modules form layers that only point down, with no import circle.

Every import of a `scripts` module is read with `ast`, inside functions too (a function-
level import is still an edge: hiding one there does not break a circle). The layers,
lowest first; a module may import its own layer's modules (without a circle) and any
lower layer's, never a higher one's:

  core, node   errors, paths, inputs, values, state, ray_cli, submit, prices, tables; the node-side programs
  catalog      instance facts and prices
  providers    one package per provider; no provider imports another
  build        values file -> checked cluster config (drives the providers)
  pricing      cost, planner, bench table
  job_env      what a job learns from the kit (its prices, the autopilot, the stall limit)
  commands     the CLI's command groups
  kit, benchmarks, sim   the CLI; the benchmarks; the simulator (it drives jobs/raykit's autopilot)
"""

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
LAYERS = {"core": 0, "node": 0, "catalog": 1, "providers": 2, "build": 3, "pricing": 4,
          "job_env": 5, "commands": 5, "kit": 6, "benchmarks": 6, "sim": 6}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kit_modules() -> dict[str, Path]:
    return {module_name(p): p for p in SCRIPTS.rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The kit's modules `path` imports: `from scripts.a import b` is scripts.a.b where
    that is a module, else scripts.a."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("scripts")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "scripts":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {name for name in found if name in modules and name != "scripts"}


def import_graph() -> dict[str, set[str]]:
    modules = kit_modules()
    return {name: imports_of(path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path (a -> b -> a), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def layer_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "scripts"


def test_the_cycle_finder_finds_a_circle_and_only_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_module_of_the_kit_imports_itself_in_a_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_every_module_has_a_layer():
    assert {layer_of(m) for m in kit_modules()} - {"scripts"} <= set(LAYERS)


def test_imports_only_point_down_the_layers():
    upward = [f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
              if layer_of(a) in LAYERS and LAYERS[layer_of(b)] > LAYERS[layer_of(a)]]
    assert upward == []


INTERFACE_TYPES = "scripts.providers.common"


def provider_of(module: str) -> str | None:
    """The provider package a module of scripts/providers/ belongs to (scripts.providers.aws.iam
    -> aws); None for the interface: the registry (scripts/providers/__init__.py), which may
    import each, and its types (scripts/providers/common.py), which every side may import."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] != "common" else None


def test_providers_are_one_package_each():
    """scripts/providers/ holds the interface (the registry and its types, common.py) and one
    folder per provider, no other loose modules (no aws_*.py families): a reader finds "how
    AWS works" in providers/aws/."""
    folder = SCRIPTS / "providers"
    loose = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")
    packages = sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())
    assert loose == ["common.py"]
    assert packages == ["aws", "kuberay", "local"]


def test_no_provider_imports_another():
    crossing = []
    for a, targets in import_graph().items():
        own = provider_of(a)
        if layer_of(a) != "providers" or own is None:
            continue
        crossing += [f"{a} -> {b}" for b in targets  # the interface's types are every provider's
                     if layer_of(b) == "providers" and provider_of(b) != own and b != INTERFACE_TYPES]
    assert crossing == []


def test_no_module_above_the_providers_imports_a_provider_package():
    """What differs between providers reaches the kit through the interface alone (the
    registry, scripts/providers/__init__.py): pricing asks each mix's `node_prices`, it does
    not read the AWS or KubeRay packages (it did, at 9 places, before the house's fifth pass)."""
    reaching = [f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                if layer_of(a) != "providers" and layer_of(b) == "providers" and provider_of(b)]
    assert reaching == []


def test_each_providers_face_stays_a_face():
    """A provider's __init__.py holds its constants, record schema and the interface's
    members, each imported from the module of its concern; a face grown past ~350 lines is
    doing a concern's work (they were 750, 697 and 580 lines before the fifth pass)."""
    sizes = {p.parent.name: len(p.read_text().splitlines())
             for p in (SCRIPTS / "providers").glob("*/__init__.py")}
    assert sizes and all(lines <= 350 for lines in sizes.values()), sizes


def test_the_provider_rule_is_shown_catching_a_crossing():
    assert provider_of("scripts.providers.aws.iam") == "aws"
    assert provider_of("scripts.providers") is None
    assert provider_of("scripts.providers.kuberay") != provider_of("scripts.providers.local.cpu_sets")


@pytest.mark.parametrize("path", sorted((SCRIPTS / "node").iterdir()), ids=lambda p: p.name)
def test_node_programs_stand_alone(path):
    """`make up` on AWS ships scripts/node/ alone to every node: each file there is a program
    that runs by itself (python FILE) and imports nothing of the kit."""
    assert path.suffix == ".py", f"{path.name}: only node-side programs belong in scripts/node/"
    text = path.read_text()
    assert 'if __name__ == "__main__":' in text
    assert imports_of(path, kit_modules()) == set()


def test_no_code_outside_the_providers_branches_on_which_provider_it_is():
    """What differs between providers is a member of their interface (node_prices,
    STOPS_WITHOUT_RECORD, JOB_PACKAGES, ...): no `provider is local`, no `== "aws"` outside
    scripts/providers/."""
    names = {"aws", "local"}
    found = []
    for name, path in kit_modules().items():
        if name.startswith("scripts.providers"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any((isinstance(s, ast.Name) and s.id in names)
                       or (isinstance(s, ast.Constant) and s.value in names)
                       or (isinstance(s, ast.Attribute) and s.attr == "NAME") for s in sides):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


# --- the job library (jobs/raykit), shipped with every job --------------------------------
# Its own layers, lowest first: what the kit may import (contract: the names and shapes the
# kit and a job share; placement: the node labels), pure figures, Ray-facing parts, the
# parts a job calls, then the driver's assemblies.
RAYKIT = REPO / "jobs" / "raykit"
RAYKIT_LAYERS = {
    "contract": 0, "placement": 0,
    "rates": 1, "steady": 1, "diagnosis": 1, "verdict": 1, "billing": 1, "feed": 1, "logbook": 1,
    "stall": 1, "ray_state": 1, "gauges": 1, "report": 1,
    "steps": 2, "measure": 2, "cluster": 2,
    "checkpoint": 3, "autopilot": 3, "summary": 3, "entry": 3,
}
# The kit's side may import these of the job library; the simulator (the autopilot's policy)
# and the benchmarks (the job's pipeline) drive more of it on purpose
KIT_MAY_IMPORT = {"contract", "placement"}
DRIVES_THE_JOB_LIBRARY = ("scripts.sim", "scripts.benchmarks")


def raykit_imports(path: Path) -> set[str]:
    """The raykit modules `path` imports (`raykit.x`, `jobs.raykit.x`, `from raykit import x`)."""
    names = {p.stem for p in RAYKIT.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[:2] == ["jobs", "raykit"]:
                parts = parts[1:]
            if parts[0] == "raykit" and len(parts) > 1 and parts[1] in names:
                found.add(parts[1])
    return found - {"__init__"}


def raykit_graph() -> dict[str, set[str]]:
    return {p.stem: raykit_imports(p) for p in RAYKIT.glob("*.py") if p.stem != "__init__"}


def test_every_raykit_module_has_a_layer():
    assert set(raykit_graph()) == set(RAYKIT_LAYERS)


def test_raykit_imports_point_down_its_layers_in_no_circle():
    graph = raykit_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)
    upward = [f"{a} -> {b}" for a, targets in graph.items() for b in targets
              if RAYKIT_LAYERS[b] > RAYKIT_LAYERS[a]]
    assert upward == []
    assert all(graph[name] == set() for name in KIT_MAY_IMPORT)  # they import no raykit module


def test_the_kit_imports_only_contract_and_placement_of_the_job_library():
    """The two names behind an earlier collection failure: the kit's side reaches the job
    library through them alone (the simulator and the benchmarks drive it on purpose)."""
    reaching = {name: raykit_imports(path) - KIT_MAY_IMPORT for name, path in kit_modules().items()
                if not name.startswith(DRIVES_THE_JOB_LIBRARY)}
    assert {name: found for name, found in reaching.items() if found} == {}
    assert raykit_imports(SCRIPTS / "sim" / "policies.py") == {"autopilot"}  # the rule sees them


def test_raykits_module_list_names_each_of_its_files():
    """jobs/raykit/__init__.py's list is where a job's author looks a module up."""
    doc = ast.get_docstring(ast.parse((RAYKIT / "__init__.py").read_text()))
    listed = {m.group(1) for m in re.finditer(r"^([a-z_]+) +\S", doc, re.M)}
    assert listed == set(RAYKIT_LAYERS)
