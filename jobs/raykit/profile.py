"""The kit's profile of a Ray Train job, by concern (the names below stay importable from
here, `from raykit import profile`, for jobs written before the split):

  measure.py    measuring: measured (preprocessing's CPU cost and node), TrainProfile (the
                trainer's data wait and step), report, GpuUtilization
  cluster.py    the cluster's shape and placement: cluster_shape, check_shape,
                configure_data, train_logging
  summary.py    the summary and its diagnosis: summarize, emit, print_summary

jobs/template/main.py shows the few lines a job needs.
"""

from raykit.cluster import check_shape, cluster_shape, configure_data, train_logging  # noqa: F401
from raykit.measure import (  # noqa: F401
    CPU_COLUMN,
    NODE_COLUMN,
    WARMUP_COLUMN,
    GpuUtilization,
    TrainProfile,
    finite,
    measured,
    report,
)
from raykit.summary import (  # noqa: F401
    cpu_use_by_node_type,
    emit,
    lost_nodes,
    preempted_nodes,
    print_summary,
    retried_tasks,
    summarize,
    warnings_of,
)
