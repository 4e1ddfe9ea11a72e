"""Asking the AWS Price List API (GetProducts): the questions ``cost --refresh`` and the price builder share.

A ``Query`` is one GetProducts question (service code and ``TERM_MATCH`` filters); ``fetch`` asks it through
a boto3 ``pricing`` client (or anything with the same ``get_products`` signature), following ``NextToken``
until the answer ends, and returns the ``PriceList`` entries (JSON strings). ``ec2_query`` is the on-demand
Linux instance question both ``cost.refresh_ec2`` and ``price_build`` ask.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import ClusterKitError

PRICING_REGION = "us-east-1"  # the Price List API endpoint
FORMAT_VERSION = "aws_v1"
MAX_RESULTS = 100


class PriceError(ClusterKitError):
    """The price file or the Price List API could not be used."""


@dataclass(frozen=True)
class Query:
    """One GetProducts question; ``name`` is also the file stem of its recorded answer (tests/cost/recorded)."""

    name: str
    service_code: str
    filters: tuple[tuple[str, str], ...]

    def params(self) -> dict[str, Any]:
        return {"ServiceCode": self.service_code, "FormatVersion": FORMAT_VERSION, "MaxResults": MAX_RESULTS,
                "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in self.filters]}

    def describe(self) -> str:
        return f"GetProducts {self.service_code} ({', '.join(f'{k}={v}' for k, v in self.filters)})"


def ec2_filters(region: str, instance_type: str) -> list[dict[str, str]]:
    """On-demand Linux, shared tenancy, no pre-installed software, ordinary (not reserved) capacity."""
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in ec2_query(region, instance_type).filters]


def ec2_query(region: str, instance_type: str) -> Query:
    terms = (("instanceType", instance_type), ("regionCode", region), ("operatingSystem", "Linux"),
             ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"),
             ("licenseModel", "No License required"))
    return Query(f"ec2-{region}-{instance_type}", "AmazonEC2", terms)


def fetch(client: Any, query: Query, hint: str = "(check AWS credentials allowed pricing:GetProducts)") -> list[str]:
    """The PriceList entries (JSON strings) of every page of ``query``'s answer; one-line ``PriceError``."""
    from botocore.exceptions import BotoCoreError, ClientError

    kwargs = query.params()
    price_list: list[str] = []
    try:
        while True:
            page = client.get_products(**kwargs)
            price_list += page.get("PriceList", [])
            if not page.get("NextToken"):
                return price_list
            kwargs["NextToken"] = page["NextToken"]
    except (BotoCoreError, ClientError) as exc:
        raise PriceError(f"Price List API ({PRICING_REGION}): {exc} {hint}") from None


def on_demand_hourly(price_list: list[str]) -> float | None:
    """The hourly USD price in a GetProducts ``PriceList`` (JSON strings), from its OnDemand terms only."""
    prices = set()
    for text in price_list:
        product = json.loads(text)
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                usd = float(dim.get("pricePerUnit", {}).get("USD", "0"))
                if dim.get("unit") == "Hrs" and usd > 0:
                    prices.add(usd)
    if len(prices) > 1:
        raise PriceError(f"the Price List API gave several on-demand prices {sorted(prices)}; filters too wide")
    return prices.pop() if prices else None
