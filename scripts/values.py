"""Load a cluster's values file and check it against its provider's JSON schema.

Values files live in cluster_templates/<cluster>.yaml; `provider:` picks the schema in
cluster_templates/schema/<provider>.schema.yaml and the template <provider>.yaml.j2.
"""

import difflib
import os
from pathlib import Path

import jsonschema
import yaml

from scripts.errors import KitError

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "cluster_templates"
# Rendered configs and cluster state; tests point it elsewhere so that they never touch
# the state of a cluster a user has up.
BUILD = Path(os.environ.get("RAYKIT_BUILD_DIR", REPO / "build"))
PROVIDERS = ("aws", "local")


def values_path(cluster: str) -> Path:
    return TEMPLATES / f"{cluster}.yaml"


def available_clusters() -> list[str]:
    return sorted(p.stem for p in TEMPLATES.glob("*.yaml"))


def load_values(cluster: str) -> dict:
    """Parse cluster_templates/<cluster>.yaml and check its shape; raise KitError."""
    values = read_values(cluster)
    check_schema(cluster, values)
    return values


def read_values(cluster: str) -> dict:
    """Parse cluster_templates/<cluster>.yaml, unchecked."""
    path = values_path(cluster)
    if not path.is_file():
        hint = difflib.get_close_matches(cluster, available_clusters(), n=1)
        raise KitError(
            f"no values file {path.relative_to(REPO)} for CLUSTER={cluster}"
            + (f"; did you mean CLUSTER={hint[0]}?" if hint else "")
            + f" (available: {', '.join(available_clusters())})"
        )
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise KitError(f"{path.relative_to(REPO)} is not valid YAML: {e}") from None
    if not isinstance(values, dict):
        raise KitError(f"{path.relative_to(REPO)}: expected a mapping of keys at the top")
    return values


def check_schema(cluster: str, values: dict) -> None:
    """Raise KitError listing every key of the values that breaks its provider's schema."""
    path = values_path(cluster)
    provider = values.get("provider")
    if provider not in PROVIDERS:
        raise KitError(
            f"{path.relative_to(REPO)}: provider: {provider!r} is not one of "
            f"{', '.join(PROVIDERS)}; set `provider: aws` or `provider: local`"
        )
    problems = schema_problems(values, provider)
    if problems:
        raise KitError("\n".join(f"{path.relative_to(REPO)}: {p}" for p in problems))


def schema_problems(values: dict, provider: str) -> list[str]:
    """Every schema violation as 'dotted.key: what is wrong; how to fix'."""
    schema = yaml.safe_load((TEMPLATES / "schema" / f"{provider}.schema.yaml").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(values), key=lambda e: list(e.path)):
        key = ".".join(str(p) for p in error.path) or "(top level)"
        if error.validator == "additionalProperties":
            allowed = list(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - set(allowed)):
                where = f"{key}.{extra}" if error.path else extra
                hint = difflib.get_close_matches(extra, allowed, n=1)
                fix = f"did you mean '{hint[0]}'?" if hint else f"allowed keys: {', '.join(allowed)}"
                problems.append(f"{where}: unknown key; {fix}")
        elif error.validator == "required":
            problems.append(f"{key}: {error.message}; add it (see hetero.yaml or local.yaml)")
        else:
            problems.append(f"{key}: {error.message}")
    return problems
