"""Price-performance commands: cost, plan, bench."""

import time

import yaml

from scripts import catalog
from scripts.commands.checked import checked
from scripts.commands.jobs import checked_job_packages, run_once, running_or_started, submit_to
from scripts.commands.lifecycle import dry_run, prepared, refuse_if_up
from scripts.core.errors import KitError
from scripts.core.inputs import (available_clusters, check_name, flag, json_text, parse_timeout,
                                 shown, split_args)
from scripts.core.paths import BENCH, VALUES_DIRS
from scripts.core.results import summary_of
from scripts.pricing import bench_table as bench
from scripts.pricing import elastic_bench
from scripts.pricing import planner
from scripts.pricing.cost import cost_table, hourly_cost, priced


def cmd_cost(a) -> int:
    built = checked(a.cluster)
    print("\n".join(cost_table(built)))
    if hourly_cost(built) is None:  # a script reading the exit code must not take it for priced
        raise KitError(f"CLUSTER={a.cluster}: this mix cannot be priced (the lines above say what "
                       "is missing)")
    return 0


def cmd_prices(a) -> int:
    """The on-demand prices of an AWS CLUSTER's region, read from AWS's price list into
    <values dir>/prices/ (scripts/providers/aws/price_list.py); then its cost table."""
    built = checked(a.cluster)
    print(f"wrote {built.provider.fetch_prices(built.values)}")
    print("\n".join(cost_table(built)))
    return 0


def cmd_plan(a) -> int:
    profile, options = planner.profile_from(split_args(a.args), a.profile)
    if options.help:
        planner.parser().print_help()
        return 0
    ranked, alone = planner.options(profile, options.region, options.spot)
    chosen = ranked[0]
    if options.write:
        write_plan(options.write, chosen, options.region)
    if options.json:
        print(json_text(planner.plan_json(chosen, ranked), indent=None))
        return 0
    reserved = catalog.INSTANCE_TYPES[chosen.head].vcpus - catalog.preprocess_vcpus(chosen.head)
    nodes = f"{profile.train_nodes} x " if profile.train_nodes > 1 else ""
    print(f"profile: {nodes}{profile.gpu_instance} trains{' each' if nodes else ''} "
          f"{profile.trainer_images_per_s:g} images/s "
          f"when fed; one vCPU preprocesses {profile.cpu_images_per_s:g} images/s "
          f"({options.region} on-demand prices + root EBS"
          + (f"; CPU workers at the {catalog.spot_source(options.region)}, the highest zone's" if options.spot else "")
          + "; a mix feeds the trainers when the "
          f"predicted data wait is < {planner.MAX_DATA_WAIT:.0%})")
    print(f"choice: {chosen.name}: ${chosen.usd_per_hour:.3f}/h, {chosen.images_per_s:.1f} images/s, "
          f"{chosen.data_wait:.0%} data wait, ${chosen.usd_per_million_images:.2f} per million images")
    print("  " + planner.limit_text(chosen, profile))
    if chosen.train_nodes > 1:
        print(f"  {chosen.preprocess_vcpus} vCPUs preprocess, on the CPU workers (each keeps one for "
              f"its raylet); the train nodes' vCPUs stay with their training processes, and the "
              f"head ({chosen.coordinator}) only coordinates")
    else:
        print(f"  {chosen.preprocess_vcpus} vCPUs preprocess; the head keeps {reserved} for the "
              "training processes (one per GPU) and Ray's own, each worker one for its raylet")
    if nodes and alone.data_wait < planner.MAX_DATA_WAIT \
            and alone.usd_per_million_images < chosen.usd_per_million_images:
        print(f"  note: the {profile.train_nodes} GPU nodes alone feed themselves for less "
              f"(${alone.usd_per_million_images:.2f} per million images): their own vCPUs "
              "suffice; a homogeneous mix (single.yaml's recipe, GPU workers) needs no CPU worker")
    mix = planner.cheaper_mix_of_types(chosen, profile, options.region)
    if mix:
        print(f"  a mix of worker types would be cheaper still: {mix.name} "
              f"(${mix.usd_per_hour:.3f}/h)")
    fed = planner.feeds(chosen)
    print(f"the {min(len(ranked), planner.SHOWN_OPTIONS)} cheapest of {len(ranked)} options "
          + ("that feed the trainers" if fed else "(none feeds the trainers: each CPU type's best count)")
          + f", and the GPU instance{'s' if nodes else ''} alone:")
    rows = ranked[:planner.SHOWN_OPTIONS] + ([alone] if alone not in ranked[:planner.SHOWN_OPTIONS] else [])
    print("\n".join("  " + line for line in planner.table(rows, alone)))
    if options.write:
        print(f"wrote {shown(VALUES_DIRS[0] / f'{options.write}.yaml')} (it validates); "
              f"`make up CLUSTER={options.write}` launches it")
    return 0


def write_plan(name: str, chosen, region: str) -> None:
    """cluster_templates/NAME.yaml (or RAYKIT_VALUES_DIR's) for the chosen mix; refused if
    a values file of that name exists; removed again if it does not validate (the
    planner's bug, said as such)."""
    check_name("--write", name)
    path = VALUES_DIRS[0] / f"{name}.yaml"
    if name in available_clusters():
        raise KitError(f"ARGS: --write {name}: a values file {name}.yaml exists; pick "
                       "another name, or remove that file first")
    header = (f"# {name}: written by `make plan` on {time.strftime('%Y-%m-%d')}: {chosen.name}, "
              f"~${chosen.usd_per_hour:.2f}/h,\n# predicted {chosen.images_per_s:.1f} images/s "
              f"at {chosen.data_wait:.0%} data wait. Every key not shown takes the schema's "
              "default\n# (schema/aws.schema.yaml); hetero.yaml documents each.\n")
    text = header + yaml.safe_dump(planner.values_for(name, chosen, region), sort_keys=False)
    try:  # "x": never over an existing file, nor through a symlink at that name
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise KitError(f"ARGS: --write {name}: {shown(path)} exists; pick "
                       "another name, or remove that file first") from None
    try:
        checked(name)
    except KitError:
        path.unlink()
        raise


def cmd_bench(a) -> int:
    """Each of CLUSTERS in turn: up, the ViT job with ARGS, down; then one table, saved.
    JOB=adaptdl_mnist: AdaptDL against fixed Ray Train on CLUSTER instead."""
    if a.job == "adaptdl_mnist":
        return bench_adaptdl(a)
    if a.job != "vit_synthetic":
        raise KitError(f"JOB={check_name('JOB', a.job)}: `make bench` compares the mixes of "
                       "CLUSTERS on vit_synthetic (the default), or AdaptDL with fixed Ray "
                       "Train on CLUSTER with JOB=adaptdl_mnist")
    if a.from_:
        rows = bench.completed(bench.read_rows(a.from_))
        print(f"rows from {a.from_}:")
    else:
        args, timeout = split_args(a.args), parse_timeout(a.timeout)
        # Every values file checked, priced and preflighted (the AWS account too) before
        # the first cluster launches: nothing starts that a later check would refuse.
        clusters = [checked(name) for name in bench.cluster_names(a.clusters)]
        providers = sorted({built.provider.NAME for built in clusters})
        if len(providers) > 1:
            raise KitError(f"CLUSTERS: mixes {' and '.join(providers)} values files; a bench "
                           "compares mixes of one provider, so run one bench per provider")
        prices = [priced(built) for built in clusters]
        for built in clusters:
            refuse_if_up(built.cluster)
        if flag("DRY_RUN", a.dry_run):  # as `make up DRY_RUN=1`: offline without credentials
            for built in clusters:
                print(f"\n== {built.cluster}")
                dry_run(built)
            return 0
        for built in clusters:  # every account check before the first launch (each launch checks again)
            prepared(built)
        measured, profile = [], None
        try:
            for built, (name, usd_per_hour) in zip(clusters, prices):
                print(f"\n== bench {len(measured) + 1}/{len(clusters)}: {name} "
                      f"(${usd_per_hour:.3f}/h)", flush=True)
                code, summary = run_once(built, "vit_synthetic", args, timeout)
                if code != 0 or summary is None:
                    raise KitError(f"bench: the ViT job failed on '{built.cluster}' (exit {code}); "
                                   "its log is above")
                summary = summary_of(summary, f"the ViT job's summary on '{built.cluster}'")
                profile = profile or summary
                measured.append(bench.measured_row(name, usd_per_hour, summary, profile))
        except (KitError, KeyboardInterrupt):  # a failed run, Ctrl-C: the rows measured stay
            if measured:
                print(f"rows so far saved in {bench.save(bench.completed(measured), BENCH)}",
                      flush=True)
            raise
        rows = bench.completed(measured)
        print(f"\nthe ViT job with ARGS={' '.join(args) or '(the job defaults)'}; predicted "
              "images/s from the first row's profile; change in $ per 100 steps vs the first row:")
    print("\n".join("  " + line for line in bench.table(rows)))
    print(f"saved in {bench.save(rows, BENCH)} (rows.json: `make bench FROM=` reads it back)")
    return 0


def bench_adaptdl(a) -> int:
    """AdaptDL's elastic MNIST, then the same model and data on fixed-size Ray Train, on
    CLUSTER (the running one, or one started for the bench and torn down after), to the
    same target; one table, saved (scripts/pricing/elastic_bench.py)."""
    if a.from_:
        raise KitError("FROM= reads the mixes' rows; JOB=adaptdl_mnist's are in "
                       "build/bench/<time>-adaptdl/rows.json, to read as they are")
    args, timeout, verbose = split_args(a.args), parse_timeout(a.timeout), flag("VERBOSE", a.verbose)
    target = elastic_bench.check_args(args)  # the job's own checks, before anything starts
    built = checked(a.cluster)
    checked_job_packages(built.provider, "adaptdl_mnist")
    name, usd_per_hour = priced(built)
    if flag("DRY_RUN", a.dry_run):
        for trainer in elastic_bench.TRAINERS:
            print(f"would run: make submit CLUSTER={a.cluster} JOB=adaptdl_mnist "
                  f"ARGS=\"{' '.join(elastic_bench.job_args(args, trainer))}\"")
        return 0
    rows = []
    with running_or_started(built) as record:
        for i, trainer in enumerate(elastic_bench.TRAINERS):
            print(f"\n== bench {i + 1}/{len(elastic_bench.TRAINERS)}: {trainer} on {name} "
                  f"(${usd_per_hour:.3f}/h)", flush=True)
            code, summary = submit_to(record, "adaptdl_mnist", elastic_bench.job_args(args, trainer),
                                      timeout, verbose)
            if code != 0 or summary is None:
                raise KitError(f"bench: the {trainer} run failed on '{a.cluster}' (exit {code}); "
                               "its log is above")
            rows.append(elastic_bench.row(trainer, usd_per_hour, summary))
    rows = elastic_bench.completed(rows)
    print(f"\nAdaptDL vs fixed Ray Train on {name} (${usd_per_hour:.3f}/h), ARGS="
          f"{' '.join(args) or '(the bench defaults)'}; $ to target at the cluster's price; "
          "change in $ to target vs fixed:")
    print("\n".join("  " + line for line in elastic_bench.table(rows, target)))
    meta = {"cluster": name, "usd_per_hour": usd_per_hour, "target_accuracy": target,
            "args": args}
    print(f"saved in {elastic_bench.save(rows, meta, BENCH)}")
    return 0
