"""`make prices CLUSTER=...`: the on-demand list prices of CLUSTER's region, read from AWS's
own Price List Query API (pricing:GetProducts: free, your credentials; read-only), for every
instance type the kit knows and every EBS volume type, written with the date they were
read to <values dir>/prices/aws-<region>.json. scripts/catalog.py reads that file wherever
its own table has no price (it carries us-east-1 and us-east-2 only), so `make cost`,
`make plan`, `make bench` and `make up`'s estimate price the region from then on.

The Price List API answers from us-east-1 (also eu-central-1 and ap-south-1) whatever the
region priced. A product is Linux, shared tenancy, no pre-installed software, capacity
status "Used": the price `make up`'s instances bill at.

It also reads the region's spot prices in effect now, zone by zone, for the same instance
types (ec2:DescribeSpotPriceHistory: free, read-only) into aws-<region>-spot.json, where
`make cost`, `make plan --spot`, the run's bill and the autopilot's price gate read the
price of a spot worker type (catalog.spot_usd_per_hour).
"""

import datetime
import json
import math
from collections.abc import Callable

from scripts import catalog
from scripts.core.errors import KitError, short

PRICING_ENDPOINT_REGION = "us-east-1"
SOURCE = "AWS Price List Query API (pricing:GetProducts), on-demand, Linux, shared tenancy"
# locationType pins the region itself: the price list also holds its Local Zones',
# Wavelength zones' and Outposts' products, which may share the region's code
INSTANCE_FILTERS = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                    "capacitystatus": "Used", "locationType": "AWS Region"}


def fetch(region: str, pricing) -> tuple[dict, list[str]]:
    """(the price list of `region` as catalog.fetched_prices reads it back: $/h of each known
    instance type the region offers, $/GB-month of each EBS volume type, today's date;
    lines naming what was left unpriced because AWS's list gave it several prices)."""
    prices, skipped = {"usd_per_hour": {}, "ebs_usd_per_gb_month": {}}, []
    asked = [("usd_per_hour", name, {"instanceType": name, "regionCode": region, **INSTANCE_FILTERS}, "Hrs")
             for name in sorted(catalog.INSTANCE_TYPES)]
    asked += [("ebs_usd_per_gb_month", volume, {"productFamily": "Storage", "volumeApiName": volume,
                                                "regionCode": region, "locationType": "AWS Region"}, "GB-Mo")
              for volume in catalog.EBS_VOLUME_TYPES]
    for table, name, filters, unit in asked:
        found = on_demand(pricing, filters, unit)
        if len(found) == 1:
            prices[table][name] = found.pop()
        elif found:  # the kit cannot tell which one bills: left unpriced, said so
            skipped.append(f"{name}: AWS's price list gives {len(found)} prices "
                           f"({', '.join(f'{p:g}' for p in sorted(found))}); left unpriced")
    if not prices["usd_per_hour"]:
        raise KitError(f"aws.region: AWS's price list has no instance of the kit's types in "
                       f"{region}; check the region's name")
    return {"region": region, "source": SOURCE, "fetched": datetime.date.today().isoformat(),
            **prices}, skipped


def on_demand(pricing, filters: dict, unit: str) -> set[float]:
    """The distinct on-demand prices per `unit` of the products `filters` match (none where
    the region does not offer it)."""
    found = set()
    paginator = pricing.get_paginator("get_products")
    for page in paginator.paginate(ServiceCode="AmazonEC2", FormatVersion="aws_v1", Filters=[
            {"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in filters.items()]):
        for text in page["PriceList"]:
            found |= on_demand_prices(json.loads(text), unit)
    return found


def on_demand_prices(product: dict, unit: str) -> set[float]:
    """The positive USD prices per `unit` in a product's on-demand terms."""
    prices = set()
    for offer in product.get("terms", {}).get("OnDemand", {}).values():
        for dimension in offer.get("priceDimensions", {}).values():
            if dimension.get("unit") != unit:
                continue
            try:
                usd = float(dimension["pricePerUnit"]["USD"])
            except (KeyError, TypeError, ValueError):
                continue
            if math.isfinite(usd) and usd > 0:
                prices.add(usd)
    return prices


SPOT_SOURCE = "EC2 DescribeSpotPriceHistory, Linux/UNIX, the price in effect in each zone"
# EC2 names Linux spot products either way (VPC or not); both bill a Linux instance
SPOT_PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]


def fetch_spot(region: str, ec2, now: datetime.datetime) -> dict:
    """The spot price of each known instance type in each zone of `region` at `now`, as
    catalog.fetched_spot_prices reads it back. EC2 answers a window with the price in
    effect at its start and every change after; the latest point at or before `now` is the
    price in effect (where two products differ, the higher)."""
    latest: dict[tuple[str, str], tuple[datetime.datetime, float]] = {}
    paginator = ec2.get_paginator("describe_spot_price_history")
    for page in paginator.paginate(InstanceTypes=sorted(catalog.INSTANCE_TYPES),
                                   ProductDescriptions=SPOT_PRODUCTS,
                                   StartTime=now - datetime.timedelta(hours=1), EndTime=now):
        for point in page["SpotPriceHistory"]:
            name, zone, when = point.get("InstanceType"), point.get("AvailabilityZone"), point.get("Timestamp")
            try:
                usd = float(point["SpotPrice"])
            except (KeyError, TypeError, ValueError):
                continue
            if name not in catalog.INSTANCE_TYPES or not isinstance(zone, str) or zone[:-1] != region \
                    or not isinstance(when, datetime.datetime) or when > now \
                    or not (math.isfinite(usd) and usd > 0):
                continue
            held = latest.get((name, zone))
            if held is None or when > held[0] or (when == held[0] and usd > held[1]):
                latest[(name, zone)] = (when, usd)
    prices: dict[str, dict[str, float]] = {}
    for (name, zone), (_, usd) in sorted(latest.items()):
        prices.setdefault(name, {})[zone] = usd
    return {"region": region, "source": SPOT_SOURCE,
            "fetched": now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "usd_per_hour": prices}


def write(prices: dict, path_of: Callable = catalog.price_list_path) -> str:
    """Save a fetched price list where the catalog finds it (path_of: which list); its path."""
    path = path_of(prices["region"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(prices, indent=1, sort_keys=True) + "\n")
    except OSError as e:
        raise KitError(f"{path}: cannot be written ({e.strerror}); make its folder writable") from None
    catalog.fetched_prices.cache_clear()
    catalog.fetched_spot_prices.cache_clear()
    return str(path)


def fetch_prices(values: dict, pricing=None, ec2=None) -> str:
    """`make prices` (the provider interface's fetch_prices): the values file's region."""
    return fetch_and_write(values["aws"]["region"], pricing, ec2)


def fetch_and_write(region: str, pricing=None, ec2=None) -> str:
    """Fetch `region`'s list and spot prices and save them; a one-line error for AWS's."""
    import boto3
    import botocore.exceptions

    from scripts.providers.aws.cli import require_credentials

    require_credentials()
    print(f"reading the on-demand prices of {len(catalog.INSTANCE_TYPES)} instance types and the "
          f"EBS volume types in {region} from AWS's price list (~1 minute)...", flush=True)
    pricing = pricing or boto3.client("pricing", region_name=PRICING_ENDPOINT_REGION)
    try:
        prices, skipped = fetch(region, pricing)
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
        raise KitError(f"AWS's price list (pricing:GetProducts) refused: {short(str(e), 160)}; "
                       "your identity needs pricing:GetProducts") from None
    for line in skipped:
        print(line)
    written = write(prices)
    ec2 = ec2 or boto3.client("ec2", region_name=region)
    try:
        spot = fetch_spot(region, ec2, datetime.datetime.now(datetime.timezone.utc))
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
        raise KitError(f"EC2's spot price history (ec2:DescribeSpotPriceHistory) refused: "
                       f"{short(str(e), 160)}; your identity needs ec2:DescribeSpotPriceHistory "
                       f"(the on-demand prices are in {written})") from None
    print(f"spot prices of {len(spot['usd_per_hour'])} instance types in "
          f"{len({z for zones in spot['usd_per_hour'].values() for z in zones})} zones, in effect "
          f"{spot['fetched']}")
    return f"{written} and {write(spot, catalog.spot_price_list_path)}"
