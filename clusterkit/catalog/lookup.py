"""Offline facts about EC2 instance types and where they are offered.

Validation runs without AWS credentials, so it reads committed data files distilled from EC2
DescribeInstanceTypes / DescribeInstanceTypeOfferings (see clusterkit/catalog/build.py, which also says
how to refresh them). Stdlib only and loaded lazily once: importing this module costs nothing until a
lookup needs a file.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterkit.paths import INSTANCE_TYPES, REGIONS


@dataclass(frozen=True)
class InstanceType:
    """What validation needs to know about one instance type.

    gpus: whole GPUs (API `Count`; fractional-GPU types such as g6f report 0 but still name gpu_model).
    gpu_memory_gib: per GPU (or per GPU partition). nvme_gib: the API's instance-store `TotalSizeInGB`
    when that storage is NVMe, else 0. arch: x86_64 or arm64 when the type supports one of them, else
    the API's first architecture (e.g. "arm64_mac"), which ParallelCluster cannot use.
    """

    name: str
    arch: str
    vcpus: int
    memory_mib: int
    gpus: int
    gpu_model: str | None
    gpu_manufacturer: str | None
    gpu_memory_gib: float
    efa_supported: bool
    max_efa_interfaces: int
    max_network_cards: int
    max_network_interfaces: int
    ipv4_per_interface: int
    nvme_gib: int
    nvme_count: int
    current_generation: bool


@functools.cache
def _load(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        doc: dict[str, Any] = json.load(fh)
        return doc


def _types() -> dict[str, dict[str, Any]]:
    types: dict[str, dict[str, Any]] = _load(INSTANCE_TYPES)["instance_types"]
    return types


def _regions() -> dict[str, Any]:
    return _load(REGIONS)


@functools.cache
def instance_type(name: str) -> InstanceType | None:
    """Facts for `name` (e.g. "p5.48xlarge"), or None when the catalog does not know it."""
    facts = _types().get(name)
    return None if facts is None else InstanceType(name=name, **facts)


def instance_type_names() -> list[str]:
    """Every instance type in the catalog, sorted."""
    return sorted(_types())


def regions() -> list[str]:
    """Regions with offering data, sorted."""
    return sorted(_regions()["regions"])


def region_azs(region: str) -> list[str] | None:
    """Sorted AZ names of `region`, or None for a region the catalog does not know."""
    entry = _regions()["regions"].get(region)
    return None if entry is None else list(entry["azs"])


def offered_azs(region: str, instance_type: str) -> list[str] | None:
    """AZs of `region` offering `instance_type`; [] when known not to be offered there.

    None means "no data": unknown region, or a type whose offerings are not recorded (only GPU, EFA and
    head-node families are, to keep the file small).
    """
    doc = _regions()
    entry = doc["regions"].get(region)
    if entry is None or instance_type not in _offering_types():
        return None
    return list(entry["offerings"].get(instance_type, ()))


@functools.cache
def _offering_types() -> frozenset[str]:
    return frozenset(_regions()["offering_types"])


def catalog_source() -> tuple[str, str]:
    """(source, as_of) of instance_types.json, for messages that cite where a fact came from."""
    doc = _load(INSTANCE_TYPES)
    return doc["source"], doc["as_of"]
