"""Tests for the offline instance/region catalog.

Real: the committed clusterkit/data files and the EC2 API snapshot moto 5.2.5 ships (real AWS responses
captured by moto's maintainers at some past date). Stand-in: `mock_aws` plays EC2 for the `--from-aws`
path, serving that same snapshot, so it proves the boto3 paginator code and the response handling, not
that today's AWS matches the committed data.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.catalog import build as catalog_build
from clusterkit.catalog import lookup as catalog

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "clusterkit" / "data"


def _committed(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# --- facts from the shipped data --------------------------------------------------------------------


def test_p5_48xlarge_matches_describe_instance_types():
    p5 = catalog.instance_type("p5.48xlarge")
    assert p5 is not None
    assert (p5.gpus, p5.gpu_model, p5.gpu_manufacturer, p5.gpu_memory_gib) == (8, "H100", "NVIDIA", 80.0)
    assert (p5.efa_supported, p5.max_efa_interfaces, p5.max_network_cards) == (True, 32, 32)
    assert (p5.nvme_count, p5.nvme_gib) == (8, 30400)
    assert (p5.arch, p5.vcpus, p5.memory_mib, p5.current_generation) == ("x86_64", 192, 2 * 1024 * 1024, True)


def test_p4d_24xlarge_has_8_a100_and_4_efa():
    p4d = catalog.instance_type("p4d.24xlarge")
    assert p4d is not None
    assert (p4d.gpus, p4d.gpu_model, p4d.gpu_memory_gib) == (8, "A100", 40.0)
    assert (p4d.efa_supported, p4d.max_efa_interfaces, p4d.max_network_cards) == (True, 4, 4)


@pytest.mark.parametrize(
    ("name", "model", "efa"),
    [("p5en.48xlarge", "H200", 16), ("p6-b200.48xlarge", "B200", 8), ("p5e.48xlarge", "H200", 32)],
)
def test_newer_gpu_types_are_in_the_snapshot(name, model, efa):
    it = catalog.instance_type(name)
    assert it is not None, f"{name} missing: the moto snapshot is older than expected"
    assert (it.gpus, it.gpu_model, it.max_efa_interfaces) == (8, model, efa)


def test_cpu_type_without_efa_or_gpu():
    c5 = catalog.instance_type("c5.large")
    assert c5 is not None
    assert (c5.arch, c5.vcpus, c5.memory_mib) == ("x86_64", 2, 4096)
    assert (c5.gpus, c5.gpu_model, c5.gpu_manufacturer, c5.gpu_memory_gib) == (0, None, None, 0.0)
    assert (c5.efa_supported, c5.max_efa_interfaces, c5.nvme_gib, c5.nvme_count) == (False, 0, 0, 0)


def test_arm64_types():
    c7g = catalog.instance_type("c7g.16xlarge")
    g5g = catalog.instance_type("g5g.xlarge")
    assert c7g is not None and g5g is not None
    assert (c7g.arch, c7g.efa_supported, c7g.gpus) == ("arm64", True, 0)
    assert (g5g.arch, g5g.gpu_model, g5g.gpus, g5g.efa_supported) == ("arm64", "T4g", 1, False)


def test_fractional_gpu_type_reports_zero_whole_gpus():
    """g6f shares an L4: the API's Count is 0 (what PC turns into Slurm GRES), the model is still named."""
    g6f = catalog.instance_type("g6f.large")
    assert g6f is not None
    assert (g6f.gpus, g6f.gpu_model) == (0, "L4")
    assert 0 < g6f.gpu_memory_gib < 24


def test_whole_catalog_is_internally_consistent():
    names = catalog.instance_type_names()
    assert len(names) > 1000 and names == sorted(names)
    for name in names:
        it = catalog.instance_type(name)
        assert it is not None and it.name == name
        assert it.arch in ("x86_64", "arm64") or it.arch.endswith("_mac"), name
        assert it.vcpus > 0 and it.memory_mib > 0, name
        assert (it.max_efa_interfaces > 0) == it.efa_supported, name
        assert it.max_efa_interfaces <= it.max_network_cards <= it.max_network_interfaces, name
        assert (it.gpu_model is None) == (it.gpu_memory_gib == 0.0) == (it.gpu_manufacturer is None), name
        assert it.gpus == 0 or it.gpu_model is not None, name
        assert (it.nvme_gib == 0) == (it.nvme_count == 0), name


def test_unknown_names_return_none():
    assert catalog.instance_type("p99.48xlarge") is None
    assert catalog.instance_type("") is None
    assert catalog.region_azs("xx-nowhere-1") is None
    assert catalog.offered_azs("xx-nowhere-1", "p5.48xlarge") is None
    # Known region, type whose offerings are not recorded (neither GPU, EFA nor a head-node family).
    assert catalog.offered_azs("us-east-1", "t3.micro") is None
    assert catalog.offered_azs("us-east-1", "p99.48xlarge") is None


def test_regions_and_offerings():
    assert {"us-east-1", "us-west-2", "eu-west-1"} <= set(catalog.regions())
    azs = catalog.region_azs("us-east-1")
    assert azs == [f"us-east-1{z}" for z in "abcdef"]
    p5 = catalog.offered_azs("us-east-1", "p5.48xlarge")
    assert p5 and set(p5) <= set(azs) and p5 == sorted(p5)
    # Head-node family recorded everywhere it is offered.
    assert catalog.offered_azs("us-east-1", "m6i.xlarge")
    # A recorded type that a region lacks: known absence ([]), not "no data" (None).
    assert catalog.offered_azs("af-south-1", "p5en.48xlarge") == []
    for region in catalog.regions():
        region_zones = catalog.region_azs(region)
        assert region_zones and all(re.fullmatch(re.escape(region) + "[a-z]", z) for z in region_zones)


def test_returned_lists_are_copies():
    catalog.region_azs("us-east-1").append("bogus")
    catalog.offered_azs("us-east-1", "p5.48xlarge").append("bogus")
    assert "bogus" not in catalog.region_azs("us-east-1")
    assert "bogus" not in catalog.offered_azs("us-east-1", "p5.48xlarge")


def test_catalog_source_names_api_and_date():
    source, as_of = catalog.catalog_source()
    assert "DescribeInstanceTypes" in source and "--from-aws" in source
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", as_of)


# --- the committed files are what the generator produces ----------------------------------------------


def test_data_files_are_up_to_date_with_moto_snapshot():
    as_of = json.loads(_committed(catalog_build.INSTANCE_TYPES_FILE))["as_of"]
    types_doc, regions_doc = catalog_build.from_moto(as_of)
    hint = f"stale catalog data: run `python -m clusterkit.catalog.build --as-of {as_of}`"
    assert catalog_build.render_instance_types(types_doc) == _committed(catalog_build.INSTANCE_TYPES_FILE), hint
    assert catalog_build.render_regions(regions_doc) == _committed(catalog_build.REGIONS_FILE), hint


def test_every_moto_region_is_present():
    az_dir = catalog_build.moto_resources() / "instance_type_offerings" / "availability-zone"
    assert catalog.regions() == sorted(p.name.split(".", 1)[0] for p in az_dir.glob("*.json*"))


def test_rendered_text_is_the_json_document_with_sorted_keys():
    types_doc, regions_doc = catalog_build.from_moto("2000-01-02")
    for doc, text in (
        (types_doc, catalog_build.render_instance_types(types_doc)),
        (regions_doc, catalog_build.render_regions(regions_doc)),
    ):
        assert json.loads(text) == doc
        assert json.dumps(json.loads(text), sort_keys=True) == json.dumps(json.loads(text))


def test_file_sizes_stay_small():
    assert (DATA / "instance_types.json").stat().st_size < 600_000
    assert (DATA / "regions.json").stat().st_size < 1_000_000


# --- --from-aws, with moto standing in for EC2 ---------------------------------------------------------


@pytest.fixture
def fake_aws(monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    from moto import mock_aws

    with mock_aws():
        yield


def test_from_aws_matches_committed_data_for_one_region(fake_aws):
    """mock_aws serves moto's snapshot through the real EC2 API shape (XML, paginators, boto3 parsing)."""
    types_doc, regions_doc = catalog_build.from_aws(["us-east-1"], "2000-01-02")
    committed_types = json.loads(_committed(catalog_build.INSTANCE_TYPES_FILE))
    committed_regions = json.loads(_committed(catalog_build.REGIONS_FILE))
    assert types_doc["instance_types"] == committed_types["instance_types"]
    assert regions_doc["regions"] == {"us-east-1": committed_regions["regions"]["us-east-1"]}
    assert "boto3" in types_doc["source"] and "us-east-1" in types_doc["source"]


def test_from_aws_without_credentials_is_a_one_line_error(no_aws_credentials, tmp_path, capsys):
    code = catalog_build.main(["--from-aws", "--regions", "us-east-1", "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "credentials" in err
    assert not list(tmp_path.glob("*.json"))


# --- generator edge cases (synthetic API entries for shapes the snapshot lacks) -----------------------


def _entry(**overrides):
    base = {
        "InstanceType": "x9.large",
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
        "VCpuInfo": {"DefaultVCpus": 2},
        "MemoryInfo": {"SizeInMiB": 4096},
        "NetworkInfo": {
            "EfaSupported": False,
            "MaximumNetworkCards": 1,
            "MaximumNetworkInterfaces": 3,
            "Ipv4AddressesPerInterface": 10,
        },
        "CurrentGeneration": True,
    }
    base.update(overrides)
    return base


def test_architecture_prefers_x86_64_or_arm64():
    assert catalog_build.instance_facts(_entry(ProcessorInfo={"SupportedArchitectures": ["i386", "x86_64"]}))[
        "arch"
    ] == "x86_64"
    mac = _entry(ProcessorInfo={"SupportedArchitectures": ["arm64_mac"]})
    assert catalog_build.instance_facts(mac)["arch"] == "arm64_mac"


def test_efa_without_efa_info_counts_one_interface():
    network = dict(_entry()["NetworkInfo"], EfaSupported=True)
    assert catalog_build.instance_facts(_entry(NetworkInfo=network))["max_efa_interfaces"] == 1


def test_non_nvme_instance_store_is_not_counted():
    storage = {"TotalSizeInGB": 800, "Disks": [{"Count": 2, "SizeInGB": 400}], "NvmeSupport": "unsupported"}
    facts = catalog_build.instance_facts(_entry(InstanceStorageInfo=storage))
    assert (facts["nvme_gib"], facts["nvme_count"]) == (0, 0)


def test_mixed_gpu_kinds_fail_loudly():
    gpus = [
        {"Count": 1, "Name": "A", "Manufacturer": "NVIDIA", "MemoryInfo": {"SizeInMiB": 1024}},
        {"Count": 1, "Name": "B", "Manufacturer": "NVIDIA", "MemoryInfo": {"SizeInMiB": 1024}},
    ]
    with pytest.raises(catalog_build.BuildError, match="mixed GPU"):
        catalog_build.instance_facts(_entry(GpuInfo={"Gpus": gpus}))


def test_local_zones_do_not_become_region_azs():
    offerings = {
        "us-west-2": [
            {"InstanceType": "x9.large", "Location": "us-west-2a"},
            {"InstanceType": "x9.large", "Location": "us-west-2-lax-1a"},
        ]
    }
    _, regions_doc = catalog_build.build_catalog(
        [_entry()], offerings, types_source="t", offerings_source="o", as_of="2000-01-02"
    )
    assert regions_doc["regions"]["us-west-2"]["azs"] == ["us-west-2a"]


# --- command line -----------------------------------------------------------------------------------


def test_cli_writes_deterministic_files(tmp_path):
    out = tmp_path / "data"
    assert catalog_build.main(["--as-of", "2000-01-02", "--out-dir", str(out)]) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert catalog_build.main(["--from-moto", "--as-of", "2000-01-02", "--out-dir", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    assert set(first) == {"instance_types.json", "regions.json"}
    assert json.loads(first["instance_types.json"])["as_of"] == "2000-01-02"


@pytest.mark.parametrize("argv", [["--as-of", "2026-13-01"], ["--regions", "us-east-1"], ["--from-aws", "--from-moto"]])
def test_cli_usage_errors_exit_2(argv, tmp_path):
    with pytest.raises(SystemExit) as exc:
        catalog_build.main([*argv, "--out-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert not list(tmp_path.iterdir())


def test_catalog_import_is_light_and_fast():
    """A fresh interpreter: no boto3/moto pulled in, import + first lookups well under 100 ms normally."""
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "import clusterkit.catalog.lookup as c\n"
        "assert c.instance_type('p5.48xlarge').gpus == 8\n"
        "assert c.offered_azs('us-east-1', 'p5.48xlarge')\n"
        "elapsed = time.perf_counter() - t\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'moto', 'yaml'))\n"
        "print(elapsed, heavy)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    elapsed, heavy = out.stdout.split(" ", 1)
    assert heavy.strip() == "[]"
    # Generous bound: the 2-core CI box is shared; typical is ~30 ms.
    assert float(elapsed) < 0.5
