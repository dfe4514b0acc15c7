"""A node's dead-man switch: powers its EC2 instance off when Ray has not run on it for a while.

Every AWS node is launched with InstanceInitiatedShutdownBehavior=terminate, so powering off
terminates the instance and its billing ends. This runs on the host, outside Ray's
container, as a systemd unit that the node's user data starts at boot (providers/aws/render.py's
deadman_user_data), before SSH, Docker or Ray, and needs nothing but /proc and `shutdown`:
no Ray, no kit, no AWS rights. It catches what the watchdog on the head cannot:

  - the head's or a worker's setup or `ray start` failed, or SSH never reached it: no
    raylet ever runs here (`ray up` exits non-zero and nothing else would watch the head);
  - the watchdog stopped Ray but its terminate calls failed (throttling, a profile
    without the right): the raylets are gone, the instances stay;
  - the head died: a worker's raylet exits once the head's GCS is gone.

On the head it also watches the watchdog (scripts/node/autostop.py, which enforces the
jobs' time limits and autostop from inside Ray's container, restarted by a shell loop if it
exits): the watchdog touches a heartbeat file every poll, read here through the raylet's
/proc/<pid>/root (the container's own /tmp). While Ray runs, a heartbeat older than
WATCHDOG minutes (or none that long after this raylet appeared) means nothing would stop a
job past its limit or an idle cluster: the loop itself died, or the watchdog crashes or
hangs on every try. Then the head powers off too, and the workers follow (their raylets
exit once the head's GCS is gone).

A raylet is looked for every POLL_S. No raylet yet: off after GRACE (from the unit's
start, at boot: the image pull and setup come first); a raylet seen, then none: off after
IDLE. Like everything in scripts/node/, this file needs nothing of the kit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

POLL_S = 30


CANNOT_LOOK = -1  # /proc cannot be listed: a raylet is assumed (never power off blind)


def raylet_pid(proc_dir: str = "/proc") -> int | None:
    """The pid of a process named `raylet` on this host (a container's processes are the
    host's too); None where there is none, CANNOT_LOOK where /proc cannot be listed."""
    try:
        entries = os.listdir(proc_dir)
    except OSError:
        return CANNOT_LOOK
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_dir, entry, "comm")) as f:
                if f.read().strip() == "raylet":
                    return int(entry)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return None


def heartbeat_age(pid: int, path: str, proc_dir: str = "/proc", now=time.time) -> float | None:
    """Seconds since the watchdog last touched `path` inside the container of process
    `pid` (its root as /proc shows it); None where there is no such file yet."""
    try:
        return max(0.0, now() - os.stat(f"{proc_dir}/{pid}/root/{path.lstrip('/')}").st_mtime)
    except OSError:
        return None


def should_power_off(now: float, started: float, last_raylet: float | None, grace_s: float,
                     idle_s: float) -> bool:
    """now, started (the unit's start, at boot) and last_raylet (when a raylet was last
    seen; None: never) on one monotonic clock."""
    if last_raylet is None:
        return now - started > grace_s
    return now - last_raylet > idle_s


def watch(grace_s: float, idle_s: float, power_off, running=raylet_pid,
          clock=time.monotonic, sleep=time.sleep, poll_s: float = POLL_S,
          watchdog_s: float | None = None, beat_age=None) -> str:
    """Poll until should_power_off (or, with watchdog_s, the watchdog silent that long while
    Ray runs), then power_off(); return why. running() gives the raylet's pid (None: none);
    beat_age(pid), the heartbeat's age in seconds (None: no heartbeat yet)."""
    started, last_raylet, pid_seen = clock(), None, (None, None)  # (pid, since)
    while True:
        now = clock()
        pid = running()
        why = None
        if pid:
            last_raylet = now
            if pid != pid_seen[0]:  # a new raylet (a new `ray up`): a new watchdog's grace
                pid_seen = (pid, now)
            if watchdog_s and pid != CANNOT_LOOK:
                age = beat_age(pid)
                silent = now - pid_seen[1] if age is None else min(age, now - pid_seen[1])
                if silent > watchdog_s:
                    why = (f"the watchdog silent for {watchdog_s / 60:g} min while Ray runs: no job "
                           "limit or autostop would apply")
        elif should_power_off(now, started, last_raylet, grace_s, idle_s):
            why = (f"no raylet for {idle_s / 60:g} min" if last_raylet is not None
                   else f"no raylet within {grace_s / 60:g} min of boot")
        if why:
            print(f"deadman: {why}; powering off (the instance terminates)", flush=True)
            power_off()
            return why
        sleep(poll_s)


def power_off() -> None:
    subprocess.run(["shutdown", "-h", "now"], check=False)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grace-minutes", type=float, required=True,
                   help="from boot, before a raylet must have run")
    p.add_argument("--idle-minutes", type=float, required=True,
                   help="with no raylet, once one has run")
    p.add_argument("--watchdog-minutes", type=float, help="the head: with Ray running, the "
                   "watchdog's heartbeat may be this old at most")
    p.add_argument("--heartbeat", default="/tmp/raykit-watchdog.heartbeat",
                   help="the watchdog's heartbeat file, inside Ray's container")
    a = p.parse_args(argv)
    print(f"deadman: off after {a.grace_minutes:g} min without Ray from boot, or "
          f"{a.idle_minutes:g} min without it after"
          + (f", or {a.watchdog_minutes:g} min without the watchdog's heartbeat while Ray runs"
             if a.watchdog_minutes else ""), flush=True)
    watch(a.grace_minutes * 60, a.idle_minutes * 60, power_off,
          watchdog_s=a.watchdog_minutes * 60 if a.watchdog_minutes else None,
          beat_age=lambda pid: heartbeat_age(pid, a.heartbeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
