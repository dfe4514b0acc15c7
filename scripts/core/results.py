"""The job summaries the kit reads back (a job's RESULT line, the copies in build/results/),
through the one loader, jobs/raykit/contract.py's run_summary: the benches, the planner
and `make submit` take a summary's figures from a RunSummary, never by key."""

from jobs.raykit.contract import RunSummary, run_summary
from scripts.core.errors import KitError


def summary_of(result, where: str = "the job's summary") -> RunSummary:
    """`result` as the kit reads it; one error line where it is not a raykit summary."""
    try:
        return run_summary(result)
    except ValueError as e:
        raise KitError(f"{where}: {e}; the kit reads the summaries raykit's summary.emit prints, "
                       "as the job kept them") from None


def readable(result) -> RunSummary | None:
    """`result` as a summary where it is one; None where a job printed another shape."""
    try:
        return run_summary(result) if result is not None else None
    except ValueError:
        return None
