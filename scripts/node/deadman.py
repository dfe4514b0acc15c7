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

A raylet is looked for every POLL_S. No raylet yet: off after GRACE (from the unit's
start, at boot: the image pull and setup come first); a raylet seen, then none: off after
IDLE. Like everything in scripts/node/, this file needs nothing of the kit.
"""

import argparse
import os
import subprocess
import sys
import time

POLL_S = 30


def raylet_running(proc_dir: str = "/proc") -> bool:
    """Whether a process named `raylet` runs on this host (a container's processes are the
    host's too)."""
    try:
        entries = os.listdir(proc_dir)
    except OSError:
        return True  # cannot look: never power off blind
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_dir, entry, "comm")) as f:
                if f.read().strip() == "raylet":
                    return True
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return False


def should_power_off(now: float, started: float, last_raylet: float | None, grace_s: float,
                     idle_s: float) -> bool:
    """now, started (the unit's start, at boot) and last_raylet (when a raylet was last
    seen; None: never) on one monotonic clock."""
    if last_raylet is None:
        return now - started > grace_s
    return now - last_raylet > idle_s


def watch(grace_s: float, idle_s: float, power_off, running=raylet_running,
          clock=time.monotonic, sleep=time.sleep, poll_s: float = POLL_S) -> str:
    """Poll until should_power_off, then power_off(); return why."""
    started, last_raylet = clock(), None
    while True:
        now = clock()
        if running():
            last_raylet = now
        elif should_power_off(now, started, last_raylet, grace_s, idle_s):
            why = (f"no raylet for {idle_s / 60:g} min" if last_raylet is not None
                   else f"no raylet within {grace_s / 60:g} min of boot")
            print(f"deadman: {why}; powering off (the instance terminates)", flush=True)
            power_off()
            return why
        sleep(poll_s)


def power_off() -> None:
    subprocess.run(["shutdown", "-h", "now"], check=False)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grace-minutes", type=float, required=True,
                   help="from boot, before a raylet must have run")
    p.add_argument("--idle-minutes", type=float, required=True,
                   help="with no raylet, once one has run")
    a = p.parse_args(argv)
    print(f"deadman: off after {a.grace_minutes:g} min without Ray from boot, or "
          f"{a.idle_minutes:g} min without it after", flush=True)
    watch(a.grace_minutes * 60, a.idle_minutes * 60, power_off)
    return 0


if __name__ == "__main__":
    sys.exit(main())
