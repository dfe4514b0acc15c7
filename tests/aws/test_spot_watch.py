"""scripts/node/spot_watch.py against a stand-in IMDSv2 on loopback, and where the AWS template
starts it. Its drain of a real node, under a running job, is in test_chaos.py."""

import datetime

import yaml

from conftest import REPO, load_example
from tests.harness.imds_standin import Imds
from scripts.node import spot_watch
from scripts.build import build, build_text


def test_no_notice_until_aws_posts_one_and_every_request_carries_a_token():
    with Imds() as imds:
        assert spot_watch.spot_notice(imds.url) is None  # 404: nothing scheduled
        imds.schedule("terminate", in_s=120)
        notice = spot_watch.spot_notice(imds.url)
        assert notice["action"] == "terminate"
        assert all(authorized for _, authorized in imds.gets)  # IMDSv2 only


def test_the_notice_time_becomes_the_drain_deadline():
    with Imds() as imds:
        imds.schedule("stop", in_s=120)
        deadline = spot_watch.deadline_ms(spot_watch.spot_notice(imds.url))
    in_s = deadline / 1000 - datetime.datetime.now(datetime.timezone.utc).timestamp()
    assert 100 < in_s <= 120
    assert spot_watch.deadline_ms({"action": "terminate", "time": "soon"}) == 0  # none
    assert spot_watch.deadline_ms({"action": "terminate"}) == 0


def test_an_on_demand_worker_has_nothing_to_watch(capsys):
    with Imds(life_cycle="on-demand") as imds:
        imds.schedule()  # never read: the watcher leaves first
        assert spot_watch.watch("127.0.0.1:9", imds.url, None, poll_s=0.1) == 0
        paths = [path for path, _ in imds.gets]
    assert "on-demand instance; nothing to watch" in capsys.readouterr().out
    assert paths == ["/latest/meta-data/instance-life-cycle"]


def test_spot_workers_start_the_watcher_and_on_demand_mixes_do_not():
    config = build("hetero").config  # on-demand workers
    assert len(config["worker_start_ray_commands"]) == 2
    values = load_example("hetero")
    values["workers"]["cpu_worker"]["spot"] = True
    values["autostop_minutes"] = 0  # the scripts are mounted for the watcher alone
    config = build_text("hetero", yaml.safe_dump(values).encode()).config
    assert config["worker_start_ray_commands"][-1] == (
        "nohup python ~/raykit_node/spot_watch.py --gcs $RAY_HEAD_IP:6379 "
        "> /tmp/raykit-spot-watch.log 2>&1 &")
    assert config["file_mounts"] == {"~/raykit_node": str(REPO / "scripts" / "node")}
    assert not any("spot_watch" in c for c in config["head_start_ray_commands"])
