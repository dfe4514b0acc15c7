"""A run's outputs, one rule for every job: where they go, how a restarted worker resumes,
what the final model is. The ViT job, the template and every job copied from it use it.

    # the driver
    run = checkpoint.run_config(args.storage, args.name, max_failures=args.max_failures)
    trainer = TorchTrainer(..., run_config=RunConfig(**run, ...))
    outputs = checkpoint.outputs(trainer.fit())    # where the run folder and model.pt are

    # the training loop, on every rank
    run = checkpoint.Resume(plan={"steps": n})              # after a restart: the last checkpoint
    if run.finished: run.report_again(); return             # the run had ended: nothing to train
    ... build model and optimizer; run.load(model, optimizer); train from run.step
    ... every N steps: run.save(model, optimizer, step)
    run.final(model, metrics)                               # the summary and model.pt

The rule. A run's folder is <storage>/<name>: --storage an absolute path every training
node can write, or s3://bucket/prefix (on AWS, a bucket of `aws.output_buckets`); --name by
default <job>-<date>_<time>-<4 hex>, so no run resumes another's. Submitted again with the
same --storage and --name, the run resumes from its last checkpoint, and a run that had
finished with the same plan (its --steps, --epochs) reports its summary again and trains
nothing (as when Ray Train restarts the workers after the last report); one finished with
another plan starts over. Checkpoints hold model.pt (the weights, loadable with
torch.load, no Ray needed) and state.pt (optimizer, step, restarts); the final one holds
model.pt, the summary (metrics.json) and the plan (plan.json), no state.pt.
"""

import json
import os
import re
import sys
import time
import uuid

from raykit import contract, measure

MODEL, STATE, SUMMARY, PLAN, ATTEMPTS = "model.pt", "state.pt", "metrics.json", "plan.json", "raykit-attempts"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def job_name() -> str:
    """The job's name: its folder under jobs/, as the kit passes it (RAYKIT_JOB), else the
    folder main.py runs from (a copy of the template calls itself by its own name)."""
    named = os.environ.get(contract.JOB_ENV, "")
    if NAME.match(named):
        return named
    return os.path.basename(os.path.dirname(os.path.abspath(sys.argv[0]))) or "job"


def run_name(name: str = "") -> str:
    """The run's folder name: `name`, or <job>-<date>_<time>-<4 hex>, a run of its own."""
    return name or f"{job_name()}-{time.strftime('%Y-%m-%d_%H-%M-%S')}-{uuid.uuid4().hex[:4]}"


def storage_problem(flag: str, value: str) -> str | None:
    """Why `value` cannot be a run's storage (pyarrow refuses a path with no scheme, and
    the driver runs in a temp folder); None where it can."""
    if value and not (value.startswith("/") or re.match(r"^[a-z][a-z0-9+.-]*://.", value)):
        return f"{flag} must be an absolute path or a URI such as s3://bucket/prefix (got {value!r})"
    return None


def name_problem(flag: str, value: str) -> str | None:
    if value and not NAME.match(value):
        return (f"{flag} must be letters, digits, '_', '.' and '-', starting with a letter or "
                f"digit, at most 100 (got {value[:60]!r})")
    return None


def add_run_flags(parser, *, storage_default: str) -> None:
    """The flags every job's run shares, one meaning everywhere: --storage (--storage-path
    too), --name, --max-failures, --tensorboard. storage_default: what an empty --storage
    does in this job (the only part that differs)."""
    parser.add_argument("--storage", "--storage-path", dest="storage", default="",
                        help="where the run's folder goes (checkpoints, the final model): an absolute "
                             f"path every training node can write, or s3://bucket/prefix; empty: {storage_default}")
    parser.add_argument("--name", default="",
                        help="the run's folder under --storage; submitted again with the same --storage "
                             "and --name, the run resumes from its last checkpoint (a finished run reports "
                             "its summary again); default: <job>-<date>_<time>-<4 hex>, a run of its own")
    parser.add_argument("--max-failures", type=int, default=2,
                        help="training-worker failures Ray Train recovers from before the job fails")
    parser.add_argument("--tensorboard", default="",
                        help="also write TensorBoard event files (loss, images/s, data wait, and the "
                             "job's evaluation) to this absolute directory on the first training node, "
                             "or s3://...")


def run_flag_problems(args) -> list[str]:
    """What is wrong with add_run_flags' values (pyarrow refuses a path with no scheme, and
    the driver's working directory is a temp folder); [] when nothing is."""
    return [problem for problem in (storage_problem("--storage", args.storage),
                                    storage_problem("--tensorboard", args.tensorboard),
                                    name_problem("--name", args.name)) if problem]


def run_config(storage: str, name: str = "", *, max_failures: int) -> dict:
    """RunConfig's keywords for a run's outputs: its folder <storage>/<name> (storage
    empty: Ray's ~/ray_results on the head) and the failures Ray Train recovers from."""
    from ray.train import FailureConfig

    return {"name": run_name(name), "storage_path": storage or None,
            "failure_config": FailureConfig(max_failures=max_failures)}


def outputs(fitted) -> dict:
    """Where the run left its outputs (Ray Train's Result): the run folder and the final
    model's checkpoint, as URIs (an absolute path is on the node that ran the driver, the
    head). The summary keeps them: `make fetch ID=...` copies the folder back."""
    scheme = "s3://" if getattr(fitted.filesystem, "type_name", "") == "s3" else ""  # pyarrow drops it
    folder = scheme + str(fitted.path)
    model = f"{scheme}{fitted.checkpoint.path}/{MODEL}" if fitted.checkpoint is not None else None
    return {"run_folder": folder, "model": model}


class Resume:
    """In the training loop, on every rank: the run's last checkpoint where Ray Train
    restarted the workers (or the run was submitted again on its folder), and the saves.
    Made first (a finished run is known before any model is built); then, once the data
    flows, load() (or report_again() for a finished run)."""

    def __init__(self, plan: dict):
        """plan: what the run was asked to do (its --steps, --epochs: JSON values); a
        finished run reports again only for the same plan."""
        import ray.train

        self.plan, self.rank = json.loads(json.dumps(plan)), ray.train.get_context().get_world_rank()
        self.step, self.restarts, self.finished = 0, 0, None
        self._checkpoint = ray.train.get_checkpoint()
        if self._checkpoint is not None and self._is_final():
            self._checkpoint = None  # a finished run of another plan: this one starts over

    def _is_final(self) -> bool:
        """Whether the checkpoint is a finished run's (no state.pt); its summary kept in
        `finished` where its plan is this run's. Reads the small files only: as_directory()
        would download the whole checkpoint from s3://."""
        import pyarrow.fs

        fs, path = self._checkpoint.filesystem, self._checkpoint.path
        if fs.get_file_info(f"{path}/{STATE}").type != pyarrow.fs.FileType.NotFound:
            return False
        with fs.open_input_stream(f"{path}/{SUMMARY}") as f:
            summary = json.loads(f.read().decode())
        try:
            with fs.open_input_stream(f"{path}/{PLAN}") as f:
                plan = json.loads(f.read().decode())
        except (OSError, ValueError):
            plan = None
        if plan == self.plan:
            self.finished = summary
        return True

    def load(self, model, optimizer) -> None:
        """Model and optimizer from the last checkpoint, where there is one: `step` is then
        its step, and the run goes on from there. Called once the feed has started: the
        attempts file's write then overlaps the pipeline's fill, not delays it."""
        import torch

        state = None
        if self._checkpoint is not None:
            with self._checkpoint.as_directory() as folder:
                weights = torch.load(os.path.join(folder, MODEL), map_location="cpu", weights_only=True)
                state = torch.load(os.path.join(folder, STATE), map_location="cpu", weights_only=True)
            getattr(model, "module", model).load_state_dict(weights)
            optimizer.load_state_dict(state["optimizer"])
            self.step = state["step"]
        if self.rank == 0:
            self.restarts = next_attempt() - 1
        elif state is not None:
            self.restarts = state["restarts"] + 1
        if self.rank == 0 and self.restarts:
            print(f"restart {self.restarts}: " + (f"resuming from the checkpoint of step {self.step}"
                                                  if state is not None else
                                                  "no checkpoint yet, starting over"), flush=True)

    def report_again(self) -> None:
        """The finished run's summary, reported again (collective: every rank reports)."""
        if self.rank == 0:
            self.restarts = next_attempt() - 1
            print(f"restart {self.restarts}: the run had finished (step {self.finished.get('steps')}); "
                  "its summary is reported again, nothing trained", flush=True)
        measure.report(self.finished | {"restarts": self.restarts})

    def save(self, model, optimizer, step: int) -> None:
        """A checkpoint a restarted worker resumes from: model.pt and state.pt."""
        import torch

        def write(folder):
            torch.save(getattr(model, "module", model).state_dict(), os.path.join(folder, MODEL))
            torch.save({"optimizer": optimizer.state_dict(), "step": step, "restarts": self.restarts},
                       os.path.join(folder, STATE))
        measure.report({"step": step}, write)

    def final(self, model, metrics: dict) -> None:
        """The run's last report: its summary and the trained model (model.pt)."""
        import torch

        def write(folder):
            torch.save(getattr(model, "module", model).state_dict(), os.path.join(folder, MODEL))
            with open(os.path.join(folder, PLAN), "w") as f:
                json.dump(self.plan, f)
        measure.report(metrics, write)


def next_attempt() -> int:
    """This attempt's number in the run (1: the first), counted in a file beside its
    checkpoints (the run's folder, which every attempt shares): a restart counts whether
    or not a checkpoint was there to resume from (a worker killed before the first one was
    registered starts over, and still restarted)."""
    import ray.train

    storage = ray.train.get_context().get_storage()
    fs, path = storage.storage_filesystem, f"{storage.experiment_fs_path}/{ATTEMPTS}"
    try:
        with fs.open_input_stream(path) as f:
            count = int(f.read().decode() or 0)
    except (OSError, ValueError):  # the first attempt: no file yet
        count = 0
        fs.create_dir(storage.experiment_fs_path, recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(str(count + 1).encode())
    return count + 1
