"""Semantic diff of the cluster configs between a git ref and the working tree, for pull-request review.

Per cluster it compares three committed files as data, not text: the spec
(``cluster_configs/<name>.yaml``), the rendered ParallelCluster config
(``cluster_configs/rendered/<name>.yaml``) and the image lock (``<name>.images.lock``). Lists of named
things (queues, compute resources, images, shared storage, tags) are matched by name, so reordering is
no change and a path reads ``Scheduling.SlurmQueues[gpu].ComputeResources[p5].MaxCount``.

The base side is what is committed at the ref, never re-rendered with today's code: a review is about
the committed files. Rendered changes get ParallelCluster's own update impact (``diff_impact``), and so
does a spec's ParallelCluster version (not in the rendered file, yet a new cluster); the cost delta comes
from ``clusterkit.cost`` when it is there; ``diff_render`` formats the report.
"""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ClusterKitError
from .paths import CONFIG_DIR_NAME, ROOT

REPO = ROOT  # the default work tree: this checkout
CONFIG_DIR = CONFIG_DIR_NAME
KINDS = ("spec", "rendered", "lock")
_FILE_PATTERNS = (
    (re.compile(rf"^{CONFIG_DIR}/rendered/([^/]+)\.yaml$"), "rendered"),
    (re.compile(rf"^{CONFIG_DIR}/([^/]+)\.images\.lock$"), "lock"),
    (re.compile(rf"^{CONFIG_DIR}/([^/]+)\.yaml$"), "spec"),
)
_NAME_KEYS = ("Name", "name", "Key", "key")
DEFAULT_BRANCHES = ("origin/main", "main")


class DiffError(ClusterKitError):
    """A diff that cannot be made (bad ref, not a git work tree): one line, exit 2."""


class _Missing:
    """Stands for "no such key / element" on one side, so a real ``null`` stays distinguishable."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def file_path(name: str, kind: str) -> str:
    """Repository-relative path of one of a cluster's three files."""
    return {
        "spec": f"{CONFIG_DIR}/{name}.yaml",
        "rendered": f"{CONFIG_DIR}/rendered/{name}.yaml",
        "lock": f"{CONFIG_DIR}/{name}.images.lock",
    }[kind]


# -- structural diff ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """A list element in a path: its name (``gpu``), or its index when the list has no names."""

    label: str


@dataclass(frozen=True)
class Change:
    """One value that differs; ``old``/``new`` is ``MISSING`` for an added/removed key or element."""

    path: tuple[str | Item, ...]
    old: Any
    new: Any

    @property
    def kind(self) -> str:
        if self.old is MISSING:
            return "added"
        if self.new is MISSING:
            return "removed"
        return "changed"

    @property
    def dotted(self) -> str:
        return show_path(self.path)


def show_path(path: tuple[str | Item, ...]) -> str:
    text = ""
    for segment in path:
        if isinstance(segment, Item):
            text += f"[{segment.label}]"
        else:
            text += f".{segment}" if text else str(segment)
    return text or "(whole file)"


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


def _label_function(old: list, new: list) -> Callable[[dict], str] | None:
    """How to name the elements of two versions of a list of mappings: by a name key (Name, name,
    Key, key) present and unique in every element, else None."""
    items = old + new
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for key in _NAME_KEYS:
        if all(key in i and _scalar(i[key]) for i in items) and all(
                len({str(i[key]) for i in side}) == len(side) for side in (old, new)):
            return lambda element, key=key: str(element[key])
    return None


def _one_key_items(items: list) -> bool:
    """Lists like ``[{Policy: arn}]``: a set of values in disguise, compared as a whole list."""
    return all(isinstance(i, dict) and len(i) == 1 for i in items)


def diff_values(old: Any, new: Any, path: tuple[str | Item, ...] = ()) -> list[Change]:
    """Every leaf-most difference between two YAML/JSON documents, old document order first.

    Named list elements are matched by name, other lists of mappings by index; lists of plain values
    (Args, SubnetIds) and of one-key mappings change as a whole (the renderer shows the elements that
    differ)."""
    if old is MISSING or new is MISSING:
        return [] if old is new else [Change(path, old, new)]
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[Change] = []
        for key in list(old) + [k for k in new if k not in old]:
            changes += diff_values(old.get(key, MISSING), new.get(key, MISSING), path + (str(key),))
        return changes
    if isinstance(old, list) and isinstance(new, list) and old != new:
        label = _label_function(old, new)
        if label is not None:
            before = {label(e): e for e in old}
            after = {label(e): e for e in new}
            names = list(before) + [n for n in after if n not in before]
            return [change for n in names
                    for change in diff_values(before.get(n, MISSING), after.get(n, MISSING), path + (Item(n),))]
        if old and new and all(isinstance(e, dict) for e in old + new) and not _one_key_items(old + new):
            changes = []
            for index in range(max(len(old), len(new))):
                a = old[index] if index < len(old) else MISSING
                b = new[index] if index < len(new) else MISSING
                changes += diff_values(a, b, path + (Item(str(index)),))
            return changes
    if old == new and type(old) is type(new):
        return []
    return [Change(path, old, new)]


# -- reading both sides ---------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise DiffError("git not found on PATH (clusterkit diff reads the base side with git)") from None


def resolve_base(root: Path, ref: str | None) -> tuple[str, str]:
    """(how the base was chosen, commit sha). ``None``: merge base with origin/main, else main, else HEAD."""
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise DiffError(f"{root}: not a git work tree (clusterkit diff compares against a git ref)")
    if ref is not None:
        found = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if found.returncode != 0:
            raise DiffError(f"unknown git ref '{ref}' "
                            "(give a branch, tag or commit; in a shallow clone fetch it first)")
        return ref, found.stdout.strip()
    for branch in DEFAULT_BRANCHES:
        base = _git(root, "merge-base", "HEAD", branch)
        if base.returncode == 0 and base.stdout.strip():
            return f"merge base with {branch}", base.stdout.strip()
    head = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if head.returncode != 0:
        raise DiffError(f"{root}: the repository has no commit yet (nothing to compare against)")
    return "HEAD", head.stdout.strip()


def _classify(relpath: str) -> tuple[str, str] | None:
    for pattern, kind in _FILE_PATTERNS:
        match = pattern.match(relpath)
        if match:
            return match.group(1), kind
    return None


Snapshot = dict[tuple[str, str], str]  # (cluster, kind) -> file text


def git_snapshot(root: Path, sha: str) -> Snapshot:
    """The cluster files committed at ``sha`` (``git ls-tree`` + ``git show``)."""
    listing = _git(root, "ls-tree", "-r", "--name-only", "-z", sha, "--", f"{CONFIG_DIR}/")
    if listing.returncode != 0:
        raise DiffError(f"git ls-tree {sha[:12]} failed: {listing.stderr.strip()}")
    snapshot: Snapshot = {}
    for relpath in sorted(filter(None, listing.stdout.split("\0"))):
        key = _classify(relpath)
        if key is None:
            continue
        shown = _git(root, "show", f"{sha}:./{relpath}")  # ./: relative to root, which may be a subdirectory
        if shown.returncode != 0:
            raise DiffError(f"git show {sha[:12]}:{relpath} failed: {shown.stderr.strip()}")
        snapshot[key] = shown.stdout
    return snapshot


def tree_snapshot(root: Path) -> Snapshot:
    """The cluster files in the working tree, committed or not."""
    snapshot: Snapshot = {}
    config = root / CONFIG_DIR
    found = [*config.glob("*.yaml"), *config.glob("*.images.lock"), *config.glob("rendered/*.yaml")]
    for path in sorted(found):
        key = _classify(path.relative_to(root).as_posix())
        if key is not None and path.is_file():
            snapshot[key] = path.read_text(encoding="utf-8")
    return snapshot


def _parse(text: str | None, kind: str) -> tuple[Any, str | None]:
    """(document or MISSING, problem)."""
    if text is None:
        return MISSING, None
    try:
        return (json.loads(text) if kind == "lock" else yaml.safe_load(text)), None
    except (ValueError, yaml.YAMLError) as exc:
        return MISSING, " ".join(str(exc).split())


# -- the report -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageChange:
    """One image of the lock that was added, removed or re-pinned (``old``/``new``: lock entries)."""

    name: str
    kind: str  # added | removed | changed
    old: dict | None
    new: dict | None

    @property
    def fields(self) -> list[str]:
        """Lock keys whose values differ (for a changed image)."""
        if self.old is None or self.new is None:
            return []
        keys = list(self.old) + [k for k in self.new if k not in self.old]
        return [k for k in keys if self.old.get(k) != self.new.get(k)]


@dataclass(frozen=True)
class CostSide:
    """One side's estimate (``clusterkit.cost``): USD per hour idle (min nodes) and busy (max nodes)."""

    idle_hourly: float
    busy_hourly: float
    missing: tuple[str, ...] = ()  # items the price file has no price for (not in the figures)


@dataclass(frozen=True)
class CostDelta:
    """Both sides' estimates; a side is None when the cluster does not exist there."""

    old: CostSide | None
    new: CostSide | None
    hours_30_days: int = 720

    def delta(self, figure: str) -> float:
        return getattr(self.new, figure, 0.0) - getattr(self.old, figure, 0.0)


@dataclass(frozen=True)
class ClusterDiff:
    name: str
    status: str  # added | removed | changed | unchanged
    spec: tuple[Change, ...] = ()
    rendered: tuple[Any, ...] = ()  # diff_impact.Assessed, most disruptive first
    images: tuple[ImageChange, ...] = ()
    lock: tuple[Change, ...] = ()  # lock changes outside the image list
    cost: CostDelta | str | None = None  # str: why there is no number
    notes: tuple[str, ...] = ()
    text_only: tuple[str, ...] = ()  # files whose text changed with the same data (comments, layout)
    spec_impacts: tuple[Any, ...] = ()  # diff_impact.Assessed: spec changes outside the rendered config (PC version)

    @property
    def changed(self) -> bool:
        return self.status != "unchanged"


@dataclass(frozen=True)
class Report:
    base: str  # how the base was chosen: the ref given, or "merge base with origin/main"
    base_sha: str
    clusters: tuple[ClusterDiff, ...]
    notes: tuple[str, ...] = field(default=())
    head: str = "working tree"


def _image_changes(old: Any, new: Any) -> tuple[list[ImageChange], list[Change]]:
    def images(doc: Any) -> dict[str, dict]:
        entries = doc.get("images", []) if isinstance(doc, dict) else []
        return {e["name"]: e for e in entries if isinstance(e, dict) and "name" in e}

    before, after = images(old), images(new)
    found: list[ImageChange] = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a != b:
            kind = "added" if a is None else "removed" if b is None else "changed"
            found.append(ImageChange(name, kind, a, b))
    if old is MISSING or new is MISSING:
        return found, []
    return found, diff_values(_without_images(old), _without_images(new))


def _without_images(doc: Any) -> Any:
    return {k: v for k, v in doc.items() if k != "images"} if isinstance(doc, dict) else doc


def diff_cluster(
    name: str,
    base: dict[str, str | None],
    head: dict[str, str | None],
    assess: Callable[[list[Change], Any, Any], list[Any]],
    cost: Callable[..., CostDelta | str] | None = None,
    assess_spec: Callable[[list[Change]], list[Any]] | None = None,
) -> ClusterDiff:
    """Compare one cluster's files; ``assess`` turns rendered changes into assessed, sorted ones,
    ``assess_spec`` the spec changes whose impact the rendered config cannot show."""
    notes: list[str] = []
    docs: dict[str, tuple[Any, Any]] = {}
    for kind in KINDS:
        pair, broken = [], False
        for side, texts in (("base", base), ("working tree", head)):
            doc, problem = _parse(texts.get(kind), kind)
            if problem:
                notes.append(f"{file_path(name, kind)} ({side}): cannot parse: {problem}")
                broken = True
            pair.append(doc)
        docs[kind] = (MISSING, MISSING) if broken else (pair[0], pair[1])  # no diff against a broken file
    def priced() -> CostDelta | str | None:
        return cost(base.get("spec"), head.get("spec"), base.get("lock"), head.get("lock")) if cost else None

    if not any(base.get(k) is not None for k in KINDS):
        images, _ = _image_changes(MISSING, docs["lock"][1])
        return ClusterDiff(name, "added", images=tuple(images), cost=priced(), notes=tuple(notes))
    if not any(head.get(k) is not None for k in KINDS):
        return ClusterDiff(name, "removed", cost=priced(), notes=tuple(notes))
    spec = diff_values(*docs["spec"])
    rendered = diff_values(*docs["rendered"])
    images, lock = _image_changes(*docs["lock"])
    text_only = [file_path(name, k) for k in KINDS
                 if base.get(k) != head.get(k) and docs[k][0] == docs[k][1] and docs[k][0] is not MISSING]
    assessed = assess(rendered, *docs["rendered"]) if rendered else []
    changed = bool(spec or rendered or images or lock or notes)
    if not changed:
        return ClusterDiff(name, "unchanged", text_only=tuple(text_only))
    spec_assessed = assess_spec(spec) if assess_spec and spec else []
    return ClusterDiff(name, "changed", tuple(spec), tuple(assessed), tuple(images), tuple(lock), priced(),
                       tuple(notes), tuple(text_only), tuple(spec_assessed))


def _by_cluster(snapshot: Snapshot) -> dict[str, dict[str, str | None]]:
    grouped: dict[str, dict[str, str | None]] = {}
    for (name, kind), text in snapshot.items():
        grouped.setdefault(name, {})[kind] = text
    return grouped


def build_report(root: Path, base_ref: str | None = None, names: list[str] | None = None) -> Report:
    """Diff every cluster (or ``names``) between ``base_ref`` and the working tree of ``root``."""
    from .diff_impact import Assessor, spec_impacts

    how, sha = resolve_base(root, base_ref)
    base, head = _by_cluster(git_snapshot(root, sha)), _by_cluster(tree_snapshot(root))
    known = sorted(set(base) | set(head))
    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise DiffError(f"no cluster named {', '.join(unknown)} at {how} or in the working tree "
                        f"(known: {', '.join(known) or 'none'})")
    assessor = Assessor()
    clusters = [diff_cluster(n, base.get(n, {}), head.get(n, {}), assessor.assess, _cost_delta, spec_impacts)
                for n in (names or known)]
    return Report(how, sha, tuple(clusters), tuple(assessor.notes))


# -- cost ------------------------------------------------------------------------------------------------


def _cost_delta(base_spec_text: str | None, head_spec_text: str | None,
                base_lock_text: str | None = None, head_lock_text: str | None = None) -> CostDelta | str:
    """Both sides priced by ``clusterkit.cost`` from the committed spec text (and lock, for image sizes);
    a short reason instead when a side cannot be priced."""
    try:
        from . import cost
        from .spec import parse_spec
    except ImportError as exc:
        return f"cost delta unavailable ({exc})"
    try:
        prices = cost.load_prices()
        sides: list[CostSide | None] = []
        for label, text, lock_text in (("base", base_spec_text, base_lock_text),
                                       ("working tree", head_spec_text, head_lock_text)):
            if text is None:
                sides.append(None)
                continue
            spec, _, _ = parse_spec(text, label)
            if spec is None:
                return f"cost delta unavailable (the {label} spec does not parse)"
            lock, _ = _parse(lock_text, "lock")
            found = cost.estimate(spec, lock if isinstance(lock, dict) else None, prices)
            sides.append(CostSide(found.idle_hourly, found.busy_hourly, tuple(found.missing)))
    except ClusterKitError as exc:
        return f"cost delta unavailable ({' '.join(exc.lines())})"
    return CostDelta(sides[0], sides[1], cost.HOURS_30_DAYS)
