"""`make prices` (scripts/providers/aws/price_list.py): a region's on-demand prices read from
AWS's Price List Query API (botocore's Stubber answers as AWS would: moto has no pricing
API), written with their date where scripts/catalog.py reads them; then `make cost` and the
planner price the region. A price list that is not one, and a mix it cannot price, are one
error line each."""

import datetime
import json
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from conftest import USER_VALUES, load_example, make
from scripts import catalog
from scripts.core.errors import KitError
from scripts.providers.aws import iam, price_list

REGION = "eu-west-1"
# what the stubbed price list answers (made-up prices: a test of the plumbing, not of AWS);
# every other known type is not offered in the region
PRICES = {"g5.xlarge": 1.123, "c5.4xlarge": 0.768}
EBS = {"gp3": 0.088, "gp2": 0.11}


def product(usd: float, unit: str) -> str:
    """One product of the price list, as GetProducts returns it: a JSON text."""
    return json.dumps({"product": {"sku": "SKU1", "attributes": {}}, "terms": {"OnDemand": {
        "SKU1.JRTCKXETXF": {"priceDimensions": {"SKU1.JRTCKXETXF.6YS6EN2CT7": {
            "unit": unit, "pricePerUnit": {"USD": f"{usd:.10f}"}}}}}}})


def stubbed_pricing(prices: dict, ebs: dict, extra: dict | None = None):
    """A pricing client whose answers are `prices` ($/h by type) and `ebs` ($/GB-month by
    volume type), in the order price_list.fetch asks; `extra`: a second product's price
    for a type (a list AWS would not give)."""
    client = boto3.client("pricing", region_name=price_list.PRICING_ENDPOINT_REGION)
    stub = Stubber(client)

    def expect(filters: dict, found: list[str]):
        stub.add_response("get_products", {"PriceList": found, "FormatVersion": "aws_v1"}, {
            "ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1",
            "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()]})

    for name in sorted(catalog.INSTANCE_TYPES):
        found = [product(prices[name], "Hrs")] if name in prices else []
        if extra and name in extra:
            found.append(product(extra[name], "Hrs"))
        expect({"instanceType": name, "regionCode": REGION, **price_list.INSTANCE_FILTERS}, found)
    for volume in catalog.EBS_VOLUME_TYPES:
        expect({"productFamily": "Storage", "volumeApiName": volume, "regionCode": REGION,
                "locationType": "AWS Region"},
               [product(ebs[volume], "GB-Mo")] if volume in ebs else [])
    stub.activate()
    return client, stub


@pytest.fixture
def euw():
    """An AWS values file in eu-west-1 (hetero's mix); its price list removed afterwards."""
    values = load_example("hetero") | {"cluster_name": "euw"}
    values["aws"]["region"] = REGION
    (USER_VALUES / "euw.yaml").write_text(yaml.safe_dump(values))
    yield values
    catalog.price_list_path(REGION).unlink(missing_ok=True)
    catalog.fetched_prices.cache_clear()


def test_a_regions_prices_are_read_from_awss_price_list_and_price_the_mix(euw):
    assert REGION not in catalog.priced_regions()
    before = make("cost", "CLUSTER=euw")
    assert before.returncode == 2 and "make prices CLUSTER=euw" in before.stdout

    client, stub = stubbed_pricing(PRICES, EBS | {"st1": 0.05})
    fetched, skipped = price_list.fetch(REGION, client)
    written = price_list.write(fetched)
    assert skipped == []
    stub.assert_no_pending_responses()
    saved = json.loads(open(written).read())
    assert written == str(USER_VALUES / "prices" / f"aws-{REGION}.json")
    assert saved == {"region": REGION, "source": price_list.SOURCE,
                     "fetched": datetime.date.today().isoformat(),
                     "usd_per_hour": PRICES, "ebs_usd_per_gb_month": EBS | {"st1": 0.05}}

    assert REGION in catalog.priced_regions()
    assert catalog.node_usd_per_hour("g5.xlarge", REGION, "gp3", 150) == pytest.approx(1.123 + 150 * 0.088 / 730)
    assert catalog.node_usd_per_hour("g5.xlarge", REGION, "io2", 150) is None  # not in the list
    assert catalog.node_usd_per_hour("g5.xlarge", "us-east-1") == 1.006  # the table's own wins
    run = make("cost", "CLUSTER=euw")
    assert run.returncode == 0, run.stdout + run.stderr
    head = euw["head"]["disk"]["root_gb"] + euw["head"]["disk"]["data_gb"]
    assert (f"'euw' on AWS: on-demand list prices in {REGION}, EBS included (AWS's price list, read "
            f"{saved['fetched']} by `make prices`;") in run.stdout
    assert f"{1.123 + head * 0.088 / 730:.4f}" in run.stdout
    # the planner prices the region too, with the types its price list has
    run = make("plan", "ARGS=--region eu-west-1 --trainer-images-per-s 300 --cpu-images-per-s 10")
    assert run.returncode == 0 and "g5.xlarge + " in run.stdout and "c5.4xlarge" in run.stdout, run.stdout + run.stderr
    run = make("plan", "ARGS=--region eu-west-1 --gpu-instance g6.xlarge --trainer-images-per-s 300 "
                       "--cpu-images-per-s 10")
    assert run.returncode == 2 and "error: plan: g6.xlarge has no price in eu-west-1" in run.stderr, run.stderr


def test_every_filter_pins_the_region_itself_not_its_local_zones():
    """The price list holds Local Zones', Wavelength's and Outposts' products too."""
    client, stub = stubbed_pricing(PRICES, EBS)  # the stub checks each call's filters
    price_list.fetch(REGION, client)
    stub.assert_no_pending_responses()
    assert price_list.INSTANCE_FILTERS["locationType"] == "AWS Region"


@pytest.mark.parametrize("fetched,wins", [(datetime.date.today().isoformat(), True), ("2025-06-01", False)])
def test_a_price_list_fetched_for_a_region_the_table_prices_wins_when_newer(fetched, wins):
    """`make prices` in us-east-1 fetched AWS's list, wrote it, and then showed the hand-kept
    table's prices, labelled as such: the newest source wins, named with its date."""
    table = catalog.INSTANCE_TYPES["g5.xlarge"].usd_per_hour["us-east-1"]
    listed = {"region": "us-east-1", "source": price_list.SOURCE, "fetched": fetched,
              "usd_per_hour": {"g5.xlarge": 1.5}, "ebs_usd_per_gb_month": {"gp3": 0.1}}
    path = price_list.write(listed)
    try:
        assert catalog.instance_usd_per_hour("g5.xlarge", "us-east-1") == (1.5 if wins else table)
        assert catalog.ebs_usd_per_gb_month("us-east-1", "gp3") == (0.1 if wins else 0.08)
        # a type the list lacks keeps the table's price
        assert catalog.instance_usd_per_hour("c5.4xlarge", "us-east-1") == \
            catalog.INSTANCE_TYPES["c5.4xlarge"].usd_per_hour["us-east-1"]
        source = catalog.price_source("us-east-1")
        assert source == (f"AWS's price list, read {fetched} by `make prices`" if wins
                          else "scripts/catalog.py, as of 2026-11")
    finally:
        Path(path).unlink()
        catalog.fetched_prices.cache_clear()


def test_a_type_the_region_does_not_offer_leaves_the_mix_unpriced(euw):
    client, _ = stubbed_pricing({"g5.xlarge": 1.123}, EBS)  # no c5.4xlarge in the region
    price_list.write(price_list.fetch(REGION, client)[0])
    run = make("cost", "CLUSTER=euw")
    assert run.returncode == 2 and "error: CLUSTER=euw: this mix cannot be priced" in run.stderr


def test_a_type_with_two_prices_is_left_unpriced_and_named():
    client, _ = stubbed_pricing(PRICES, EBS, extra={"c5.4xlarge": 0.9})
    fetched, skipped = price_list.fetch(REGION, client)
    assert fetched["usd_per_hour"] == {"g5.xlarge": 1.123}
    assert skipped == ["c5.4xlarge: AWS's price list gives 2 prices (0.768, 0.9); left unpriced"]


def test_a_region_none_of_whose_types_is_listed_is_one_error_line():
    client, _ = stubbed_pricing({}, {})
    with pytest.raises(KitError, match="has no instance of the kit's types in eu-west-1"):
        price_list.fetch(REGION, client)


@pytest.mark.parametrize("text,problem", [
    ("{", "not JSON"),
    (json.dumps([1]), "a price list has exactly the keys"),
    ("WRONG_REGION", "it prices 'us-west-2', not eu-west-1"),
    ("NEGATIVE", "usd_per_hour.g5.xlarge: -1 is not a price in USD"),
    ("TRUE", "usd_per_hour.g5.xlarge: true is not a price in USD"),
    ("UNKNOWN_TYPE", "usd_per_hour: 'x9.huge' is not a type the kit knows"),
], ids=["not json", "a list", "another region", "a negative price", "a boolean", "an unknown type"])
def test_a_price_list_that_is_not_one_is_one_error_line(euw, text, problem):
    good = {"region": REGION, "source": "hand", "fetched": "2026-11-27",
            "usd_per_hour": dict(PRICES), "ebs_usd_per_gb_month": dict(EBS)}
    changed = {"WRONG_REGION": good | {"region": "us-west-2"},
               "NEGATIVE": good | {"usd_per_hour": {"g5.xlarge": -1}},
               "TRUE": good | {"usd_per_hour": {"g5.xlarge": True}},
               "UNKNOWN_TYPE": good | {"usd_per_hour": {"x9.huge": 1.0}}}
    path = catalog.price_list_path(REGION)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(changed[text]) if text in changed else text)
    run = make("cost", "CLUSTER=euw")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if not line.startswith("make: ")]
    assert line.startswith(f"error: {path}: {problem}") and "run `make prices" in line, line


def test_make_prices_needs_an_aws_mix_and_credentials_before_it_asks_aws(euw, monkeypatch):
    run = make("prices", "CLUSTER=local")
    assert run.returncode == 2 and "`make prices` reads an AWS mix's region" in run.stderr
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    run = make("prices", "CLUSTER=euw")
    assert run.returncode != 0 and "AWS credentials" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not catalog.price_list_path(REGION).exists()


def test_the_providers_fetch_prices_reads_the_values_files_region_and_says_what_it_does(euw, capsys):
    client, stub = stubbed_pricing(PRICES, EBS, extra={"g5.xlarge": 1.2})
    ec2 = boto3.client("ec2", region_name=REGION)
    spot = Stubber(ec2)  # the region's spot prices, read after the list (test_spot_prices.py)
    spot.add_response("describe_spot_price_history", {"SpotPriceHistory": [
        {"InstanceType": "c5.4xlarge", "AvailabilityZone": f"{REGION}b", "SpotPrice": "0.300000",
         "ProductDescription": "Linux/UNIX",
         "Timestamp": datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2)}]})
    spot.activate()
    try:
        written = price_list.fetch_prices(euw, pricing=client, ec2=ec2)
        stub.assert_no_pending_responses()
        spot.assert_no_pending_responses()
        assert written == f"{catalog.price_list_path(REGION)} and {catalog.spot_price_list_path(REGION)}"
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith(f"reading the on-demand prices of {len(catalog.INSTANCE_TYPES)} instance types")
        assert out[1] == "g5.xlarge: AWS's price list gives 2 prices (1.123, 1.2); left unpriced"
        assert out[2].startswith("spot prices of 1 instance types in 1 zones, in effect ")
        assert catalog.fetched_prices(REGION)["usd_per_hour"] == {"c5.4xlarge": 0.768}
        assert catalog.spot_usd_per_hour("c5.4xlarge", REGION) == 0.3
    finally:
        catalog.spot_price_list_path(REGION).unlink(missing_ok=True)
        catalog.fetched_spot_prices.cache_clear()
    assert iam.USER_ACTIONS["make prices"] == ["pricing:GetProducts", "ec2:DescribeSpotPriceHistory"]
