"""Batches to the trainer as they are made, from the first one on.

Two things of Ray Data's hold a trainer's first batch back, measured on Ray 2.60
(docs/benchmark-log.md, "The data path"):

- A task's output leaves it as one block: whatever a map stage yields is gathered in an
  output buffer up to the DataContext's target_max_block_size (128 MiB), so a task that
  preprocesses 4 batches hands over all 4 at its end, and equal tasks end in waves (the
  trainer sees bursts, and its first batch waits for a whole task). one_batch_blocks()
  makes each batch a stage yields a block of its own, which leaves the task at once.
- DataIterator.iter_batches(prefetch_batches=N) fills its whole window (N batches) before
  it hands over the first, and keeps it full: each batch waits for N more to be made. With
  the job's 4, the first step waited for 5 batches. Feed pulls with prefetch_batches=0 in
  a thread of its own and keeps `ahead` batches in a queue: each batch is the trainer's as
  soon as it is made, and the next ones are fetched while the trainer computes.

One more costs a core, not a batch: Ray Data's executor loop waits (up to 0.1 s) in ray.wait
only until every running task has output ready. Once they all have, and the consumer is
slower than the tasks (a trainer eating the start-up's stock, or backpressure), the loop
turns again at once, over and over: the coordinator of Train's dataset shard, on the
trainer's own node, kept ~70% of a core busy that way (2.2 CPU s in 3.1 s of a slower
consumer). pace_executor_loop() gives each turn of the loop at least MIN_LOOP_S.

Feed starts pulling when it is made: make it before building the model, and the pipeline
fills (Ray Data's start, the preprocessing processes' imports, the first tasks) while the
model is built and moved to the device:

    batches = feed.Feed("train", batch_size=32)  # starts now: the shard of Train's "train" dataset
    model = ray.train.torch.prepare_model(build_model())
    for batch in steps.batches(batches):
        ...
"""

import queue
import threading
import time

_END = object()  # the shard is exhausted


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def one_batch_blocks(batch_bytes: int, blocks_per_task: int | None = None) -> None:
    """Each batch a map stage yields becomes a block of its own, leaving its task as it is
    made (call before building the dataset: a Dataset keeps the DataContext of its
    creation). batch_bytes: about one output batch's size. A block is cut where the
    buffer exceeds the target, and sliced only past 1.5 times it, so a batch a little
    over the target leaves whole and alone.

    blocks_per_task: the most batches one task yields (None: not known). A task never
    pauses mid-way for its blocks to be read: Ray Data pauses a task's generator after 2
    unread blocks by default, and where a node dies with a block the trainer waits for,
    the paused tasks hold every CPU its re-run needs while Ray Data reads nothing more
    until that block comes: a deadlock (ray-project/ray#64805; it hung make test's chaos
    test). A task's blocks then sit in the object store as its one block used to."""
    import ray.data

    context = ray.data.DataContext.get_current()
    context.target_max_block_size = max(1, int(batch_bytes))
    # None: no pause at all; a count: no pause before the task's last block, and Ray
    # Data's memory budget still counts a running task's output whole
    context._max_num_blocks_in_streaming_gen_buffer = None if blocks_per_task is None else blocks_per_task + 1


# Half of Ray Data's own wait (0.1 s), so a loop that waits on its tasks is never slowed
MIN_LOOP_S = 0.05


class PacedLoop:
    """A Ray Data execution callback (the four methods of Ray's ExecutionCallback): each turn
    of the executor's loop lasts at least MIN_LOOP_S, sleeping what is left, so that a loop
    with nothing to wait on no longer spins. Ray makes one per execution."""

    def __init__(self):
        self._last = 0.0

    def before_execution_starts(self, executor):
        pass

    def on_execution_step(self, executor):
        left = self._last + MIN_LOOP_S - time.perf_counter()
        if left > 0:
            time.sleep(left)
        self._last = time.perf_counter()

    def after_execution_succeeds(self, executor):
        pass

    def after_execution_fails(self, executor, error):
        pass


def pace_executor_loop() -> None:
    """Every Ray Data execution of the datasets built after this call paces its loop
    (PacedLoop), the coordinators of their shards included: it rides in the DataContext,
    which a Dataset keeps from its creation and ships to them. Every process that runs it
    then imports raykit, which the kit ships to each job (py_modules)."""
    import ray.data

    context = ray.data.DataContext.get_current()
    if PacedLoop not in context.custom_execution_callback_classes:
        context.custom_execution_callback_classes = [*context.custom_execution_callback_classes, PacedLoop]


class Feed:
    """An iterable over a Ray Data shard's numpy batches, pulled in a thread of its own
    from the moment it is made, `ahead` batches kept ready. An error in the pipeline is
    raised where the trainer asks for its next batch. Iterate it once."""

    def __init__(self, shard, *, batch_size: int, ahead: int = 4, drop_last: bool = True):
        """shard: a Ray Train dataset's name ("train": its shard is opened in the feed's
        thread, and get_dataset_shard's ~4 s, Ray Data's coordinator starting, overlap the
        model's build too), or a DataIterator."""
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, ahead))
        self._stop = threading.Event()
        options = {"batch_size": batch_size, "batch_format": "numpy", "prefetch_batches": 0,
                   "drop_last": drop_last}
        self._thread = threading.Thread(target=self._pull, args=(shard, options), name="raykit-feed",
                                        daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        """Queue `item`, waiting for room; False once the feed was closed."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _pull(self, shard, options: dict) -> None:
        try:
            if isinstance(shard, str):
                import ray.train

                shard = ray.train.get_dataset_shard(shard)
            for batch in shard.iter_batches(**options):
                if not self._put(batch):
                    return
            self._put(_END)
        except BaseException as e:  # noqa: BLE001 (any failure reaches the trainer's thread)
            self._put(_Failed(e))

    def __iter__(self):
        try:
            while True:
                item = self._queue.get()
                if item is _END:
                    return
                if isinstance(item, _Failed):
                    raise item.error
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop pulling (a loop that stops before the shard ends)."""
        self._stop.set()
