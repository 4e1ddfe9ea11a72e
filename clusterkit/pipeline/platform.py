"""Platforms: the network, FSx file system and image store that many clusters share, referenced by name.

A platform file ``platforms/<name>.yaml`` lives next to the cluster specs that say ``platform: <name>``. It is
checked by the same network and storage rules a cluster's own network and storage get, plus the rules only
the sum of its clusters can break: the compute subnet must hold every cluster's nodes, the file system every
cluster's images, and an image name must mean one digest across the platform (the store's stable name
``<store>/<name>.sqsh`` and its manifest are keyed by name; clusterkit_node/store/manifest.py). "Its clusters" are the
specs in the same directory that name it: what ``validate`` can know offline; the head nodes' own records
on the store cover clusters made from specs elsewhere (docs/operations.md).

A cluster on a platform is checked as the merged spec: its own fields, with ``network`` and ``storage`` taken
from the platform; problems in those two come from the platform's file, once.
"""
from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from clusterkit.effective.expand import expand_spec
from clusterkit.images.lock_file import ImageLock, LockError, read_lock
from clusterkit.paths import CONFIG_DIR
from clusterkit.rules import advice
from clusterkit.rules.cluster import identity
from clusterkit.rules.limits import AWS_RESERVED_IPS_PER_SUBNET, CLUSTER_NAME
from clusterkit.rules.network import compute_ips_needed, network
from clusterkit.rules.storage import storage
from clusterkit.spec.errors import Problem, SpecError
from clusterkit.spec.files import SPEC_SUFFIXES, display, lock_path, platform_path, platforms_dir
from clusterkit.spec.model import ClusterSpec, PlatformSpec, Queue, parse_platform, parse_spec
from clusterkit.spec.yaml_reader import Marks

GIB = 1024 ** 3
PLATFORM_FIELDS = ("network", "storage")  # what a cluster on a platform takes from it, never writes itself


@dataclass(frozen=True)
class LoadedPlatform:
    """A platform file that has no errors, with where it came from."""

    spec: PlatformSpec
    path: Path
    marks: Marks
    members: tuple[Member, ...] = ()  # the specs naming it, read once per load (empty while it has errors)

    @property
    def display_path(self) -> str:
        return self.marks.file


@dataclass(frozen=True)
class Member:
    """A cluster spec in the platform's directory that names the platform (parsed, not validated)."""

    spec: ClusterSpec
    path: Path
    marks: Marks
    lock: ImageLock | None


def at_platform_file(problems: list[Problem], on: LoadedPlatform | None, cluster: str) -> list[Problem]:
    """A cluster's warnings about what its platform sets (network, storage) are positioned in the platform's file,
    where the key they name is, and say which cluster they are about (the cluster's file has no such key)."""
    if on is None:
        return problems
    moved = []
    for problem in problems:
        if problem.path.split(".")[0] in PLATFORM_FIELDS:
            line, col = on.marks.at(problem.path)
            problem = dataclasses.replace(problem, file=on.marks.file, line=line, col=col,
                                          message=f"cluster {cluster}: {problem.message}")
        moved.append(problem)
    return moved


def as_cluster(platform: PlatformSpec, queues: tuple[Queue, ...] = ()) -> ClusterSpec:
    """The platform as a cluster with no queues of its own: what the cluster rules for identity, network and
    storage read (the same rules, so a platform and a cluster's own network are checked alike)."""
    return ClusterSpec(name=platform.name, region=platform.region, availability_zone=platform.availability_zone,
                       queues=queues, account=platform.account, network=platform.network, storage=platform.storage,
                       tags=platform.tags)


def merged(spec: ClusterSpec, platform: PlatformSpec) -> ClusterSpec:
    """The cluster as it runs: its own fields, the platform's network and storage."""
    return dataclasses.replace(spec, network=platform.network, storage=platform.storage)


def known_platforms(spec_dir: Path) -> list[str]:
    folder = platforms_dir(spec_dir)
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def members(spec_dir: Path, name: str) -> list[Member]:
    """Every spec in ``spec_dir`` that names platform ``name`` and parses (one that does not is its own
    validate's business), sorted by file name."""
    found = []
    for path in sorted(p for p in spec_dir.iterdir() if p.suffix in SPEC_SUFFIXES and p.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        spec, marks, problems = parse_spec(text, display(path))
        if spec is None or spec.platform != name or problems:
            continue
        try:
            lock = read_lock(lock_path(path)) if lock_path(path).exists() else None
        except LockError:
            lock = None
        found.append(Member(spec, path, marks, lock))
    return found


def read_platform(path: Path) -> tuple[PlatformSpec | None, Marks, list[Problem]]:
    """Parse and check a platform file on its own (no member rules)."""
    shown = display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        known = ", ".join(known_platforms(path.parent.parent)) or "none"
        return None, Marks(shown), [Problem(shown, 0, 0, "", "no such platform file", f"known platforms: {known}")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, Marks(shown), [Problem(shown, 0, 0, "", f"cannot read: {exc}")]
    platform, marks, problems = parse_platform(text, shown)
    if platform is None:
        return None, marks, problems or [Problem(shown, 1, 1, "", "not a platform file")]
    if problems:
        return platform, marks, problems
    as_spec = as_cluster(platform)
    for rule in (identity, network, storage):
        problems += [p for p in rule(as_spec, marks) if p.path != "parallelcluster_version"]
    given = platform.network.security_groups
    if given.head_node or given.compute or given.fsx:
        problems.append(marks.problem(
            "network.security_groups", "a platform takes no existing security groups: each cluster on it makes its "
            "own node group and opens the platform's FSx group to it (stacks/platform_link.py)",
            "in a locked-down account, give the groups in a standalone cluster spec with network.existing and "
            "storage.fsx_lustre.existing (docs/operations.md)"))
    if path.stem != platform.name and not any(p.path == "name" for p in problems):
        problems.append(marks.problem("name", f"'{platform.name}' differs from the file name '{path.stem}'",
                                      f"rename the file to {platform.name}.yaml or set name: {path.stem}"))
    return platform, marks, problems


def load_platform(path: Path) -> tuple[LoadedPlatform, list[Problem]]:
    """The platform at ``path`` with the problems of the platform and of the sum of its members (errors and
    warnings); raises ``SpecError`` when the file cannot be read as a platform at all."""
    platform, marks, problems = read_platform(path)
    if platform is None:
        raise SpecError(problems)
    loaded = LoadedPlatform(platform, path, marks)
    if not [p for p in problems if p.level == "error"]:
        group = members(path.parent.parent, platform.name)
        loaded = LoadedPlatform(platform, path, marks, tuple(group))
        problems += list(_sum_of_members(loaded, group))
        problems += list(_stack_names_taken(loaded, path.parent.parent))
    return loaded, problems


def platform_of(spec: ClusterSpec, marks: Marks, spec_path: Path) -> tuple[LoadedPlatform | None, list[Problem]]:
    """Resolve a cluster's ``platform:``: the platform and every problem of the reference, the platform and the
    cluster's place on it. ``(None, [])`` for a cluster without one."""
    if spec.platform is None:
        return None, []
    if not CLUSTER_NAME.fullmatch(spec.platform):  # it becomes a file name and stack names
        return None, [marks.problem("platform", f"'{spec.platform}' is not a platform name",
                                    "start with a letter; letters, digits and hyphens; at most 60 characters")]
    path = platform_path(spec_path, spec.platform)
    if not path.is_file():
        known = known_platforms(spec_path.parent)
        hint = f"known platforms: {', '.join(known)}" if known else f"create {display(path)} (docs/operations.md)"
        return None, [marks.problem("platform", f"no platform '{spec.platform}': {display(path)} does not exist",
                                    hint)]
    problems: list[Problem] = []
    for key in PLATFORM_FIELDS:
        if key in marks.keys:
            problems.append(marks.problem(key, f"set by platform {spec.platform} ({display(path)}); a cluster on a "
                                          f"platform has no {key} of its own",
                                          f"remove {key}: here, or change it in {display(path)}", on_key=True))
    try:
        loaded, platform_problems = load_platform(path)
    except SpecError as exc:
        return None, problems + exc.problems
    problems += platform_problems
    p = loaded.spec
    where = f"{loaded.display_path}:{loaded.marks.at('region')[0]}"
    if spec.region != p.region:
        problems.append(marks.problem("region", f"'{spec.region}' differs from platform {p.name}'s region {p.region} "
                                      f"({where})", f"a cluster runs in its platform's region: region: {p.region}"))
    elif spec.availability_zone != p.availability_zone:
        problems.append(marks.problem(
            "availability_zone", f"'{spec.availability_zone}' differs from platform {p.name}'s {p.availability_zone} "
            f"({loaded.display_path}:{loaded.marks.at('availability_zone')[0]})",
            f"the platform's compute subnet is in one AZ: availability_zone: {p.availability_zone}"))
    if spec.account is not None and p.account is not None and spec.account != p.account:
        problems.append(marks.problem("account", f"'{spec.account}' differs from platform {p.name}'s account "
                                      f"{p.account}", "exports are read in the account that made them"))
    return loaded, problems


def name_conflicts(spec: ClusterSpec, marks: Marks, spec_path: Path, lock: ImageLock | None,
                   on: LoadedPlatform | None) -> list[Problem]:
    """One image name, one digest on a platform: this cluster's locked digests against every other member's
    (``on.members``, read when the platform was loaded)."""
    if on is None or lock is None:
        return []
    mine = {e.name: e for e in lock.images}
    problems = []
    for other in on.members:
        if other.path.resolve() == spec_path.resolve() or other.lock is None:
            continue
        theirs = {e.name: e for e in other.lock.images}
        for i, image in enumerate(spec.containers.images):
            a, b = mine.get(image.name), theirs.get(image.name)
            if a and b and a.digest == b.digest and a.expect != b.expect:
                # the sync demotes an image whose versions miss its lock's expect, removing the stable name for
                # every cluster: two expectations of one file would make the name come and go with each sync
                problems.append(marks.problem(
                    f"containers.images[{i}].expect",
                    f"'{image.name}' expects {_expect(a.expect)} here but {_expect(b.expect)} in {other.spec.name} "
                    f"({display(other.path)}), for the same file on platform {spec.platform}: the store keeps one "
                    "verdict per name", "state the same expect in both specs (or give one image another name)"))
            digest, their = a.digest if a else None, b.digest if b else None
            if digest and their and digest != their:
                problems.append(marks.problem(
                    f"containers.images[{i}].name",
                    f"'{image.name}' is {_short(digest)} here but {_short(their)} in {other.spec.name} "
                    f"({display(other.path)}), on the same platform {spec.platform}: the store's stable name "
                    f"{image.name}.sqsh means one image",
                    f"give one of them another name, e.g. {image.name}-{_short(digest)[7:15]}, or pin the same digest"))
    return problems


def trust_conflicts(spec: ClusterSpec, marks: Marks, spec_path: Path, on: LoadedPlatform | None) -> list[Problem]:
    """One platform, one trust domain: root on any cluster of a platform can rewrite the shared store, its manifest
    and the published record every other cluster's importer trusts (FSx has no root squash on the store, and
    without a directory service uid N is one owner on every cluster), so clusters that declare different
    ``security.trust_domain`` values (one declaring none counts as its own) may not share one."""
    if on is None:
        return []
    mine = spec.security.trust_domain
    for other in on.members:
        if other.path.resolve() == spec_path.resolve() or other.spec.security.trust_domain == mine:
            continue
        theirs = other.spec.security.trust_domain
        at = "security.trust_domain" if "security.trust_domain" in marks.keys else "platform"
        return [marks.problem(
            at, f"trust domain {_domain(mine)} here but {_domain(theirs)} in {other.spec.name} "
            f"({display(other.path)}), on the same platform {spec.platform}: root on either cluster can rewrite the "
            "store the other serves", "give clusters of another trust domain their own platform, or declare the "
            "same security.trust_domain in both specs")]
    return []


def _domain(value: str | None) -> str:
    return f"'{value}'" if value is not None else "none declared"


def _expect(expect: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(expect.items())) or "nothing"


def _short(digest: str) -> str:
    return digest[:19]


def _sum_of_members(loaded: LoadedPlatform, group: list[Member]) -> list[Problem]:
    """What only the platform's clusters together can exceed: subnet addresses and file system capacity."""
    problems: list[Problem] = []
    if not group:
        return problems
    p, m = loaded.spec, loaded.marks
    net = p.network
    cidr, path = None, ""
    if net.existing is not None and net.existing.compute_subnet_cidr:
        cidr, path = net.existing.compute_subnet_cidr, "network.existing.compute_subnet_cidr"
    elif net.existing is None:
        new = net.new
        mask = new.compute_subnet_mask if new else 20
        base = new.cidr if new else "10.0.0.0/16"
        cidr, path = f"{base.split('/')[0]}/{mask}", "network.new.compute_subnet_mask"
    if cidr:
        try:
            usable = ipaddress.ip_network(cidr, strict=False).num_addresses - AWS_RESERVED_IPS_PER_SUBNET
        except ValueError:
            usable = None
        needs = {g.spec.name: compute_ips_needed(g.spec) for g in group}
        if usable is not None and len(group) > 1 and sum(needs.values()) > usable:
            each = ", ".join(f"{k} {v}" for k, v in needs.items())
            problems.append(m.problem(path, f"compute subnet has {usable} usable addresses but the platform's "
                                      f"clusters at max nodes need {sum(needs.values())} ({each})",
                                      "a larger compute subnet, or lower max in a cluster"))
    new_fsx = p.storage.fsx_lustre.new
    if p.storage.fsx_lustre.existing is None:
        capacity = (new_fsx.capacity_gib if new_fsx else 1200) * GIB
        store = advice.shared_store((expand_spec(merged(g.spec, p)), g.lock) for g in group)
        sizes, assumed = store.sqsh, store.assumed
        total = sum(sizes.values())
        if total > capacity:
            note = f"; {assumed} of them at the assumed {advice.DEFAULT_IMAGE_GIB} GiB (no size in the lock)" \
                if assumed else ""
            problems.append(m.problem(
                "storage.fsx_lustre.new.capacity_gib",
                f"{capacity // GIB} GiB cannot hold the {len(sizes)} distinct images of clusters "
                f"{', '.join(g.spec.name for g in group)}: about {total / GIB:.0f} GiB of .sqsh{note}",
                f"capacity_gib: {max(2400, -(-int(total * 1.25 / GIB) // 2400) * 2400)} (room to import a new "
                "version beside the old), or fewer images"))
    return problems


def _stack_names_taken(loaded: LoadedPlatform, spec_dir: Path) -> list[Problem]:
    """A platform's stacks are ``<Name>-Network`` and ``<Name>-Storage``, as a standalone cluster's are: the two
    must not share a name in one directory (one app would build, the other overwrite)."""
    clash = spec_dir / f"{loaded.spec.name}.yaml"
    if clash.is_file():
        return [loaded.marks.problem("name", f"cluster spec {display(clash)} has the same name: both would make "
                                     "the stacks of that name", "rename the platform or the cluster")]
    return []


def resolve_platform(name_or_path: str) -> Path:
    """A bare name means ``cluster_configs/platforms/<name>.yaml``; anything with a slash or .yaml is a path."""
    if "/" in name_or_path or name_or_path.endswith(SPEC_SUFFIXES):
        return Path(name_or_path)
    if not CLUSTER_NAME.fullmatch(name_or_path):
        raise SpecError([Problem(name_or_path, 0, 0, "", "not a platform name or a platform file path",
                                 f"known platforms: {', '.join(known_platforms(CONFIG_DIR)) or 'none'}")])
    return platforms_dir(CONFIG_DIR) / f"{name_or_path}.yaml"


def load_checked(name_or_path: str) -> tuple[LoadedPlatform, list[Problem]]:
    """The platform for its own stacks: raises ``SpecError`` with every error; returns the warnings."""
    loaded, problems = load_platform(resolve_platform(name_or_path))
    errors = [p for p in problems if p.level == "error"]
    if errors:
        raise SpecError(errors)
    return loaded, problems
