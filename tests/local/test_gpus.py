"""GPUs on the local cluster (issue 43), with the stand-in NVML (tests/standins/nvml) showing
the kit two GPUs this machine does not have: each train node of local_multi gets one of
them, its raylet runs with CUDA_VISIBLE_DEVICES naming it, Ray hands a GPU task on that
node exactly that device, and `make status` lists what each node was given. On the same
cluster, the stall watch's GPU rule (issue 49): a job that records no step is stopped once
the GPUs it holds idle for stall_minutes, and not while they work. The values rules (a
count refused with one line, auto giving none here) are in test_bad_inputs.py and
tests/test_render.py."""

import sys
import uuid

import pytest
import yaml

from conftest import REPO, USER_JOBS, USER_VALUES, kept_summary, load_example, local_cluster_up, make, standin_gpus

sys.path.insert(0, str(REPO / "jobs"))  # as a job imports it (stall imports raykit's modules so)
from raykit import stall  # noqa: E402

WHERE = '''import json, os
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()

@ray.remote(num_gpus=1, num_cpus=0)
def where():
    return [ray.util.get_node_ip_address(), os.environ.get("CUDA_VISIBLE_DEVICES"),
            [str(g) for g in ray.get_gpu_ids()]]

nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
found = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                 for n in nodes])
print("RESULT " + json.dumps({"gpus": sorted(found)}))
'''


NO_STEPS = '''import os, time
import ray

os.environ["RAYKIT_STALL_S"] = "4"  # the kit passes the values file's; a test's own is short
ray.init()
time.sleep(12)  # a script of its own: no step recorded
print('RESULT {"status": "done"}')
'''


def job_folder(text: str):
    job = USER_JOBS / f"gpu_job_{uuid.uuid4().hex[:6]}"
    job.mkdir()
    (job / "main.py").write_text(text)
    return job


@pytest.mark.cluster
def test_two_train_nodes_split_the_machines_gpus_and_status_shows_them(tmp_path):
    values = load_example("local_multi") | {"cluster_name": "gpu_split"}
    (USER_VALUES / "gpu_split.yaml").write_text(yaml.safe_dump(values))
    job, idle_job = job_folder(WHERE), job_folder(NO_STEPS)
    utilization = tmp_path / "gpu-utilization"  # what the stand-in NVML answers, held by a process
    try:
        with local_cluster_up(tmp_path / "build", "gpu_split",
                              env_extra=standin_gpus("NVIDIA H200", "NVIDIA H200", utilization_file=utilization)
                              ) as (env, state):
            status = make("status", "CLUSTER=gpu_split", env=env, timeout=120)
            assert status.returncode == 0, status.stdout + status.stderr
            lines = status.stdout[status.stdout.index("GPUs per node (this machine has 2):"):].splitlines()
            given = sorted(line.split(": ", 1)[1] for line in lines[1:] if line.startswith("  127.0.0."))
            # the coordinating head and the two preprocess nodes none, each train node one
            assert given == ["GPU 0 (NVIDIA H200)", "GPU 1 (NVIDIA H200)", "no GPU", "no GPU", "no GPU"]
            run = make("submit", "CLUSTER=gpu_split", f"JOB={job.name}", env=env, timeout=300)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
            found = kept_summary(run.stdout)["gpus"]
            # Ray gave each node's task that node's own device, never the other's
            assert len(found) == 2 and len({ip for ip, _, _ in found}) == 2
            assert sorted(visible for _, visible, _ in found) == ["0", "1"]
            assert all([visible] == ids for _, visible, ids in found)
            # the stall watch's GPU rule: held GPUs at work, the job runs to its end...
            utilization.write_text("55")
            busy = make("submit", "CLUSTER=gpu_split", f"JOB={idle_job.name}", env=env, timeout=300)
            assert busy.returncode == 0, busy.stdout[-3000:] + busy.stderr[-2000:]
            assert kept_summary(busy.stdout) == {"status": "done"} and "stalled" not in busy.stdout
            # ...idle for the limit (4 s, polled every 0.5 s), it is stopped with one line
            utilization.write_text("0")
            idle = make("submit", "CLUSTER=gpu_split", f"JOB={idle_job.name}", env=env, timeout=300)
            assert idle.returncode != 0 and f"Error {stall.STALLED_EXIT}" in idle.stderr, idle.stdout[-3000:]
            (line,) = [l for l in idle.stdout.splitlines() if l.startswith("error: stalled:")]
            assert "the job recorded no step, and every GPU it held on 127.0.0." in line
            assert kept_summary(idle.stdout)["status"] == "stalled"
    finally:
        (USER_VALUES / "gpu_split.yaml").unlink()
        for folder in (job, idle_job):
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()


@pytest.mark.cluster
def test_a_training_head_gets_the_machines_gpu_on_its_ray_start(tmp_path):
    """local.yaml as shipped (gpus: auto) on a one-GPU machine: the head, which trains,
    starts with the GPU; its preprocess workers with none."""
    with local_cluster_up(tmp_path / "build", "local", env_extra=standin_gpus("NVIDIA L4")) as (env, state):
        status = make("status", "CLUSTER=local", env=env, timeout=120)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "GPU" in status.stdout.split("GPUs per node")[0]  # Ray's own resources line
        lines = status.stdout[status.stdout.index("GPUs per node (this machine has 1):"):].splitlines()
        assert sorted(lines[1:]) == ["  127.0.0.2: GPU 0 (NVIDIA L4)", "  127.0.0.3: no GPU",
                                     "  127.0.0.4: no GPU"]
