"""Update impact of rendered-config changes, from ParallelCluster's own update-policy metadata.

``pcluster_runner.update_policies()`` (run in ``.venv-pcluster``) maps every schema path to the policy
``pcluster update-cluster`` applies. Here each changed path takes its own policy, or, inside a free-form
value such as ``CustomSlurmSettings``, its nearest ancestor's; an added or removed list element takes
the list's policy, as ParallelCluster does. The conditional policies are then resolved the way
``pcluster/config/update_policy.py`` decides them for a cluster with running compute nodes (the case a
reviewer must plan for): growth vs shrink of counts, list additions vs removals, and the target
config's ``QueueUpdateStrategy``. The result is a severity rank and a plain-language label.
``spec_impacts`` covers the one spec value outside the rendered config with an impact of its own: the
ParallelCluster version, which needs a new cluster.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clusterkit.diff.structure import MISSING, Change, Item, diff_values

# Severity ranks, most disruptive first.
RECREATE, HEAD_NODE, FLEET, QUEUE, LIVE, UNKNOWN = range(6)

RECREATE_LABEL = "cannot be updated: recreate the cluster"
VERSION_LABEL = "cannot be updated (another ParallelCluster version): recreate the cluster"
VERSION_REASON = ("ParallelCluster updates only clusters created by the same version; "
                  "make destroy-cluster, then make deploy (docs/operations.md \"Upgrading ParallelCluster\")")
VERSION_PATH = ("parallelcluster_version",)
HEAD_NODE_LABEL = "stop the head node"
FLEET_LABEL = "stop the compute fleet"
# A change applied in place under running clusters that takes a service away from their jobs for a while: not
# "live" (applied without anyone noticing), and nothing replaces nodes; the fleet level, said as what to do.
INTERRUPT_LABEL = "stop the compute fleet, or running jobs stall while it applies"
FSX_UNAVAILABLE = ("FSx switches or adds file servers: /fsx unavailable for minutes (FSx for Lustre guide: up to an "
                   "hour for throughput); running jobs' file I/O waits until it is back")
# The cluster's own new file system lives in its Storage stack, updated in place as a platform's is
# (clusterkit/diff/platforms.py): its spec paths whose change makes /fsx unavailable, with the property.
OWN_FSX_PATHS: dict[tuple[str, ...], str] = {
    ("storage", "fsx_lustre", "new", "throughput_mb_per_tib"): "AWS::FSx::FileSystem PerUnitStorageThroughput",
    ("storage", "fsx_lustre", "new", "capacity_gib"): "AWS::FSx::FileSystem StorageCapacity",
}
LIVE_LABEL = "live"
UNKNOWN_LABEL = "impact unknown"
QUEUE_LABELS = {
    "DRAIN": "QueueUpdateStrategy DRAIN: nodes replaced as their jobs finish",
    "TERMINATE": "QueueUpdateStrategy TERMINATE: running jobs stopped, nodes replaced",
}
_FIXED: dict[str, tuple[int, str]] = {
    "SUPPORTED": (LIVE, LIVE_LABEL),
    "SUPPORTED_UNLESS_ADC": (LIVE, LIVE_LABEL),  # only us-iso* (ADC) regions refuse it
    "UNSUPPORTED": (RECREATE, RECREATE_LABEL),
    "UNKNOWN": (RECREATE, RECREATE_LABEL),
    "READ_ONLY_RESOURCE_BUCKET": (RECREATE, "cannot be updated (read-only): recreate the cluster"),
    "HEAD_NODE_STOP": (HEAD_NODE, HEAD_NODE_LABEL),
    "COMPUTE_FLEET_STOP": (FLEET, FLEET_LABEL),
    "COMPUTE_AND_LOGIN_NODES_STOP": (FLEET, "stop the compute fleet and the login nodes"),
    "LOGIN_NODES_STOP": (FLEET, "stop the login nodes"),
    "LOGIN_NODES_POOL_STOP": (FLEET, "stop the login nodes of the pool"),
    "EXTRA_CHEF_ATTRIBUTES": (FLEET, "only some ExtraChefAttributes fields can change"),
}
# pcluster.constants: storage types that mount/unmount live, and the keys that make storage external.
_LIVE_STORAGE_TYPES = ("Efs", "FsxLustre", "FsxOntap", "FsxOpenZfs", "FileCache")
_EXTERNAL_STORAGE_KEYS = ("VolumeId", "FileSystemId", "FileCacheId")
DEFAULT_MAX_COUNT, DEFAULT_MIN_COUNT = 10, 0  # ParallelCluster's defaults when a count is absent


@dataclass(frozen=True)
class Impact:
    rank: int
    label: str
    policy: str  # ParallelCluster's policy name; "" when unknown


@dataclass(frozen=True)
class Assessed:
    change: Change
    impact: Impact


Policies = dict[str, dict[str, Any]]


def load_policies() -> tuple[Policies | None, str | None]:
    """ParallelCluster's policy table, or None and a one-line note saying why not."""
    from clusterkit.pcluster.runner import PclusterCheckFailed, PclusterVenvMissing, update_policies

    try:
        return update_policies(), None
    except PclusterVenvMissing as exc:
        return None, f"{exc}: update impact unknown"
    except PclusterCheckFailed as exc:
        return None, f"ParallelCluster update policies unavailable ({exc}): update impact unknown"


def policy_key(path: tuple[str | Item, ...]) -> str:
    """``Scheduling.SlurmQueues[gpu].MaxCount`` -> ``Scheduling.SlurmQueues[].MaxCount`` (the table's form)."""
    key = ""
    for segment in path:
        key += "[]" if isinstance(segment, Item) else (f".{segment}" if key else segment)
    return key


def _parent(key: str) -> str:
    if key.endswith("[]"):
        return key[:-2]
    return key.rpartition(".")[0]


def lookup(policies: Policies, path: tuple[str | Item, ...]) -> str:
    """The policy name for a path: its own, else its nearest ancestor's; PC's default UNSUPPORTED."""
    key = policy_key(path)
    while key:
        if key in policies:
            policy: str = policies[key]["policy"]
            return policy
        key = _parent(key)
    return "UNSUPPORTED"


def _named(path: tuple[str | Item, ...], list_key: str) -> str | None:
    for index, segment in enumerate(path[:-1]):
        if segment == list_key and isinstance(path[index + 1], Item):
            return path[index + 1].label  # type: ignore[union-attr]
    return None


def _in_queue(path: tuple[str | Item, ...]) -> bool:
    """Inside a queue (PC's is_slurm_queues_change): below ``SlurmQueues[x]``, not the element itself."""
    for index, segment in enumerate(path[:-2]):
        if segment == "SlurmQueues" and isinstance(path[index + 1], Item):
            return True
    return False


def _element(change: Change) -> bool:
    """A whole list element added or removed (PC: a change with ``is_list``)."""
    return bool(change.path) and isinstance(change.path[-1], Item) and change.kind != "changed"


def _adds_only(change: Change) -> bool:
    """An element added, or a whole list (``Instances``, ``SubnetIds``) that only gained values."""
    if _element(change):
        return change.kind == "added"
    old, new = change.old, change.new
    return isinstance(old, list) and isinstance(new, list) and all(v in new for v in old)


def _by_name(items: Any, name: str | None) -> dict[str, Any]:
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("Name") == name:
            return item
    return {}


def _managed_pg(config: Any, queue: str | None, resource: str | None) -> bool:
    q = _by_name((config or {}).get("Scheduling", {}).get("SlurmQueues"), queue)
    cr = _by_name(q.get("ComputeResources"), resource)
    chosen = (cr.get("Networking") or {}).get("PlacementGroup") or (q.get("Networking") or {}).get("PlacementGroup")
    return bool(chosen and chosen.get("Enabled") and not (chosen.get("Name") or chosen.get("Id")))


def _managed_fsx(config: Any) -> set[str | None]:
    return {s.get("Name") for s in (config or {}).get("SharedStorage", []) or []
            if isinstance(s, dict) and s.get("StorageType") == "FsxLustre"
            and "FileSystemId" not in (s.get("FsxLustreSettings") or {})}


def _count(value: Any, default: int) -> int:
    return default if value is MISSING or value is None else int(value)


@dataclass(frozen=True)
class _Context:
    changes: list[Change]
    base: Any
    head: Any

    @property
    def strategy(self) -> str:
        settings = ((self.head or {}).get("Scheduling") or {}).get("SlurmSettings") or {}
        strategy: str = settings.get("QueueUpdateStrategy", "COMPUTE_FLEET_STOP")
        return strategy

    def by_strategy(self, policy: str, *, terminate_only: bool = False) -> Impact:
        """A queue change the target's QueueUpdateStrategy applies, or a fleet stop when it cannot."""
        strategy = self.strategy
        if strategy in QUEUE_LABELS and (strategy == "TERMINATE" or not terminate_only):
            return Impact(QUEUE, QUEUE_LABELS[strategy], policy)
        label = f"{FLEET_LABEL} (or set QueueUpdateStrategy TERMINATE)" if terminate_only else FLEET_LABEL
        return Impact(FLEET, label, policy)


def _grows(change: Change, ctx: _Context) -> bool:
    """RESIZE_UPDATE_STRATEGY_ON_REMOVE's always-allowed cases: additions, more MaxCount, MinCount
    raised by no more than MaxCount next to it."""
    if _element(change):
        return change.kind == "added"
    key = change.path[-1]
    if key == "MaxCount":
        return _count(change.new, DEFAULT_MAX_COUNT) >= _count(change.old, DEFAULT_MAX_COUNT)
    if key == "MinCount":
        for other in ctx.changes:
            if other.path[:-1] == change.path[:-1] and other.path[-1] == "MaxCount":
                more_max = _count(other.new, DEFAULT_MAX_COUNT) - _count(other.old, DEFAULT_MAX_COUNT)
                more_min = _count(change.new, DEFAULT_MIN_COUNT) - _count(change.old, DEFAULT_MIN_COUNT)
                return more_max >= more_min
    return False


def _shared_storage(change: Change, policy: str, ctx: _Context) -> Impact:
    if _element(change):
        storage = change.new if change.new is not MISSING else change.old
        storage = storage if isinstance(storage, dict) else {}
        if storage.get("MountDir") in ("home", "/home"):
            return Impact(RECREATE, "cannot be updated (/home mount): recreate the cluster", policy)
        settings = storage.get(f"{storage.get('StorageType')}Settings") or {}
        if storage.get("StorageType") in _LIVE_STORAGE_TYPES and any(k in settings for k in _EXTERNAL_STORAGE_KEYS):
            return Impact(LIVE, "live (external file system mounted/unmounted)", policy)
    if ctx.strategy in QUEUE_LABELS:
        return Impact(QUEUE, QUEUE_LABELS[ctx.strategy], policy)
    return Impact(FLEET, FLEET_LABEL, policy)


def classify(change: Change, policies: Policies, ctx: _Context) -> Impact:
    """The impact of one rendered change on a cluster with running compute nodes."""
    path = change.path
    if not path:  # the rendered file itself appears or disappears
        return Impact(RECREATE, "whole config added or removed: the cluster is created or deleted", "")
    policy = lookup(policies, path)
    if policy == "IGNORED":
        if change.kind != "changed" and isinstance(change.new if change.old is MISSING else change.old, dict):
            old = {} if change.old is MISSING else change.old
            inner = diff_values(old, {} if change.new is MISSING else change.new, path)
            found = [classify(c, policies, ctx) for c in inner]
            return min(found, key=lambda i: i.rank) if found else Impact(LIVE, LIVE_LABEL, policy)
        return Impact(LIVE, LIVE_LABEL, policy)
    if policy in _FIXED:
        rank, label = _FIXED[policy]
        return Impact(rank, label, policy)
    if policy == "QUEUE_UPDATE_STRATEGY":
        return ctx.by_strategy(policy) if _in_queue(path) else Impact(FLEET, FLEET_LABEL, policy)
    if policy == "RESIZE_UPDATE_STRATEGY_ON_REMOVE":
        if _grows(change, ctx):
            return Impact(LIVE, LIVE_LABEL, policy)
        if _in_queue(path) or (_element(change) and path[-2] == "SlurmQueues"):
            return ctx.by_strategy(policy, terminate_only=True)
        return Impact(FLEET, FLEET_LABEL, policy)
    if policy == "COMPUTE_FLEET_STOP_ON_REMOVE":
        queue_list = _in_queue(path) or (len(path) > 1 and path[-2] == "SlurmQueues")
        if _adds_only(change) and queue_list:
            return Impact(LIVE, LIVE_LABEL, policy)
        return Impact(FLEET, FLEET_LABEL, policy)
    if policy == "MANAGED_PLACEMENT_GROUP":
        queue, resource = _named(path, "SlurmQueues"), _named(path, "ComputeResources")
        if _managed_pg(ctx.base, queue, resource) and not _managed_pg(ctx.head, queue, resource):
            return Impact(FLEET, f"{FLEET_LABEL} (managed placement group removed)", policy)
        return ctx.by_strategy(policy) if _in_queue(path) else Impact(FLEET, FLEET_LABEL, policy)
    if policy == "MANAGED_FSX":
        if _managed_fsx(ctx.base) & _managed_fsx(ctx.head):
            return Impact(RECREATE, "cannot be updated (the managed FSx would be replaced): recreate the cluster",
                          policy)
        if _in_queue(path):
            if _adds_only(change):
                return Impact(LIVE, LIVE_LABEL, policy)
            return ctx.by_strategy(policy)
        return Impact(FLEET, FLEET_LABEL, policy)
    if policy == "SHARED_STORAGE_UPDATE_POLICY":
        return _shared_storage(change, policy, ctx)
    if policy == "LOGIN_NODES_POOLS_UPDATE_POLICY":
        if _adds_only(change):
            return Impact(LIVE, LIVE_LABEL, policy)
        return Impact(FLEET, "stop the login nodes", policy)
    return Impact(RECREATE, f"unknown policy {policy}: treat as not updatable", policy)


IMDS_ARG = "CK_COMPUTE_IMDS="  # clusterkit_node/contract/settings.py: security.compute_imds on compute nodes


def exposure_notes(changes: list[Change], head: Any) -> list[str]:
    """What a running compute node keeps until it is replaced, for changes its IAM side does not cover: the IMDS
    lock (clusterkit_node/node/imds_lock.py) runs at OnNodeStart, which a running node does not run again, while
    the job-user guard (an IAM policy) applies to every node as soon as the deploy ends."""
    queues: dict[str, list[str]] = {}
    for change in changes:
        path = change.path
        keys = tuple(p for p in path if not isinstance(p, Item))  # the Args list itself, or one of its elements
        if keys[-3:] != ("CustomActions", "OnNodeStart", "Args"):
            continue
        before, now = _imds(change.old), _imds(change.new)
        if now is not None and now != before:
            queues.setdefault(now, []).append(_named(path, "SlurmQueues") or "?")
    strategy = _Context([], None, head if isinstance(head, dict) else None).strategy
    when = QUEUE_LABELS.get(strategy, "the compute fleet is stopped").split(": ", 1)[-1]
    notes = []
    for mode, names in sorted(queues.items()):
        listed = ", ".join(sorted(set(names)))
        if mode == "root_only":
            notes.append(f"security.compute_imds root_only reaches queue(s) {listed} only as their nodes are "
                         f"replaced ({when}): until then a running node keeps IMDS, and the compute role, open to "
                         "its jobs (the job-user guard covers it from this deploy on)")
        else:
            notes.append(f"security.compute_imds {mode}: running nodes of queue(s) {listed} keep IMDS locked to "
                         f"root until they are replaced ({when})")
    return notes


def _imds(value: Any) -> str | None:
    """The CK_COMPUTE_IMDS value an Args side sets (an element or the whole list)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, str) and item.startswith(IMDS_ARG):
            return item[len(IMDS_ARG):]
    return None


def default_version() -> str:
    """The version a spec without ``parallelcluster_version`` gets (today's ClusterKit default)."""
    import dataclasses

    from clusterkit.spec.model import ClusterSpec

    (field,) = [f for f in dataclasses.fields(ClusterSpec) if f.name == VERSION_PATH[0]]
    return str(field.default)


def spec_impacts(changes: list[Change], default: Callable[[], str] = default_version) -> list[Assessed]:
    """Spec changes with an update impact the rendered config cannot show, most disruptive first.

    The ParallelCluster version is not part of ParallelCluster's config: it picks the provider template
    (stacks/cluster.py), and ``update_cluster`` refuses a cluster created by another version
    (aws-parallelcluster ``api/controllers/cluster_operations_controller.py``), so any change of it needs
    a new cluster. An absent key counts as ``default()``; that is today's default, as a diff of committed
    files cannot know the default of the code at the base commit."""
    found = []
    for change in changes:
        if change.path == VERSION_PATH:
            old, new = (default() if side is MISSING else str(side) for side in (change.old, change.new))
            if old != new:
                found.append(Assessed(change, Impact(RECREATE, VERSION_LABEL, "")))
        prop = OWN_FSX_PATHS.get(tuple(str(s) for s in change.path))
        if prop and _fsx_in_place(change):
            found.append(Assessed(change, Impact(FLEET, INTERRUPT_LABEL, f"{prop}: {FSX_UNAVAILABLE}")))
    return sorted(found, key=lambda a: a.impact.rank)


def _fsx_in_place(change: Change) -> bool:
    """A throughput change, or more capacity: what FSx applies in place (less capacity is a new file system)."""
    old, new = change.old, change.new
    if not (isinstance(old, int) and isinstance(new, int)) or old == new:
        return False
    return change.path[-1] != "capacity_gib" or new > old


class Assessor:
    """Assesses rendered changes; loads ParallelCluster's policy table once, only when needed."""

    def __init__(self, loader: Callable[[], tuple[Policies | None, str | None]] = load_policies):
        self._loader = loader
        self._policies: Policies | None = None
        self._loaded = False
        self.notes: list[str] = []

    def policies(self) -> Policies | None:
        if not self._loaded:
            self._policies, note = self._loader()
            self._loaded = True
            if note:
                self.notes.append(note)
        return self._policies

    def assess(self, changes: list[Change], base: Any, head: Any) -> list[Assessed]:
        """Each change with its impact, most disruptive first (file order within a rank)."""
        policies = self.policies()
        ctx = _Context(changes, None if base is MISSING else base, None if head is MISSING else head)
        unknown = Impact(UNKNOWN, UNKNOWN_LABEL, "")
        assessed = [Assessed(c, unknown if policies is None else classify(c, policies, ctx)) for c in changes]
        return sorted(assessed, key=lambda a: a.impact.rank)
