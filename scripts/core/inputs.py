"""What a user types reaches the kit here, and only as data.

The Makefile exports its variables to the kit's environment as KIT_CLUSTER, KIT_JOB,
KIT_ARGS and KIT_TIMEOUT (never pasted into a shell line), so quotes, `$`, backticks and
`;` arrive exactly as typed. CLUSTER and JOB are names, resolved only inside
cluster_templates/ and jobs/; ARGS is split as a POSIX shell would split it; TIMEOUT is a
positive, finite number of seconds.
"""

import argparse
import difflib
import json
import math
import re
import shlex
from pathlib import Path

from jobs.raykit.contract import finite
from scripts.core.errors import KitError, short
from scripts.core.paths import JOB_DIRS, REPO, VALUES_DIRS

# One pattern for every name the user picks: a cluster, a job, a node type.
NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
NAME_RULE = "lowercase letters, digits, '_' and '-', starting with a letter, at most 40"
MAX_ARGS_CHARS = 4096
MAX_REQUIREMENTS_BYTES = 64 * 1024
MAX_TIMEOUT_S = 7 * 24 * 3600
JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_name(variable: str, value: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise KitError(f"{variable}={short(value)} is not a name ({NAME_RULE}); "
                       f"set {variable} to one of: {choices(variable)}")
    return value


def choices(variable: str) -> str:
    found = available_clusters() if variable in ("CLUSTER", "CLUSTERS") else available_jobs()
    return ", ".join(found) or "(none)"


def available_clusters() -> list[str]:
    return sorted({p.stem for d in VALUES_DIRS for p in d.glob("*.yaml") if NAME.fullmatch(p.stem)})


def available_jobs() -> list[str]:
    return sorted({p.name for d in JOB_DIRS if d.is_dir() for p in d.iterdir()
                   if NAME.fullmatch(p.name) and (p / "main.py").is_file()})


def shown(path: Path) -> str:
    """A path as the user reads it: relative to the checkout where it is inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def found_once(variable: str, name: str, candidates: list[Path]) -> Path | None:
    """The one candidate that exists; None for none; two (the same name in the checkout
    and in RAYKIT_VALUES_DIR/RAYKIT_JOBS_DIR) is refused: which would run is a guess."""
    found = [path for path in candidates if path.exists()]
    if len(found) > 1:
        raise KitError(f"{variable}={name} is both {shown(found[0])} and {shown(found[1])}; "
                       "rename one of them")
    return found[0] if found else None


def values_file(cluster: str) -> Path:
    """<dir>/<cluster>.yaml for a valid name (cluster_templates/, or RAYKIT_VALUES_DIR), or
    KitError. A symlink that leads out of its folder is refused too."""
    check_name("CLUSTER", cluster)
    path = found_once("CLUSTER", cluster, [d / f"{cluster}.yaml" for d in VALUES_DIRS])
    if path is None or not path.is_file() or path.parent.resolve() not in path.resolve().parents:
        where = " or ".join(f"{shown(d)}/" for d in VALUES_DIRS)  # RAYKIT_VALUES_DIR's too
        hint = difflib.get_close_matches(cluster, available_clusters(), n=1, cutoff=0.6)
        raise KitError(f"CLUSTER={cluster}: no values file {cluster}.yaml in {where}; "
                       + (f"did you mean {hint[0]}? " if hint else "")
                       + f"choose one of: {choices('CLUSTER')}")
    return path


def values_shown(cluster: str) -> str:
    """How an error names CLUSTER's values file: where it is (cluster_templates/ or the
    user's RAYKIT_VALUES_DIR), as the user reads it."""
    try:
        return shown(values_file(cluster))
    except KitError:  # a mix made in memory (make plan, a bench's variants)
        return f"cluster_templates/{cluster}.yaml"


def job_dir(job: str) -> Path:
    """<dir>/<job>/ holding main.py (jobs/, or RAYKIT_JOBS_DIR), or KitError; the directory
    is what gets uploaded."""
    check_name("JOB", job)
    path = found_once("JOB", job, [d / job for d in JOB_DIRS])
    if path is None or not (path / "main.py").is_file() \
            or path.parent.resolve() != path.resolve().parent:
        raise KitError(f"JOB={job}: no job jobs/{job}/main.py; choose one of: {choices('JOB')}")
    return path


def job_requirements(job: str) -> list[str]:
    """The pip requirements of jobs/<job>/requirements.txt (none without the file): one
    PEP 508 requirement per line, `#` comments allowed. Options (-r, --index-url, -e) and
    paths are refused: the file must mean the same on this machine and on every node."""
    from packaging.requirements import InvalidRequirement, Requirement

    path = job_dir(job) / "requirements.txt"
    if not path.is_file():
        return []
    where = shown(path)
    if path.stat().st_size > MAX_REQUIREMENTS_BYTES:
        raise KitError(f"{where} is over {MAX_REQUIREMENTS_BYTES // 1024} KiB; list only the "
                       "packages the job needs beyond the kit's image")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise KitError(f"{where} is not UTF-8 text; save it as UTF-8") from None
    packages = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            requirement = None
        if requirement is None or text.startswith("-") or requirement.url:
            raise KitError(f"{where} line {number}: {short(text)} is not a requirement; write "
                           "one package per line, such as einops==0.8.1 (no options, URLs or paths)")
        packages.append(text)
    return packages


def split_args(text: str) -> list[str]:
    """ARGS as a POSIX shell splits it: quoted words stay whole, `$` and `;` stay text."""
    if len(text) > MAX_ARGS_CHARS:
        raise KitError(f"ARGS is {len(text)} characters long; at most {MAX_ARGS_CHARS}")
    try:
        return shlex.split(text)
    except ValueError as e:  # "No closing quotation", "No escaped character"
        raise KitError(f"ARGS={short(text)}: {str(e).lower()}; close the quote or "
                       "escape it with a backslash") from None


def parse_timeout(text: str | None) -> float | None:
    """TIMEOUT: empty means no limit; else a positive, finite number of seconds."""
    if text is None or text.strip() == "":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S):
        raise KitError(f"TIMEOUT={short(text)} is not a number of seconds between 0 and "
                       f"{MAX_TIMEOUT_S}; set e.g. TIMEOUT=600, or leave it empty for no limit")
    return seconds


def flag(variable: str, text: str) -> bool:
    """A yes/no Make variable (DRY_RUN, PURGE, FOLLOW): 1, or 0/empty."""
    if text not in ("", "0", "1"):
        raise KitError(f"{variable}={text[:20]!r}: set {variable}=1, or leave it out")
    return text == "1"


def job_id(text: str) -> str:
    """ID: a job's submission id, as `make jobs` lists it."""
    if not JOB_ID.fullmatch(text):
        raise KitError(f"ID={text[:40]!r} is not a job id; `make jobs` lists them")
    return text


def json_text(value, indent: int | None = 2) -> str:
    """JSON as the kit writes it: standard JSON only. A non-finite number (a rate over a
    time measured as zero) becomes null, so that every file the kit writes reads back
    through read_json, which refuses NaN and Infinity (contract.finite: one definition)."""
    return json.dumps(finite(value), indent=indent, allow_nan=False)


class OneLineParser(argparse.ArgumentParser):
    """argparse for the kit's commands and benchmarks: a mistake in their flags (ARGS) is
    one `error:` line naming where to look (a KitError), never argparse's usage dump and
    its exit."""

    def __init__(self, *args, see: str, prefix: str = "ARGS: ", **kwargs):
        super().__init__(*args, **kwargs)
        self.see, self.prefix = see, prefix

    def error(self, message):
        raise KitError(f"{self.prefix}{message}; see `{self.see}`")


def strict_json(text: str | bytes):
    """JSON as a standard reader takes it: Python's json also takes NaN, Infinity and
    -Infinity, which no JSON the kit, kubectl or AWS writes holds, and which every bound
    check passes (a comparison with NaN is False). ValueError for them, as for bad JSON."""
    def refuse(constant):
        raise ValueError(f"{constant} is not a JSON number")
    return json.loads(text, parse_constant=refuse)


def read_json(variable: str, path_text: str, hint: str, max_bytes: int = 1 << 20):
    """The JSON in the file a Make variable names (PROFILE, FROM): a regular file of at
    most max_bytes, strict JSON (no NaN or Infinity); anything else is one error line
    ending in `hint`, the fix."""
    path = Path(path_text)
    if not path_text or not path.is_file():
        raise KitError(f"{variable}={short(path_text)}: no such file; {hint}")
    if path.stat().st_size > max_bytes:
        raise KitError(f"{variable}={short(path_text)}: over {max_bytes} bytes; {hint}")
    try:
        return strict_json(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise KitError(f"{variable}={short(path_text)}: cannot be read ({e.strerror}); "
                       f"{hint}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise KitError(f"{variable}={short(path_text)}: not JSON ({short(str(e), 80)[1:-1]}); "
                       f"{hint}") from None
