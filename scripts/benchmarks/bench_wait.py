"""make bench-wait: does the trainer wait for data when the CPUs suffice?

Runs the ViT job (jobs/vit_synthetic) with light preprocessing, one blur, on CLUSTER:
  224px : the demo's images and step
  64px  : a step some 10x shorter, the pace a GPU sets, with 12x cheaper images
and reads each run's summary: the share of each step the trainer spent waiting for data
(target < 5%) and its longest single wait (target < 1 s: no stalls). The first step, which
holds the pipeline's start-up, is left out by the job itself. The cluster is brought up
and down around the runs, unless it was up already.
"""

import argparse
import os
import subprocess
import sys

from scripts.core.errors import KitError
from scripts.core.inputs import check_name
from scripts.core.submit import result_line
from scripts.providers import load_record

CASES = {"224px": "--blur-count 1", "64px": "--blur-count 1 --image-size 64"}
TARGET_WAIT_FRACTION = 0.05
TARGET_MAX_WAIT_S = 1.0


def kit(command: str, cluster: str, **variables: str) -> str:
    """Run the kit's CLI as the Makefile does (inputs in its environment), echoing its
    output as it comes; return the output."""
    env = dict(os.environ, KIT_CLUSTER=cluster,
               **{f"KIT_{name.upper()}": value for name, value in variables.items()})
    proc = subprocess.Popen([sys.executable, "-m", "scripts.kit", command], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    if proc.wait():
        print(f"bench-wait: `make {command}` failed (exit {proc.returncode})", file=sys.stderr)
        raise SystemExit(proc.returncode)  # its code: 2 for bad input, as the kit's
    return "".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default=os.environ.get("KIT_CLUSTER") or "local")
    p.add_argument("--steps", type=int, default=80, help="training steps per case")
    args = p.parse_args()
    try:
        check_name("CLUSTER", args.cluster)
        already_up = load_record(args.cluster) is not None
    except KitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2  # bad input, as the kit's own commands exit
    summaries, started_here = {}, False
    try:
        if not already_up:
            kit("up", args.cluster)
            started_here = True  # only now is the cluster this run's to tear down
        for name, case_args in CASES.items():
            job_args = f"{case_args} --steps {args.steps}"
            print(f"\n== {name}: make submit JOB=vit_synthetic ARGS=\"{job_args}\"", flush=True)
            summaries[name] = result_line(kit("submit", args.cluster, job="vit_synthetic",
                                              args=job_args))
    except KitError as e:
        raise SystemExit(f"bench-wait: {e}")
    finally:
        if started_here:
            kit("down", args.cluster)
    print(f"\ntrainer's data wait with one blur on '{args.cluster}' "
          f"(targets: < {TARGET_WAIT_FRACTION:.0%} of each step, longest < {TARGET_MAX_WAIT_S:g} s)")
    for name, s in summaries.items():
        ok = (s["data_wait_fraction"] < TARGET_WAIT_FRACTION
              and s["max_data_wait_s"] < TARGET_MAX_WAIT_S)
        print(f"  {name:6} step {s['mean_step_s']:.3f} s, waiting {s['mean_data_wait_s']:.4f} s "
              f"= {s['data_wait_fraction']:.1%}, longest wait {s['max_data_wait_s']:.3f} s, "
              f"{s['images_per_s']:.1f} images/s  {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
