"""Day-2 commands on a running cluster: status, dashboard, attach, monitor."""

import time

from scripts.commands.jobs import job_client
from scripts.commands.lifecycle import require_record
from scripts.core.inputs import flag
from scripts.node.autostop import duration, head_started_at, job_states, seconds_left
from scripts.providers import PROVIDERS


def cmd_status(a) -> int:
    record = require_record(a.cluster)
    code = PROVIDERS[record["provider"]].status(record)
    if record.get("autostop_minutes"):
        print(autostop_status(a.cluster, record))
    return code


def autostop_status(cluster: str, record: dict) -> str:
    """The watchdog's own arithmetic on the same jobs: the time left, or what holds it."""
    minutes = record["autostop_minutes"]
    with job_client(cluster) as client:
        # the watchdog's start of the clock; `up_at` (before `ray up`) only if Ray's is unread
        started = head_started_at(client.get_address()) or record["up_at"]
        left = seconds_left(job_states(client), started, time.time(), minutes * 60)
    if left is None:
        return f"autostop: held up by a running job (then {duration(minutes)} with no job)"
    return (f"autostop: the cluster stops itself in {duration(max(left, 0) / 60)} unless a job "
            f"starts ({duration(minutes)} with no job; autostop_minutes in its values file)")


def cmd_dashboard(a) -> int:
    record = require_record(a.cluster)
    return PROVIDERS[record["provider"]].dashboard(record)


def cmd_attach(a) -> int:
    record = require_record(a.cluster)
    return PROVIDERS[record["provider"]].attach(record)


def cmd_monitor(a) -> int:
    follow = flag("FOLLOW", a.follow)
    record = require_record(a.cluster)
    return PROVIDERS[record["provider"]].monitor(record, follow)
