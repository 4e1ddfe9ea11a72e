"""The blast radius of a platform change: what changed in ``cluster_configs/platforms/<name>.yaml``, what it does
to the platform's stacks, and which clusters it reaches.

A platform's clusters import its ids through CloudFormation exports (stacks/platform_link.py), and CloudFormation
refuses to change an export's value while a stack imports it ("Cannot update export ... as it is in use by ...";
docs/operations.md "Platform and cluster lifecycles"). So a platform change that replaces an exported resource,
or points an export at another one, is blocked while a cluster runs on the platform: every cluster on it must
be destroyed first (level ``recreate``). A change CloudFormation applies in place reaches no cluster config: each
cluster's level is the in-place one (``live``), said as such. A change of where the file system is mounted
(``mount_dir``, ``image_store``) deploys nothing on the platform but reaches every cluster's rendered
ParallelCluster config: those clusters' own diffs carry ParallelCluster's update impact (clusterkit/diff/impact.py).

Changes are classified on the effective platform (``expand_platform``: defaults resolved), so writing out a
default is no change; the report shows the file's own changes by path, as for a cluster spec.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from clusterkit.diff.cost_delta import CostDelta
from clusterkit.diff.impact import (
    FLEET,
    FSX_UNAVAILABLE,
    INTERRUPT_LABEL,
    LIVE,
    LIVE_LABEL,
    RECREATE,
    UNKNOWN,
    Assessed,
    Impact,
)
from clusterkit.diff.structure import MISSING, Change, Item, diff_values

BLOCKED_LABEL = "blocked while a cluster imports it: destroy the clusters on it first"
IN_PLACE_LABEL = LIVE_LABEL  # the clusters' own word for it: one vocabulary, the levels'; the why says "in place"
REACHES_LABEL = "reaches every cluster's ParallelCluster config (their update impact below)"
NOTHING_LABEL = "nothing deployed changes (an offline check's input)"
RENDER_FIRST_LABEL = "impact unknown until `make render` (the compared render does not show it)"
REMOVED_LABEL = "platform removed: destroy its clusters first (make destroy-platform refuses while they use it)"
UNKNOWN_PLATFORM_LABEL = "impact on the platform's stacks unknown"
_HOW_TO = ("make destroy-cluster for each cluster on it, make deploy-platform, then make deploy each "
           "(docs/operations.md \"Platform and cluster lifecycles\")")

# What CloudFormation does with each effective platform value, and why. "Replacement" is CloudFormation's
# "Update requires: Replacement": the resource type's createOnlyProperties in its registry schema (read here in
# cfn-lint's copy, .venv/.../cfnlint/data/schemas/providers/us-east-1.json, schema_date 2026-10-20) and the
# CloudFormation resource reference:
#
# | resource (stack)                    | replaced when                                    | its export          |
# |-------------------------------------|--------------------------------------------------|---------------------|
# | AWS::EC2::VPC (Network)             | CidrBlock                                        | VpcId               |
# | AWS::EC2::Subnet (Network)          | CidrBlock, VpcId, AvailabilityZone               | Compute/HeadNode-   |
# |                                     |                                                  | SubnetId            |
# | AWS::EC2::NatGateway (Network)      | SubnetId (the public subnet)                     | -                   |
# | AWS::EC2::SecurityGroup (Network)   | VpcId, GroupDescription, GroupName               | FsxSecurityGroupId  |
# | AWS::FSx::FileSystem (Storage)      | SubnetIds, SecurityGroupIds, KmsKeyId,           | FileSystemId        |
# |                                     | FileSystemType, BackupId; LustreConfiguration.   |                     |
# |                                     | DeploymentType (the reference: "Replacement")    |                     |
# | AWS::FSx::DataRepositoryAssociation | FileSystemPath, DataRepositoryPath, FileSystemId | -                   |
#
# In place (mutable): FSx StorageCapacity (increase only: FSx UpdateFileSystem "to increase the storage
# capacity"), PerUnitStorageThroughput (FSx switches the file servers: a few minutes unavailable, FSx for Lustre
# guide "Managing throughput capacity"), DataCompressionType; log group RetentionInDays; interface endpoints are
# added or removed; Tags; DeletionPolicy.


@dataclass(frozen=True)
class Rule:
    """The consequence of changing one effective platform value."""

    rank: int
    label: str
    why: str


def _blocked(why: str) -> Rule:
    return Rule(RECREATE, BLOCKED_LABEL, why)


def _in_place(why: str) -> Rule:
    return Rule(LIVE, IN_PLACE_LABEL, why)


def _interrupts(why: str) -> Rule:
    """In place, but the clusters' jobs lose a service meanwhile (the file system, outbound traffic)."""
    return Rule(FLEET, INTERRUPT_LABEL, why)


_ALL = "every export changes (new stacks)"
_VPC = ("AWS::EC2::VPC CidrBlock: replacement; with it every subnet, the FSx group and the file system (a new, "
        "empty one): every export")
_COMPUTE = ("AWS::EC2::Subnet CidrBlock: the compute subnet is replaced, and the file system in it (FSx SubnetIds: "
            "replacement, a new empty file system): ComputeSubnetId, FileSystemId")
RULES: dict[str, Rule] = {
    "name": _blocked(f"another platform: {_ALL}"),
    "network_stack": _blocked(f"another Network stack: {_ALL}"),
    "storage_stack": _blocked(f"another Storage stack: {_ALL}"),
    "region": _blocked(f"another region: {_ALL}"),
    "availability_zone": _blocked("AWS::EC2::Subnet AvailabilityZone: replacement (and the file system in it): "
                                  "ComputeSubnetId, HeadNodeSubnetId, FileSystemId"),
    "account": _blocked(f"another account: {_ALL}"),
    "network.new": _blocked("a new VPC instead of an existing one, or back: VpcId and every other export"),
    "network.existing": _blocked("an existing VPC instead of a new one, or back: VpcId and every other export"),
    "network.new.cidr": _blocked(_VPC),
    "network.new.compute_subnet_mask": _blocked(_COMPUTE),
    "network.new.interface_endpoints": _in_place("interface endpoints added or removed in the VPC"),
    "network.new.flow_logs_retention_days": _in_place("AWS::Logs::LogGroup RetentionInDays"),
    "network.head_node_public": _blocked("the head node's subnet changes: HeadNodeSubnetId"),
    "network.existing.vpc_id": _blocked("VpcId (and the FSx group, AWS::EC2::SecurityGroup VpcId: replacement)"),
    "network.existing.head_node_subnet_id": _blocked("HeadNodeSubnetId"),
    "network.existing.compute_subnet_id": _blocked("ComputeSubnetId (and the file system in it: FileSystemId)"),
    "network.existing.compute_subnet_cidr": Rule(LIVE, NOTHING_LABEL, "only `validate` reads it (subnet room)"),
    "storage.new": _blocked("a created file system instead of an existing one, or back: FileSystemId"),
    "storage.existing_file_system_id": _blocked("FileSystemId"),
    "storage.new.deployment_type": _blocked("AWS::FSx::FileSystem LustreConfiguration.DeploymentType: replacement "
                                            "(a new empty file system): FileSystemId"),
    "storage.new.kms_key_arn": _blocked("AWS::FSx::FileSystem KmsKeyId: replacement (a new empty file system): "
                                        "FileSystemId"),
    "storage.new.throughput_mb_per_tib": _interrupts(f"AWS::FSx::FileSystem PerUnitStorageThroughput: "
                                                     f"{FSX_UNAVAILABLE}"),
    "storage.new.compression": _in_place("AWS::FSx::FileSystem DataCompressionType (data written from then on)"),
    "storage.new.image_store_bucket": _in_place("the image-store bucket and its data repository association "
                                                "added or removed; FileSystemId stays"),
    "storage.new.retain_on_delete": _in_place("DeletionPolicy only"),
    "storage.mount_dir": Rule(LIVE, REACHES_LABEL, "SharedStorage MountDir and the nodes' store paths"),
    "storage.image_store": Rule(LIVE, REACHES_LABEL, "the nodes' store path (CK_STORE)"),
    "storage.image_store_fs_path": _in_place("AWS::FSx::DataRepositoryAssociation FileSystemPath: the S3 link is "
                                             "replaced (the files stay)"),
    "tags": _in_place("Tags"),
}
_GROW = _interrupts("AWS::FSx::FileSystem StorageCapacity: storage grows under the running file system; "
                    f"{FSX_UNAVAILABLE}")
_SHRINK = _blocked("FSx storage only grows (UpdateFileSystem increases StorageCapacity): a smaller file system is "
                   "a new one: FileSystemId")
_PUBLIC = "AWS::EC2::Subnet CidrBlock: the public subnet is replaced, and its NAT gateway (SubnetId: replacement)"


@dataclass(frozen=True)
class Consequence:
    """One effective platform value that changed, with what CloudFormation does about it."""

    change: Change
    impact: Impact  # rank and label as a cluster change's; ``policy`` holds the reason

    @property
    def why(self) -> str:
        return self.impact.policy


@dataclass(frozen=True)
class Member:
    """A cluster on the platform, on either side (its level: ``diff_gate.levels``, the platform's consequences in)."""

    name: str
    sides: str  # "both", "base" or "working tree"


@dataclass(frozen=True)
class PlatformDiff:
    name: str
    status: str  # added | removed | changed | unchanged
    changes: tuple[Change, ...] = ()  # the platform file's own values, by path
    consequences: tuple[Consequence, ...] = ()  # most disruptive first
    members: tuple[Member, ...] = ()
    notes: tuple[str, ...] = ()
    text_only: bool = False  # the file's text changed with the same effective platform
    cost: CostDelta | str | None = None  # the platform's own cost on both sides (report.py prices it)

    @property
    def changed(self) -> bool:
        return self.status != "unchanged"

    @property
    def worst(self) -> Consequence | None:
        return self.consequences[0] if self.consequences else None


def _rule(change: Change, head: Any) -> Rule:
    key = ".".join(s for s in change.path if not isinstance(s, Item))
    if key == "storage.new.capacity_gib":
        grows = isinstance(change.old, int) and isinstance(change.new, int) and change.new > change.old
        return _GROW if grows else _SHRINK
    if key == "network.new.public_subnet_mask":
        if head is not None and head.network.head_node_public:
            return _blocked(f"{_PUBLIC}; the head node is in it: HeadNodeSubnetId")
        return _interrupts(f"{_PUBLIC}; no export changes (the head node is in the compute subnet), but the nodes' "
                           "outbound traffic stops until the new NAT gateway is up")
    while key:
        if key in RULES:
            return RULES[key]
        key = key.rpartition(".")[0]
    return Rule(UNKNOWN, UNKNOWN_PLATFORM_LABEL, "not in ClusterKit's table (clusterkit/diff/platforms.py)")


def _effective(text: str | None, where: str) -> tuple[Any, Any, str | None]:
    """(effective platform or None, its data for diffing or MISSING, a problem)."""
    if text is None:
        return None, MISSING, None
    from clusterkit.effective.expand import expand_platform
    from clusterkit.spec.model import parse_platform

    platform, _, problems = parse_platform(text, where)
    errors = [p for p in problems if p.level == "error"]
    if platform is None or errors:
        first = errors[0].message if errors else "not a platform file"
        return None, MISSING, f"{where}: does not parse as a platform ({first}): its consequences are unknown"
    effective = expand_platform(platform)
    return effective, dataclasses.asdict(effective), None


def _yaml(text: str | None) -> Any:
    if text is None:
        return MISSING
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return MISSING


def diff_platform(name: str, base: str | None, head: str | None, *, where: str) -> PlatformDiff:
    """One platform file between the two sides (``where``: its repository path, for notes); members come later."""
    if base == head:
        return PlatformDiff(name, "unchanged")
    status = "added" if base is None else "removed" if head is None else "changed"
    changes = diff_values(_yaml(base), _yaml(head)) if status == "changed" else []
    if status == "added":
        return PlatformDiff(name, status)
    if status == "removed":
        gone = Consequence(Change((), MISSING, MISSING), Impact(RECREATE, REMOVED_LABEL, "every export goes"))
        return PlatformDiff(name, status, consequences=(gone,))
    old, old_data, old_problem = _effective(base, f"{where} (base)")
    new, new_data, new_problem = _effective(head, f"{where} (working tree)")
    notes = tuple(p for p in (old_problem, new_problem) if p)
    if notes:
        unknown = [Consequence(c, Impact(UNKNOWN, UNKNOWN_PLATFORM_LABEL, "")) for c in changes]
        return PlatformDiff(name, "changed", tuple(changes), tuple(unknown), notes=notes)
    if not changes:
        return PlatformDiff(name, "unchanged", text_only=True)
    found = []
    for change in diff_values(old_data, new_data):
        rule = _rule(change, new)
        found.append(Consequence(change, Impact(rule.rank, rule.label, rule.why)))
    if not found:  # the same effective platform: defaults written out or left out
        return PlatformDiff(name, "unchanged", tuple(changes), text_only=True)
    return PlatformDiff(name, "changed", tuple(changes), tuple(sorted(found, key=lambda c: c.impact.rank)))


def platform_of(spec_text: str | None) -> str | None:
    """The ``platform:`` a cluster spec names (None: none, or the spec does not parse as a mapping)."""
    doc = _yaml(spec_text)
    value = doc.get("platform") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def members(name: str, base: dict[str, str | None], head: dict[str, str | None]) -> list[Member]:
    """The clusters naming platform ``name`` at the base or in the working tree (cluster -> spec text per side)."""
    found = []
    for cluster in sorted(set(base) | set(head)):
        at_base, in_tree = platform_of(base.get(cluster)) == name, platform_of(head.get(cluster)) == name
        if at_base or in_tree:
            found.append(Member(cluster, "both" if at_base and in_tree else "base" if at_base else "working tree"))
    return found


def cluster_impacts(platform: PlatformDiff, *, rendered_changed: bool) -> list[Assessed]:
    """The platform's consequences as changes of a cluster on it (``platforms[research-east].network.new.cidr``),
    but for those its rendered config shows with ParallelCluster's own impact; when the compared render does not
    show them (committed before ``make render``), they are of unknown impact."""
    found = []
    for c in platform.consequences:
        impact = c.impact
        if impact.label == REACHES_LABEL:
            if rendered_changed:
                continue
            impact = Impact(UNKNOWN, RENDER_FIRST_LABEL, impact.policy)
        found.append(Assessed(dataclasses.replace(c.change, path=("platforms", Item(platform.name), *c.change.path)),
                              impact))
    return found


def rendered_note(platform: PlatformDiff, cluster: str, rendered_changed: bool) -> Iterable[str]:
    """A platform change that reaches the rendered config, which the cluster's compared render does not show."""
    if rendered_changed or not any(c.impact.label == REACHES_LABEL for c in platform.consequences):
        return ()
    return (f"platform {platform.name} changed where the file system is mounted, but the compared "
            f"cluster_configs/rendered/{cluster}.yaml does not show it: run `make render`",)


HOW_TO = _HOW_TO
