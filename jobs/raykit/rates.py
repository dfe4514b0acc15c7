"""The trainers' figures over a window of step records, (end time, step s, wait s, images),
every rank's: the share of step time spent waiting for data, and the images/s. Pure
arithmetic, one definition read by the autopilot (its signal), the gauges (the metrics)
and the step log's readers."""


def wait_share(steps: list[tuple[float, float, float]], now: float, window_s: float,
               waiting: list[float] = ()) -> float | None:
    """Share of step time spent waiting for data over the last window_s, every rank's
    steps: (end time, step seconds, of which waiting), and every rank's open wait (since
    when it has been blocked for its next batch: its part inside the window, all waiting).
    None without a step or an open wait in the window."""
    start = now - window_s
    recent = [(step, wait) for end, step, wait in steps if end >= start and step > 0]
    recent += [(now - max(since, start),) * 2 for since in waiting if since < now]
    total = sum(step for step, _ in recent)
    return sum(wait for _, wait in recent) / total if total > 0 else None


def images_per_s(steps: list[tuple[float, float, float, int]]) -> float | None:
    """The images the steps (end time, step s, wait s, images) trained, over the time from
    the first one's start to the last one's end; None without a span."""
    if not steps:
        return None
    span = max(s[0] for s in steps) - min(s[0] - s[1] for s in steps)
    return sum(s[3] for s in steps) / span if span > 0 else None
