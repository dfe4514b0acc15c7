"""The kit's profile of a Ray Train job, by concern (the names below stay importable from
here, `from raykit import profile`, for jobs written before the split):

  measure.py    measuring: measured (preprocessing's CPU cost and node), TrainProfile (the
                trainer's data wait and step), report, GpuUtilization
  cluster.py    the cluster's shape and placement: cluster_shape, check_shape,
                configure_data, train_logging
  summary.py    the summary and its diagnosis: summarize, emit (ray_state.py: lost_nodes,
                preempted_nodes, retried_tasks; report.py: print_summary)

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
from raykit.ray_state import lost_nodes, preempted_nodes, retried_tasks  # noqa: F401
from raykit.report import print_summary  # noqa: F401
from raykit.summary import cpu_use_by_node_type, emit, summarize, warnings_of  # noqa: F401
