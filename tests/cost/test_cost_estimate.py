"""Cost estimates of the shipped specs, checked against figures worked by hand from prices.json.

Real: the committed price file, the spec loader and lock, the report and the CLI. The prices are the ones
clusterkit.cost.price_build made of the recorded GetProducts answers in tests/cost/recorded (reconstructed from
the sources its README.md cites); nothing is fetched here (see test_cost_refresh.py, test_price_build.py).
"""
from __future__ import annotations

import json
import shutil

import pytest

from clusterkit.cli.main import main
from clusterkit.cost import estimate as cost
from clusterkit.effective.expand import expand
from clusterkit.paths import CONFIG_DIR
from clusterkit.pipeline.loader import load, lock_or_none
from tests import shipped

HOURS_PER_MONTH = 730
DAYS_30 = 720
GIB = 1024 ** 3


def _estimate(name: str) -> cost.Estimate:
    loaded = load(name)
    return cost.estimate(expand(loaded), lock_or_none(loaded.source.path))


def test_demo_by_hand():
    est = _estimate("demo")
    # head c6i.2xlarge $0.34; NAT $0.045/h; S3: 2 images x 1.2 x 20 GiB (sizes assumed) = 48 GiB x $0.023 / 730 h;
    # FSx: 1200 GiB PERSISTENT_2 at 250 MB/s/TiB x $0.21 / 730 h
    s3 = 48 * 0.023 / HOURS_PER_MONTH
    fsx = 1200 * 0.21 / HOURS_PER_MONTH
    idle = 0.34 + 0.045 + s3 + fsx
    busy = idle + 4 * 55.04 + 8 * 0.34  # p5.48xlarge 0..4, c6i.2xlarge 0..8
    assert est.idle_hourly == pytest.approx(idle, rel=1e-12)
    assert est.busy_hourly == pytest.approx(busy, rel=1e-12)
    assert est.idle_30_days == pytest.approx(526.8368219, rel=1e-9)
    assert est.busy_30_days == pytest.approx(161000.4368219, rel=1e-9)
    assert est.missing == []


def test_p4d_existing_by_hand():
    est = _estimate("p4d-existing")
    # us-west-2: head m6i.2xlarge $0.384; p4d.24xlarge $21.95764 x 2..16; existing VPC and FSx are not counted
    assert est.idle_hourly == pytest.approx(0.384 + 2 * 21.95764, rel=1e-12)
    assert est.busy_hourly == pytest.approx(0.384 + 16 * 21.95764, rel=1e-12)
    assert est.busy_30_days == pytest.approx(253228.49280, rel=1e-9)
    assert [line.item for line in est.lines] == ["head node", "queue train/p4d", "FSx for Lustre"]
    assert est.missing == []


def test_p5_capacity_block_by_hand():
    est = _estimate("p5-capacity-block")
    # us-east-2: head c6i.4xlarge $0.68, NAT $0.045; capacity block excluded; spot c6i.2xlarge 0..4 at on-demand $0.34;
    # FSx 4800 GiB PERSISTENT_2 at 500 MB/s/TiB x $0.34; S3: 1 image x 1.2 x 20 GiB (assumed) = 24 GiB x $0.023;
    # login pool: 2 x c6i.xlarge $0.17, running idle or busy
    idle = 0.68 + 0.045 + 4800 * 0.34 / HOURS_PER_MONTH + 24 * 0.023 / HOURS_PER_MONTH + 2 * 0.17
    assert est.idle_hourly == pytest.approx(idle, rel=1e-12)
    assert est.busy_hourly == pytest.approx(idle + 4 * 0.34, rel=1e-12)
    block = next(line for line in est.lines if line.item == "queue block/p5")
    assert (block.idle, block.busy, block.note) == (
        None, None, "capacity block: billed at reservation purchase, not included")
    login = next(line for line in est.lines if line.item == "login pool login")
    assert (login.detail, login.idle, login.busy) == ("c6i.xlarge x 2", 2 * 0.17, 2 * 0.17)
    spot = next(line for line in est.lines if line.item == "queue debug/c6i")
    assert spot.note == "spot: on-demand price shown as the upper bound"
    assert est.missing == []  # the capacity block is excluded by design, not missing


@pytest.mark.parametrize("fsx,capacity,rate", [
    ("      deployment_type: SCRATCH_2\n      throughput_mb_per_tib: null\n", 1200, 0.14),
    ("      throughput_mb_per_tib: 125\n", 2400, 0.145),
])
def test_fsx_capacity_times_rate(tmp_path, fsx, capacity, rate):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nregion: us-east-1\navailability_zone: us-east-1a\nqueues:\n  - name: cpu\n"
                    "    compute_resources:\n      - name: c\n        instance_type: c6i.2xlarge\n        max: 2\n"
                    f"storage:\n  fsx_lustre:\n    new:\n      capacity_gib: {capacity}\n{fsx}"
                    "      image_store_bucket: false\n")
    est = cost.estimate(expand(load(str(path))))
    line = next(line for line in est.lines if line.item == "FSx for Lustre")
    assert line.idle == line.busy == pytest.approx(capacity * rate / HOURS_PER_MONTH, rel=1e-12)
    assert est.idle_hourly == pytest.approx(0.34 + 0.045 + capacity * rate / HOURS_PER_MONTH, rel=1e-12)
    assert [line.item for line in est.lines] == ["head node", "queue cpu/c", "FSx for Lustre", "NAT gateway",
                                                 "VPC flow logs"]


def test_a_price_the_shipped_specs_do_not_need_is_named_with_the_rebuild_command(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nregion: us-east-1\navailability_zone: us-east-1a\nqueues:\n  - name: cpu\n"
                    "    compute_resources:\n      - name: c\n        instance_type: c6i.2xlarge\n        max: 1\n"
                    "storage:\n  fsx_lustre:\n    new:\n      deployment_type: PERSISTENT_1\n")
    est = cost.estimate(expand(load(str(path))))
    assert est.missing == ["no price for FSx PERSISTENT_1 200 MB/s/TiB in us-east-1 (not in prices.json: python -m "
                           "clusterkit.cost.price_build --from-aws adds it, docs/cost.md)"]


def test_unknown_region_names_every_missing_price(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nregion: sa-east-1\navailability_zone: sa-east-1a\nqueues:\n  - name: cpu\n"
                    "    compute_resources:\n      - name: c\n        instance_type: c6i.2xlarge\n        max: 1\n")
    est = cost.estimate(expand(load(str(path))))
    assert est.idle_hourly == est.busy_hourly == 0
    assert est.missing[:2] == ["no price for c6i.2xlarge in sa-east-1 (run --refresh)"] * 2


@pytest.mark.parametrize("region,itype,hourly", [("us-east-1", "g5.12xlarge", 5.672),
                                                  ("eu-west-1", "c6i.2xlarge", 0.3648)])
def test_a_type_no_shipped_spec_names_keeps_its_price(tmp_path, region, itype, hourly):
    """Pairs the recorded answers price (tests/cost/recorded) are priced without a shipped spec."""
    path = tmp_path / "t.yaml"
    path.write_text(f"name: t\nregion: {region}\navailability_zone: {region}a\nqueues:\n  - name: q\n"
                    f"    compute_resources:\n      - name: c\n        instance_type: {itype}\n        max: 2\n")
    est = cost.estimate(expand(load(str(path))))
    assert not [m for m in est.missing if itype in m], est.missing
    compute = next(line for line in est.lines if line.item == "queue q/c")
    assert compute.busy == pytest.approx(2 * hourly, rel=1e-12)


@pytest.mark.parametrize("region,head,itype,hourly", [("us-west-2", "m6i.2xlarge", "g5.12xlarge", 5.672),
                                                       ("eu-north-1", "c6i.2xlarge", "p5.48xlarge", 58.8928),
                                                       ("eu-central-1", "c6i.2xlarge", "g6e.12xlarge", 13.12002)])
def test_gpu_nodes_are_priced_where_gpu_users_are(tmp_path, region, head, itype, hourly):
    """#35: a GPU spec outside us-east-1 prices every node (was "no price for g5.12xlarge in us-west-2"); what stays
    missing there is FSx, NAT and S3, which the price file has for us-east-1 and us-east-2 only (docs/cost.md)."""
    path = tmp_path / "t.yaml"
    path.write_text(f"name: t\nregion: {region}\navailability_zone: {region}a\nhead_node:\n  instance_type: {head}\n"
                    f"queues:\n  - name: q\n    compute_resources:\n      - name: c\n        instance_type: {itype}\n"
                    "        max: 2\n")
    est = cost.estimate(expand(load(str(path))))
    assert [cost.brief(m) for m in est.missing] == [f"FSx PERSISTENT_2 250 MB/s/TiB in {region}",
                                                    f"the NAT gateway in {region}", f"S3 Standard in {region}"]
    compute = next(line for line in est.lines if line.item == "queue q/c")
    assert compute.busy == pytest.approx(2 * hourly, rel=1e-12)
    assert est.lines[0].busy is not None


@pytest.mark.parametrize("region,itype,missing", [
    ("us-east-1", "p5.48xlarge", []),  # `clusterkit init`'s default spec: fully priced
    ("eu-central-1", "g5.12xlarge", ["FSx PERSISTENT_2 250 MB/s/TiB in eu-central-1",
                                     "the NAT gateway in eu-central-1", "S3 Standard in eu-central-1"])])
def test_an_init_spec_prices_its_nodes(tmp_path, region, itype, missing):
    """`clusterkit init`'s starter spec (head c6i.2xlarge): every node priced, in us-east-1 everything; elsewhere
    only the platform's FSx, NAT and S3 stay missing (no source for them outside us-east-1/2: docs/cost.md)."""
    from clusterkit.cli.init_command import starter_text

    path = tmp_path / "starter.yaml"
    path.write_text(starter_text(name="starter", region=region, availability_zone=f"{region}a", instance_type=itype,
                                 max_nodes=2, os_name="ubuntu2404", target=path))
    est = cost.estimate(expand(load(str(path))))
    assert [cost.brief(m) for m in est.missing] == missing
    assert est.lines[0].item == "head node" and est.lines[0].detail == "c6i.2xlarge" and est.lines[0].busy


def test_cli_report(capsys):
    assert main(["cost", "demo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "demo (us-east-1): list prices in USD; idle = min nodes, busy = max nodes"
    assert out[1].split() == ["head", "node", "c6i.2xlarge", "$0.3400/h"]
    assert out[2].split() == [
        "queue", "gpu/p5", "p5.48xlarge", "x", "0..4", "(ondemand)", "$0.0000/h", "..", "$220.1600/h"]
    assert ("  total              idle $0.7317/h = $526.84 per 30 days; busy $223.6117/h = $161,000.44 per 30 days"
            in out)
    assert out[4].split() == ["FSx", "for", "Lustre", "1200", "GiB", "PERSISTENT_2", "250", "MB/s/TiB", "$0.3452/h",
                              "[SSD:", "$0.21", "per", "GB-month]"]
    assert not [line for line in out if "no price" in line or "not in the totals" in line]
    assert "  from prices.json (instance prices c6i.2xlarge, p5.48xlarge and every other price):" in out


def test_one_line_for_make_synth():
    assert cost.one_line(_estimate("p4d-existing"), whole="python -m clusterkit cost p4d-existing") == (
        "cost estimate: $44.2993/h idle, $351.7062/h with all max nodes (30 days: $31,895.48 .. $253,228.49; "
        "list prices; python -m clusterkit cost p4d-existing)")


def test_summary_ends_with_the_estimate(tmp_path):
    from clusterkit.cli.summary_command import summarize

    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {}}))
    assert summarize(tmp_path, "demo")[-1] == "  " + cost.one_line(_estimate("demo"),
                                                                     whole="python -m clusterkit cost demo")


def test_the_summary_of_a_spec_outside_the_checkout_names_its_cost_command_by_path(tmp_path):
    """``python -m clusterkit cost NAME`` finds only the checkout's specs: a spec elsewhere is named by its path."""
    from clusterkit.cli.summary_command import summarize

    spec = tmp_path / "specs" / "demo.yaml"
    spec.parent.mkdir()
    shutil.copy(CONFIG_DIR / "demo.yaml", spec)
    shutil.copy(CONFIG_DIR / "demo.images.lock", spec.parent)
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {}}))
    last = summarize(tmp_path, str(spec))[-1]
    assert last.endswith(f"; clusterkit cost {spec})") and "python -m clusterkit cost demo" not in last


# -- the price file ------------------------------------------------------------------------------------

def test_price_file_is_sourced_dated_and_deterministic():
    text = cost.PRICES_PATH.read_text()
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    # the regions the recorded answers price (FSx, NAT and S3 in us-east-1 and us-east-2 only)
    assert {"eu-west-1", "us-east-1", "us-east-2", "us-west-2", "eu-central-1", "ap-northeast-1"} <= set(doc["regions"])
    assert [r for r, sections in doc["regions"].items() if set(sections) != {"ec2_on_demand_linux"}] == [
        "us-east-1", "us-east-2"]
    for region, sections in doc["regions"].items():
        for name, section in sections.items():
            assert section["source"].startswith("AWS Price List API (GetProducts "), (region, name)
            assert section["as_of"], (region, name)


def test_every_shipped_instance_type_has_a_price():
    book = cost.load_prices()
    for name in ("demo", "p4d-existing", "p5-capacity-block"):
        spec = expand(load(name))
        assert [t for t in cost.instance_types(spec) if book.ec2(spec.region, t) is None] == [], name


def test_30_days_is_720_hours():
    assert cost.HOURS_30_DAYS == DAYS_30


def test_a_cluster_on_a_platform_costs_its_nodes_only():
    """The platform's FSx, NAT gateway and bucket are paid once, not by each cluster on it (``cost`` adds a share
    of them: tests/cost/test_platform_cost.py)."""
    est = _estimate("train-a")
    assert [line.item for line in est.lines] == ["head node", "queue gpu/p5"]
    assert {"FSx for Lustre", "NAT gateway"} <= {line.item for line in _estimate("demo").lines}


def test_make_synth_of_a_platform_and_of_a_cluster_on_it(tmp_path):
    from clusterkit.cli.summary_command import summarize, summarize_platform

    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {}}))
    world = shipped.copy_examples(tmp_path / "specs")  # the members are the folder's: only the shipped ones here
    assert summarize_platform(tmp_path, str(world / "platforms" / "research-east.yaml")) == [
        "platform research-east (us-east-1/us-east-1a); clusters naming it: train-a, train-b",
        f"  templates: {tmp_path}/",
        "  cost estimate: $0.7369/h (30 days: $530.58; list prices; shared by 2 cluster specs; clusterkit cost "
        f"{world / 'platforms' / 'research-east.yaml'})"]  # outside the checkout: by path
    train_b = summarize(tmp_path, str(world / "train-b.yaml"))
    assert train_b[-1].startswith("  cost estimate: ")
    assert "; with 1/2 of platform research-east; " in train_b[-1]
    assert ("  on platform research-east: network and storage in Research-East-Network and Research-East-Storage "
            "(`make synth PLATFORM=research-east` builds them)") in train_b
