"""Generate the offline instance/region catalog (clusterkit/data/*.json) from EC2 API responses.

Validation must run without AWS credentials, so the facts it needs are distilled here from
`DescribeInstanceTypes` / `DescribeInstanceTypeOfferings` responses and committed. Two sources give the
same response shapes:

* ``--from-moto`` (default): the snapshot of both responses that moto ships. Reproducible anywhere, but it
  lags AWS by however old the installed moto is.
* ``--from-aws --regions r1,r2``: boto3 paginators against a real account; refreshes the data.

Output is deterministic (sorted keys, one line per instance type / offering, no timestamp other than the
explicit ``--as-of`` date), so a test can regenerate it and compare bytes.

    python -m clusterkit.catalog.build [--from-moto | --from-aws [--regions r1,r2]] [--as-of YYYY-MM-DD]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import importlib.metadata
import importlib.util
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from clusterkit.atomic import write_text
from clusterkit.paths import DATA_DIR, INSTANCE_TYPES, REGIONS

INSTANCE_TYPES_FILE = INSTANCE_TYPES.name  # written into --out-dir (default DATA_DIR)
REGIONS_FILE = REGIONS.name

# Architectures ParallelCluster can run; others (i386, *_mac) are only kept when nothing better exists.
ARCHITECTURES = ("x86_64", "arm64")
# Offerings are recorded for GPU and EFA types (compute queues) plus these families (head/login nodes);
# everything else would bloat regions.json without helping validation.
HEAD_NODE_FAMILIES = frozenset({"c5", "c6i", "c7i", "m5", "m6i", "m7i", "r6i"})
# Block device storage that Linux exposes as NVMe (PC mounts it as an EphemeralVolume).
_NVME = frozenset({"required", "supported"})

REFRESH = "`python -m clusterkit.catalog.build --from-aws` refreshes it"


class BuildError(Exception):
    """A problem the person running the build can fix (bad argument, unreadable snapshot, AWS error)."""


# ---------------------------------------------------------------------------------------------------
# Distilling API responses


def instance_facts(info: Mapping[str, Any]) -> dict[str, Any]:
    """Reduce one DescribeInstanceTypes entry to the facts ClusterKit validates against.

    `gpus` is the API's whole-GPU `Count` (what PC uses for Slurm GRES), so fractional-GPU types (g6f,
    gr6f) have gpus=0 while gpu_model still names the partitioned GPU. `nvme_gib` is the API's
    `TotalSizeInGB` verbatim (AWS's instance-store unit), counted only when the storage is NVMe.
    """
    name = info["InstanceType"]
    archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures") or []
    arch = next((a for a in archs if a in ARCHITECTURES), archs[0] if archs else "unknown")

    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    models = {(g.get("Name"), g.get("Manufacturer"), g.get("MemoryInfo", {}).get("SizeInMiB")) for g in gpus}
    if len(models) > 1:
        # One row per type cannot describe mixed GPUs; fail loudly rather than record half the truth.
        raise BuildError(f"{name}: mixed GPU kinds {sorted(map(str, models))} do not fit the catalog schema")
    gpu_model, gpu_manufacturer, gpu_mib = next(iter(models)) if models else (None, None, None)

    network = info.get("NetworkInfo", {})
    efa_supported = bool(network.get("EfaSupported", False))
    max_efa = network.get("EfaInfo", {}).get("MaximumEfaInterfaces")
    if max_efa is None:
        max_efa = 1 if efa_supported else 0  # older responses: EfaSupported without EfaInfo means one

    storage = info.get("InstanceStorageInfo") or {}
    nvme = storage.get("NvmeSupport") in _NVME
    return {
        "arch": arch,
        "vcpus": int(info["VCpuInfo"]["DefaultVCpus"]),
        "memory_mib": int(info["MemoryInfo"]["SizeInMiB"]),
        "gpus": int(sum(g.get("Count", 0) for g in gpus)),
        "gpu_model": gpu_model,
        "gpu_manufacturer": gpu_manufacturer,
        "gpu_memory_gib": (gpu_mib or 0) / 1024,
        "efa_supported": efa_supported,
        "max_efa_interfaces": int(max_efa),
        "max_network_cards": int(network.get("MaximumNetworkCards", 1)),
        "max_network_interfaces": int(network["MaximumNetworkInterfaces"]),
        "ipv4_per_interface": int(network["Ipv4AddressesPerInterface"]),
        "nvme_gib": int(storage.get("TotalSizeInGB", 0)) if nvme else 0,
        "nvme_count": int(sum(d.get("Count", 0) for d in storage.get("Disks", []))) if nvme else 0,
        "current_generation": bool(info.get("CurrentGeneration", False)),
    }


def wants_offerings(name: str, facts: Mapping[str, Any] | None) -> bool:
    """Whether regions.json records where `name` is offered (GPU, EFA, or head-node family)."""
    if name.split(".", 1)[0] in HEAD_NODE_FAMILIES:
        return True
    return facts is not None and (facts["gpu_model"] is not None or facts["efa_supported"])


def build_catalog(
    instance_types: Iterable[Mapping[str, Any]],
    az_offerings: Mapping[str, Iterable[Mapping[str, Any]]],
    *,
    types_source: str,
    offerings_source: str,
    as_of: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Turn raw API entries into the two documents (instance_types.json, regions.json).

    `az_offerings` maps region -> DescribeInstanceTypeOfferings(LocationType=availability-zone) entries.
    A region's AZs are the AZs anything is offered in, so both sources derive them the same way. Only
    regular AZs (`<region><letter>`) count: Local and Wavelength Zones are opt-in per account, and keeping
    them would make the file depend on whose account refreshed it.
    """
    facts: dict[str, dict[str, Any]] = {}
    for info in instance_types:
        facts.setdefault(info["InstanceType"], instance_facts(info))

    regions: dict[str, Any] = {}
    covered: set[str] = set()
    for region, offerings in az_offerings.items():
        azs: set[str] = set()
        where: dict[str, set[str]] = {}
        for offering in offerings:
            name, az = offering["InstanceType"], offering["Location"]
            if not (az.startswith(region) and len(az) == len(region) + 1 and az[-1].isalpha()):
                continue
            azs.add(az)
            if wants_offerings(name, facts.get(name)):
                where.setdefault(name, set()).add(az)
        covered.update(where)
        regions[region] = {
            "azs": sorted(azs),
            "offerings": {name: sorted(zones) for name, zones in where.items()},
        }
    # Types that qualify but are offered nowhere in these regions are covered too (answer: nowhere).
    covered.update(n for n, f in facts.items() if wants_offerings(n, f))

    types_doc = {"source": types_source, "as_of": as_of, "instance_types": facts}
    regions_doc = {
        "source": offerings_source,
        "as_of": as_of,
        "offering_types": sorted(covered),
        "regions": regions,
    }
    return types_doc, regions_doc


# ---------------------------------------------------------------------------------------------------
# Rendering: compact but diff-friendly (one line per instance type / per offering)


def _line(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _block(mapping: Mapping[str, Any], indent: str) -> str:
    if not mapping:
        return "{}"
    rows = [f"{indent}  {_line(k)}: {_line(mapping[k])}" for k in sorted(mapping)]
    return "{\n" + ",\n".join(rows) + f"\n{indent}}}"


def render_instance_types(doc: Mapping[str, Any]) -> str:
    """instance_types.json text: sorted keys, one line per instance type."""
    return (
        "{\n"
        f'  "as_of": {_line(doc["as_of"])},\n'
        f'  "instance_types": {_block(doc["instance_types"], "  ")},\n'
        f'  "source": {_line(doc["source"])}\n'
        "}\n"
    )


def render_regions(doc: Mapping[str, Any]) -> str:
    """regions.json text: sorted keys, one line per (region, instance type) offering."""
    regions = []
    for region in sorted(doc["regions"]):
        entry = doc["regions"][region]
        regions.append(
            f"    {_line(region)}: {{\n"
            f'      "azs": {_line(entry["azs"])},\n'
            f'      "offerings": {_block(entry["offerings"], "      ")}\n'
            "    }"
        )
    body = "{\n" + ",\n".join(regions) + "\n  }" if regions else "{}"
    return (
        "{\n"
        f'  "as_of": {_line(doc["as_of"])},\n'
        f'  "offering_types": {_line(doc["offering_types"])},\n'
        f'  "regions": {body},\n'
        f'  "source": {_line(doc["source"])}\n'
        "}\n"
    )


# ---------------------------------------------------------------------------------------------------
# Sources


def _load_json_resource(path: Path) -> Any:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    return json.loads(path.read_text(encoding="utf-8"))


def moto_resources() -> Path:
    """moto/ec2/resources of the installed moto (located without importing moto's service registry)."""
    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("moto is not installed (pip install -r requirements-dev.txt, or use --from-aws)")
    return Path(next(iter(spec.submodule_search_locations))) / "ec2" / "resources"


def from_moto(as_of: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build both documents from moto's snapshot of DescribeInstanceTypes / ...Offerings."""
    resources = moto_resources()
    version = importlib.metadata.version("moto")
    types_path = next((p for p in sorted(resources.glob("instance_types.json*"))), None)
    az_dir = resources / "instance_type_offerings" / "availability-zone"
    if types_path is None or not az_dir.is_dir():
        raise BuildError(f"{resources}: moto {version} has no EC2 instance type snapshot")
    raw_types = _load_json_resource(types_path)
    offerings = {p.name.split(".", 1)[0]: _load_json_resource(p) for p in sorted(az_dir.glob("*.json*"))}
    snapshot = f"via moto {version} snapshot"
    return build_catalog(
        raw_types.values(),
        offerings,
        types_source=f"EC2 DescribeInstanceTypes {snapshot} (moto/ec2/resources/{types_path.name}); "
        f"moto's snapshot may lag AWS, {REFRESH}",
        offerings_source=(
            f"EC2 DescribeInstanceTypeOfferings (LocationType=availability-zone) {snapshot} "
            f"(moto/ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz); "
            f"moto's snapshot may lag AWS, {REFRESH}"
        ),
        as_of=as_of,
    )


def from_aws(regions: list[str] | None, as_of: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build both documents from live EC2 calls (credentials from the usual boto3 chain).

    DescribeInstanceTypes is regional (it lists what that region supports), so it is called in every
    region and the union kept.
    """
    import boto3
    import botocore.config
    import botocore.exceptions

    config = botocore.config.Config(retries={"mode": "standard", "max_attempts": 10})
    session = boto3.session.Session()
    try:
        if not regions:
            ec2 = session.client("ec2", region_name=session.region_name or "us-east-1", config=config)
            regions = sorted(r["RegionName"] for r in ec2.describe_regions()["Regions"])
        raw_types: list[dict[str, Any]] = []
        offerings: dict[str, list[dict[str, Any]]] = {}
        for region in regions:
            ec2 = session.client("ec2", region_name=region, config=config)
            for page in ec2.get_paginator("describe_instance_types").paginate():
                raw_types.extend(page["InstanceTypes"])
            offerings[region] = [
                offering
                for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
                    LocationType="availability-zone"
                )
                for offering in page["InstanceTypeOfferings"]
            ]
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise BuildError(f"EC2 API call failed: {exc} (check credentials/region, or use --from-moto)") from exc
    live = f"via boto3 {boto3.__version__} in {','.join(regions)}"
    # Stable order regardless of the API's page order, so the union is deterministic.
    raw_types.sort(key=lambda t: t["InstanceType"])
    return build_catalog(
        raw_types,
        offerings,
        types_source=f"EC2 DescribeInstanceTypes {live}; {REFRESH}",
        offerings_source=f"EC2 DescribeInstanceTypeOfferings (LocationType=availability-zone) {live}; {REFRESH}",
        as_of=as_of,
    )


# ---------------------------------------------------------------------------------------------------
# CLI


def write(types_doc: Mapping[str, Any], regions_doc: Mapping[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (
        (INSTANCE_TYPES_FILE, render_instance_types(types_doc)),
        (REGIONS_FILE, render_regions(regions_doc)),
    ):
        path = out_dir / name
        write_text(path, text)
        written.append(path)
    return written


def as_of_date(value: str) -> str:
    """An argparse type: a YYYY-MM-DD date for a data file's as_of (price_build uses it too)."""
    try:
        return datetime.date.fromisoformat(value).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {value!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterkit.catalog.build", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-moto", action="store_true", help="use moto's snapshot (default)")
    source.add_argument("--from-aws", action="store_true", help="call EC2 on a real account")
    parser.add_argument("--regions", help="comma-separated regions for --from-aws (default: all enabled)")
    parser.add_argument("--as-of", type=as_of_date, default=datetime.date.today().isoformat(),
                        help="date recorded as as_of (default: today)")
    parser.add_argument("--out-dir", type=Path, default=DATA_DIR, help=f"default: {DATA_DIR}")
    args = parser.parse_args(argv)
    if args.regions and not args.from_aws:
        parser.error("--regions only applies to --from-aws")
    regions = [r.strip() for r in args.regions.split(",") if r.strip()] if args.regions else None
    try:
        docs = from_aws(regions, args.as_of) if args.from_aws else from_moto(args.as_of)
        paths = write(*docs, args.out_dir)
    except BuildError as exc:
        print(f"catalog_build: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
