"""The port AdaptDL's reducer binds: adaptdl-ray's replica 0 listens on 47000 + offset +
restarts (adaptdl_ray/aws/worker.py), and every replica connects to it. The launcher picks
the offset once per job.

Upstream's default offset (0) and a random one below 57000 both sit inside Linux's
ephemeral range (ip_local_port_range, 32768-60999 by default), where the OS hands ports to
outgoing connections and to every bind of port 0. With one of those holding the port, the
replica retried "Could not connect to root" until its job's time limit (a test's job, with
two local clusters' sockets on the machine). Above that range nothing takes a port
unasked."""

import random
import socket
from pathlib import Path

BASE = 47000  # adaptdl-ray's, fixed
STRIDE = 100  # each job's span: the restarts it may take before its port reaches the next offset's
MAX_OFFSET = 65535 - BASE - STRIDE  # the last offset whose span is all ports (flags.py's bound)
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_HIGH = 60999


def ephemeral_high(path: Path = EPHEMERAL) -> int:
    """The highest port the OS hands out unasked (Linux's default where it cannot say)."""
    try:
        return int(path.read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return LINUX_DEFAULT_HIGH


def candidates(high: int) -> list[int]:
    """Offsets whose whole span lies above `high` and below 65536; where the ephemeral
    range leaves no room for one, upstream's 47000-56999 (better than nothing)."""
    first = max(0, -(-(high + 1 - BASE) // STRIDE) * STRIDE)
    above = list(range(first, MAX_OFFSET + 1, STRIDE))
    return above or list(range(0, 100 * STRIDE, STRIDE))


def free_here(port: int) -> bool:
    """Whether this machine could bind the port now (replica 0 may run here: the local
    cluster's nodes are all on this host)."""
    with socket.socket() as s:
        try:
            s.bind(("", port))
            return True
        except OSError:
            return False


def pick_offset(path: Path = EPHEMERAL, rng: random.Random = random) -> int:
    """A random candidate offset whose first port is free here (any candidate, if none is)."""
    offsets = candidates(ephemeral_high(path))
    rng.shuffle(offsets)
    return next((o for o in offsets if free_here(BASE + o)), offsets[0])
