"""Which simulated nodes' work comes first when they share this machine's cores: the
trainers'. A raylet starts its Ray workers at `RAY_worker_niceness` (Ray's default 15, a
CFS weight of 36; the job's driver runs at 0, 1024). On a real cluster a trainer has its
node to itself; here it shares the cores with the preprocess nodes' workers and with Ray's
own daemons (raylets, GCS, dashboard: nice 0), and at nice 15 it lost to both. On 2 cores
the demo's trainer ran below speed for 6.2-10.5 s while its two CPU workers made the images
(docs/benchmark-log.md).

So a node that trains or coordinates (the head, a `role: train` worker type) starts its
workers at nice 0, as the driver is, and a preprocess node keeps Ray's 15: the trainers
get a core whenever they want one, the preprocessing every cycle they leave. It only
orders work on cores already shared; a pinned node (`pin_cpus`) has its cores to itself.
"""

WORKER_NICENESS_ENV = "RAY_worker_niceness"  # read by each raylet (Ray's system config)
TRAINER = 0         # nodes that train or coordinate: the job's driver's own priority
PREPROCESS = 15     # preprocess nodes: Ray's default worker niceness


def worker_niceness(role: str) -> int:
    """The niceness of the Ray workers of a node of `role` (train | coordinate | preprocess)."""
    return PREPROCESS if role == "preprocess" else TRAINER


def env(niceness: int) -> dict[str, str]:
    """The raylet's environment entry for it (a worker raylet's, or the head's)."""
    return {WORKER_NICENESS_ENV: str(int(niceness))}
