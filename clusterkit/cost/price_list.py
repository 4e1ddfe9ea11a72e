"""Asking the AWS Price List API (GetProducts): the questions ``cost --refresh`` and the price builder share.

A ``Query`` is one GetProducts question (service code and ``TERM_MATCH`` filters); ``fetch`` asks it through
a boto3 ``pricing`` client (or anything with the same ``get_products`` signature), following ``NextToken``
until the answer ends, and returns the ``PriceList`` entries (JSON strings). ``ec2_query`` is the on-demand
Linux instance question both ``cost.refresh_ec2`` and ``price_build`` ask.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterkit.spec.errors import ClusterKitError

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


def ec2_query(region: str, instance_type: str) -> Query:
    """On-demand Linux, shared tenancy, no pre-installed software, ordinary (not reserved) capacity."""
    terms = (("instanceType", instance_type), ("regionCode", region), ("operatingSystem", "Linux"),
             ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"),
             ("licenseModel", "No License required"))
    return Query(f"ec2-{region}-{instance_type}", "AmazonEC2", terms)


def ec2_region_query(region: str) -> Query:
    """``ec2_query`` without the instance type: every on-demand Linux type of ``region`` in one (paged) answer, how
    the price builder asks for a whole region (one question per type would be tens of thousands)."""
    terms = tuple(t for t in ec2_query(region, "").filters if t[0] != "instanceType")
    return Query(f"ec2-{region}", "AmazonEC2", terms)


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


@dataclass(frozen=True)
class Rate:
    """One OnDemand price dimension of a product."""

    attributes: Mapping[str, str]
    unit: str
    usd: float
    begin: str  # beginRange: "0" for the first tier


def products(query: Query, price_list: Sequence[str]) -> list[dict[str, Any]]:
    """The PriceList entries as objects; a malformed one is a one-line ``PriceError`` naming the query."""
    found = []
    for text in price_list:
        try:
            product = json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise PriceError(f"{query.describe()}: a PriceList entry is not JSON ({exc})") from None
        if not isinstance(product, dict):
            raise PriceError(f"{query.describe()}: a PriceList entry is not a JSON object")
        found.append(product)
    return found


def rates(query: Query, found: Sequence[Mapping[str, Any]]) -> list[Rate]:
    """Every OnDemand price dimension of the products (Reserved and other terms are ignored)."""
    out = []
    for product in found:
        attributes = product.get("product", {}).get("attributes", {})
        sku = product.get("product", {}).get("sku", "?")
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                usd = dim.get("pricePerUnit", {}).get("USD")
                try:
                    value = float(usd)
                except (TypeError, ValueError):
                    raise PriceError(f"{query.describe()}: product {sku} has an OnDemand price dimension without "
                                     f"a USD price (pricePerUnit.USD = {usd!r})") from None
                out.append(Rate(attributes, str(dim.get("unit", "")), round(value, 10),
                                str(dim.get("beginRange", "0"))))
    return out


def hourly_by_type(query: Query, found: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The hourly USD price of each ``instanceType`` among the products (``on_demand_hourly`` per type)."""
    by_type: dict[str, list[Mapping[str, Any]]] = {}
    for product in found:
        itype = product.get("product", {}).get("attributes", {}).get("instanceType")
        if itype:
            by_type.setdefault(str(itype), []).append(product)
    prices = {t: on_demand_hourly(query, products) for t, products in sorted(by_type.items())}
    return {t: price for t, price in prices.items() if price is not None}


def on_demand_hourly(query: Query, found: Sequence[Mapping[str, Any]]) -> float | None:
    """The hourly USD price among the products' OnDemand terms; None when there is none."""
    prices = {rate.usd for rate in rates(query, found) if rate.unit == "Hrs" and rate.usd > 0}
    if len(prices) > 1:
        raise PriceError(f"{query.describe()}: the Price List API gave several on-demand prices {sorted(prices)}; "
                         "filters too wide")
    return prices.pop() if prices else None
