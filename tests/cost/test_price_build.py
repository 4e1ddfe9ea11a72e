"""The price builder (clusterkit.cost.price_build): prices.json from AWS Price List API (GetProducts) answers.

Real: boto3's ``pricing`` client and botocore's request validation against the service model (the Stubber
checks every parameter the builder sends, page by page), the catalog (coverage follows it, never the
checkout's specs), the committed price file and ``cost.estimate``. Stand-in: the answers, recorded in
tests/cost/recorded/ in GetProducts' response shape but reconstructed from cited sources, not captured
from AWS (its README.md says where each value comes from). No network, no credentials.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from botocore.stub import Stubber

from clusterkit.cost import estimate as cost
from clusterkit.cost import price_build
from clusterkit.cost import price_list as price_list_module
from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load, lock_or_none
from tests import shipped

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests" / "cost" / "recorded"
COMMITTED = REPO / "clusterkit" / "data" / "prices.json"
STALE = f"clusterkit/data/prices.json is not the build of tests/cost/recorded: run `{price_build.REPLAY}`"


def _pages(name: str, directory: Path = RECORDED) -> list[dict]:
    """The recorded answer pages of one query, in order (following NextToken)."""
    pages = [json.loads((directory / f"{name}.json").read_text())]
    while pages[-1].get("NextToken"):
        pages.append(json.loads((directory / f"{name}.{pages[-1]['NextToken']}.json").read_text()))
    return pages


def _stub(stubber: Stubber, query: price_build.Query, pages: list[dict]) -> None:
    token = None
    for page in pages:
        expected = query.params() | ({"NextToken": token} if token else {})
        stubber.add_response("get_products", page, expected)
        token = page.get("NextToken")


@pytest.fixture(scope="module")
def needs():
    """What the recorded answers price of the coverage (every type and region the catalog accepts)."""
    return price_build.recorded(RECORDED, price_build.coverage())


def _answer(query: price_build.Query, needs) -> list[dict]:
    """The pages the recordings give for ``query`` (a region's EC2 answer: the union of its per-type answers)."""
    client = price_build.recorded_client(RECORDED, needs)
    pages = [client.get_products(**query.params())]
    while pages[-1].get("NextToken"):
        pages.append(client.get_products(**query.params(), NextToken=pages[-1]["NextToken"]))
    return pages


# -- the committed file is what the builder makes of the recorded answers ---------------------------------

def test_price_file_is_the_build_of_the_recorded_answers(pricing, needs):
    client, stubber = pricing
    for query in price_build.plan(needs):
        _stub(stubber, query, _answer(query, needs))
    doc = price_build.build(client, needs, provenance=price_build.recorded_provenance(RECORDED))
    assert price_build.render(doc) == COMMITTED.read_text(encoding="utf-8"), STALE


def test_cli_replay_writes_the_committed_bytes(tmp_path):
    out = tmp_path / "prices.json"
    assert price_build.main(["--from-recorded", str(RECORDED), "--out", str(out)]) == 0
    assert out.read_bytes() == COMMITTED.read_bytes(), STALE
    assert price_build.main(["--from-recorded", "tests/cost/recorded", "--out", str(out)]) == 0
    assert out.read_bytes() == COMMITTED.read_bytes(), "the recorded directory's name must not depend on the cwd"


def test_every_section_names_its_service_code_and_publication_date():
    doc = json.loads(COMMITTED.read_text())
    assert doc["as_of"] == "2026-12-06"  # the newest publicationDate among the answers, not the build day
    for region, sections in doc["regions"].items():
        for name, section in sections.items():
            assert section["source"].startswith(f"AWS Price List API (GetProducts {price_build.SECTION_SERVICE[name]})")
            assert "prices reconstructed from public sources, not a live read: " in section["source"], (region, name)
    assert doc["regions"]["us-east-1"]["ec2_on_demand_linux"]["as_of"] == "2026-12-06"  # its newest answer
    assert doc["regions"]["eu-west-1"]["ec2_on_demand_linux"]["as_of"] == "2026-12-06"  # g5.12xlarge added then
    assert doc["regions"]["us-east-2"]["fsx_lustre_usd_per_gb_month"]["as_of"] == "2026-12-01"


def test_as_of_argument_overrides_the_publication_dates(tmp_path):
    out = tmp_path / "prices.json"
    assert price_build.main(["--from-recorded", str(RECORDED), "--as-of", "2000-01-02", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["as_of"] == "2000-01-02"
    assert {s["as_of"] for sections in doc["regions"].values() for s in sections.values()} == {"2000-01-02"}


# -- what is asked: coverage from the catalog ----------------------------------------------------------

def test_coverage_is_every_type_and_region_the_catalog_accepts():
    """Was: a hand list of 66 pairs (price_build.EC2_COVERAGE) plus the checkout's specs; g5.12xlarge in us-west-2
    was never asked for."""
    from clusterkit.catalog import lookup

    covered = price_build.coverage()
    assert sorted(covered) == lookup.regions() and len(covered) == 30
    assert all((n.fsx, n.nat, n.s3) == (True, True, True) for n in covered.values())
    assert "g5.12xlarge" in covered["us-west-2"].instance_types  # regions.json: offered in us-west-2a/b/c
    assert "p5en.48xlarge" not in covered["eu-west-1"].instance_types  # regions.json: offered in no eu-west-1 AZ
    assert "t3.micro" in covered["eu-west-1"].instance_types  # no offerings recorded: accepted, so asked
    assert all(set(n.instance_types) <= set(lookup.instance_type_names()) for n in covered.values())


def test_the_recordings_answer_what_is_committed(needs):
    """``--from-recorded`` asks only what the recordings hold (the rest of the coverage: `cost` names it missing)."""
    covered = price_build.coverage()
    services = {"us-east-1": (True, True, True), "us-east-2": (True, True, True)}
    assert needs == {r: price_build.Needs(covered[r].instance_types, *services.get(r, ()))  # asked whole: every type
                     for r in RECORDED_REGIONS}
    assert not list(RECORDED.glob("ec2-*-*.*xlarge.json"))  # no per-type recordings left


# -- coverage: never less than the hand-curated file the builder replaced ----------------------------------

# Every (region, instance type) the previous prices.json (hand-curated, before clusterkit.cost.price_build) priced:
# 66 pairs, 25 types, 4 regions. Spelled out here, apart from the recordings and the catalog, so that shrinking the
# coverage (or the file) fails a test instead of silently turning a user's price into "no price".
PREVIOUS_COVERAGE = {
    "eu-west-1": "c5.4xlarge c5.large c6i.2xlarge c6i.4xlarge c6i.8xlarge c6i.large c6i.xlarge m6i.2xlarge "
                 "m6i.4xlarge m6i.8xlarge m6i.large p4d.24xlarge",
    "us-east-1": "c5.2xlarge c5.4xlarge c5.large c5.xlarge c6i.2xlarge c6i.4xlarge c6i.8xlarge c6i.large c6i.xlarge "
                 "g5.12xlarge g5.48xlarge g5.xlarge g6.12xlarge g6.48xlarge g6.xlarge m6i.2xlarge m6i.4xlarge "
                 "m6i.large m6i.xlarge p4d.24xlarge p4de.24xlarge p5.48xlarge p5en.48xlarge p6-b200.48xlarge",
    "us-east-2": "c5.4xlarge c5.large c6i.2xlarge c6i.4xlarge c6i.8xlarge c6i.large c6i.xlarge m6i.2xlarge "
                 "m6i.4xlarge m6i.large p4d.24xlarge p5.48xlarge p5en.48xlarge p6-b200.48xlarge",
    "us-west-2": "c5.2xlarge c5.4xlarge c5.large c6i.2xlarge c6i.4xlarge c6i.8xlarge c6i.large c6i.xlarge "
                 "m6i.2xlarge m6i.4xlarge m6i.large p4d.24xlarge p4de.24xlarge p5.48xlarge p5en.48xlarge "
                 "p6-b200.48xlarge",
}
PREVIOUS_PAIRS = {(region, t) for region, types in PREVIOUS_COVERAGE.items() for t in types.split()}
# Regions with a recorded EC2 answer, each recorded whole (``ec2-<region>``, tests/cost/recorded/README.md): the four
# the previous file priced and those SkyPilot's rows added for #35.
RECORDED_REGIONS = ("af-south-1", "ap-east-1", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1",
                    "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ca-central-1", "eu-central-1", "eu-north-1",
                    "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3", "me-central-1", "me-south-1",
                    "us-east-1", "us-east-2", "us-west-1", "us-west-2")


def _priced_pairs(doc: dict) -> dict[tuple[str, str], float]:
    return {(region, t): usd for region, sections in doc["regions"].items()
            for t, usd in sections.get("ec2_on_demand_linux", {}).get("usd_per_hour", {}).items()}


def test_previous_coverage_is_66_pairs_of_25_types_in_4_regions():
    assert (len(PREVIOUS_PAIRS), len({t for _, t in PREVIOUS_PAIRS}), len(PREVIOUS_COVERAGE)) == (66, 25, 4)


def test_coverage_keeps_every_previously_priced_pair():
    covered = {(region, t) for region, need in price_build.coverage().items() for t in need.instance_types}
    assert sorted(PREVIOUS_PAIRS - covered) == []


def _recorded_ec2_prices() -> dict[tuple[str, str], float]:
    """(region, type) -> USD/h of every product in the recorded EC2 answers, per type or whole-region."""
    out = {}
    for path in RECORDED.glob("ec2-*.json"):
        for entry in json.loads(path.read_text())["PriceList"]:
            product = json.loads(entry)
            attributes = product["product"]["attributes"]
            (term,) = product["terms"]["OnDemand"].values()
            (dim,) = term["priceDimensions"].values()
            out[(attributes["regionCode"], attributes["instanceType"])] = float(dim["pricePerUnit"]["USD"])
    return out


def test_price_file_prices_exactly_what_the_recordings_answer():
    priced = _priced_pairs(json.loads(COMMITTED.read_text()))
    assert priced == _recorded_ec2_prices()
    assert sorted(PREVIOUS_PAIRS - set(priced)) == []


def test_gpu_prices_where_gpu_users_are():
    """#35: GPU types are priced beyond us-east-1 (from SkyPilot's catalog, recorded/README.md), each at the
    price its region's row gives; where that catalog has no on-demand price (p5e.48xlarge) none is made up."""
    priced = _priced_pairs(json.loads(COMMITTED.read_text()))
    assert {key: priced.get(key) for key in [
        ("us-west-2", "g5.12xlarge"), ("eu-central-1", "g5.12xlarge"), ("ap-northeast-1", "p5.48xlarge"),
        ("eu-west-2", "p5.48xlarge"), ("eu-north-1", "p5en.48xlarge"), ("us-west-2", "g6e.12xlarge"),
        ("ca-central-1", "p4d.24xlarge"), ("us-west-2", "p6-b200.48xlarge")]} == {
        ("us-west-2", "g5.12xlarge"): 5.672, ("eu-central-1", "g5.12xlarge"): 7.09282,
        ("ap-northeast-1", "p5.48xlarge"): 68.8, ("eu-west-2", "p5.48xlarge"): 71.552,
        ("eu-north-1", "p5en.48xlarge"): 67.72672, ("us-west-2", "g6e.12xlarge"): 10.49264,
        ("ca-central-1", "p4d.24xlarge"): 25.25174, ("us-west-2", "p6-b200.48xlarge"): 113.9328}
    assert not [pair for pair in priced if pair[1] == "p5e.48xlarge"]
    regions = {r for r, t in priced if t.split(".")[0] in {"g4dn", "g5", "g6", "g6e", "p4d", "p4de", "p5", "p5en"}}
    assert len(regions) >= 20, sorted(regions)


def test_skypilot_rows_agree_with_the_karpenter_prices_they_overlap():
    """A column slip in the extract (Price vs SpotPrice) would show here: us-east-1 is priced from Karpenter's
    file, and every SkyPilot row read for a us-east-1 type Karpenter prices must carry the same price."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reconstruct", RECORDED / "reconstruct.py")
    assert spec is not None and spec.loader is not None
    reconstruct = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reconstruct)
    karpenter = reconstruct.EC2_PRICES["us-east-1"][2]
    overlap = {t: usd for (region, t), usd in reconstruct.extract().items() if region == "us-east-1" and t in karpenter}
    assert len(overlap) >= 7
    assert {t: float(usd) for t, usd in overlap.items()} == {t: float(karpenter[t]) for t in overlap}


def test_previous_prices_are_carried_over_unchanged():
    """The reconstructed answers reuse the previous file's values (and its sources: recorded/README.md)."""
    previous = {  # a sample, one per source and family, as the previous file had them
        ("us-east-1", "g5.12xlarge"): 5.672, ("us-east-1", "p4d.24xlarge"): 21.957642,
        ("us-east-1", "p6-b200.48xlarge"): 113.9328, ("us-east-2", "p5en.48xlarge"): 63.296,
        ("us-west-2", "p4de.24xlarge"): 27.44705, ("us-west-2", "p4d.24xlarge"): 21.95764,
        ("eu-west-1", "p4d.24xlarge"): 23.71569, ("eu-west-1", "c6i.2xlarge"): 0.3648,
    }
    priced = _priced_pairs(json.loads(COMMITTED.read_text()))
    assert {key: priced[key] for key in previous} == previous


def test_no_fsx_nat_or_s3_section_without_an_answer(needs):
    assert (needs["us-west-2"].fsx, needs["us-west-2"].nat, needs["us-west-2"].s3) == (False, False, False)
    doc = json.loads(COMMITTED.read_text())
    services = ["ec2_on_demand_linux", "fsx_lustre_usd_per_gb_month", "nat_gateway", "s3_standard_usd_per_gb_month"]
    assert {region: sorted(sections) for region, sections in doc["regions"].items()} == {
        **{r: ["ec2_on_demand_linux"] for r in RECORDED_REGIONS},
        "us-east-1": services, "us-east-2": services}


def _filters(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in pairs]


# Every question the build asks, spelled out so a reviewer sees it: service code and filters per query, in the
# order the build asks them (per region: EC2, then FSx, NAT and S3 where recorded).
EC2 = (("operatingSystem", "Linux"), ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"),
       ("licenseModel", "No License required"))
PINNED = {
    "ec2-eu-west-1": ("AmazonEC2", _filters(("regionCode", "eu-west-1"), *EC2)),
    "ec2-us-east-1": ("AmazonEC2", _filters(("regionCode", "us-east-1"), *EC2)),
    "fsx-us-east-1": ("AmazonFSx", _filters(("regionCode", "us-east-1"), ("productFamily", "Storage"),
                                            ("fileSystemType", "Lustre"), ("storageType", "SSD"))),
    "nat-us-east-1": ("AmazonEC2", _filters(("regionCode", "us-east-1"), ("productFamily", "NAT Gateway"))),
    "s3-us-east-1": ("AmazonS3", _filters(("regionCode", "us-east-1"), ("productFamily", "Storage"),
                                          ("volumeType", "Standard"))),
    "ec2-us-east-2": ("AmazonEC2", _filters(("regionCode", "us-east-2"), *EC2)),
    "fsx-us-east-2": ("AmazonFSx", _filters(("regionCode", "us-east-2"), ("productFamily", "Storage"),
                                            ("fileSystemType", "Lustre"), ("storageType", "SSD"))),
    "nat-us-east-2": ("AmazonEC2", _filters(("regionCode", "us-east-2"), ("productFamily", "NAT Gateway"))),
    "s3-us-east-2": ("AmazonS3", _filters(("regionCode", "us-east-2"), ("productFamily", "Storage"),
                                          ("volumeType", "Standard"))),
    "ec2-us-west-2": ("AmazonEC2", _filters(("regionCode", "us-west-2"), *EC2)),
    **{f"ec2-{region}": ("AmazonEC2", _filters(("regionCode", region), *EC2)) for region in RECORDED_REGIONS},
}
PINNED = dict(sorted(PINNED.items(), key=lambda item: (item[0].split("-", 1)[1], item[0].split("-")[0])))


def test_filters_sent_to_get_products_are_pinned(pricing, needs):
    """The Stubber fails the build on any parameter that differs from these literals."""
    client, stubber = pricing
    for name, (service, filters) in PINNED.items():
        token = None
        query = next(q for q in price_build.plan(needs) if q.name == name)
        for page in _answer(query, needs):
            expected = {"ServiceCode": service, "Filters": filters, "FormatVersion": "aws_v1", "MaxResults": 100}
            stubber.add_response("get_products", page, expected | ({"NextToken": token} if token else {}))
            token = page.get("NextToken")
    price_build.build(client, needs)
    assert [q.name for q in price_build.plan(needs)] == list(PINNED)


def test_a_region_answer_is_paged_and_read_per_type(pricing):
    """A live build asks one question per region (``ec2_region_query``) and follows its pages: here us-east-1's
    recorded products re-paged in three, the previous file's 24 types read from them as it priced them."""
    client, stubber = pricing
    region = {"us-east-1": price_build.Needs(tuple(sorted(PREVIOUS_COVERAGE["us-east-1"].split())))}
    entries = [e for page in _answer(price_build.ec2_region_query("us-east-1"), region) for e in page["PriceList"]]
    assert len(entries) > 24
    pages = [{"FormatVersion": "aws_v1", "PriceList": entries[:10], "NextToken": "p2"},
             {"FormatVersion": "aws_v1", "PriceList": entries[10:20], "NextToken": "p3"},
             {"FormatVersion": "aws_v1", "PriceList": entries[20:]}]
    _stub(stubber, price_build.ec2_region_query("us-east-1"), pages)
    doc = price_build.build(client, region, provenance=price_build.recorded_provenance(RECORDED))
    committed = json.loads(COMMITTED.read_text())["regions"]["us-east-1"]["ec2_on_demand_linux"]["usd_per_hour"]
    assert doc["regions"]["us-east-1"]["ec2_on_demand_linux"]["usd_per_hour"] == {
        t: committed[t] for t in region["us-east-1"].instance_types}


def test_cost_refresh_asks_the_builders_ec2_query(pricing):
    client, stubber = pricing
    stubber.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []},
                         price_build.ec2_query("us-east-2", "c6i.4xlarge").params())
    cost.refresh_ec2(cost.load_prices(), "us-east-2", ["c6i.4xlarge"], client)


# -- pagination ------------------------------------------------------------------------------------------

def test_next_token_pages_are_followed_and_joined(pricing):
    client, stubber = pricing
    query = price_build.fsx_query("us-east-1")
    pages = _pages("fsx-us-east-1")
    assert len(pages) == 2 and pages[0]["NextToken"] == "page-2" and "NextToken" not in pages[1]
    _stub(stubber, query, pages)  # the second request must carry NextToken=page-2
    price_list = price_build.fetch(client, query)
    assert price_list == pages[0]["PriceList"] + pages[1]["PriceList"]
    found = price_list_module.rates(query, price_list_module.products(query, price_list))
    assert price_build.fsx_prices(query, found) == {
        "PERSISTENT_2/1000": 0.6, "PERSISTENT_2/125": 0.145, "PERSISTENT_2/250": 0.21, "PERSISTENT_2/500": 0.34,
        "SCRATCH_2": 0.14}


def test_refresh_follows_next_token_too(pricing):
    client, stubber = pricing
    query = price_build.ec2_query("us-east-1", "p5.48xlarge")
    page = {"FormatVersion": "aws_v1", "PriceList": [  # the product the region's recorded answer has for the type
        e for p in _pages("ec2-us-east-1") for e in p["PriceList"] if '"instanceType": "p5.48xlarge"' in e]}
    assert len(page["PriceList"]) == 1
    _stub(stubber, query, [{"FormatVersion": "aws_v1", "PriceList": [], "NextToken": "more"}, page])
    book, unknown = cost.refresh_ec2(cost.load_prices(), "us-east-1", ["p5.48xlarge"], client)
    assert (book.refreshed, unknown) == ({("us-east-1", "p5.48xlarge"): 55.04}, [])


# -- answers that lack what is needed: one line, no traceback, no file ------------------------------------

def _edit_recording(tmp_path: Path, name: str, edit) -> Path:
    directory = tmp_path / "recorded"
    shutil.copytree(RECORDED, directory)
    path = directory / f"{name}.json"
    page = json.loads(path.read_text())
    page["PriceList"] = edit(page["PriceList"])
    path.write_text(json.dumps(page))
    return directory


def _run_failing(directory: Path, tmp_path: Path, capsys) -> str:
    out = tmp_path / "prices.json"
    assert price_build.main(["--from-recorded", str(directory), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert not out.exists() and captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    return captured.err


def _drop_tier(tier: str):
    return lambda entries: [e for e in entries if f'"throughputCapacity": "{tier}"' not in e]


def test_a_tier_the_answer_lacks_is_left_out(tmp_path, capsys):
    """Was an error while the shipped specs decided which tiers were needed; now the answer decides what is priced,
    and ``cost`` names a tier it lacks as missing."""
    directory = _edit_recording(tmp_path, "fsx-us-east-1.page-2", _drop_tier("250"))
    out = tmp_path / "prices.json"
    assert price_build.main(["--from-recorded", str(directory), "--out", str(out)]) == 0
    book = cost.load_prices(out)
    assert (book.fsx("us-east-1", "PERSISTENT_2/250"), book.fsx("us-east-1", "PERSISTENT_2/500")) == (None, 0.34)


def test_fsx_answer_without_a_readable_price_is_a_one_line_error(tmp_path, capsys):
    directory = _edit_recording(tmp_path, "fsx-us-east-2", lambda entries: [e.replace('"GB-Mo"', '"Qty"')
                                                                            for e in entries])
    err = _run_failing(directory, tmp_path, capsys)
    assert err == ("price_build: GetProducts AmazonFSx (regionCode=us-east-2, productFamily=Storage, "
                   "fileSystemType=Lustre, storageType=SSD): the answer has products but no FSx for Lustre GB-month "
                   f"price (rebuild with `{price_build.REBUILD}` or check the filters)\n")


def test_ec2_answer_without_an_hourly_price_is_a_one_line_error(tmp_path, capsys):
    assert "NextToken" not in json.loads((RECORDED / "ec2-af-south-1.json").read_text())  # the whole answer
    directory = _edit_recording(tmp_path, "ec2-af-south-1", lambda entries: [e.replace('"Hrs"', '"Qty"')
                                                                             for e in entries])
    err = _run_failing(directory, tmp_path, capsys)
    assert err.startswith("price_build: GetProducts AmazonEC2 (regionCode=af-south-1, ")
    assert "the answer has products but no on-demand hourly price" in err


def test_an_empty_answer_writes_no_section_and_cost_names_the_price_missing(tmp_path, capsys):
    """AWS selling nothing of a kind in a region (an empty answer) is no error: the price stays missing."""
    directory = _edit_recording(tmp_path, "nat-us-east-2", lambda entries: [])
    out = tmp_path / "prices.json"
    assert price_build.main(["--from-recorded", str(directory), "--out", str(out)]) == 0
    book = cost.load_prices(out)
    assert book.nat("us-east-2") is None and book.nat("us-east-1") == (0.045, 0.045)
    assert f"instance prices for {len(_priced_pairs(json.loads(COMMITTED.read_text())))} of " in capsys.readouterr().out


def test_price_dimension_without_usd_is_a_one_line_error(tmp_path, capsys):
    def strip_usd(entries):
        product = json.loads(entries[0])
        for term in product["terms"]["OnDemand"].values():
            for dim in term["priceDimensions"].values():
                dim["pricePerUnit"] = {"CNY": "0.33"}
        return [json.dumps(product)]

    err = _run_failing(_edit_recording(tmp_path, "s3-us-east-2", strip_usd), tmp_path, capsys)
    assert "GetProducts AmazonS3 (regionCode=us-east-2" in err and "without a USD price" in err


def test_nat_answer_without_the_per_gb_product_is_a_one_line_error(tmp_path, capsys):
    directory = _edit_recording(tmp_path, "nat-us-east-2", lambda entries: [e for e in entries if "Bytes" not in e])
    err = _run_failing(directory, tmp_path, capsys)
    assert "GetProducts AmazonEC2 (regionCode=us-east-2, productFamily=NAT Gateway): the answer has no " \
           "NatGateway-Bytes price (GB)" in err


def test_two_prices_for_one_key_mean_the_filters_were_too_wide():
    query = price_build.s3_query("us-east-1")
    (page,) = _pages(query.name)
    dearer = page["PriceList"][0].replace('"USD": "0.0230000000"', '"USD": "0.0250000000"')
    products = price_list_module.products(query, [page["PriceList"][0], dearer])
    with pytest.raises(cost.PriceError, match=r"several prices for .* \[0.023, 0.025\]; filters too wide"):
        price_build.s3_rate(query, price_list_module.rates(query, products))


def test_unknown_fsx_products_are_ignored():
    assert price_build.fsx_key({"fileSystemType": "Lustre", "storageType": "HDD", "deploymentOption": "Persistent",
                                "throughputCapacity": "12"}) is None
    assert price_build.fsx_key({"fileSystemType": "Windows", "storageType": "SSD"}) is None
    assert price_build.fsx_key({"fileSystemType": "Lustre", "storageType": "SSD", "deploymentOption": "Persistent",
                                "throughputCapacity": "200"}) == "PERSISTENT_1/200"
    assert price_build.fsx_key({"fileSystemType": "Lustre", "storageType": "SSD", "deploymentOption": "Persistent",
                                "throughputCapacity": "N/A"}) is None


def test_from_aws_without_credentials_is_a_one_line_error(no_aws_credentials, tmp_path, capsys):
    out = tmp_path / "prices.json"
    assert price_build.main(["--from-aws", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "credentials" in captured.err and not out.exists()


# -- command line --------------------------------------------------------------------------------------

def test_regions_rebuilds_only_those_and_keeps_the_rest(tmp_path):
    out = tmp_path / "prices.json"
    doc = json.loads(COMMITTED.read_text())
    doc["regions"]["us-east-1"]["nat_gateway"]["usd_per_hour"] = 9.99  # kept as it is: not rebuilt
    doc["regions"]["us-west-2"]["ec2_on_demand_linux"]["usd_per_hour"]["m6i.2xlarge"] = 9.99  # rebuilt
    out.write_text(json.dumps(doc))
    assert price_build.main(["--from-recorded", str(RECORDED), "--regions", "us-west-2", "--out", str(out)]) == 0
    rebuilt = json.loads(out.read_text())
    assert rebuilt["regions"]["us-east-1"]["nat_gateway"]["usd_per_hour"] == 9.99
    assert rebuilt["regions"]["us-west-2"] == json.loads(COMMITTED.read_text())["regions"]["us-west-2"]


@pytest.mark.parametrize("argv", [[], ["--from-recorded", "x", "--from-aws"], ["--from-aws", "--as-of", "2026-13-01"],
                                  ["--from-recorded", str(RECORDED), "--regions", "xx-nowhere-1"]])
def test_usage_errors_exit_2(argv, tmp_path):
    out = tmp_path / "prices.json"
    with pytest.raises(SystemExit) as exc:
        price_build.main([*argv, "--out", str(out)])
    assert exc.value.code == 2 and not out.exists()


# -- every shipped spec gets a complete estimate ----------------------------------------------------------

@pytest.mark.parametrize("path", shipped.spec_paths(), ids=lambda p: p.stem)
def test_every_shipped_spec_has_a_complete_estimate(path):
    loaded = load(str(path))
    est = cost.estimate(expand(loaded), lock_or_none(loaded.source.path))
    assert est.missing == []
    assert all(line.idle is not None or line.note for line in est.lines), est.lines
    blocks = [line for line in est.lines if "(capacity_block)" in line.detail]
    assert all(line.note == "capacity block: billed at reservation purchase, not included" for line in blocks)


def test_the_capacity_block_is_excluded_by_design_not_missing():
    loaded = load("p5-capacity-block")
    est = cost.estimate(expand(loaded), lock_or_none(loaded.source.path))
    block = next(line for line in est.lines if line.item == "queue block/p5")
    assert (block.idle, block.busy, block.missing) == (None, None, "")
