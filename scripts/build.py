"""One pass from a values file to a checked cluster config, the only way the kit makes one.

    values file --read strictly--> values --schema (+ defaults)--> --provider's rules-->
    --template--> config text --provider's checks (Ray's own for an autoscaler config)--> Built

Nothing is written here: `render` writes the result to build/clusters/<cluster>.yaml,
`up` to build/launched/ (state.py), `validate` nowhere.
"""

from dataclasses import dataclass

import jinja2
import markupsafe
import yaml

from scripts.core.errors import KitError
from scripts.core.inputs import values_file, values_shown
from scripts.core.paths import SCHEMAS, TEMPLATES
from scripts.core.values import check_and_fill, joined, load_schema, parse_yaml
from scripts.providers import Provider, provider


@dataclass(frozen=True)
class Built:
    cluster: str
    provider: Provider
    values: dict  # as written, defaults filled in
    text: str     # the rendered Ray autoscaler config
    config: dict  # the same, parsed


def build(cluster: str) -> Built:
    return build_text(cluster, values_file(cluster).read_bytes())


def build_text(cluster: str, data: bytes) -> Built:
    where = values_shown(cluster)
    raw = parse_yaml(data, where)
    if not isinstance(raw, dict):
        raise KitError(f"{where}: expected a mapping of keys at the top")
    chosen = provider(raw.get("provider"), where, raw)
    values = check_and_fill(raw, load_schema(SCHEMAS / f"{chosen.NAME}.schema.yaml"), where)
    problems = worker_count_problems(values) + chosen.value_problems(values)
    if problems:
        raise KitError(joined(where, problems))
    context = {
        "values_file": f"{cluster}.yaml",
        "cluster_name": values["cluster_name"],
        "idle_timeout_minutes": values["idle_timeout_minutes"],
        "max_workers": sum(w["max_workers"] for w in values["workers"].values()),
    } | chosen.template_context(cluster, values)
    text = render_template(chosen.NAME, context)
    config = yaml.safe_load(text)
    problems = chosen.config_problems(config)
    if problems:
        raise KitError(joined(f"the config rendered from {where}", problems))
    return Built(cluster, chosen, values, text, config)


def worker_count_problems(values: dict) -> list[str]:
    return [f"workers.{name}: min_workers ({w['min_workers']}) > max_workers "
            f"({w['max_workers']}); raise max_workers to at least {w['min_workers']}"
            for name, w in values["workers"].items() if w["min_workers"] > w["max_workers"]]


def only_serialized(value):
    """Jinja's finalize hook: a template may print numbers and booleans as they are, but a
    string only through `| tojson`, so every string lands as one YAML scalar and can never
    add keys, list items or lines to the config."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        raise KitError(f"template pastes the string {value[:40]!r}; write it with | tojson")
    return value


def strict_tojson(tojson):
    """Jinja's tojson, but a missing value is Jinja's undefined error (naming the value),
    not a TypeError from the JSON encoder."""
    @jinja2.pass_eval_context
    def checked(eval_ctx, value, indent=None):
        if isinstance(value, jinja2.Undefined):
            value._fail_with_undefined_error()
        return tojson(eval_ctx, value, indent)
    return checked


def render_template(provider_name: str, context: dict) -> str:
    return render(f"{provider_name}.yaml.j2", context, f"scripts/providers/{provider_name}/")


def render(template: str, context: dict, provided_by: str) -> str:
    """cluster_templates/<template> filled from `context`: strings only through tojson."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,  # a missing value is an error, never ""
        finalize=only_serialized,
        keep_trailing_newline=True,
    )
    env.filters["tojson"] = strict_tojson(env.filters["tojson"])
    try:
        return env.get_template(template).render(**context)
    except jinja2.UndefinedError as e:
        raise KitError(f"cluster_templates/{template}: {e}; {provided_by} must provide that value") from None
