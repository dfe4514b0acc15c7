"""`make prices CLUSTER=...`: the on-demand list prices of CLUSTER's region, read from AWS's
own Price List Query API (pricing:GetProducts: free, your credentials; read-only), for every
instance type the kit knows and every EBS volume type, written with the date they were
read to <values dir>/prices/aws-<region>.json. scripts/catalog.py reads that file wherever
its own table has no price (it carries us-east-1 and us-east-2 only), so `make cost`,
`make plan`, `make bench` and `make up`'s estimate price the region from then on.

The Price List API answers from us-east-1 (also eu-central-1 and ap-south-1) whatever the
region priced. A product is Linux, shared tenancy, no pre-installed software, capacity
status "Used": the price `make up`'s instances bill at.
"""

import datetime
import json
import math

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


def write(prices: dict) -> str:
    """Save a fetched price list where catalog.fetched_prices finds it; its path."""
    path = catalog.price_list_path(prices["region"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(prices, indent=1, sort_keys=True) + "\n")
    except OSError as e:
        raise KitError(f"{path}: cannot be written ({e.strerror}); make its folder writable") from None
    catalog.fetched_prices.cache_clear()
    return str(path)


def fetch_prices(values: dict, pricing=None) -> str:
    """`make prices` (the provider interface's fetch_prices): the values file's region."""
    return fetch_and_write(values["aws"]["region"], pricing)


def fetch_and_write(region: str, pricing=None) -> str:
    """Fetch `region`'s prices and save them; a one-line error for AWS's."""
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
    return write(prices)
