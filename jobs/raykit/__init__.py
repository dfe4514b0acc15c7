"""The kit's job library: shipped to every job `make submit` runs (the job's runtime_env
`py_modules`), so a job imports it without installing anything:

    from raykit import cluster, feed, measure, summary

placement  where work runs: the node labels every kit cluster carries, and the selectors
           Ray Data and Ray Train take
cluster    the cluster's shape (trainer slots, preprocessing CPUs) and the placement, and
           warm_up: the preprocessing processes started while Ray Train starts
feed       batches to the trainer as they are made, from the first one on, and Ray
           Data's executor loop paced (it spins beside a slower trainer)
measure    a Ray Train loop's data wait and steps, each preprocessing batch's cost and node
steady     where a run's steady state begins: the first step, the start-up's stock, the ramp
summary    the summary, the diagnosis and the RESULT line that `make plan PROFILE=` reads
checkpoint a run's folder, its checkpoints and final model, and resuming: one rule for
           every job
gauges     the kit's figures (data wait, images/s, $ per image, the autopilot's nodes) as
           Ray metrics
logbook    TensorBoard event files of a run's figures (--tensorboard)
autopilot  preprocess nodes sized while the job runs (Steering: the policy, pure)
profile    the older single entry point: re-exports them

It imports only Ray and the standard library (and numpy): it runs on every node.
"""
