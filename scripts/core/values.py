"""Read a values file strictly, check it against its provider's schema, fill in defaults.

Strict means: UTF-8, at most MAX_BYTES, no duplicate keys, string keys, a cap on YAML
aliases and on the values they expand to (a "billion laughs" file cannot blow up), no control or invisible characters in
any string (a name cannot hide a newline or a zero-width space), and integers that are
integers (5.0 and true are not). Defaults live in the schema (`default:`), nowhere else.
"""

import copy
import difflib
import math
import unicodedata
from pathlib import Path

import jsonschema
import yaml

from scripts.core.errors import KitError, short

MAX_BYTES = 64 * 1024
MAX_ALIASES = 50
MAX_VALUES = 5000  # after aliases are expanded: 50 aliases can still double 25 times
MAX_PROBLEMS = 3  # more are counted, not listed: an error stays one short line


class StrictLoader(yaml.SafeLoader):
    aliases_seen = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > MAX_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_ALIASES} YAML aliases (*name)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise yaml.YAMLError(f"line {line}: key {short(key)} is not a string; quote it")
            if key in keys:
                raise yaml.YAMLError(f"line {line}: duplicate key '{short(key)[1:-1]}'; "
                                     "keep one of them")
            keys.add(key)
        return super().construct_mapping(node, deep=True)


def parse_yaml(data: bytes, where: str):
    """Bytes of a YAML file -> Python objects, strictly; KitError naming `where`."""
    if len(data) > MAX_BYTES:
        raise KitError(f"{where}: {len(data)} bytes; a values file is at most {MAX_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KitError(f"{where}: not UTF-8 (byte {e.start}); save it as UTF-8") from None
    try:
        parsed = yaml.load(text, Loader=StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise KitError(f"{where}: not valid YAML: {at}{plain_yaml_problem(problem)}") from None
    except (ValueError, OverflowError, RecursionError) as e:  # e.g. a date out of range
        raise KitError(f"{where}: not valid YAML: {short(str(e), 120)}") from None
    if too_many_values(parsed):
        raise KitError(f"{where}: expands to more than {MAX_VALUES} values (YAML aliases); "
                       "write the values out")
    for key, text_value in strings_in(parsed):
        bad = next((c for c in text_value if invisible(c)), None)
        if bad is not None:
            raise KitError(f"{where}: {key or '(top level)'}: {short(text_value)} contains the "
                           f"invisible character U+{ord(bad):04X}; retype it")
    return parsed


# PyYAML's words for the mistakes people make, in theirs
YAML_PROBLEMS = {
    "expected <block end>, but found '<block mapping start>'":
        "this key is indented differently from the keys above it; give keys of one mapping "
        "the same number of spaces",
    "mapping values are not allowed here":
        "a second ':' on one line, or a key indented under a value; quote a value that holds "
        "': ', or fix the indentation",
    "found character '\\t' that cannot start any token":
        "a tab; YAML indents with spaces only",
}


def plain_yaml_problem(problem: str) -> str:
    for words, plain in YAML_PROBLEMS.items():
        if problem.startswith(words):
            return f"{plain} (YAML: {problem})"
    return problem


def too_many_values(value) -> bool:
    """Count the values of a parsed file as a walk would meet them, stopping at the cap."""
    pending, seen = [value], 0
    while pending:
        seen += 1
        if seen > MAX_VALUES:
            return True
        item = pending.pop()
        if isinstance(item, dict):
            pending += list(item.keys()) + list(item.values())
        elif isinstance(item, list):
            pending += item
    return False


def invisible(char: str) -> bool:
    """Control, format (zero-width, bidi), separator other than a plain space."""
    category = unicodedata.category(char)
    return category in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp") or (category == "Zs" and char != " ")


def strings_in(value, key: str = ""):
    """(dotted key, string) for every string in a parsed file, keys included."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            child = f"{key}.{k}" if key else str(k)
            yield child, k
            yield from strings_in(v, child)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from strings_in(v, f"{key}[{i}]")


# --- the schema ---------------------------------------------------------------------

def _strict_int(checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _finite_number(checker, instance) -> bool:
    """YAML's .nan, .inf and -.inf are floats, and every bound passes NaN (a comparison
    with it is False): a number here is a finite one."""
    return (isinstance(instance, (int, float)) and not isinstance(instance, bool)
            and (isinstance(instance, int) or math.isfinite(instance)))


StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _strict_int, "number": _finite_number}),
)


def not_finite(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def yaml_spelling(value: float) -> str:
    return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")


def load_schema(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def check_and_fill(values, schema: dict, where: str) -> dict:
    """Every schema problem in one KitError, or the values with defaults filled in."""
    if not isinstance(values, dict):
        raise KitError(f"{where}: expected a mapping of keys at the top, got {type(values).__name__}")
    problems = schema_problems(values, schema)
    if problems:
        raise KitError(joined(where, problems))
    return with_defaults(copy.deepcopy(values), schema, schema)


def joined(where: str, problems: list[str]) -> str:
    listed = "; ".join(short_problem(p) for p in problems[:MAX_PROBLEMS])
    more = len(problems) - MAX_PROBLEMS
    return f"{where}: {listed}" + (f" (and {more} more)" if more > 0 else "")


def short_problem(problem: str, limit: int = 600) -> str:
    """A problem whole (each value it quotes is already shortened, inputs.short): cut only
    past `limit`, at a word, where a message of the kit's would say too much."""
    if len(problem) <= limit:
        return problem
    return problem[:limit].rsplit(" ", 1)[0] + " ..."


def schema_problems(values: dict, schema: dict) -> list[str]:
    """Every violation as 'dotted.key: what is wrong; how to fix', a key typed wrong said
    once: its did-you-mean, not also the required key it was meant to be."""
    problems, meant, said_not_finite = [], set(), set()
    # by key; at one key an unknown key first, so that its did-you-mean is known
    for error in sorted(StrictValidator(schema).iter_errors(values),
                        key=lambda e: (list(map(str, e.path)), e.validator != "additionalProperties")):
        key = ".".join(str(p) for p in error.path) or "(top level)"
        rule = error.schema if isinstance(error.schema, dict) else {}
        if not_finite(error.instance):
            if key not in said_not_finite:  # one line, whichever rules it failed
                said_not_finite.add(key)
                problems.append(f"{key}: {yaml_spelling(error.instance)} is not a number; write a "
                                "finite one" + (f" ({rule['description']})" if "description" in rule else ""))
        elif error.validator == "additionalProperties":
            allowed = list(rule.get("properties", {}))
            for extra in sorted(set(error.instance) - set(allowed)):
                where = f"{key}.{extra}" if error.path else extra
                why = (rule.get("x-not-here") or {}).get(extra)
                if why:  # a key a user may expect: why it is not here, and where it is
                    problems.append(f"{where}: not a key here: {why}")
                    continue
                hint = difflib.get_close_matches(extra, allowed, n=1)
                fix = f"did you mean '{hint[0]}'?" if hint else f"allowed keys: {', '.join(allowed)}"
                meant |= {(key, hint[0])} if hint else set()
                problems.append(f"{short(where, 50)[1:-1]}: unknown key; {fix}")
        elif error.validator == "required":
            missing = error.message.split("'")[1]
            if (key, missing) in meant:
                continue  # said as the typo's did-you-mean
            problems.append(f"{key}: '{missing}' is required; add it (see hetero.yaml or local.yaml)")
        elif error.validator == "propertyNames":
            problems.append(f"{key}: key {short(error.instance)} is not a name; {rule.get('description', '')}")
        elif "description" in rule and error.validator in ("pattern", "type", "enum", "const",
                                                           "minimum", "maximum", "maxLength",
                                                           "minLength", "not"):
            problems.append(f"{key}: {short(error.instance)} is not allowed; {rule['description']}")
        elif error.validator == "type":
            problems.append(f"{key}: {short(error.instance)} is not of type '{rule['type']}'"
                            if isinstance(rule.get("type"), str) else
                            f"{key}: {short(error.instance)} is not of type {rule.get('type')}")
        elif error.validator in ("enum", "const"):
            allowed = rule.get("enum") or [rule.get("const")]
            problems.append(f"{key}: {short(error.instance)} is not one of {', '.join(map(str, allowed))}")
        elif error.validator in ("minimum", "maximum"):
            bound = rule[error.validator]
            word = "at least" if error.validator == "minimum" else "at most"
            problems.append(f"{key}: {short(error.instance)} is out of range; set {word} {bound}")
        else:
            problems.append(f"{key}: {short(error.message, 120)}")
    # where no rule reads a number (a free-form map): a non-finite one is still no value
    problems += [f"{key}: {yaml_spelling(v)} is not a number; write a finite one"
                 for key, v in numbers_in(values) if not_finite(v) and key not in said_not_finite]
    return problems


def numbers_in(value, key: str = ""):
    """(dotted key, number) for every float in a parsed file."""
    if isinstance(value, float):
        yield key or "(top level)", value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from numbers_in(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):  # the path as the schema's errors spell it
            yield from numbers_in(v, f"{key}.{i}" if key else str(i))


def with_defaults(values, rule: dict, root: dict):
    """Fill missing keys from `default:` in the schema, recursively (through $ref and the
    per-name schemas of maps such as `workers`)."""
    rule = resolve(rule, root)
    if not isinstance(values, dict):
        return values
    for name, sub in rule.get("properties", {}).items():
        sub = resolve(sub, root)
        if name not in values and "default" in sub:
            values[name] = copy.deepcopy(sub["default"])
        if name in values:
            values[name] = with_defaults(values[name], sub, root)
    extra = rule.get("additionalProperties")
    if isinstance(extra, dict):
        for name in set(values) - set(rule.get("properties", {})):
            values[name] = with_defaults(values[name], extra, root)
    return values


def resolve(rule: dict, root: dict) -> dict:
    ref = rule.get("$ref") if isinstance(rule, dict) else None
    if ref:
        node = root
        for part in ref.lstrip("#/").split("/"):
            node = node[part]
        return resolve(node, root)
    return rule
