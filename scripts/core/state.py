"""What the kit knows about clusters it launched: build/launched/<cluster>.{json,yaml} and
build/launched/job_env/<cluster>.json.

`up` writes the record (JSON), the config it launched from (YAML) and the job environment
it launched with (job_env/: the nodes' prices, the autopilot's settings, the stall limit;
`make submit` passes it to every job) before anything starts, so that `down` always stops
what runs even after the values file was edited or broken, and so that `render`/`validate` never change a running cluster's config (they
write build/clusters/, which nothing running reads). Records are validated on every read:
a corrupt one is an error naming the fix, never a traceback. One lock per cluster keeps
two `make up`/`make down` of the same cluster from racing.
"""

import fcntl
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

import jsonschema

from scripts.core.errors import KitError, short
from scripts.core.inputs import strict_json
from scripts.core.paths import LAUNCHED

MAX_RECORD_BYTES = 16 * 1024


def record_path(cluster: str) -> Path:
    return LAUNCHED / f"{cluster}.json"


def config_path(cluster: str) -> Path:
    return LAUNCHED / f"{cluster}.yaml"


def job_env_path(cluster: str) -> Path:
    return LAUNCHED / "job_env" / f"{cluster}.json"  # a folder of its own: a record is <cluster>.json


def save_job_env(cluster: str, env: dict[str, str]) -> None:
    make_dir(job_env_path(cluster).parent)
    write_atomic(job_env_path(cluster), json.dumps(env, indent=2, sort_keys=True) + "\n")


def load_job_env(cluster: str) -> dict[str, str] | None:
    """The job environment `up` launched the cluster with; None where none was recorded
    (a cluster launched by an older kit). One that is not the kit's is an error naming it."""
    path = job_env_path(cluster)
    if not os.path.lexists(path):
        return None
    try:
        kind = path.lstat()
        if not stat.S_ISREG(kind.st_mode) or kind.st_size > MAX_RECORD_BYTES:
            raise ValueError("not a small regular file")
        env = strict_json(path.read_bytes())
    except (OSError, ValueError) as e:
        env, problem = None, short(str(e), 80)
    else:
        problem = None if isinstance(env, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()) else "not names to texts"
    if problem:
        raise KitError(f"{path} is corrupt ({problem}); it is not the job environment the kit recorded: "
                       f"delete it, and `make submit` uses the values file's as it is now")
    return env


def make_dir(path: Path) -> None:
    """`path` as a directory (created private if missing); one error line where a file,
    FIFO or dangling link of that name stands in the way."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise KitError(f"{path} cannot be a directory ({e.strerror}): something else has that "
                       "name; move it away and run the command again") from None


def write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    """Readers see the old file or the new one, never half of one."""
    make_dir(path.parent)
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
    job_env_path(cluster).unlink(missing_ok=True)


def load(cluster: str, record_schemas: dict[str, dict]) -> dict | None:
    """The validated record of a launched cluster, or None if there is none.
    `record_schemas`: {provider name: the JSON schema of its records}, handed in by the
    providers (scripts/providers/__init__.py's load_record): this module knows records,
    not providers."""
    path = record_path(cluster)
    if not os.path.lexists(path):  # a link, even one to nothing, is there: judged below
        return None
    where = f"{path}"
    fix = (f"it is not a record the kit wrote; move it away, then `make down CLUSTER={cluster}` "
           "stops a local cluster's processes without it (an AWS cluster: `ray down` by hand)")
    try:
        kind = path.lstat()  # never follow a link, nor open a FIFO (it would block) or a device
        if not stat.S_ISREG(kind.st_mode):
            raise ValueError("not a regular file")
        if kind.st_size > MAX_RECORD_BYTES:
            raise ValueError(f"{kind.st_size} bytes")
        record = strict_json(path.read_bytes())
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
    make_dir(LAUNCHED)
    path = LAUNCHED / f"{cluster}.lock"
    try:  # a FIFO there would block a plain open; a link could point anywhere
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as e:
        raise KitError(f"{path} cannot be opened as a lock file ({e.strerror}); move it away") from None
    with os.fdopen(fd, "w") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise KitError(f"{path} is not a regular file; move it away")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise KitError(f"another `make up`/`make down`/`make run` of CLUSTER={cluster} is "
                           "running; wait for it to finish") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
