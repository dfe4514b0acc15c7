"""The cluster's watchdog on its head: a job past its time limit is stopped, and the cluster
tears itself down after `autostop_minutes` with no job.

A job's limit (TIMEOUT, 6 h by default on AWS) is recorded with the job (its metadata,
JOB_LIMIT_KEY) by `make submit`; the watchdog stops a job past it, whether or not the
user's machine is still there to do so (a closed laptop, a lost tunnel), and the idle clock
starts at that job's end.

Ray's head never stops by itself (ray-project/ray#13839): a forgotten g5.xlarge + 2 x
c5.4xlarge bills ~$57 a day. This small process runs beside the head and every POLL_S lists the cluster's jobs through
Ray's job API. A job PENDING or RUNNING holds the cluster up; once none has been for the
limit (counted from the last job's end, or from the watchdog's start), it tears the whole
cluster down and exits:

  aws      Ray on the head first (its autoscaler would relaunch workers), then every
           instance carrying the cluster's `ray-kit-cluster` tag in its region, its own
           head included (terminate_tagged; the head's IAM policy allows exactly that)
  kuberay  its own RayCluster deleted (the garbage collector then deletes every pod,
           the watchdog's own head pod too, and the node groups scale their nodes
           down). The watchdog is a container of the head pod, which runs as the
           values' kubernetes.service_account, else the ServiceAccount `<name>` the
           operator makes (watchdog.py): the operator binds its autoscaler's Role to
           it, and the namespace's admin, once, a Role that may delete this one
           RayCluster and nothing else (`make render` writes it); a dry-run DELETE at
           start says in one line whether that right holds (delete_right)

While the job API cannot be reached, the jobs' supervisors are looked for among the
processes here (Ray's detached JobSupervisor actors outlive the dashboard, and so do the
jobs they run): one running holds the cluster up, so a healthy long job is not torn down
under itself; with none, the clock runs on from the last job seen, so a head whose
dashboard died does not bill forever either. (A KubeRay watchdog is a container of its
own, which sees no process of Ray's: there the clock runs on from the last job seen.)

A job past its limit that has not stopped STOP_GRACE_S after the first stop asked of it
(a driver that ignores the signal, a wedged supervisor) no longer holds the cluster up:
the idle clock counts from that first stop, and autostop tears the cluster down as for
an idle one. With autostop off, the watchdog says so in its log and goes on asking.

`make status` shows the time left, computed by the same seconds_left from the same jobs
and the same start: the head node's start time as Ray publishes it (head_started_at).
A local cluster's watchdog (scripts/providers/local/autostop.py) runs this clock with the
local provider's teardown. Like everything in scripts/node/, this file needs nothing of the
kit: `make up` on AWS ships scripts/node/ alone to the nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BUSY = ("PENDING", "RUNNING")
POLL_S = 10  # RAYKIT_AUTOSTOP_POLL_S overrides it (tests)
KIT_TAG = "ray-kit-cluster"  # the kit's tag on every instance of a cluster (aws.KIT_TAG)
JOB_LIMIT_KEY = "raykit_limit_s"  # a job's time limit in seconds, in its metadata
TERMINATE_ATTEMPTS = 20  # the teardown's sweeps (throttling, a transient API error)
TERMINATE_RETRY_S = 15
RETRY_MAX_S = 300        # the KubeRay watchdog's longest wait between DELETEs (it never gives up)
STOP_GRACE_S = 300  # a job past its limit still running this long after the first stop is stuck
API_TIMEOUT_S = 60  # any one call to Ray's job or state API
SUPERVISOR_TITLE = b"ray::JobSupervisor"  # the process title of Ray's job supervisor actor


def duration(minutes: float) -> str:
    """A limit as people say it: '60 min', or '20 s' under a minute (tests' limits)."""
    return f"{minutes:g} min" if minutes >= 1 else f"{minutes * 60:.0f} s"


def seconds_left(jobs: list[tuple[str, float | None]], idle_from: float, now: float,
                 limit_s: float) -> float | None:
    """Seconds until autostop; None while a job holds the cluster up. `jobs`: (status,
    end time in epoch seconds or None) of every job; `idle_from`: when the cluster (or
    the watchdog) started."""
    if any(status in BUSY for status, _ in jobs):
        return None
    ends = [end for _, end in jobs if end]
    return limit_s - (now - max([idle_from, *ends]))


def job_states(client, ignore: frozenset = frozenset()) -> list[tuple[str, float | None]]:
    """(status, end time) of every job but those in `ignore`, from Ray's JobSubmissionClient."""
    return [(info.status.value, info.end_time / 1000 if info.end_time else None)
            for info in client.list_jobs() if (info.submission_id or info.job_id) not in ignore]


def supervisors_running(proc: str = "/proc") -> int:
    """Ray's job supervisors running on this host (their process title), read from /proc:
    the sign of a running job while the job API cannot be reached."""
    found = 0
    for pid in os.listdir(proc) if os.path.isdir(proc) else []:
        try:
            with open(os.path.join(proc, pid, "cmdline"), "rb") as f:
                found += f.read(len(SUPERVISOR_TITLE)) == SUPERVISOR_TITLE
        except OSError:  # not a process, or gone since the listing
            continue
    return found


def overdue_jobs(jobs: list[dict], now: float) -> list[str]:
    """The submission ids of the PENDING or RUNNING jobs past the limit recorded with them
    (`jobs`: {"id", "status", "start_s", "limit_s"}; limit_s None: no limit)."""
    return [job["id"] for job in jobs if job["status"] in BUSY and job["limit_s"]
            and job["start_s"] is not None and now - job["start_s"] > job["limit_s"]]


def job_limits(client) -> list[dict]:
    """Every job's id, status, start (epoch s) and recorded limit (s), from Ray's
    JobSubmissionClient; a limit that is not a positive number is none."""
    jobs = []
    for info in client.list_jobs():
        try:
            limit_s = float((info.metadata or {}).get(JOB_LIMIT_KEY, ""))
        except ValueError:
            limit_s = None
        jobs.append({"id": info.submission_id or info.job_id, "status": info.status.value,
                     "start_s": info.start_time / 1000 if info.start_time else None,
                     "limit_s": limit_s if limit_s and limit_s > 0 else None})
    return jobs


def stop_overdue(client, now: float) -> list[str]:
    """Stop every job past its limit; return their ids."""
    overdue = overdue_jobs(job_limits(client), now)
    for submission_id in overdue:
        print(f"autostop: job {submission_id} ran past its time limit; stopping it", flush=True)
        client.stop_job(submission_id)
    return overdue


def head_started_at(address: str) -> float | None:
    """When the head node started (epoch seconds), as Ray's state API publishes it; None
    if it cannot be read. The clock's start for the watchdog and for `make status` alike:
    both then count the same idle time, whenever each of them started."""
    from ray.util.state import list_nodes

    try:
        heads = list_nodes(address=address, filters=[("is_head_node", "=", True)],
                           raise_on_missing_output=False, timeout=API_TIMEOUT_S)
    except Exception:  # noqa: BLE001 (the dashboard not up yet, or gone)
        return None
    times = [node.start_time_ms / 1000 for node in heads if node.start_time_ms]
    return min(times) if times else None


def beat(heartbeat: str | None) -> None:
    """Touch the heartbeat file: the head's dead-man switch (scripts/node/deadman.py) reads
    its age, and powers the head off if this loop stops beating while Ray runs."""
    if heartbeat:
        try:
            with open(heartbeat, "a"):
                os.utime(heartbeat)
        except OSError as e:
            print(f"autostop: cannot touch the heartbeat {heartbeat} ({e.strerror})", flush=True)


def watch(address: str, limit_s: float | None, teardown, poll_s: float = POLL_S,
          stop_grace_s: float = STOP_GRACE_S, heartbeat: str | None = None) -> None:
    """Every poll_s: stop the jobs past their limit; then, where limit_s is set (autostop
    on), tear the cluster down once no job has run for limit_s (a job stuck past its stop
    counts as ended when its stop was first asked). Runs until that teardown; each round
    beats the heartbeat, where there is one."""
    started = head_started_at(address) or time.time()
    last_busy = time.time()
    stop_asked: dict[str, float] = {}  # overdue job -> when its stop was first asked
    said_stuck: set[str] = set()
    while True:
        beat(heartbeat)
        now = time.time()
        try:
            client = job_client(address)
            overdue = stop_overdue(client, now)  # the jobs still running past their limit
            for submission_id in overdue:
                stop_asked.setdefault(submission_id, now)
            stuck = {i: stop_asked[i] for i in overdue if now - stop_asked[i] > stop_grace_s}
            jobs = job_states(client, frozenset(stuck))
            for submission_id, asked in stuck.items():  # counted as ended when its stop was asked
                jobs.append(("STUCK", asked))
                if submission_id not in said_stuck:
                    said_stuck.add(submission_id)
                    print(f"autostop: job {submission_id} has not stopped {now - asked:.0f} s after it "
                          "was asked to; " + ("it no longer holds the cluster up" if limit_s else
                                              "autostop is off: it runs on until stopped by hand"), flush=True)
        except Exception as e:  # the dashboard is down: a supervisor running here holds it up
            running = supervisors_running()
            print(f"autostop: job API unreachable ({type(e).__name__}); "
                  + (f"{running} job supervisor(s) running here: busy" if running
                     else f"idle since {time.ctime(last_busy)}"), flush=True)
            jobs = [("RUNNING", None)] if running else [("UNKNOWN", last_busy)]
        left = seconds_left(jobs, started, now, limit_s) if limit_s else None
        if not limit_s:
            pass  # job limits only
        elif left is None:
            last_busy = now
        elif left <= 0:
            print(f"autostop: no job for {duration(limit_s / 60)}; tearing the cluster down",
                  flush=True)
            teardown()
            return
        else:
            last_busy = max([last_busy, *[end for _, end in jobs if end]])
        time.sleep(poll_s)


def job_client(address: str, timeout_s: float | None = None):
    """Ray's JobSubmissionClient with every request bounded: it passes no timeout to
    `requests`, which then waits for ever on a dashboard that accepts a connection and never
    answers (socket.setdefaulttimeout does not reach it: requests sets the socket's own);
    the token comes from the environment."""
    from ray.job_submission import JobSubmissionClient

    limit = API_TIMEOUT_S if timeout_s is None else timeout_s

    class Bounded(JobSubmissionClient):
        def _do_request(self, method, endpoint, **kwargs):
            kwargs.setdefault("timeout", limit)
            return super()._do_request(method, endpoint, **kwargs)

    return Bounded(address)


def tagged_instances(ec2, cluster_name: str, heads: bool) -> list[str]:
    """The cluster's instances (by its tag) in any state that bills, heads or workers (Ray
    tags its head instance ray-node-type=head)."""
    filters = [{"Name": f"tag:{KIT_TAG}", "Values": [cluster_name]},
               {"Name": "instance-state-name",
                "Values": ["pending", "running", "stopping", "stopped"]}]
    found = [i for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
             for r in page["Reservations"] for i in r["Instances"]]
    is_head = lambda i: {"Key": "ray-node-type", "Value": "head"} in i.get("Tags", [])  # noqa: E731 (Ray's tag)
    return [i["InstanceId"] for i in found if is_head(i) == heads]


def terminate_tagged(ec2, cluster_name: str) -> list[str]:
    """Terminate every instance of the cluster (by its tag), whatever its state; return
    their ids. Instances of other clusters or without the tag are never touched."""
    ids = tagged_instances(ec2, cluster_name, heads=False) + tagged_instances(ec2, cluster_name, heads=True)
    if ids:
        ec2.terminate_instances(InstanceIds=ids)
    return ids


def stop_ray_here() -> str:
    """Stop Ray on this node, the head. On the head instance every Ray process is this
    cluster's (the watchdog runs beside them in the head's container), so `ray stop` is
    the way here, as `ray down` does; never on a machine shared with other clusters."""
    try:
        done = subprocess.run(["ray", "stop", "--force"], capture_output=True, text=True,
                              timeout=120)
        return f"autostop: ray stop on the head exited {done.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:  # terminate all the same
        return f"autostop: ray stop on the head failed ({type(e).__name__}); terminating anyway"


def teardown_aws(ec2, cluster_name: str, stop_ray=stop_ray_here, attempts: int = TERMINATE_ATTEMPTS,
                 retry_s: float = TERMINATE_RETRY_S) -> list[str]:
    """Ray first, then the instances. While the head's autoscaler runs it re-lists the
    cluster's pending and running instances every 5 s and tops it back up to min_workers:
    terminated first, the workers could be relaunched in the seconds the head takes to
    shut down, and nobody would stop those. With Ray stopped, the workers are swept until
    none is left (a launch in flight shows up late), then the head, this instance; each
    call retried on an API error (throttling). Where every attempt fails (a profile
    without the right), the nodes' dead-man timers (deadman.py) power them off. Returns
    the instance ids terminated."""
    print(stop_ray(), flush=True)
    terminated: list[str] = []
    for heads in (False, True):
        for attempt in range(attempts):
            try:
                ids = tagged_instances(ec2, cluster_name, heads=heads)
                live = [i for i in ids if i not in terminated]
                if not ids:
                    break
                if live:
                    ec2.terminate_instances(InstanceIds=live)
                    terminated += live
                elif heads:
                    break  # the head's terminate went through; it is on its way down
            except Exception as e:  # noqa: BLE001 (throttled, no right: retry, then the dead-man)
                print(f"autostop: terminating failed ({type(e).__name__}: "
                      f"{str(e).splitlines()[0][:160] if str(e) else ''}); retrying", flush=True)
            time.sleep(retry_s)
    return terminated


def head_alarm_name(cluster_name: str) -> str:
    """The hung-head alarm `make up` set (aws/names.py's head_alarm_name, restated: this
    file runs alone on the head; a test holds the two alike)."""
    return f"raykit-{cluster_name}-head-hung"


def delete_head_alarm(cloudwatch, cluster_name: str) -> str:
    """The cluster's hung-head alarm ($0.10 a month) ends with it: the head deletes its own
    before terminating (the kit's head role may, on that alarm alone). Best effort: a
    profile of the user's own without the right leaves it to the next `make up` or
    `make down`, which delete it too."""
    try:
        cloudwatch.delete_alarms(AlarmNames=[head_alarm_name(cluster_name)])
        return f"autostop: deleted the alarm {head_alarm_name(cluster_name)}"
    except Exception as e:  # noqa: BLE001 (no right, throttled: the next up/down deletes it)
        return (f"autostop: the alarm {head_alarm_name(cluster_name)} stays ({type(e).__name__}); "
                "the next `make up` or `make down` deletes it")


def aws_teardown(cluster_name: str, region: str):
    def teardown() -> None:
        import boto3

        print(delete_head_alarm(boto3.client("cloudwatch", region_name=region), cluster_name), flush=True)
        ids = teardown_aws(boto3.client("ec2", region_name=region), cluster_name)
        print(f"autostop: terminated {', '.join(ids) or 'nothing'}", flush=True)
    return teardown


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # the pod's token and CA


def delete_raycluster(api: str, namespace: str, name: str, account_dir: str,
                      attempts: int | None = None, retry_s: float = TERMINATE_RETRY_S) -> bool:
    """DELETE the RayCluster (background propagation: the garbage collector deletes its
    pods), with the pod's service-account token over TLS checked against the cluster's
    CA; retried on an API error or a refusal (throttling, an API server restarting, a
    RoleBinding applied late or fixed), the wait doubling up to RETRY_MAX_S. By default
    it never gives up: the watchdog is what stops the bill, and its pod is not restarted
    (the head's restartPolicy). True once it is deleted or gone; False once `attempts`
    (where given) all failed."""
    tried, wait_s = 0, retry_s
    while attempts is None or tried < attempts:
        tried += 1
        try:
            send_delete(api, namespace, name, account_dir)
            return True
        except urllib.error.HTTPError as e:
            if e.code == 404:
                print(f"autostop: RayCluster {namespace}/{name} is gone already", flush=True)
                return True
            print(f"autostop: deleting failed (HTTP {e.code} {e.reason}); retrying", flush=True)
        except (OSError, ssl.SSLError) as e:
            print(f"autostop: deleting failed ({type(e).__name__}: {str(e)[:160]}); retrying", flush=True)
        if tried % 20 == 0:
            print(f"autostop: RayCluster {namespace}/{name} still not deleted after {tried} tries: its pods "
                  "bill until it is; check the watchdog's RoleBinding (`make render`'s kubectl-role.yaml)",
                  flush=True)
        time.sleep(wait_s)
        wait_s = min(RETRY_MAX_S, wait_s * 2)
    print(f"autostop: could not delete RayCluster {namespace}/{name}: its pods bill until "
          "`make down`", flush=True)
    return False


def send_delete(api: str, namespace: str, name: str, account_dir: str, dry_run: bool = False) -> None:
    """One DELETE of the RayCluster with the pod's token (re-read each time: the kubelet
    rotates it), over TLS checked against the cluster's CA; dry_run: authorized, admitted
    and answered as a delete would be, and nothing deleted (dryRun: All). The API server
    reads a DELETE's options from its body where it has one, and its query only where not:
    dryRun goes in the body (in the query alone, the test's real API server deleted)."""
    url = (f"{api}/apis/ray.io/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
           f"/rayclusters/{urllib.parse.quote(name, safe='')}" + ("?dryRun=All" if dry_run else ""))
    body = json.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
                      | ({"dryRun": ["All"]} if dry_run else {})).encode()
    token = open(os.path.join(account_dir, "token")).read().strip()
    context = ssl.create_default_context(cafile=os.path.join(account_dir, "ca.crt"))
    request = urllib.request.Request(url, data=body, method="DELETE", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=30):
        pass


RIGHT_OK, RIGHT_REFUSED = "autostop: may delete", "autostop: cannot delete"  # `make up`/`status` read them


def delete_right(api: str, namespace: str, name: str, account_dir: str) -> str:
    """The one line that says, at start, whether the teardown's DELETE would go through:
    a dry-run DELETE proves the token, the CA, the way to the API server (an egress
    NetworkPolicy) and the RBAC (a Role edited since, a webhook) together."""
    try:
        send_delete(api, namespace, name, account_dir, dry_run=True)
        return f"{RIGHT_OK} RayCluster {namespace}/{name} (a dry-run DELETE was allowed)"
    except urllib.error.HTTPError as e:
        why = f"HTTP {e.code} {e.reason}"
    except (OSError, ssl.SSLError, KeyError) as e:
        why = f"{type(e).__name__}: {str(e)[:160]}"
    return (f"{RIGHT_REFUSED} RayCluster {namespace}/{name} ({why}): after autostop_minutes with no job "
            "it bills on until `make down`; check the watchdog's RoleBinding and any NetworkPolicy "
            "that keeps the head pod from the API server")


def in_cluster_api() -> str:
    """The API server as a pod reaches it (Kubernetes sets both variables in every pod)."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def kuberay_teardown(namespace: str, name: str, account_dir: str = SERVICE_ACCOUNT_DIR):
    def teardown() -> None:
        if delete_raycluster(in_cluster_api(), namespace, name, account_dir):
            print(f"autostop: RayCluster {namespace}/{name} deleted; its pods go with it", flush=True)
    return teardown


def run(address: str, minutes: float, teardown, heartbeat: str | None = None) -> int:
    """Watch until the limit, then teardown(); the entry of both watchdogs (this one on
    AWS, scripts/providers/local/autostop.py on a local cluster)."""
    poll_s = float(os.environ.get("RAYKIT_AUTOSTOP_POLL_S") or POLL_S)
    # every call to Ray's API gives up after a while: a dashboard that accepts and never
    # answers must not hang the loop (a hung watchdog enforces nothing, and stops beating);
    # the job client's requests are bounded by job_client, the rest by this default
    socket.setdefaulttimeout(API_TIMEOUT_S)
    print("autostop: " + (f"the cluster stops after {duration(minutes)} with no job" if minutes
                          else "off; jobs past their time limit are stopped")
          + f" (checked every {poll_s:g} s)", flush=True)
    watch(address, minutes * 60 or None, teardown, poll_s, heartbeat=heartbeat)
    return 0


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--address", required=True, help="the dashboard's URL (Ray's job API)")
    p.add_argument("--minutes", type=float, required=True, help="idle minutes before teardown")
    return p


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--aws", nargs=2, metavar=("CLUSTER_NAME", "REGION"),
                       help="the AWS cluster whose instances carry this tag")
    where.add_argument("--kuberay", nargs=2, metavar=("NAMESPACE", "NAME"),
                       help="the RayCluster whose head pod this runs in")
    p.add_argument("--service-account-dir", default=SERVICE_ACCOUNT_DIR,
                   help="the pod's service-account token and CA (kuberay)")
    p.add_argument("--heartbeat", help="a file touched every poll (aws: the head's dead-man "
                   "switch reads it)")
    a = p.parse_args(argv)
    if a.kuberay and a.minutes:
        print(delete_right(in_cluster_api(), *a.kuberay, a.service_account_dir), flush=True)
    teardown = aws_teardown(*a.aws) if a.aws else kuberay_teardown(*a.kuberay, a.service_account_dir)
    return run(a.address, a.minutes, teardown, a.heartbeat)


if __name__ == "__main__":
    sys.exit(main())
