"""The summary as a person reads it: the table `summary.emit` prints at the job's end
(throughput, start-up, the step, the trainer's idle share, nodes, cost, diagnosis, verdict,
the autopilot's moves and the bill)."""

import re
import textwrap

from raykit.verdict import verdict_text

LABEL_WIDTH, WIDTH = 17, 88  # the table's label column, and a terminal's width


def row(label: str, text: str) -> None:
    """One row of the summary table: its text wrapped under its label, never one line of
    300 characters, and never a figure apart from its unit ("26.5 s")."""
    text = re.sub(r"(\d) (?=s\b|ms\b|images\b)", "\\1\u00a0", text)  # textwrap keeps these together
    print(textwrap.fill(text, WIDTH, initial_indent=f"{label:<{LABEL_WIDTH}}",
                        subsequent_indent=" " * LABEL_WIDTH, break_on_hyphens=False).replace("\u00a0", " "))


def print_summary(s: dict, headline: str = "") -> None:
    print(f"\n=== {s['job']} summary ===")
    row("steps", f"{s['steps']} x {s['workers']} worker(s) x {s['batch_size']} images "
                 f"({headline + ' on ' if headline else ''}{s['device']}, node {s['trainer_node']})")
    row("throughput", throughput_text(s))
    row("start-up", startup_text(s))
    row("mean step", f"{s['mean_step_s']:.3f} s = {s['mean_data_wait_s']:.3f} s waiting "
                     f"for data + {s['mean_compute_s']:.3f} s computing (every step after the first)")
    run = s.get("steady") or {}
    waits = (f"; per step p50 {run['wait_p50_s']:.3f} s, p95 {run['wait_p95_s']:.3f} s"
             if run.get("wait_p50_s") is not None else "")
    row("trainer idle", f"{s['data_wait_fraction']:.0%} of each step "
                        f"(longest wait {s['max_data_wait_s']:.2f} s{waits})")
    if len(s.get("train_nodes") or {}) > 1:
        for ip, node in s["train_nodes"].items():
            row("train node", f"{ip}: {node['workers']} worker(s), {node['images_per_s']:.1f} "
                              f"images/s, mean step {node['mean_step_s']:.3f} s (data wait "
                              f"{node['mean_data_wait_s']:.3f} s)")
    if s.get("ranks_in_sync") is not None:
        row("replicas", ("in sync: every worker's parameters are equal" if s["ranks_in_sync"]
                        else "OUT OF SYNC: the workers' parameters differ"))
    nodes = ", ".join(f"{ip}: {n} images" for ip, n in sorted(s["preprocess_nodes"].items()))
    row("preprocessed on", f"{nodes or '(no measured stage: wrap it in measure.measured)'}")
    if s.get("preprocess_images_measured"):
        left_out = (f"each worker process's first batch ({s['preprocess_warmup_images']} images: "
                    "imports, start-up) left out" if not s["preprocess_cost_includes_warmup"]
                    else "every batch was its process's first: start-up included, so it overstates")
        row("preprocess cost", f"{s['preprocess_s_per_image'] * 1000:.2f} ms CPU per image over "
                               f"{s['preprocess_images_measured']} images ({left_out})")
    if s.get("restarts"):
        row("restarts", f"{s['restarts']} (the last resumed from the checkpoint of step "
                        f"{s['resumed_from_step']}; its means cover the steps after it)")
    if s["preempted_nodes"]:
        row("preempted", f"{', '.join(s['preempted_nodes'])} (drained on a spot notice: "
                         "no new work went there)")
    if s["lost_nodes"]:
        row("lost nodes", f"{', '.join(s['lost_nodes'])} (their preprocessing was re-run)")
    if s["retried_preprocessing_tasks"]:
        row("retried work", f"{s['retried_preprocessing_tasks']} preprocessing task(s) re-run")
    for warning in s["warnings"]:
        row("WARNING", f"{warning}")
    row("diagnosis", s["diagnosis"]["text"])
    if s.get("autopilot"):
        row("autopilot", autopilot_text(s["autopilot"]))
    if s.get("verdict"):
        row("verdict", verdict_text(s["verdict"]))
    row("job's cost", bill_text(s.get("node_seconds") or {}, s.get("bill")))
    print()


def throughput_text(s: dict) -> str:
    """The steady rate where the run reached it, beside the whole run's; else why not."""
    run = s.get("steady") or {}
    overall = f"{s['images_per_s']:.1f} images/s over every step after the first"
    if run.get("steady"):
        return (f"{run['steady_images_per_s']:.1f} images/s steady (steps {run['steady_from_step']}-"
                f"{s['steps']}: data wait {run['steady_wait_share']:.0%}); {overall}")
    if not run:
        return overall
    return (f"{overall}; NO STEADY STATE: {run['stock_steps']} of the {s['steps'] - 1} steps after "
            "the first ate the batches made during the start-up, too few were left to measure "
            f"the steady flow: run at least {run['steps_needed']} steps (--steps)")


def startup_text(s: dict) -> str:
    """The start-up: the first step (from the training function's start, and from
    trainer.fit()'s), the ramp after it, steps 2-5's wait, and when every preprocessing
    node was at work."""
    run = s.get("steady") or {}
    if run.get("first_step_s") is None:
        return f"first step {s['warmup_s']:.1f} s"
    text = f"first step {run['first_step_s']:.1f} s into the training function"
    if s.get("first_step_after_fit_s") is not None:
        text += f" ({s['first_step_after_fit_s']:.1f} s after trainer.fit() began)"
    if run.get("ramp_s") is not None:
        text += f"; below its steady rate for {run['ramp_s']:.1f} s after it (ramp)"
    if run.get("early_wait_s") is not None:
        text += f"; steps 2-5 waited {run['early_wait_s']:.3f} s each"
        if run.get("steady_wait_s") is not None:
            text += f" (steady: {run['steady_wait_s']:.3f} s)"
    started = s.get("preprocess_node_start_s") or {}
    if started:
        text += (f"; every preprocessing node ({len(started)}) at work "
                 + (f"by {max(started.values()):.1f} s after the first batch" if max(started.values()) > 0
                    else "by the first batch"))
    return text


def autopilot_text(report: dict) -> str:
    held = [p["preprocess_nodes"] for p in report["timeline"]] or [0]
    mean = report["mean_wait_share"]
    return (f"steered {report['node_type']} between {min(held)} and {max(held)} node(s) "
            f"({report['min_nodes']}-{report['max_nodes']} allowed), {len(report['changes'])} change(s); "
            f"trainers waited {'?' if mean is None else f'{mean:.0%}'} of each step on average "
            f"(target {report['target_wait_share']:.0%})"
            + (f"; {report['given_up']} node(s) never joined" if report["given_up"] else "")
            + price_note(report))


def price_note(report: dict) -> str:
    """Where the trainers waited well above the target because no node more would have
    made an image cheaper (the price gate held): cheapest per image is not fastest."""
    mean, target = report["mean_wait_share"], report["target_wait_share"]
    if not report.get("price_holds") or mean is None or mean < max(2 * target, target + 0.1):
        return ""
    return (f"; above the target because one node more would not have made an image cheaper "
            f"({report['price_holds']} poll(s)): the cheapest image is not the fastest run; for "
            "speed at any price, raise the preprocess type's min_workers")


def bill_text(node_seconds: dict, run_bill: dict | None) -> str:
    held = ", ".join(f"{kind} {seconds:.0f} s" for kind, seconds in node_seconds.items()) or "no node seen"
    if run_bill is None:
        return (f"not priced (node time: {held}): the kit passed no prices (a local cluster "
                "without prices_as, or an instance type scripts/catalog.py does not price)")
    if run_bill["usd"] is None:
        return f"not priced: no price for {', '.join(run_bill['unpriced'])} (node time: {held})"
    return (f"${run_bill['usd']:.4f} for the nodes' time while the job ran ({held}; {run_bill['priced_as']}); "
            "not in it: `make up`, the wait for workers, idle minutes before autostop")
