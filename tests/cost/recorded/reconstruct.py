"""Writes the GetProducts answers in this directory: reconstructions, not captures (see README.md).

No AWS account is reachable where this project is built, so the answers ``clusterkit.cost.price_build``
replays are assembled here in the response shape boto3's ``pricing.get_products`` returns
(``{"FormatVersion": "aws_v1", "PriceList": [<JSON string>, ...], "NextToken"?}``), with product
attributes named as the Price List API names them and the prices taken from the sources cited next to
each value below (README.md lists them too). Run it after changing a value, then rebuild the price file:

    .venv/bin/python tests/cost/recorded/reconstruct.py
    .venv/bin/python -m clusterkit.cost.price_build --from-recorded tests/cost/recorded

SKUs (``RECON...``) and rate codes are made up; the OnDemand offer term code ``JRTCKXETXF`` and the
dimension suffix ``6YS6EN2CT7`` are the ones the aws-cli ``pricing get-products`` example shows. Only
OnDemand terms are reconstructed (a real EC2 answer also carries Reserved terms, which the builder
ignores), and only the products and tiers a source was found for.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TERM = "JRTCKXETXF"  # OnDemand offer term code (aws-cli pricing get-products example)
DIMENSION = "6YS6EN2CT7"

ROOT = HERE.parents[2]
# Price List `location` of each region (public Price List readers' region -> location tables, e.g. one mapping
# "ap-northeast-1" to "Asia Pacific (Tokyo)" and "eu-central-1" to "EU (Frankfurt)"; the builder reads none of them).
LOCATION = {"af-south-1": "Africa (Cape Town)", "ap-east-1": "Asia Pacific (Hong Kong)",
            "ap-northeast-1": "Asia Pacific (Tokyo)", "ap-northeast-2": "Asia Pacific (Seoul)",
            "ap-northeast-3": "Asia Pacific (Osaka)", "ap-south-1": "Asia Pacific (Mumbai)",
            "ap-southeast-1": "Asia Pacific (Singapore)", "ap-southeast-2": "Asia Pacific (Sydney)",
            "ap-southeast-3": "Asia Pacific (Jakarta)", "ca-central-1": "Canada (Central)",
            "eu-central-1": "EU (Frankfurt)", "eu-north-1": "EU (Stockholm)", "eu-south-1": "EU (Milan)",
            "eu-south-2": "EU (Spain)", "eu-west-1": "EU (Ireland)", "eu-west-2": "EU (London)",
            "eu-west-3": "EU (Paris)", "me-central-1": "Middle East (UAE)", "me-south-1": "Middle East (Bahrain)",
            "us-east-1": "US East (N. Virginia)", "us-east-2": "US East (Ohio)", "us-west-1": "US West (N. California)",
            "us-west-2": "US West (Oregon)"}
# usagetype prefixes: AWS's "Region billing codes" (docs.aws.amazon.com/global-infrastructure/latest/regions/
# aws-region-billing-codes.html, as public Price List readers copy it), none in us-east-1, EU- in eu-west-1.
PREFIX = {"af-south-1": "AFS1-", "ap-east-1": "APE1-", "ap-northeast-1": "APN1-", "ap-northeast-2": "APN2-",
          "ap-northeast-3": "APN3-", "ap-south-1": "APS3-", "ap-southeast-1": "APS1-", "ap-southeast-2": "APS2-",
          "ap-southeast-3": "APS4-", "ca-central-1": "CAN1-", "eu-central-1": "EUC1-", "eu-north-1": "EUN1-",
          "eu-south-1": "EUS1-", "eu-south-2": "EUS2-", "eu-west-1": "EU-", "eu-west-2": "EUW2-", "eu-west-3": "EUW3-",
          "me-central-1": "MEC1-", "me-south-1": "MES1-", "us-east-1": "", "us-east-2": "USE2-", "us-west-1": "USW1-",
          "us-west-2": "USW2-"}

# When each source was read or generated: the answers' publicationDate, hence the price file's as_of.
KARPENTER = "2026-01-19T13:23:24Z"  # aws/karpenter-provider-aws zz_generated.pricing_aws.go "generated at"
READ = "2026-11-30T00:00:00Z"  # the day the sources of the previous hand-curated prices.json were read
READ_NOW = "2026-12-01T00:00:00Z"  # the day the FSx tier table below was read
READ_GPU = "2026-12-06T00:00:00Z"  # the day the SkyPilot rows in EXTRACT were read

# EC2 on-demand Linux prices: exactly the values of the previous, hand-curated clusterkit/data/prices.json
# (commit a604446, the version before clusterkit.cost.price_build), each with the source that file's
# `ec2_on_demand_linux` section cited for its region (quoted below), for every (region, instance type) it
# priced (the shipped specs' types are all among them); EXTRACT below adds the rest. This table is the record of
# which us-east-1 price comes from Karpenter's file. vCPUs and memory: clusterkit/data/instance_types.json.
SKYPILOT = ("skypilot-org/skypilot-catalog catalogs/v8/aws/vms.csv @ 00148f2af3672e2229b4f7bf8157d5a3f36e3c35 "
            "(SkyPilot's catalog built from the AWS Price List API; column Price = on-demand Linux)")
KARPENTER_SOURCE = ("aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go (\"generated at "
                    "2026-01-19T13:23:24Z for us-east-1\" from the AWS Price List API; on-demand Linux, shared "
                    "tenancy); every value checked against skypilot-org/skypilot-catalog catalogs/v8/aws/vms.csv "
                    "@ 00148f2af3672e2229b4f7bf8157d5a3f36e3c35 where that file has the type")
# region -> (publicationDate, source, {instance type: USD per hour})
EC2_PRICES: dict[str, tuple[str, str, dict[str, str]]] = {
    "eu-west-1": (READ, SKYPILOT, {
        "c5.4xlarge": "0.768", "c5.large": "0.096",
        "c6i.2xlarge": "0.3648", "c6i.4xlarge": "0.7296", "c6i.8xlarge": "1.4592", "c6i.large": "0.0912",
        "c6i.xlarge": "0.1824",
        "m6i.2xlarge": "0.428", "m6i.4xlarge": "0.856", "m6i.8xlarge": "1.712", "m6i.large": "0.107",
        "p4d.24xlarge": "23.71569",
    }),
    "us-east-1": (KARPENTER, KARPENTER_SOURCE, {
        "c5.2xlarge": "0.34", "c5.4xlarge": "0.68", "c5.large": "0.085", "c5.xlarge": "0.17",
        "c6i.2xlarge": "0.34", "c6i.4xlarge": "0.68", "c6i.8xlarge": "1.36", "c6i.large": "0.085",
        "c6i.xlarge": "0.17",
        "g5.12xlarge": "5.672", "g5.48xlarge": "16.288", "g5.xlarge": "1.006",
        "g6.12xlarge": "4.6016", "g6.48xlarge": "13.3504", "g6.xlarge": "0.8048",
        "m6i.2xlarge": "0.384", "m6i.4xlarge": "0.768", "m6i.large": "0.096", "m6i.xlarge": "0.192",
        "p4d.24xlarge": "21.957642", "p4de.24xlarge": "27.44705", "p5.48xlarge": "55.04",
        "p5en.48xlarge": "63.296", "p6-b200.48xlarge": "113.9328",
    }),
    "us-east-2": (READ, SKYPILOT, {
        "c5.4xlarge": "0.68", "c5.large": "0.085",
        "c6i.2xlarge": "0.34", "c6i.4xlarge": "0.68", "c6i.8xlarge": "1.36", "c6i.large": "0.085",
        "c6i.xlarge": "0.17",
        "m6i.2xlarge": "0.384", "m6i.4xlarge": "0.768", "m6i.large": "0.096",
        "p4d.24xlarge": "21.95764", "p5.48xlarge": "55.04", "p5en.48xlarge": "63.296",
        "p6-b200.48xlarge": "113.9328",
    }),
    "us-west-2": (READ, SKYPILOT, {
        "c5.2xlarge": "0.34", "c5.4xlarge": "0.68", "c5.large": "0.085",
        "c6i.2xlarge": "0.34", "c6i.4xlarge": "0.68", "c6i.8xlarge": "1.36", "c6i.large": "0.085",
        "c6i.xlarge": "0.17",
        "m6i.2xlarge": "0.384", "m6i.4xlarge": "0.768", "m6i.large": "0.096",
        "p4d.24xlarge": "21.95764", "p4de.24xlarge": "27.44705", "p5.48xlarge": "55.04",
        "p5en.48xlarge": "63.296", "p6-b200.48xlarge": "113.9328",
    }),
}


# More EC2 prices, where GPU users are: the rows of SKYPILOT's vms.csv read on READ_GPU, as "type region price"
# lines (the file's header says how they were taken). A pair EC2_PRICES already prices must agree with it.
EXTRACT = HERE / "skypilot-vms-v8-00148f2a.txt"
# Every region's EC2 prices are recorded as its whole answer (``ec2-<region>``, the question a build asks), in
# pages of PAGE products with NextToken ``page-N``: one answer per region keeps this directory small (one file per
# (region, type) would be hundreds) and exercises the builder's paging.
PAGE = 40


def extract() -> dict[tuple[str, str], str]:
    """(region, instance type) -> USD per hour, from EXTRACT."""
    rows = [line.split() for line in EXTRACT.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    return {(region, itype): usd for itype, region, usd in rows}


def _ec2() -> dict[tuple[str, str], tuple[str, int, int, str, str]]:
    """(region, instance type) -> (USD per hour to 10 decimals, vCPUs, memory GiB, publicationDate, source)."""
    shapes = json.loads((ROOT / "clusterkit" / "data" / "instance_types.json").read_text())["instance_types"]
    listed = {(region, itype): (usd, published, source)
              for region, (published, source, prices) in EC2_PRICES.items() for itype, usd in prices.items()}
    for pair, usd in extract().items():
        if pair in listed and float(listed[pair][0]) != float(usd):
            raise SystemExit(f"{EXTRACT.name}: {pair} is {usd}, EC2_PRICES says {listed[pair][0]}")
        listed.setdefault(pair, (usd, READ_GPU, SKYPILOT))
    return {(region, itype): (f"{float(usd):.10f}", shapes[itype]["vcpus"], shapes[itype]["memory_mib"] // 1024,
                              published, source)
            for (region, itype), (usd, published, source) in sorted(listed.items())}


def ec2_answer_name(region: str) -> str:
    """The query name whose answer records ``region``'s instance prices (``price_list.ec2_region_query``)."""
    return f"ec2-{region}"


EC2 = _ec2()

# region -> [(deploymentOption, throughputCapacity, USD per GB-month, publicationDate, source)]
FSX = {
    "us-east-1": [
        ("Scratch", "N/A", "0.1400000000", READ, "learning-aws.readthedocs.io resources/pricing (Scratch 2)"),
        ("Persistent", "125", "0.1450000000", READ, "c3x.dev aws_fsx_lustre_file_system (SSD 125 MB/s/TiB)"),
        ("Persistent", "250", "0.2100000000", READ_NOW, "public FSx monitor's 'FSx for Lustre pricing (us-east-1)'"),
        ("Persistent", "500", "0.3400000000", READ_NOW, "public FSx monitor's 'FSx for Lustre pricing (us-east-1)'"),
        ("Persistent", "1000", "0.6000000000", READ_NOW, "public FSx monitor's 'FSx for Lustre pricing (us-east-1)'"),
    ],
    # NOT region-specific: no us-east-2 source was found; the us-east-1 figure, on the unverified assumption
    # that FSx for Lustre lists the same price in both US East regions (README.md says so in bold).
    "us-east-2": [
        ("Persistent", "500", "0.3400000000", READ_NOW, "ASSUMED equal to us-east-1 (no us-east-2 source found)"),
    ],
}

# region -> ((per hour, per GB), publicationDate, source)
NAT = {
    "us-east-1": (("0.0450000000", "0.0450000000"), READ, "basavytix.com/blog/aws-nat-gateway-pricing"),
    "us-east-2": (("0.0450000000", "0.0450000000"), READ,
                  "cloudburn.io/blog/aws-nat-gateway-pricing (hourly), hub.pointfive.co CER-0325 (per GB)"),
}

# region -> ([(beginRange, endRange, USD per GB-month)], publicationDate, source)
S3 = {
    "us-east-1": ([("0", "51200", "0.0230000000"), ("51200", "512000", "0.0220000000"),
                   ("512000", "Inf", "0.0210000000")], READ,
                  "learning-aws.readthedocs.io resources/pricing (first 50 TB); SaimShaikh/Cloud_Computing "
                  "AWS/AWS_S3/AWS_S3_Pricing.md (all three tiers)"),
    "us-east-2": ([("0", "51200", "0.0230000000")], READ,
                  "public rate table S3_STANDARD_USD_PER_GB_MONTH ('Source: the AWS Price List API'; first tier)"),
}


def _sku(*parts: str) -> str:
    return "RECON" + hashlib.sha256("/".join(parts).encode()).hexdigest()[:11].upper()


def _product(sku: str, family: str, service: str, region: str, attributes: dict[str, str],
             dims: list[tuple[str, str, str, str, str]], published: str) -> str:
    """One PriceList entry; dims are (unit, beginRange, endRange, USD, description)."""
    code = f"{sku}.{TERM}"
    dimensions = {}
    for i, (unit, begin, end, usd, description) in enumerate(dims):
        rate = f"{code}.{DIMENSION}" if i == 0 else f"{code}.{_sku(sku, str(i))[5:15]}"
        dimensions[rate] = {"rateCode": rate, "description": description, "beginRange": begin, "endRange": end,
                            "unit": unit, "pricePerUnit": {"USD": usd}, "appliesTo": []}
    stamp = published.replace("-", "").replace(":", "").replace("T", "").rstrip("Z")
    return json.dumps({
        "product": {"productFamily": family, "sku": sku, "attributes": {
            "servicecode": service, "location": LOCATION[region], "locationType": "AWS Region",
            "regionCode": region, **attributes}},
        "serviceCode": service,
        "terms": {"OnDemand": {code: {"offerTermCode": TERM, "sku": sku, "effectiveDate": published,
                                      "priceDimensions": dimensions, "termAttributes": {}}}},
        "version": stamp, "publicationDate": published}, sort_keys=True)


def _answer(price_list: list[str], next_token: str | None = None) -> dict[str, Any]:
    page: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": price_list}
    if next_token:
        page["NextToken"] = next_token
    return page


def answers() -> dict[str, dict[str, Any]]:
    """File stem -> GetProducts answer page."""
    out: dict[str, dict[str, Any]] = {}
    whole: dict[str, list[str]] = {}  # query name -> its products, a region's in type order
    for (region, itype), (usd, vcpu, gib, published, _source) in EC2.items():
        attributes = {"instanceType": itype, "instanceFamily": "GPU instance" if itype.startswith(("p", "g"))
                      else "Compute optimized" if itype.startswith("c") else "General purpose",
                      "vcpu": str(vcpu), "memory": f"{gib} GiB", "operatingSystem": "Linux", "tenancy": "Shared",
                      "preInstalledSw": "NA", "capacitystatus": "Used", "licenseModel": "No License required",
                      "marketoption": "OnDemand", "operation": "RunInstances", "currentGeneration": "Yes",
                      "usagetype": f"{PREFIX[region]}BoxUsage:{itype}", "servicename": "Amazon Elastic Compute Cloud"}
        dim = ("Hrs", "0", "Inf", usd, f"${float(usd):g} per On Demand Linux {itype} Instance Hour")
        whole.setdefault(ec2_answer_name(region), []).append(
            _product(_sku(region, itype), "Compute Instance", "AmazonEC2", region, attributes, [dim], published))
    for name, products in whole.items():
        pages = [products[i:i + PAGE] for i in range(0, len(products), PAGE)]
        for n, page in enumerate(pages, start=1):
            token = f"page-{n + 1}" if n < len(pages) else None
            out[name if n == 1 else f"{name}.page-{n}"] = _answer(page, token)
    for region, rows in FSX.items():
        products = []
        for option, tier, usd, published, _source in rows:
            attributes = {"fileSystemType": "Lustre", "storageType": "SSD", "deploymentOption": option,
                          "throughputCapacity": tier, "servicename": "Amazon FSx",
                          "usagetype": f"{PREFIX[region]}{option}-Lustre-SSD-Storage" + ("" if tier == "N/A" else
                                                                                           f"-{tier}MBps")}
            what = "scratch" if option == "Scratch" else f"persistent {tier} MB/s/TiB"
            dim = ("GB-Mo", "0", "Inf", usd, f"${float(usd):g} per GB-month of Lustre {what} SSD storage")
            products.append(_product(_sku(region, option, tier), "Storage", "AmazonFSx", region, attributes, [dim],
                                     published))
        if region == "us-east-1":  # two pages, so the recorded replay exercises NextToken as the API pages
            out[f"fsx-{region}"] = _answer(products[:2], "page-2")
            out[f"fsx-{region}.page-2"] = _answer(products[2:])
        else:
            out[f"fsx-{region}"] = _answer(products)
    for region, ((hourly, per_gb), published, _source) in NAT.items():
        hours = {"usagetype": f"{PREFIX[region]}NatGateway-Hours", "operation": "NatGateway", "group": "NGW:NatGateway",
                 "groupDescription": "Hourly charge for NAT Gateways", "servicename": "Amazon Elastic Compute Cloud"}
        data = {"usagetype": f"{PREFIX[region]}NatGateway-Bytes", "operation": "NatGateway",
                "group": "NGW:NatGateway", "groupDescription": "Charge for per GB data processed by NAT Gateways",
                "servicename": "Amazon Elastic Compute Cloud"}
        out[f"nat-{region}"] = _answer([
            _product(_sku(region, "nat-hours"), "NAT Gateway", "AmazonEC2", region, hours,
                     [("Hrs", "0", "Inf", hourly, f"${float(hourly):g} per NAT Gateway Hour")], published),
            _product(_sku(region, "nat-bytes"), "NAT Gateway", "AmazonEC2", region, data,
                     [("GB", "0", "Inf", per_gb, f"${float(per_gb):g} per GB - data processed by NAT Gateways")],
                     published)])
    for region, (tiers, published, _source) in S3.items():
        attributes = {"storageClass": "General Purpose", "volumeType": "Standard", "availability": "99.99%",
                      "durability": "99.999999999%", "usagetype": f"{PREFIX[region]}TimedStorage-ByteHrs",
                      "operation": "", "servicename": "Amazon Simple Storage Service"}
        dims = [("GB-Mo", begin, end, usd, f"${float(usd):g} per GB-month of storage used ({begin}-{end} GB)")
                for begin, end, usd in tiers]
        out[f"s3-{region}"] = _answer([_product(_sku(region, "s3-standard"), "Storage", "AmazonS3", region,
                                                attributes, dims, published)])
    return out


# The short form of each EC2 source, as the price file names it (the long forms above are this file's record).
EC2_SHORT = {KARPENTER_SOURCE: "aws/karpenter-provider-aws zz_generated.pricing_aws.go (generated 2026-01-19 from the "
                               "Price List API)",
             SKYPILOT: "skypilot-org/skypilot-catalog catalogs/v8/aws/vms.csv @ 00148f2a (built from the Price List "
                       "API)"}


def _dated(source: str, published: str) -> str:
    """``source, read YYYY-MM-DD``; a source that carries its own date (generated ...) or is an assumption, as is."""
    return source if "generated 20" in source or source.startswith("ASSUMED") else f"{source}, read {published[:10]}"


def provenance() -> dict[str, str]:
    """Query name -> the public source its answer reconstructs and when that was read (price_build's
    ``provenance.json``: the price file names these, never this directory)."""
    out: dict[str, str] = {}
    ec2: dict[str, dict[str, set[str]]] = {}  # query name -> short source -> the days it was read
    for (region, _itype), (_usd, _vcpu, _gib, published, source) in EC2.items():
        ec2.setdefault(ec2_answer_name(region), {}).setdefault(EC2_SHORT[source], set()).add(published)
    out.update({name: "; ".join(_dated(source, min(days)) if len(days) == 1 or "generated 20" in source else
                                f"{source}, read {' and '.join(sorted(d[:10] for d in days))}"
                                for source, days in sorted(sources.items()))
                for name, sources in ec2.items()})
    for region, rows in FSX.items():
        out[f"fsx-{region}"] = "; ".join(sorted({_dated(source, published) for *_, published, source in rows}))
    for region, (_rates, published, source) in NAT.items():
        out[f"nat-{region}"] = _dated(source, published)
    for region, (_tiers, published, source) in S3.items():
        out[f"s3-{region}"] = _dated(source, published)
    return dict(sorted(out.items()))


def main() -> None:
    for old in HERE.glob("*.json"):
        old.unlink()
    for name, page in sorted(answers().items()):
        (HERE / f"{name}.json").write_text(json.dumps(page, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {name}.json")
    (HERE / "provenance.json").write_text(json.dumps(provenance(), indent=2) + "\n", encoding="utf-8")
    print("wrote provenance.json")


if __name__ == "__main__":
    main()
