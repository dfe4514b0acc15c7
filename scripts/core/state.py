"""What the kit knows about clusters it launched: build/launched/<cluster>.{json,yaml}.

`up` writes the record (JSON) and the config it launched from (YAML) before anything
starts, so that `down` always stops what runs even after the values file was edited or
broken, and so that `render`/`validate` never change a running cluster's config (they
write build/clusters/, which nothing running reads). Records are validated on every read:
a corrupt one is an error naming the fix, never a traceback. One lock per cluster keeps
two `make up`/`make down` of the same cluster from racing.
"""

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import jsonschema

from scripts.core.errors import KitError, short
from scripts.core.paths import LAUNCHED

MAX_RECORD_BYTES = 16 * 1024


def record_path(cluster: str) -> Path:
    return LAUNCHED / f"{cluster}.json"


def config_path(cluster: str) -> Path:
    return LAUNCHED / f"{cluster}.yaml"


def write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    """Readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save(cluster: str, record: dict, config_text: str | None = None) -> None:
    if config_text is not None:
        write_atomic(config_path(cluster), config_text)
    write_atomic(record_path(cluster), json.dumps(record, indent=2) + "\n")


def forget(cluster: str) -> None:
    record_path(cluster).unlink(missing_ok=True)
    config_path(cluster).unlink(missing_ok=True)


def load(cluster: str, record_schemas: dict[str, dict]) -> dict | None:
    """The validated record of a launched cluster, or None if there is none.
    `record_schemas`: {provider name: the JSON schema of its records}, handed in by the
    providers (scripts/providers/__init__.py's load_record): this module knows records,
    not providers."""
    path = record_path(cluster)
    if not path.exists():
        return None
    where = f"{path}"
    fix = (f"it is not a record the kit wrote; move it away, then `make down CLUSTER={cluster}` "
           "stops a local cluster's processes without it (an AWS cluster: `ray down` by hand)")
    try:
        data = path.read_bytes()
        if len(data) > MAX_RECORD_BYTES:
            raise ValueError(f"{len(data)} bytes")
        record = json.loads(data)
    except (OSError, ValueError) as e:
        raise KitError(f"{where} is corrupt ({short(str(e), 80)}); {fix}") from None
    if not isinstance(record, dict) or record.get("cluster") != cluster \
            or record.get("provider") not in record_schemas:
        raise KitError(f"{where} is corrupt (cluster or provider); {fix}")
    schema = record_schemas[record["provider"]]
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(record))
    if error is not None:
        key = ".".join(map(str, error.path)) or error.validator
        raise KitError(f"{where} is corrupt ({key[:40]}); {fix}")
    return record


def launched_clusters() -> list[str]:
    return sorted(p.stem for p in LAUNCHED.glob("*.json")) if LAUNCHED.is_dir() else []


@contextmanager
def lock(cluster: str):
    """Held while a command starts or stops `cluster`; a second one is refused at once."""
    LAUNCHED.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(LAUNCHED / f"{cluster}.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise KitError(f"another `make up`/`make down`/`make run` of CLUSTER={cluster} is "
                           "running; wait for it to finish") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
