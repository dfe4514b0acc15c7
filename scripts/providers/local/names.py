"""The names the local package's modules share, each written once: the provider's, the
head's node type and address, and the marker every process of a cluster carries."""

import hashlib
from pathlib import Path

from scripts.core.paths import BUILD

NAME = "local"
# Ray's fake multi-node provider, which loopback_node_provider.py extends, registers the
# head under this node type name; the rendered config must use the same one.
HEAD_TYPE = "ray.head.default"
PROVIDER_CLASS = "scripts.providers.local.loopback_node_provider.LoopbackNodeProvider"
# Ray rewrites 127.0.0.1 to the host's network address; any other 127.x address stays on
# loopback. Workers take 127.0.0.3, 127.0.0.4, ... (loopback_node_provider.py).
HEAD_IP = "127.0.0.2"
MARKER = "RAYKIT_CLUSTER_ID"  # in the environment of every process a cluster starts: `down` stops those
MIB = 1024 * 1024


def cluster_id(cluster: str, build: Path = BUILD) -> str:
    """The marker of `cluster` as started from the build dir `build` (one per checkout)."""
    return hashlib.sha256(f"{build}\0{cluster}".encode()).hexdigest()[:24]
