"""The values files' comments say what the code accepts, and keep saying it.

A values file is the user's manual: its comments name each key's choices (`aws | kuberay |
local`) and bounds (`(1-1440)`). Both are read here against what the kit really accepts:
a choice list must be exactly the schema's `enum` (for `provider`, the registry's names),
a commented key with choices must list them, and a range must be the schema's minimum and
maximum. A new enum member, a new provider or a changed bound fails here until every file
that comments that key says so.
"""

import re
from pathlib import Path

import pytest
import yaml

from scripts.providers import PROVIDERS

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "cluster_templates"
VALUES_FILES = sorted(TEMPLATES.glob("*.yaml"))
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*):(?P<value>[^#]*?)(\s+#\s?(?P<comment>.*))?$")
CONTINUED = re.compile(r"^(?P<indent> +)#\s?(?P<comment>.*)$")
WORD = r"[\w-]+(?:\.[\w-]+)*"  # a choice: g5.xlarge, but not the '.' ending a sentence
CHOICES = re.compile(rf"(?<![\w.-]){WORD}(?: \| {WORD})+(?![\w-])")
RANGE = re.compile(r"\((?:[^()]*?[\s,;:])?(\d+)-(\d+)\)")


def commented_keys(text: str) -> list[tuple[tuple[str, ...], str]]:
    """(key path, its comment with the comment lines that continue it) for every key line
    with a comment; a continuation is a comment-only line indented past its key."""
    found, stack, last = [], [], None
    for line in text.splitlines():
        key = KEY_LINE.match(line)
        if key and not line.lstrip().startswith("#"):
            indent = len(key["indent"])
            stack = [(i, k) for i, k in stack if i < indent] + [(indent, key["key"])]
            last = None
            if key["comment"] is not None:
                found.append((tuple(k for _, k in stack), key["comment"]))
                last = (indent, len(found) - 1)
            continue
        more = CONTINUED.match(line)
        if more and last and len(more["indent"]) > last[0]:
            path, comment = found[last[1]]
            found[last[1]] = (path, f"{comment} {more['comment']}")
        else:
            last = None
    return found


def schema_of(provider: str) -> dict:
    return yaml.safe_load((TEMPLATES / "schema" / f"{provider}.schema.yaml").read_text())


def node_at(schema: dict, path: tuple[str, ...]) -> dict | None:
    """The schema node a values file's key path lands on (worker type names are free: a
    mapping's additionalProperties), $refs followed; None where the schema has no such key."""
    node = schema
    for key in path:
        while "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        if key in node.get("properties", {}):
            node = node["properties"][key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def allowed_choices(path: tuple[str, ...], node: dict) -> set[str] | None:
    if path == ("provider",):
        return set(PROVIDERS)
    return {str(v) for v in node["enum"]} if "enum" in node else None


def comment_problems(text: str, schema: dict) -> list[str]:
    problems = []
    for path, comment in commented_keys(text):
        where = ".".join(path)
        node = node_at(schema, path)
        assert node is not None, f"{where}: not a key of the schema"
        allowed = allowed_choices(path, node)
        lists = [set(found.split(" | ")) for found in CHOICES.findall(comment)]
        if allowed is not None and allowed not in lists:
            problems.append(f"{where}: the comment must list the choices as "
                            f"{' | '.join(sorted(allowed))}")
        problems += [f"{where}: the comment lists {' | '.join(sorted(listed))}, the kit "
                     f"accepts {' | '.join(sorted(allowed or ()))}"
                     for listed in lists if listed != allowed]
        for low, high in RANGE.findall(comment):
            bounds = (node.get("minimum"), node.get("maximum"))
            if (int(low), int(high)) != bounds:
                problems.append(f"{where}: the comment says ({low}-{high}), the schema "
                                f"{bounds[0]}-{bounds[1]}")
    return problems


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.name)
def test_every_comment_says_what_the_kit_accepts(path):
    text = path.read_text()
    provider = yaml.safe_load(text)["provider"]
    assert comment_problems(text, schema_of(provider)) == []


def test_the_fully_commented_files_list_every_choice():
    """hetero.yaml, local.yaml and k8s_hetero.yaml comment every key: each key with choices
    is there with its list (so the check above has something to read)."""
    for name, keys in {"hetero": {"provider", "mix", "aws.placement_group", "head.role",
                                  "workers.cpu_worker.role"},
                       "local": {"provider", "mix", "head.role", "workers.cpu_worker.role"},
                       "k8s_hetero": {"provider", "mix", "head.role"}}.items():
        text = (TEMPLATES / f"{name}.yaml").read_text()
        listed = {".".join(path) for path, comment in commented_keys(text) if CHOICES.search(comment)}
        assert keys <= listed, name


def test_the_check_catches_drift():
    """Shown failing on each kind of drift: a provider missing from the list, an enum member
    missing, a choice commented in prose instead of as a list, a stale bound."""
    schema = schema_of("local")
    assert comment_problems("provider: local  # aws | local\n", schema) == [
        "provider: the comment must list the choices as aws | kuberay | local",
        "provider: the comment lists aws | local, the kit accepts aws | kuberay | local"]
    assert comment_problems("mix: heterogeneous  # heterogeneous\n", schema) == [
        "mix: the comment must list the choices as heterogeneous | homogeneous"]
    assert comment_problems("head:\n  role: train  # train: it trains; coordinate: it does not\n",
                            schema) == ["head.role: the comment must list the choices as coordinate | train"]
    assert comment_problems("idle_timeout_minutes: 5  # stop after this\n"
                            "                       #   (1-1000)\n", schema) == [
        "idle_timeout_minutes: the comment says (1-1000), the schema 1-1440"]
    assert comment_problems("workers:\n  a:\n    min_workers: 1  # (0-16)\n", schema) == []


def patterns_without_a_rule(node, path: str = "") -> list[str]:
    """Schema paths whose `pattern` has no `description`: a value refused there would be
    told a regular expression instead of the rule and its fix."""
    found = []
    if isinstance(node, dict):
        if "pattern" in node and "description" not in node:
            found.append(path or "(top)")
        for key, sub in node.items():
            found += patterns_without_a_rule(sub, f"{path}.{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            found += patterns_without_a_rule(sub, f"{path}[{i}]")
    return found


@pytest.mark.parametrize("schema", sorted((TEMPLATES / "schema").glob("*.schema.yaml")), ids=lambda p: p.name)
def test_every_pattern_says_its_rule_in_words(schema):
    assert patterns_without_a_rule(yaml.safe_load(schema.read_text())) == []


def test_a_value_refused_by_a_pattern_is_told_the_rule_not_the_expression(capsys, tmp_path):
    from conftest import USER_VALUES, load_example
    from scripts import kit

    values = load_example("hetero")
    values["aws"]["data_buckets"] = ["s3://my-data"]
    (USER_VALUES / "pattern_told.yaml").write_text(yaml.safe_dump(values))
    try:
        assert kit.main(["validate", "--cluster", "pattern_told"]) == 2
    finally:
        (USER_VALUES / "pattern_told.yaml").unlink()
    err = capsys.readouterr().err
    assert "aws.data_buckets.0: 's3://my-data' is not allowed; an S3 bucket name" in err and "^[" not in err
