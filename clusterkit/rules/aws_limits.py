"""AWS and ParallelCluster limits a spec can break only at deploy time, checked offline from sourced data.

Why a data file: these limits change (gp3 grew to 64 TiB in 2025, Capacity Blocks gain instance types every
few months), so each one lives in ``clusterkit/data/aws_limits.json`` with the page it was read on and the
date, and a refresh is an edit there, not a code change. Why here and not at deploy: CloudFormation, FSx or
ParallelCluster's provider Lambda would reject the same spec only after the network and storage stacks
exist, with a message that no longer names the spec line.

The generators have the signature of the rule modules' checks, ``(spec, marks) -> Iterator[Problem]``; ``check``
runs them all. What the other rule modules already check (the queue root volume range, a malformed KMS key ARN, an
unknown instance type) is left to it, so a mistake is reported once.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

from clusterkit.catalog import lookup as catalog
from clusterkit.effective.expand import created_fsx
from clusterkit.paths import AWS_LIMITS
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks

DATA_FILE = AWS_LIMITS
TAG_CHARACTERS_HINT = "letters, digits, spaces and _ . : / = + - @"


@dataclasses.dataclass(frozen=True)
class Limits:
    """The values of ``aws_limits.json`` that the checks use, typed; see the file for each one's source."""

    tags_per_resource_max: int
    tag_key_length: tuple[int, int]
    tag_value_length: tuple[int, int]
    tag_categories: frozenset[str]  # first letters of the Unicode general categories allowed (L, Z, N)
    tag_extra_characters: frozenset[str]
    aws_prefix: str  # reserved in any letter case
    parallelcluster_prefix: str  # reserved as written (ParallelCluster compares case-sensitively)
    parallelcluster_tags_max: int
    provider_tag_keys: frozenset[str]
    instance_tag_keys: frozenset[str]
    clusterkit_tag_keys: frozenset[str]
    gp3_max_gib: int  # ParallelCluster's gp3 limit: lower than EBS's own, and the one our volumes meet
    kms_key_arn: re.Pattern[str]
    capacity_block_types: frozenset[str]
    capacity_block_instance_types: frozenset[str]  # bought by the instance (not UltraServer blocks)
    capacity_block_counts: tuple[int, ...]  # the instance counts a Capacity Block is sold in


def raw() -> dict[str, dict[str, Any]]:
    """Every entry of the data file by name, with its value, source and checked date (for tests and reports)."""
    limits: dict[str, dict[str, Any]] = _document()["limits"]
    return limits


@functools.cache
def _document() -> dict[str, Any]:
    with open(DATA_FILE, encoding="utf-8") as fh:
        doc: dict[str, Any] = json.load(fh)
        return doc


@functools.cache
def limits() -> Limits:
    """The limits, read once on first use: importing this module costs nothing (clusterkit.rules.check imports it)."""
    v = {name: entry["value"] for name, entry in raw().items()}
    return Limits(
        tags_per_resource_max=v["tags_per_resource_max"],
        tag_key_length=(v["tag_key_length"]["min"], v["tag_key_length"]["max"]),
        tag_value_length=(v["tag_value_length"]["min"], v["tag_value_length"]["max"]),
        tag_categories=frozenset(v["tag_characters"]["categories"]),
        tag_extra_characters=frozenset(v["tag_characters"]["extra"]),
        aws_prefix=v["tag_key_reserved_prefix_aws"],
        parallelcluster_prefix=v["tag_key_reserved_prefix_parallelcluster"],
        parallelcluster_tags_max=v["parallelcluster_cluster_tags_max"],
        provider_tag_keys=frozenset(v["parallelcluster_provider_tag_keys"]),
        instance_tag_keys=frozenset(v["parallelcluster_instance_tag_keys"]),
        clusterkit_tag_keys=frozenset(v["clusterkit_tag_keys"]),
        gp3_max_gib=v["parallelcluster_gp3_size_gib"]["max"],
        kms_key_arn=re.compile(v["kms_key_arn"]),
        capacity_block_types=frozenset(v["capacity_block_instance_types"]
                                       + v["capacity_block_ultraserver_instance_types"]
                                       + v["capacity_block_other_instance_types"]),
        capacity_block_instance_types=frozenset(v["capacity_block_instance_types"]
                                                + v["capacity_block_other_instance_types"]),
        capacity_block_counts=tuple(v["capacity_block_instance_counts"]),
    )


def check(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """Every limit check, in spec order."""
    for rule in (_ebs, _kms, _capacity_blocks, _capacity_block_counts, _tags, _tag_count):
        yield from rule(spec, m)


# -- helpers -----------------------------------------------------------------------------------------------


def kms_key_region(arn: str) -> str | None:
    """The Region of a KMS key ARN (single- or multi-Region key), or None when ``arn`` is not one."""
    match = limits().kms_key_arn.fullmatch(arn)
    return match.group("region") if match else None


def family(instance_type: str) -> str:
    """``p5`` of ``p5.48xlarge``: Capacity Blocks are offered per family first, per size second."""
    return instance_type.partition(".")[0]


def _shown(text: str, limit: int = 60) -> str:
    """``text`` quoted for a one-line message: escaped when it holds control characters, cut when long."""
    shown = f"'{text}'" if text.isprintable() else repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def _bad_character(text: str) -> str | None:
    """The first character AWS tags do not allow, or None."""
    lim = limits()
    for char in text:
        if char not in lim.tag_extra_characters and unicodedata.category(char)[0] not in lim.tag_categories:
            return char
    return None


# -- checks ------------------------------------------------------------------------------------------------


def _ebs(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """The head node's root volume has only a lower bound in rules/queues.py, which fully checks queue root volumes."""
    size, most = spec.head_node.root_volume_gib, limits().gp3_max_gib
    if size > most:
        yield m.problem("head_node.root_volume_gib", f"{size} GiB is larger than ParallelCluster allows for a gp3 "
                        "root volume", f"at most {most} GiB: EBS allows more since 2025, ParallelCluster still "
                        "checks the old limit")


def _kms(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """A key in another Region: KMS keys are regional and FSx only uses one in its own Region.

    A malformed ARN is rules/storage.py's to report (``storage.fsx_lustre.new.kms_key_arn: not a KMS key ARN``).
    """
    fsx = spec.storage.fsx_lustre
    new = created_fsx(fsx)
    if new is None or fsx.existing is not None or new.kms_key_arn is None:
        return
    region = kms_key_region(new.kms_key_arn)
    if region is not None and region != spec.region:
        yield m.problem("storage.fsx_lustre.new.kms_key_arn", f"the KMS key is in {region}, the cluster in "
                        f"{spec.region}", f"KMS keys are regional: use a key (or a multi-Region replica) in "
                        f"{spec.region}")


def _capacity_blocks(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """capacity_block on a family EC2 sells no Capacity Blocks for (error), or on an unlisted size (warning)."""
    offered = limits().capacity_block_types
    families = sorted({family(name) for name in offered})
    for i, queue in enumerate(spec.queues):
        if queue.capacity_type != "capacity_block":
            continue
        for j, cr in enumerate(queue.compute_resources):
            name = cr.instance_type
            if name in offered or catalog.instance_type(name) is None:  # rules/queues.py reports unknown
                continue
            path = f"queues[{i}].compute_resources[{j}].instance_type"
            sizes = sorted(t for t in offered if family(t) == family(name))
            if not sizes:
                yield m.problem(path, f"{name} has no Capacity Blocks: EC2 sells none for the {family(name)} family",
                                f"Capacity Blocks exist for {', '.join(families)}; else use ondemand or spot")
            else:
                yield m.problem(path, f"{name} is not among the Capacity Block sizes AWS lists",
                                f"listed {family(name)} sizes: {', '.join(sizes)}", level="warning",
                                id="capacity-block-size-unlisted")


def _capacity_block_counts(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """A capacity block's instance count (``reservation_instance_count``), or the nodes its compute resource
    launches (``max``; ``min`` must equal it), beyond the largest block EC2 sells.

    A count below 1 is rules/queues.py's; one that is not a size sold (3, 12) is left alone: the block is
    what was bought, and the page notes sizes vary by type and Region.
    """
    lim = limits()
    most = max(lim.capacity_block_counts)
    for i, queue in enumerate(spec.queues):
        if queue.capacity_type != "capacity_block":
            continue
        for j, cr in enumerate(queue.compute_resources):
            if cr.instance_type not in lim.capacity_block_instance_types:
                continue
            hint = f"EC2 sells blocks of {', '.join(map(str, lim.capacity_block_counts))} instances"
            count = cr.reservation_instance_count
            if count is not None and count > most:
                yield m.problem(f"queues[{i}].compute_resources[{j}].reservation_instance_count",
                                f"{count} instances is more than one Capacity Block holds", hint)
            # min == max is rules/queues.py's; max is what ParallelCluster launches against the one block
            if cr.max > most:
                yield m.problem(f"queues[{i}].compute_resources[{j}].max",
                                f"{cr.max} instances is more than one Capacity Block holds", hint)


def _tags(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """Each tag against AWS's tag rules and the keys ParallelCluster and ClusterKit keep for themselves.

    One problem per key (the first rule it breaks) and one per value; key problems point at the key. A value
    with a control character is left to the catch-all in rules/check.py, which says how to write it on one line.
    """
    lim = limits()
    (key_min, key_max), (_, value_max) = lim.tag_key_length, lim.tag_value_length
    for key, value in spec.tags.items():
        path = f"tags.{key}"
        key_problem: tuple[str, str] | None = None
        if not key_min <= len(key) <= key_max:
            key_problem = (f"tag key is {len(key)} characters long", f"AWS allows {key_min} to {key_max}")
        elif key.casefold().startswith(lim.aws_prefix.casefold()):
            why = f"starts with {lim.aws_prefix}, which AWS reserves for its own tags"
            key_problem = (f"tag key {_shown(key)} {why}", "rename the key")
        elif key.startswith(lim.parallelcluster_prefix):
            why = f"starts with {lim.parallelcluster_prefix}, which ParallelCluster reserves"
            key_problem = (f"tag key {_shown(key)} {why}",
                           "rename the key; ParallelCluster refuses the cluster otherwise")
        elif key in lim.clusterkit_tag_keys:
            key_problem = (f"tag key {_shown(key)} would replace ClusterKit's own tag",
                           "ClusterKit sets it to the cluster name on every resource; use another key")
        elif (char := _bad_character(key)) is not None:
            key_problem = (f"tag key {_shown(key)} contains {char!r}, which AWS tags do not allow",
                           TAG_CHARACTERS_HINT)
        if key_problem:
            problem = m.problem(path, *key_problem, on_key=True)
            # the path is printed as is: escape a key's control characters so the problem stays one line
            yield problem if key.isprintable() else dataclasses.replace(problem, path=f"tags.{repr(key)[1:-1]}")
        if len(value) > value_max:
            yield m.problem(path, f"tag value is {len(value)} characters long", f"AWS allows at most {value_max}")
        elif value.isprintable() and (char := _bad_character(value)) is not None:  # rules/check.py: control chars
            yield m.problem(path, f"tag value {_shown(value)} contains {char!r}, which AWS tags do not allow",
                            TAG_CHARACTERS_HINT)


def _tag_count(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """Too many tags once ClusterKit's and ParallelCluster's own are added (aws: keys count against nothing).

    Two ceilings: ParallelCluster's 40 cluster tags, which include clusterkit:cluster and the provider's
    parallelcluster:custom_resource, and AWS's 50 per resource on the compute instances, where
    ParallelCluster adds its instance tags too. The lower one is reported.
    """
    lim = limits()
    added = lim.clusterkit_tag_keys | lim.provider_tag_keys
    user = {k for k in spec.tags if not k.casefold().startswith(lim.aws_prefix.casefold())} - added
    own = added | lim.instance_tag_keys
    by_parallelcluster = (f"ParallelCluster allows {lim.parallelcluster_tags_max} cluster tags and "
                          f"{', '.join(sorted(added))} are added to yours")
    by_aws = f"AWS allows {lim.tags_per_resource_max} per instance and ClusterKit and ParallelCluster add {len(own)}"
    ceilings = [(lim.parallelcluster_tags_max - len(added), by_parallelcluster),
                (lim.tags_per_resource_max - len(own), by_aws)]
    most, why = min(ceilings)
    if len(user) > most:
        yield m.problem("tags", f"{len(user)} tags, at most {most} fit", why)
