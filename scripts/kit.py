"""The kit's command line; the Makefile calls it (`python -m scripts.kit COMMAND`). This file
only dispatches: each command lives in scripts/commands/ with its group (lifecycle, jobs,
outputs, images, container_image, day2, priceperf), as COMMANDS lists them.

  validate  every check on CLUSTER's values file and its rendered config; writes nothing
  render    the same checks, then write the config to build/clusters/<cluster>.yaml (AWS:
            also <cluster>.head-policy.json, a least-privilege IAM policy for the head;
            KubeRay: <cluster>.kubectl-role.yaml, the Role the kit's user needs)
  preflight the same checks, then the provider's read-only checks of the account (AWS:
            credentials, a zone offering every type, a usable subnet, key pair, AMI, quotas)
  up        preflight, then start CLUSTER and wait until it is ready (DRY_RUN=1:
            print what would be launched, launch nothing)
  status    nodes and resources of a running CLUSTER
  submit    run jobs/<JOB>/main.py on CLUSTER; exit with the job's exit code; its summary
            (RESULT line) is kept in build/results/
  jobs      the jobs of CLUSTER: id, status, start, duration
  logs      a job's logs (ID=..., default the latest; FOLLOW=1 follows it)
  stop-job  stop the job ID=...
  fetch     a job's run folder (checkpoints, final model, summary) into build/runs/<ID>/,
            from S3, the head or the local folder
  dashboard the dashboard's URL (AWS: an SSH tunnel, KubeRay: kubectl port-forward, kept
            open until Ctrl-C)
  attach    a shell on the head (local: a shell aimed at the cluster)
  monitor   the autoscaler's log (FOLLOW=1 follows it)
  down      stop what `up` started (local: its processes; aws: `ray down`, checked; PURGE=1:
            also the cluster's security group)
  run       up + submit + down; down runs, through Ctrl-C and SIGTERM, if this run launched
            (KubeRay: a RayJob, whose cluster the operator deletes when the job ends)
  images    write a JPEG image set (ARGS: --count, --size, --dir) for a job's --data
  image     build the container images a KubeRay CLUSTER names (images.job_packages: baked):
            Ray's images with the jobs' packages (Docker; DRY_RUN=1: only the commands)
  clean     remove build/, keeping the records of clusters that may be running
  cost      CLUSTER's $/h per node type at min and max workers, with EBS, and totals
  prices    an AWS CLUSTER's region's on-demand prices (AWS's price list) and spot prices
            in effect (EC2's spot price history), your credentials, into <values
            dir>/prices/aws-<region>.json and aws-<region>-spot.json, dated
  plan      the cheapest mix that feeds the trainers, from PROFILE=<job summary> or ARGS
            (--gpu-instance, --trainer-images-per-s, --cpu-images-per-s; --json, --write NAME)
  bench     the ViT job on each of CLUSTERS in turn (up, job with ARGS, down), then one
            price-performance table, saved to build/bench/<time>/ (JSON, CSV, PNG);
            FROM=rows.json prints and plots saved or published rows instead;
            JOB=adaptdl_mnist: AdaptDL vs fixed-size Ray Train on CLUSTER (running, or
            started and stopped for it): time and $ to a target accuracy, JSON, CSV, PNG

Inputs come from the environment the Makefile exports (KIT_CLUSTER, KIT_JOB, KIT_ARGS,
KIT_TIMEOUT, KIT_PROFILE, ...), or from the flags below; scripts/core/inputs.py checks them.
"""

import argparse
import os
import signal
import sys
import time
import traceback

from scripts.commands import container_image, day2, images, jobs, lifecycle, outputs, priceperf
from scripts.core.errors import KitError, cloud_error, command_exit
from scripts.core.inputs import OneLineParser
from scripts.core.paths import LOGS
from scripts.core.state import make_dir

COMMANDS = {
    # lifecycle
    "validate": lifecycle.cmd_validate, "render": lifecycle.cmd_render,
    "preflight": lifecycle.cmd_preflight, "up": lifecycle.cmd_up, "down": lifecycle.cmd_down,
    "clean": lifecycle.cmd_clean,
    # jobs
    "submit": jobs.cmd_submit, "jobs": jobs.cmd_jobs, "logs": jobs.cmd_logs,
    "stop-job": jobs.cmd_stop_job, "run": jobs.cmd_run, "fetch": outputs.cmd_fetch,
    # data and images
    "images": images.cmd_images, "image": container_image.cmd_image,
    # day 2
    "status": day2.cmd_status, "dashboard": day2.cmd_dashboard, "attach": day2.cmd_attach,
    "monitor": day2.cmd_monitor,
    # price-performance
    "cost": priceperf.cmd_cost, "prices": priceperf.cmd_prices, "plan": priceperf.cmd_plan,
    "bench": priceperf.cmd_bench,
}


def parse(argv) -> argparse.Namespace:
    env = os.environ
    p = OneLineParser(see="python -m scripts.kit --help", prefix="", prog="kit", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=COMMANDS)
    p.add_argument("--cluster", default=env.get("KIT_CLUSTER") or "local",
                   help="a values file in cluster_templates/ (CLUSTER)")
    p.add_argument("--job", default=env.get("KIT_JOB") or "vit_synthetic",
                   help="a directory in jobs/ (JOB)")
    p.add_argument("--args", default=env.get("KIT_ARGS", ""), help="the job's flags, one string (ARGS)")
    p.add_argument("--timeout", default=env.get("KIT_TIMEOUT", ""),
                   help="stop the job after this many seconds (TIMEOUT)")
    p.add_argument("--dry-run", default=env.get("KIT_DRY_RUN", ""),
                   help="1: `up` prints what it would launch and launches nothing (DRY_RUN)")
    p.add_argument("--purge", default=env.get("KIT_PURGE", ""),
                   help="1: `down` also deletes the cluster's own security group (PURGE)")
    p.add_argument("--id", default=env.get("KIT_ID", ""), help="a job's submission id (ID)")
    p.add_argument("--follow", default=env.get("KIT_FOLLOW", ""),
                   help="1: `logs` follows the job until it ends (FOLLOW)")
    p.add_argument("--detach", default=env.get("KIT_DETACH", ""),
                   help="1: `submit` returns once the job is submitted; it runs on (DETACH)")
    p.add_argument("--verbose", default=env.get("KIT_VERBOSE", ""),
                   help="1: a job's log shows Ray's own INFO lines too (VERBOSE)")
    p.add_argument("--profile", default=env.get("KIT_PROFILE", ""),
                   help="a job summary for `plan`, e.g. build/results/<id>.json (PROFILE)")
    p.add_argument("--clusters", default=env.get("KIT_CLUSTERS", ""),
                   help="values files `bench` runs in turn, space-separated (CLUSTERS)")
    p.add_argument("--from", dest="from_", default=env.get("KIT_FROM", ""),
                   help="rows.json for `bench` to print and plot instead of running (FROM)")
    return p.parse_args(argv)


def raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def internal_error(exc: BaseException) -> str:
    """Write the traceback to build/logs/ and return where; where that cannot be written,
    the traceback goes to stderr (never to a file outside build/)."""
    text = "".join(traceback.format_exception(exc))
    try:
        make_dir(LOGS)
        path = LOGS / f"kit-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        path.write_text(text)
        return str(path)
    except (OSError, KitError) as e:
        print(text, file=sys.stderr, end="")
        return f"the traceback above ({LOGS} could not be written: {e})"


def dispatch(argv) -> int:
    a = parse(argv)
    return COMMANDS[a.command](a)


def main(argv=None) -> int:
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # `kill` ends like Ctrl-C
    signal.signal(signal.SIGHUP, raise_keyboard_interrupt)   # so does closing the terminal
    try:
        return command_exit(lambda: dispatch(argv))
    except BrokenPipeError:  # the reader left (`make plan | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # a bug in the kit, not the user's input; or the network's
        refused = cloud_error(e)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return 2
        where = internal_error(e)
        print(f"error: internal error in the kit ({type(e).__name__}), not in your input; "
              f"details in {where}", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
