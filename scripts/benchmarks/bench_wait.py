"""make bench-wait: does the trainer wait for data when the CPUs suffice?

Runs the ViT job (jobs/vit_synthetic) with light preprocessing, one blur, on CLUSTER:
  224px : the demo's images and step
  64px  : a step some 10x shorter, the pace a GPU sets, with 12x cheaper images
and reads each run's summary: the share of each step the trainer spent waiting for data
(target < 5%) and its longest single wait (target < 1 s: no stalls). The first step, which
holds the pipeline's start-up, is left out by the job itself. The cluster is the running
one, or one started for the runs and torn down after (commands/jobs.running_or_started).
"""

import os
import signal
import sys

from scripts.commands.checked import checked
from scripts.commands.jobs import running_or_started, submit_to
from scripts.core.errors import KitError, command_exit
from scripts.core.inputs import OneLineParser, check_name, split_args
from scripts.core.results import summary_of
from scripts.kit import raise_keyboard_interrupt

CASES = {"224px": "--blur-count 1", "64px": "--blur-count 1 --image-size 64"}
TARGET_WAIT_FRACTION = 0.05
TARGET_MAX_WAIT_S = 1.0


def main(argv=None) -> int:
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # `kill`: the teardown still runs
    p = OneLineParser(see="python -m scripts.benchmarks.bench_wait --help", prefix="",
                      description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default=os.environ.get("KIT_CLUSTER") or "local")
    p.add_argument("--steps", type=int, default=80, help="training steps per case")
    # bad input or a failed run: as the kit's commands exit
    return command_exit(lambda: run(p.parse_args(argv)))


def run(args) -> int:
    summaries = {}
    built = checked(check_name("CLUSTER", args.cluster))
    with running_or_started(built) as record:  # the running cluster, or one of its own
        for name, case_args in CASES.items():
            job_args = f"{case_args} --steps {args.steps}"
            print(f"\n== {name}: make submit JOB=vit_synthetic ARGS=\"{job_args}\"", flush=True)
            code, summary = submit_to(record, "vit_synthetic", split_args(job_args), None)
            if code != 0 or summary is None:
                raise KitError(f"bench-wait: the {name} run failed (exit {code}); its log "
                               "is above")
            summaries[name] = summary_of(summary, f"the {name} run's summary")
    print(f"\ntrainer's data wait with one blur on '{args.cluster}' "
          f"(targets: < {TARGET_WAIT_FRACTION:.0%} of each step, longest < {TARGET_MAX_WAIT_S:g} s)")
    for name, s in summaries.items():
        ok = (s.data_wait_fraction < TARGET_WAIT_FRACTION
              and s.max_data_wait_s < TARGET_MAX_WAIT_S)
        print(f"  {name:6} step {s.mean_step_s:.3f} s, waiting {s.mean_data_wait_s:.4f} s "
              f"= {s.data_wait_fraction:.1%}, longest wait {s.max_data_wait_s:.3f} s, "
              f"{s.images_per_s:.1f} images/s  {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
