"""The kit's job library: shipped to every job `make submit` runs (the job's runtime_env
`py_modules`), so a job imports it without installing anything:

    from raykit import autopilot, checkpoint, cluster, feed, measure, summary

What a job calls:
cluster    the cluster's shape (trainer slots, preprocessing CPUs) and the placement, and
           warm_up: the preprocessing processes started while Ray Train starts
feed       batches to the trainer as they are made, from the first one on, and Ray
           Data's executor loop paced (it spins beside a slower trainer)
measure    a Ray Train loop's data wait and steps, each preprocessing batch's cost and node
checkpoint a run's folder, its checkpoints and final model, and resuming: one rule for
           every job
logbook    TensorBoard event files of a run's figures (--tensorboard)
autopilot  preprocess nodes sized while the job runs (Steering: the policy, pure;
           steering(): around trainer.fit())
summary    the summary (assemble: pure), printed, and the RESULT line that `make plan
           PROFILE=` reads

What those use:
contract   the names and shapes the kit and a job share (the environment's entries, the
           prices); with placement, all the kit imports of this library
placement  where work runs: the node labels every kit cluster carries, and the selectors
           Ray Data and Ray Train take
rates      the trainers' wait share and images/s over a window of steps
steady     where a run's steady state begins: the first step, the start-up's stock, the ramp
steps      the trainers' step records in one actor (StepLog) every part reads
diagnosis  the run's bottleneck, decided once (data, network, pipeline, compute)
verdict    that bottleneck priced: $ per million images now and with the remedy
billing    the run's bill: each node type's seconds at the kit's prices
ray_state  what Ray's state says of a run (run_facts, read once after fit())
report     the summary's table for a person
gauges     the kit's figures (data wait, images/s, $ per image, the autopilot's nodes) as
           Ray metrics
stall      the stall watch: a job without a step for too long is stopped
entry      the kit's entrypoint: starts the step log and the stall watch, then the job

It imports only Ray and the standard library (and numpy): it runs on every node.
"""
