"""The kit's command line; the Makefile calls it (`python -m scripts.kit COMMAND`).

  render   values file -> build/clusters/<cluster>.yaml
  validate render, then every check (scripts/validate.py); launches nothing
  up       validate, then start the cluster (local: simulated; aws: `ray up`)
  status   `ray status` of a running cluster
  submit   run jobs/<job>/main.py on the cluster, exit with the job's exit code
  down     stop the cluster (local: its processes; aws: `ray down`, instances terminated)
  run      up + submit + down; down runs even when the job fails or on Ctrl-C
"""

import argparse
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from scripts import catalog, local_cluster, submit
from scripts.errors import KitError
from scripts.render import render_cluster
from scripts.validate import validate
from scripts.values import BUILD, read_values, values_path

# What `up` launched, kept apart from build/clusters/ so that `down` always stops what is
# running even after the values file was edited (or broken) in between.
LAUNCHED = BUILD / "launched"


def validated(cluster: str) -> tuple[Path, dict]:
    """Validate the values file, then write its rendered YAML; return (path, values)."""
    values = read_values(cluster)
    validate(cluster, values)
    path, _ = render_cluster(cluster)
    return path, values


def cmd_render(a) -> int:
    path, _ = validated(a.cluster)  # the template needs values that passed every check
    print(path)
    return 0


def cmd_validate(a) -> int:
    path, _ = validated(a.cluster)
    print(f"{path}: valid")
    return 0


def hourly_cost(values: dict) -> str:
    head = catalog.INSTANCE_TYPES[values["head"]["instance_type"]].usd_per_hour
    lo = hi = head
    for w in values["workers"].values():
        price = catalog.INSTANCE_TYPES[w["instance_type"]].usd_per_hour
        lo += w["min_workers"] * price
        hi += w["max_workers"] * price
    return f"~${lo:.2f}/h with min_workers, up to ~${hi:.2f}/h at max_workers (on-demand list prices)"


def cmd_up(a) -> int:
    path, values = validated(a.cluster)
    LAUNCHED.mkdir(parents=True, exist_ok=True)
    if values["provider"] == "local":
        state = local_cluster.up(a.cluster, path, values)
        print(local_cluster.status(a.cluster))
        print(f"local cluster '{a.cluster}' is up: dashboard {state['dashboard_url']}, "
              f"logs {state['temp_dir']}/session_latest/logs")
        return 0
    print(f"launching '{a.cluster}' on AWS: {hourly_cost(values)}", flush=True)
    launched = LAUNCHED / path.name
    shutil.copyfile(path, launched)
    return subprocess.run([local_cluster.ray_cli(), "up", "-y", "--no-config-cache",
                           "--disable-usage-stats", str(launched)],
                          env=local_cluster.ray_env()).returncode


def cmd_down(a) -> int:
    launched = LAUNCHED / f"{a.cluster}.yaml"
    if local_cluster.read_state(a.cluster) or provider_of(a.cluster) == "local":
        stopped = local_cluster.down(a.cluster)
        print(f"local cluster '{a.cluster}': {stopped} processes stopped")
        return 0
    if not launched.exists():
        launched, _ = render_cluster(a.cluster)
    code = subprocess.run([local_cluster.ray_cli(), "down", "-y", str(launched)],
                          env=local_cluster.ray_env()).returncode
    if code == 0:
        launched.unlink(missing_ok=True)
    return code


def provider_of(cluster: str) -> str:
    """The provider of a cluster, read without validating (down must work on a values
    file that was broken after up)."""
    import yaml

    path = values_path(cluster)
    try:
        return yaml.safe_load(path.read_text()).get("provider", "")
    except Exception:
        return ""


def cmd_status(a) -> int:
    if local_cluster.read_state(a.cluster):
        print(local_cluster.status(a.cluster))
        return 0
    launched = LAUNCHED / f"{a.cluster}.yaml"
    if not launched.exists():
        raise KitError(f"cluster '{a.cluster}' is not up; run `make up CLUSTER={a.cluster}`")
    return subprocess.run([local_cluster.ray_cli(), "exec", str(launched), "ray status"],
                          env=local_cluster.ray_env()).returncode


def cmd_submit(a) -> int:
    job_args = shlex.split(a.args)
    submit.job_dir(a.job)  # a typo in JOB fails before any tunnel opens
    state = local_cluster.read_state(a.cluster)
    if state:
        local_cluster.require_state(a.cluster)
        return submit.submit(state["dashboard_url"], a.job, job_args, state["python"],
                             timeout_s=a.timeout)
    launched = LAUNCHED / f"{a.cluster}.yaml"
    if not launched.exists():
        raise KitError(f"cluster '{a.cluster}' is not up; run `make up CLUSTER={a.cluster}`")
    with submit.dashboard_tunnel(launched) as url:
        return submit.submit(url, a.job, job_args, "python", timeout_s=a.timeout)


def cmd_run(a) -> int:
    submit.job_dir(a.job)
    try:
        code = cmd_up(a)
        if code == 0:
            code = cmd_submit(a)
        return code
    finally:
        print(f"tearing down '{a.cluster}'", flush=True)
        with ignoring_interrupts():
            cmd_down(a)


class ignoring_interrupts:
    """Let teardown finish even if Ctrl-C is pressed again while it runs."""

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)


def raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


COMMANDS = {"render": cmd_render, "validate": cmd_validate, "up": cmd_up, "down": cmd_down,
            "status": cmd_status, "submit": cmd_submit, "run": cmd_run}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--cluster", default="local", help="a values file in cluster_templates/")
    parser.add_argument("--job", default="vit_synthetic", help="a directory in jobs/")
    parser.add_argument("--args", default="", help="flags passed to the job, one string")
    parser.add_argument("--timeout", type=float, default=None,
                        help="stop the job after this many seconds")
    a = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # `kill` tears down like Ctrl-C
    try:
        return COMMANDS[a.command](a)
    except KitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
