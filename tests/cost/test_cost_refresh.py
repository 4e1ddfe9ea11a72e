"""``cost --refresh``: instance prices from the AWS Price List API (GetProducts), through a real boto3 client.

Real: boto3's ``pricing`` client and botocore's request validation against the service model (the
Stubber checks our exact parameters). Stand-in: the answers, built like GetProducts answers are
(PriceList = JSON strings with product, serviceCode, terms.OnDemand.*.priceDimensions — the shape of
the aws-cli ``pricing get-products`` example), with prices chosen by the test. No network.
"""
from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from clusterkit.cli.main import main
from clusterkit.cost import estimate as cost
from clusterkit.cost import price_list as price_list_module
from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load, lock_or_none


def _product(instance_type: str, usd: str, region: str = "us-east-1", term: str = "OnDemand") -> str:
    sku = "ABCDEFGH12345678"
    code = f"{sku}.JRTCKXETXF"
    return json.dumps({
        "product": {"productFamily": "Compute Instance", "sku": sku, "attributes": {
            "instanceType": instance_type, "regionCode": region, "location": "US East (N. Virginia)",
            "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
            "licenseModel": "No License required", "usagetype": f"BoxUsage:{instance_type}",
            "servicecode": "AmazonEC2", "operation": "RunInstances"}},
        "serviceCode": "AmazonEC2",
        "terms": {term: {code: {
            "offerTermCode": "JRTCKXETXF", "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "termAttributes": {},
            "priceDimensions": {f"{code}.6YS6EN2CT7": {
                "rateCode": f"{code}.6YS6EN2CT7", "unit": "Hrs", "beginRange": "0", "endRange": "Inf", "appliesTo": [],
                "description": f"${float(usd):g} per On Demand Linux {instance_type} Instance Hour",
                "pricePerUnit": {"USD": usd}}}}}},
        "version": "20261120001122", "publicationDate": "2026-11-20T00:11:22Z"})


def _expect(stubber: Stubber, instance_type: str, price_list: list[str], region: str = "us-east-1") -> None:
    stubber.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": price_list}, {
        "ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "MaxResults": 100,
        "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in [
            ("instanceType", instance_type), ("regionCode", region), ("operatingSystem", "Linux"),
            ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"),
            ("licenseModel", "No License required")]]})


def test_refresh_replaces_file_prices_and_names_the_rest(pricing):
    client, stubber = pricing
    demo = load("demo")
    _expect(stubber, "c6i.2xlarge", [])  # the API has nothing: the file's price stays
    _expect(stubber, "p5.48xlarge", [_product("p5.48xlarge", "54.0000000000")])
    book, unknown = cost.refresh_ec2(cost.load_prices(), "us-east-1", cost.instance_types(expand(demo)), client)
    assert unknown == ["c6i.2xlarge"]
    est = cost.estimate(expand(demo), lock_or_none(demo.source.path), book)
    assert est.refreshed == ("p5.48xlarge",)
    fsx = 1200 * 0.21 / 730  # prices.json: PERSISTENT_2 at 250 MB/s/TiB
    assert est.busy_hourly == pytest.approx(0.34 + 4 * 54.0 + 8 * 0.34 + 0.045 + 48 * 0.023 / 730 + fsx, rel=1e-12)
    text = cost.report(est, book, unknown)
    assert "  from the AWS Price List API now: p5.48xlarge" in text
    assert "  the AWS Price List API has no on-demand Linux price for c6i.2xlarge in us-east-1" in text
    assert "  from prices.json (instance prices c6i.2xlarge and every other price):" in text


def _hourly(price_list: list[str]) -> float | None:
    query = price_list_module.ec2_query("us-east-1", "p5.48xlarge")
    return price_list_module.on_demand_hourly(query, price_list_module.products(query, price_list))


def test_only_on_demand_hourly_terms_count():
    reserved = _product("p5.48xlarge", "30.0000000000", term="Reserved")
    free = _product("p5.48xlarge", "0.0000000000")
    assert _hourly([reserved, free, _product("p5.48xlarge", "55.0400000000")]) == 55.04
    assert _hourly([reserved]) is None


def test_two_prices_mean_the_filters_were_too_wide():
    with pytest.raises(cost.PriceError, match="several on-demand prices"):
        _hourly([_product("p5.48xlarge", "55.04"), _product("p5.48xlarge", "98.32")])


def test_api_error_is_one_line(pricing):
    client, stubber = pricing
    stubber.add_client_error("get_products", service_error_code="AccessDeniedException",
                             service_message="User is not authorized to perform pricing:GetProducts")
    with pytest.raises(cost.PriceError) as info:
        cost.refresh_ec2(cost.load_prices(), "us-east-1", ["p5.48xlarge"], client)
    (line,) = info.value.lines()
    assert line.startswith("Price List API (us-east-1): An error occurred (AccessDeniedException)")
    assert line.endswith("(check AWS credentials, or drop --refresh)")


def test_cli_refresh_uses_the_pricing_endpoint(monkeypatch, capsys):
    """``cost --refresh`` asks the us-east-1 Price List endpoint for each instance type of the spec."""
    client = boto3.client("pricing", region_name="us-east-1")
    stubber = Stubber(client)
    for itype, usd in (("m6i.2xlarge", "0.3840000000"), ("p4d.24xlarge", "21.9576400000")):
        _expect(stubber, itype, [_product(itype, usd, region="us-west-2")], region="us-west-2")
    asked = []
    monkeypatch.setattr(boto3, "client",
                        lambda service, region_name=None: asked.append((service, region_name)) or client)
    with stubber:
        assert main(["cost", "p4d-existing", "--refresh"]) == 0
    assert asked == [("pricing", "us-east-1")]
    out = capsys.readouterr().out
    assert "  from the AWS Price List API now: m6i.2xlarge, p4d.24xlarge" in out
    assert "  from prices.json (every other price):" in out
