"""The spot watcher: a spot worker drains its Ray node when AWS announces its interruption.

AWS warns a spot instance two minutes before it reclaims it, through the instance's
metadata (spot/instance-action). This small process runs beside Ray on every worker of a
mix with spot workers (the template's worker_start_ray_commands start it, from the
scripts/ that file_mounts puts on each node; on an on-demand worker it exits at once) and
asks IMDSv2 every POLL_S. On a notice it
drains its own node through Ray's GCS (reason PREEMPTION, deadline the notice's time): its
raylet grants no new worker lease, so no new preprocessing lands on a node about to vanish
(a worker leased before may take the tasks queued to it for Ray's lease timeout, 0.5 s),
while the tasks under way finish and the raylet then exits. The job carries on on the other workers; once AWS has
taken the instance, the autoscaler launches a replacement. Then the watcher exits.

It needs only the standard library and Ray. Tests serve a stand-in metadata endpoint on
loopback (--imds) and watch a node of the local cluster (--node-ip).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import urllib.error
import urllib.request

IMDS = "http://169.254.169.254"  # the instance metadata service, from any EC2 instance
POLL_S = 5  # AWS updates the notice every 5 s
TOKEN_TTL_S = 300


def imds_get(base: str, path: str) -> tuple[int, str]:
    """GET a metadata path with a fresh IMDSv2 session token: (HTTP status, body)."""
    put = urllib.request.Request(f"{base}/latest/api/token", method="PUT",
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)})
    with urllib.request.urlopen(put, timeout=2) as reply:
        token = reply.read().decode()
    get = urllib.request.Request(f"{base}/latest/meta-data/{path}",
                                 headers={"X-aws-ec2-metadata-token": token})
    try:
        with urllib.request.urlopen(get, timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as e:  # 404: nothing there (no notice scheduled)
        return e.code, ""


def spot_notice(base: str) -> dict | None:
    """The instance-action ({"action": "terminate"|"stop"|"hibernate", "time": ...}) once
    AWS has scheduled one; None before."""
    status, body = imds_get(base, "spot/instance-action")
    if status != 200:
        return None
    notice = json.loads(body)
    return notice if notice.get("action") in ("terminate", "stop", "hibernate") else None


def deadline_ms(notice: dict) -> int:
    """The notice's time ("2026-11-22T08:22:00Z") in epoch ms; 0 (no deadline) if unreadable."""
    try:
        when = datetime.datetime.fromisoformat(str(notice.get("time")).replace("Z", "+00:00"))
        return int(when.timestamp() * 1000) if when.tzinfo else 0
    except ValueError:
        return 0


def drain(gcs_address: str, node_ip: str, notice: dict) -> str:
    """Drain the live Ray node at node_ip for preemption; return its node ID."""
    from ray._raylet import GcsClient
    from ray.core.generated import autoscaler_pb2
    from ray.exceptions import RayError

    try:
        gcs = GcsClient(address=gcs_address)
        alive = [info for info in gcs.get_all_node_info(timeout=30).values()
                 if info.node_manager_address == node_ip and info.state == 0]  # 0: ALIVE
        if not alive:
            raise RuntimeError(f"no live Ray node at {node_ip}")
        node_id = alive[0].node_id.hex()
        accepted, why = gcs.drain_node(
            node_id, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
            f"spot {notice['action']} notice for {notice.get('time', 'now')}",
            deadline_ms(notice))
    except RayError as e:  # the GCS did not answer
        raise RuntimeError(f"Ray's GCS at {gcs_address}: {e}") from None
    if not accepted:
        raise RuntimeError(f"Ray refused to drain {node_ip}: {why}")
    return node_id


def watch(gcs_address: str, imds: str, node_ip: str | None, poll_s: float) -> int:
    life_cycle, warned = None, False
    while True:
        try:
            if life_cycle is None:  # the template starts it on every worker: spot ones stay
                life_cycle = imds_get(imds, "instance-life-cycle")[1].strip()
                if life_cycle != "spot":
                    print(f"spot watch: {life_cycle or 'not a spot'} instance; nothing to watch",
                          flush=True)
                    return 0
            notice = spot_notice(imds)
            if notice and not node_ip:
                node_ip = imds_get(imds, "local-ipv4")[1].strip()
        except (OSError, ValueError) as e:  # the metadata service did not answer: ask again
            if not warned:
                print(f"spot watch: no answer from {imds} ({type(e).__name__}); retrying "
                      f"every {poll_s:g} s", flush=True)
                warned = True
            notice = None
        if notice:
            node_id = drain(gcs_address, node_ip, notice)
            print(f"spot watch: {notice['action']} notice for {notice.get('time', 'now')}; "
                  f"drained node {node_ip} ({node_id}) at {time.time():.3f}: "
                  "no new work lands on it", flush=True)
            return 0
        time.sleep(poll_s)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gcs", required=True, help="the head's GCS address, host:port")
    p.add_argument("--imds", default=IMDS, help="the metadata service's base URL")
    p.add_argument("--node-ip", help="this node's Ray address; default: the instance's "
                                     "local-ipv4 from the metadata service")
    p.add_argument("--poll-s", type=float, default=POLL_S, help="seconds between checks")
    a = p.parse_args(argv)
    print(f"spot watch: asking {a.imds} for an interruption notice every {a.poll_s:g} s",
          flush=True)
    try:
        return watch(a.gcs, a.imds, a.node_ip, a.poll_s)
    except RuntimeError as e:
        print(f"spot watch: error: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
