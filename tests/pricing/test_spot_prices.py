"""Spot prices: `make prices` reads the region's spot prices in effect now, zone by zone,
from EC2's DescribeSpotPriceHistory (botocore's Stubber answers as EC2's API model says:
moto answers every type at a fixed $0.00001 from 2006), and every figure that prices a
spot worker uses them, with their date: `make cost`, `make plan --spot`, the job's prices
(its bill) and the autopilot's price gate. Where none were read, a spot worker is priced at
on-demand, its ceiling, and the table says so."""

import datetime
import json

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from conftest import USER_VALUES, load_example, make
from jobs.raykit import contract
from scripts import catalog
from scripts.build import build_text
from scripts.job_env import job_env
from scripts.providers.aws import price_list

REGION = "us-east-1"
NOW = datetime.datetime(2026, 11, 29, 6, 0, tzinfo=datetime.timezone.utc)
HOUR = datetime.timedelta(hours=1)


def point(kind: str, zone: str, usd: float, when: datetime.datetime,
          product: str = "Linux/UNIX") -> dict:
    return {"InstanceType": kind, "AvailabilityZone": zone, "SpotPrice": f"{usd:.6f}",
            "Timestamp": when, "ProductDescription": product}


def stubbed_ec2(pages: list[list[dict]]):
    """An EC2 client answering DescribeSpotPriceHistory with `pages` (NextToken between
    them), each call checked against what fetch_spot must ask."""
    client = boto3.client("ec2", region_name=REGION)
    stub = Stubber(client)
    asked = {"InstanceTypes": sorted(catalog.INSTANCE_TYPES), "ProductDescriptions": price_list.SPOT_PRODUCTS,
             "StartTime": NOW - HOUR, "EndTime": NOW}
    for i, page in enumerate(pages):
        more = {"NextToken": f"page{i + 1}"} if i + 1 < len(pages) else {}
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": page, **more},
                          asked | ({"NextToken": f"page{i}"} if i else {}))
    stub.activate()
    return client, stub


# c5.4xlarge: us-east-1a changed 40 minutes ago (the older point is what it was), 1b's
# two products differ (the higher bills), 1c has a point from after `now` (not yet in
# effect); noise that is no price of the region: another region's zone, an unknown type
HISTORY = [
    [point("c5.4xlarge", "us-east-1a", 0.31, NOW - 2 * HOUR),
     point("c5.4xlarge", "us-east-1a", 0.29, NOW - 40 * datetime.timedelta(minutes=1)),
     point("c5.4xlarge", "us-east-1b", 0.33, NOW - 2 * HOUR),
     point("c5.4xlarge", "us-east-1b", 0.35, NOW - 2 * HOUR, "Linux/UNIX (Amazon VPC)")],
    [point("c5.4xlarge", "us-east-1c", 0.30, NOW - 3 * HOUR),
     point("c5.4xlarge", "us-east-1c", 0.90, NOW + HOUR),
     point("c5.4xlarge", "us-west-2a", 0.10, NOW - HOUR),
     point("x9.huge", "us-east-1a", 0.10, NOW - HOUR),
     point("g5.xlarge", "us-east-1a", 0.42, NOW - 5 * HOUR)],
]
SPOT = {"c5.4xlarge": {"us-east-1a": 0.29, "us-east-1b": 0.35, "us-east-1c": 0.30},
        "g5.xlarge": {"us-east-1a": 0.42}}


@pytest.fixture
def spot_read():
    """The region's spot prices as `make prices` would have saved them now."""
    client, stub = stubbed_ec2(HISTORY)
    fetched = price_list.fetch_spot(REGION, client, NOW)
    stub.assert_no_pending_responses()
    path = price_list.write(fetched, catalog.spot_price_list_path)
    yield fetched
    catalog.spot_price_list_path(REGION).unlink(missing_ok=True)
    catalog.fetched_spot_prices.cache_clear()


def spot_mix(name: str, zone: str | None = None, autopilot: bool = False) -> dict:
    values = load_example("hetero") | {"cluster_name": name}
    values["workers"]["cpu_worker"]["spot"] = True
    values["aws"]["availability_zone"] = zone
    if autopilot:
        values["autopilot"] = {"enabled": True}
    (USER_VALUES / f"{name}.yaml").write_text(yaml.safe_dump(values))
    return values


def test_the_price_in_effect_now_is_read_per_zone_across_pages(spot_read):
    assert spot_read == {"region": REGION, "source": price_list.SPOT_SOURCE,
                         "fetched": "2026-11-29 06:00 UTC", "usd_per_hour": SPOT}
    assert json.loads(catalog.spot_price_list_path(REGION).read_text()) == spot_read
    assert catalog.spot_usd_per_hour("c5.4xlarge", REGION) == 0.35  # any zone: the dearest
    assert catalog.spot_usd_per_hour("c5.4xlarge", REGION, "us-east-1a") == 0.29
    assert catalog.spot_usd_per_hour("c5.4xlarge", REGION, "us-east-1f") is None  # not offered there
    assert catalog.spot_usd_per_hour("c6i.4xlarge", REGION) is None


def test_make_cost_prices_a_spot_worker_at_its_spot_price_with_its_date(spot_read):
    spot_mix("spotty")
    run = make("cost", "CLUSTER=spotty")
    assert run.returncode == 0, run.stdout + run.stderr
    disk = load_example("hetero")["workers"]["cpu_worker"]["disk"]
    each = 0.35 + (disk["root_gb"] + disk["data_gb"]) * catalog.ebs_usd_per_gb_month(REGION, "gp3") / 730
    assert f"cpu_worker        c5.4xlarge  2-4      {each:.4f}" in run.stdout, run.stdout
    assert "one); spot workers at the spot prices read 2026-11-29 06:00 UTC by `make prices`" in run.stdout
    assert ("spot: cpu_worker is priced at $0.3500/h (on-demand $0.6800), the highest of the zones "
            "of us-east-1, in effect 2026-11-29 06:00 UTC") in run.stdout, run.stdout
    # a zone the values file pins: that zone's price
    spot_mix("pinned", zone="us-east-1a")
    run = make("cost", "CLUSTER=pinned")
    assert f"{0.29 + each - 0.35:.4f}" in run.stdout and "zone us-east-1a" in run.stdout, run.stdout


def test_a_spot_worker_without_a_spot_price_read_is_priced_at_on_demand_and_said_so():
    catalog.fetched_spot_prices.cache_clear()
    assert not catalog.spot_price_list_path(REGION).exists()
    spot_mix("unread")
    run = make("cost", "CLUSTER=unread")
    assert run.returncode == 0 and "0.6910" in run.stdout, run.stdout  # on-demand with its EBS
    assert ("spot: cpu_worker is priced at on-demand, its ceiling: no spot price of c5.4xlarge in "
            "us-east-1 was read; `make prices CLUSTER=unread`") in run.stdout
    assert "spot workers at" not in run.stdout


def test_the_jobs_prices_and_the_autopilots_gate_take_the_spot_price(spot_read):
    values = spot_mix("gated", autopilot=True)
    env = job_env(build_text("gated", yaml.safe_dump(values).encode()))
    worker = json.loads(env[contract.AUTOPILOT_ENV])["node_usd_per_hour"]
    prices = json.loads(env[contract.NODE_PRICES_ENV])
    disk = values["workers"]["cpu_worker"]["disk"]
    gb = disk["root_gb"] + disk["data_gb"]
    assert worker == pytest.approx(0.35 + gb * catalog.ebs_usd_per_gb_month(REGION, "gp3") / 730)
    assert prices["usd_per_hour"]["cpu_worker"] == pytest.approx(worker)
    assert "spot workers at the spot prices read 2026-11-29 06:00 UTC" in json.dumps(prices)


def test_make_plan_spot_prices_the_cpu_workers_at_spot_and_writes_them_spot(spot_read):
    args = "--trainer-images-per-s 300 --cpu-images-per-s 10"
    on_demand = make("plan", f"ARGS={args} --json")
    spot = make("plan", f"ARGS={args} --spot --json --write planned_spot")
    assert spot.returncode == 0, spot.stderr
    od, sp = json.loads(on_demand.stdout)["chosen"], json.loads(spot.stdout.splitlines()[0])["chosen"]
    # only c5.4xlarge has a spot price read: the plan uses it, at the dearest zone's price
    assert sp["workers"] == [{"instance_type": "c5.4xlarge", "count": sp["workers"][0]["count"], "spot": True}]
    head = catalog.node_usd_per_hour("g5.xlarge", REGION, "gp3", catalog.min_root_gb(True))
    cpu = catalog.node_usd_per_hour("c5.4xlarge", REGION, "gp3", catalog.min_root_gb(False), spot=True)
    assert sp["usd_per_hour"] == pytest.approx(head + sp["workers"][0]["count"] * cpu)
    assert sp["usd_per_million_images"] < od["usd_per_million_images"]
    written = yaml.safe_load((USER_VALUES / "planned_spot.yaml").read_text())
    assert written["workers"]["cpu_worker"]["spot"] is True
    text = make("plan", f"ARGS={args} --spot")
    assert "CPU workers at the spot prices read 2026-11-29 06:00 UTC by `make prices`" in text.stdout
    assert "c5.4xlarge (spot)" in text.stdout


def test_make_plan_spot_without_spot_prices_is_one_error_line():
    catalog.fetched_spot_prices.cache_clear()
    run = make("plan", "ARGS=--trainer-images-per-s 300 --cpu-images-per-s 10 --spot --region us-east-2")
    assert run.returncode == 2 and run.stderr.startswith(
        "error: ARGS: --spot: no spot prices were read for us-east-2; `make prices"), run.stderr


@pytest.mark.parametrize("changed,problem", [
    ({"usd_per_hour": {"c5.4xlarge": {"us-west-2a": 0.3}}}, "'us-west-2a' is not a zone of us-east-1"),
    ({"usd_per_hour": {"c5.4xlarge": {"us-east-1a": float("nan")}}}, "not JSON"),
    ({"usd_per_hour": {"c5.4xlarge": {"us-east-1a": -1}}}, "usd_per_hour.c5.4xlarge.us-east-1a: -1 is not a price"),
    ({"usd_per_hour": {"c5.4xlarge": {}}}, "usd_per_hour.c5.4xlarge maps zones to prices"),
    ({"usd_per_hour": {"x9.huge": {"us-east-1a": 1}}}, "'x9.huge' is not a type the kit knows"),
    ({"extra": 1}, "a spot price list has exactly the keys"),
], ids=["another region's zone", "nan", "negative", "no zones", "unknown type", "an extra key"])
def test_a_spot_price_list_that_is_not_one_is_one_error_line(changed, problem):
    spot_mix("broken")
    good = {"region": REGION, "source": "hand", "fetched": "2026-11-29 06:00 UTC",
            "usd_per_hour": {"c5.4xlarge": {"us-east-1a": 0.3}}}
    path = catalog.spot_price_list_path(REGION)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(good | changed))
    try:
        run = make("cost", "CLUSTER=broken")
    finally:
        path.unlink()
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if not line.startswith("make: ")]
    assert line.startswith(f"error: {path}: ") and problem in line and "make prices" in line, line
