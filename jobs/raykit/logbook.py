"""A run's metrics as TensorBoard event files, where a job names a place (--tensorboard):
`tensorboard --logdir <that place>` shows them. tensorboardX writes them (pinned in
requirements.txt; Ray Tune's own TensorBoard logger uses it), from the first training
worker only. A local path is on that worker's node (on one machine: anywhere); an s3://
place is written through boto3 with the node's role (on AWS: under aws.output_buckets).

    log = logbook.Logbook(config["tensorboard"])         # nothing where the place is ""
    log.steps(step, profile, batch_size, loss=loss)      # loss, images/s, data wait share
    log.scalars(step, {"eval_accuracy": 0.91})
    log.close()
"""


class Logbook:
    def __init__(self, place: str):
        import ray.train

        self.writer = None
        if place and ray.train.get_context().get_world_rank() == 0:
            from tensorboardX import SummaryWriter

            self.writer = SummaryWriter(place, flush_secs=10)

    def steps(self, step: int, profile, batch_size: int, loss: float | None = None) -> None:
        """The last steps' figures from a measure.TrainProfile, at `step`."""
        if self.writer is None or not profile.steps_s:
            return
        step_s, wait_s = profile.recent(10)
        figures = {"train/images_per_s": batch_size / step_s if step_s else 0.0,
                   "train/data_wait_share": wait_s / step_s if step_s else 0.0,
                   "train/step_s": step_s}
        if loss is not None:
            figures["train/loss"] = loss
        self.scalars(step, figures)

    def scalars(self, step: int, figures: dict) -> None:
        if self.writer is None:
            return
        for name, value in figures.items():
            tag = name if "/" in name else name.replace("eval_", "eval/", 1) if name.startswith("eval_") \
                else f"metrics/{name}"
            self.writer.add_scalar(tag, float(value), step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
