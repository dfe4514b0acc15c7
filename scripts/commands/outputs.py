"""A run's outputs on this machine: `make fetch ID=<submission id>` copies the run's folder
(checkpoints, the final model.pt, the summary) from where the job left it into
build/runs/<id>/: s3:// through this machine's credentials, a path on the cluster through
its provider (AWS: `ray rsync-down` from the head; KubeRay: `kubectl cp` from the head pod;
the local cluster: the folder itself). And the warning `make down` gives where a run's
outputs live only on a head it is about to end."""

from pathlib import Path, PurePosixPath

from jobs.raykit.contract import RunSummary
from scripts.core.errors import KitError, short
from scripts.core.inputs import job_id, shown, strict_json
from scripts.core.paths import RESULTS, RUNS
from scripts.core.results import readable, summary_of
from scripts.core.state import make_dir
from scripts.core.submit import JobFiles
from scripts.providers import PROVIDERS, load_record


def cmd_fetch(a) -> int:
    if not a.id:
        raise KitError("set ID= to a job's submission id (`ls build/results/`, or `make jobs`)")
    submission_id = job_id(a.id)
    folder = run_folder(submission_id)
    dest = RUNS / submission_id
    make_dir(RUNS)
    if folder.startswith("s3://"):
        copy_from_s3(folder, dest)
    else:
        kept = kept_result(submission_id)
        record = load_record(kept.get("cluster") or a.cluster)
        if record is None:
            raise KitError(f"job {submission_id}'s run folder {short(folder)} is on cluster "
                           f"'{kept.get('cluster') or a.cluster}', which is not up: it went with the cluster")
        PROVIDERS[record["provider"]].fetch_folder(record, folder, dest)
    files = [p for p in dest.rglob("*") if p.is_file()]
    print(f"{shown(dest)}: {len(files)} file(s) of {folder}"
          + (f"; the model: {shown(models[-1])}" if (models := sorted(dest.rglob("model.pt"))) else ""))
    return 0


def kept_result(submission_id: str) -> dict:
    path = RESULTS / f"{submission_id}.json"
    try:
        kept = strict_json(path.read_text())
    except ValueError:
        raise KitError(f"{shown(path)} is not JSON; submit the job again") from None
    except FileNotFoundError:
        raise KitError(f"ID={submission_id}: no summary in {shown(RESULTS)} (`make submit` keeps one per "
                       "job that printed its RESULT line; `make logs ID=...` keeps one of a detached job)") from None
    if not isinstance(kept, dict) or not isinstance(kept.get("result"), dict):
        raise KitError(f"{shown(path)} is not a summary the kit kept; submit the job again")
    return kept


def run_folder(submission_id: str) -> str:
    """Where job `submission_id` left its run's folder, from the summary the kit kept."""
    folder = summary_of(kept_result(submission_id), f"ID={submission_id}'s kept summary").run_folder
    if folder is None or not (folder.startswith("/") or folder.startswith("s3://")) \
            or ".." in PurePosixPath(folder).parts:
        raise KitError(f"job {submission_id} kept no run folder (a job that saves through "
                       "raykit.checkpoint names one; the ViT job only with --storage)")
    return folder


def copy_from_s3(uri: str, dest: Path) -> None:
    """Every object under the URI's prefix into dest, at its path below the prefix. A key
    that would land outside dest (a '..' part, an absolute path) is refused."""
    import boto3
    import botocore.exceptions

    bucket, _, prefix = uri[len("s3://"):].partition("/")
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    s3 = boto3.client("s3")
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                relative = PurePosixPath(item["Key"][len(prefix):])
                if item["Key"].endswith("/") or not relative.parts:
                    continue  # a folder marker
                if relative.is_absolute() or ".." in relative.parts:
                    raise KitError(f"{uri}: object key {short(item['Key'])} would land outside "
                                   f"{shown(dest)}; not fetched")
                target = dest.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, item["Key"], str(target))
    except botocore.exceptions.NoCredentialsError:
        raise KitError(f"{uri}: no AWS credentials on this machine (`aws configure`, AWS_PROFILE)") from None


def head_only_warnings(cluster: str, provider, kept_since: float | None = None) -> list[str]:
    """Runs of `cluster` whose folder is a path on its head (not s3://) and not fetched:
    `make down` and autostop end the head, and them with it. None where the nodes run on
    this machine (the provider's JOB_FILES is in place: its folders stay here).
    kept_since: only the summaries kept since then (the job `make submit` just ran)."""
    if provider.JOB_FILES is JobFiles.IN_PLACE or not RESULTS.is_dir():
        return []
    lines = []
    for path in sorted(RESULTS.glob("*.json")):
        if kept_since is not None and path.stat().st_mtime < kept_since:
            continue
        try:
            kept = strict_json(path.read_text())
        except (ValueError, OSError):
            continue
        if not isinstance(kept, dict):
            continue
        folder = (readable(kept) or RunSummary()).run_folder
        if kept.get("cluster") == cluster and folder is not None and folder.startswith("/") \
                and not (RUNS / path.stem).exists():
            lines.append(f"warning: job {path.stem}'s model and checkpoints are only on the head "
                         f"({short(folder)}): `make fetch ID={path.stem} CLUSTER={cluster}` before `make down` "
                         "or autostop ends the cluster, and them with it")
    return lines
