"""Semantic diff of the cluster configs between a git ref and the working tree, for pull-request review.

Per cluster it compares three committed files as data, not text: the spec
(``cluster_configs/<name>.yaml``), the rendered ParallelCluster config
(``cluster_configs/rendered/<name>.yaml``) and the image lock (``<name>.images.lock``). Lists of named
things (queues, compute resources, images, shared storage, tags) are matched by name, so reordering is
no change and a path reads ``Scheduling.SlurmQueues[gpu].ComputeResources[p5].MaxCount``.

The base side is what is committed at the ref, never re-rendered with today's code: a review is about
the committed files. The working tree's rendered config is what ``render`` would write from its spec when
the caller can say (``render_now``: the CLI does for this checkout): a committed render left stale by a
spec edit must not hide the update impact, so the would-be render is compared and a note says it is
stale. Seams: ``diff_sources`` reads both sides, ``diff_struct`` compares documents,
``diff_impact`` gives rendered changes ParallelCluster's own update impact (and a spec's ParallelCluster
version, not in the rendered file yet a new cluster, its own), this module builds the report (with the cost
delta from ``clusterkit.cost.estimate`` when it is there) and ``diff_render`` formats it. A changed platform
file (``cluster_configs/platforms/<name>.yaml``, ``diff_platforms``) adds its consequences to every cluster on it.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clusterkit.diff import platforms as diff_platforms
from clusterkit.diff.cost_delta import CostDelta as CostDelta
from clusterkit.diff.cost_delta import CostSide as CostSide
from clusterkit.diff.impact import Assessed, Assessor, exposure_notes, spec_impacts
from clusterkit.diff.platforms import PlatformDiff
from clusterkit.diff.sources import (
    KINDS,
    PLATFORM,
    DiffError,
    by_cluster,
    by_platform,
    file_path,
    git_snapshot,
    resolve_base,
    tree_snapshot,
)
from clusterkit.diff.structure import MISSING, Change, diff_values
from clusterkit.paths import ROOT
from clusterkit.spec.errors import ClusterKitError

REPO = ROOT  # the default work tree: this checkout


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
    old: dict[str, Any] | None
    new: dict[str, Any] | None

    @property
    def fields(self) -> list[str]:
        """Lock keys whose values differ (for a changed image)."""
        if self.old is None or self.new is None:
            return []
        keys = list(self.old) + [k for k in self.new if k not in self.old]
        return [k for k in keys if self.old.get(k) != self.new.get(k)]


@dataclass(frozen=True)
class ClusterDiff:
    name: str
    status: str  # added | removed | changed | unchanged
    spec: tuple[Change, ...] = ()
    rendered: tuple[Assessed, ...] = ()  # most disruptive first
    images: tuple[ImageChange, ...] = ()
    lock: tuple[Change, ...] = ()  # lock changes outside the image list
    cost: CostDelta | str | None = None  # str: why there is no number
    notes: tuple[str, ...] = ()
    text_only: tuple[str, ...] = ()  # files whose text changed with the same data (comments, layout)
    spec_impacts: tuple[Assessed, ...] = ()  # spec changes outside the rendered config (PC version)
    platform_impacts: tuple[Assessed, ...] = ()  # its platform's changes (``platforms[name].<path>``), worst first

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
    platforms: tuple[PlatformDiff, ...] = ()  # changed platform files, with the clusters on them


def _image_changes(old: Any, new: Any) -> tuple[list[ImageChange], list[Change]]:
    def images(doc: Any) -> dict[str, dict[str, Any]]:
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
    *,
    head_notes: tuple[str, ...] = (),
) -> ClusterDiff:
    """Compare one cluster's files; ``assess`` turns rendered changes into assessed, sorted ones,
    ``assess_spec`` the spec changes whose impact the rendered config cannot show; ``head_notes`` come first
    (what ``render_now`` found of the working tree's rendered config)."""
    notes: list[str] = list(head_notes)
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
    notes += exposure_notes(rendered, docs["rendered"][1])
    changed = bool(spec or rendered or images or lock or notes)
    if not changed:
        return ClusterDiff(name, "unchanged", text_only=tuple(text_only))
    spec_assessed = assess_spec(spec) if assess_spec and spec else []
    return ClusterDiff(name, "changed", tuple(spec), tuple(assessed), tuple(images), tuple(lock), priced(),
                       tuple(notes), tuple(text_only), tuple(spec_assessed))


@dataclass(frozen=True)
class RenderedNow:
    """What ``render`` would write for a working-tree spec: the text, or why it cannot say (spec errors)."""

    text: str | None
    why_not: str = ""


RenderNow = Callable[[str], RenderedNow]  # cluster name -> its would-be rendered config


def _rendered_now(name: str, head: dict[str, str | None], render_now: RenderNow | None
                  ) -> tuple[dict[str, str | None], tuple[str, ...]]:
    """The working tree's files with the rendered config ``render`` would write, and the note saying so."""
    if render_now is None or head.get("spec") is None:
        return head, ()
    found = render_now(name)
    rendered, spec = file_path(name, "rendered"), file_path(name, "spec")
    if found.text is None:
        return head, (f"{rendered} compared as committed, maybe stale: {spec} does not render ({found.why_not})",)
    if found.text == head.get("rendered"):
        return head, ()
    return {**head, "rendered": found.text}, (
        f"{rendered} is stale (run `make render`): compared as `make render` would write it from {spec}",)


def build_report(root: Path, base_ref: str | None = None, names: list[str] | None = None, *,
                 render_now: RenderNow | None = None) -> Report:
    """Diff every cluster (or ``names``) between ``base_ref`` and the working tree of ``root``; with
    ``render_now``, the working tree's rendered configs are what ``render`` would write (a note when stale)."""

    how, sha = resolve_base(root, base_ref)
    base_files, head_files = git_snapshot(root, sha), tree_snapshot(root)
    base, head = by_cluster(base_files), by_cluster(head_files)
    known = sorted(set(base) | set(head))
    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise DiffError(f"no cluster named {', '.join(unknown)} at {how} or in the working tree "
                        f"(known: {', '.join(known) or 'none'})")
    assessor = Assessor()
    clusters = []
    for n in names or known:
        files, head_notes = _rendered_now(n, head.get(n, {}), render_now)
        clusters.append(diff_cluster(n, base.get(n, {}), files, assessor.assess, _cost_delta, spec_impacts,
                                     head_notes=head_notes))
    platforms, clusters = _platforms(by_platform(base_files), by_platform(head_files), base, head, clusters,
                                    filtered=bool(names))
    return Report(how, sha, tuple(clusters), tuple(repo_relative(note, root) for note in assessor.notes),
                  platforms=platforms)


def repo_relative(note: str, root: Path) -> str:
    """A note as a pull request shows it: a path inside the repository (or ClusterKit's checkout, where its venvs
    are) relative to it, so the comment names ``.venv-pcluster/bin/python``, not the CI runner's directories."""
    for base in sorted({str(root), str(root.resolve()), str(ROOT), str(ROOT.resolve())}, key=len, reverse=True):
        note = note.replace(base.rstrip("/") + "/", "")
    return note


def _platforms(base: dict[str, str], head: dict[str, str], base_clusters: dict[str, dict[str, str | None]],
               head_clusters: dict[str, dict[str, str | None]], clusters: list[ClusterDiff], *, filtered: bool
               ) -> tuple[tuple[PlatformDiff, ...], list[ClusterDiff]]:
    """Every changed platform file with the clusters on it (at either side, among ``clusters``), and those
    clusters with the platform's consequences added: a platform change is a change of each of them."""
    shown = {c.name: c for c in clusters}
    specs = [{n: files.get("spec") for n, files in side.items()} for side in (base_clusters, head_clusters)]
    found = []
    for name in sorted(set(base) | set(head)):
        platform = diff_platforms.diff_platform(name, base.get(name), head.get(name), where=file_path(name, PLATFORM))
        if not platform.changed and not platform.text_only:
            continue
        on_it = [m for m in diff_platforms.members(name, *specs) if m.name in shown]
        if filtered and not on_it:
            continue  # no cluster on it among the names asked for
        for member in on_it:
            shown[member.name] = _on_changed_platform(shown[member.name], platform)
        priced = _platform_cost_delta(name, base.get(name), head.get(name), base_clusters, head_clusters) \
            if platform.changed else None
        found.append(dataclasses.replace(platform, members=tuple(on_it), cost=priced))
    return tuple(found), [shown[c.name] for c in clusters]


def _on_changed_platform(cluster: ClusterDiff, platform: PlatformDiff) -> ClusterDiff:
    """``cluster`` with ``platform``'s consequences: a cluster whose own files are unchanged is changed now."""
    if not platform.consequences:
        return cluster
    impacts = diff_platforms.cluster_impacts(platform, rendered_changed=bool(cluster.rendered))
    notes = list(diff_platforms.rendered_note(platform, cluster.name, bool(cluster.rendered)))
    if cluster.status == "unchanged":
        notes.insert(0, f"runs on platform {platform.name}, which changed ({file_path(platform.name, PLATFORM)})")
    return dataclasses.replace(
        cluster, status="changed" if cluster.status == "unchanged" else cluster.status,
        platform_impacts=tuple(sorted([*cluster.platform_impacts, *impacts], key=lambda a: a.impact.rank)),
        notes=(*cluster.notes, *notes))


# -- cost ------------------------------------------------------------------------------------------------


def _cost_delta(base_spec_text: str | None, head_spec_text: str | None,
                base_lock_text: str | None = None, head_lock_text: str | None = None) -> CostDelta | str:
    """Both sides priced by ``clusterkit.cost.estimate`` from the committed spec text (and lock, for image sizes);
    a short reason instead when a side cannot be priced."""
    try:
        from clusterkit.cost import estimate as cost
        from clusterkit.effective.expand import expand_spec
        from clusterkit.images.lock_file import parse_lock_text
        from clusterkit.spec.model import parse_spec
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
            lock, broken = parse_lock_text(lock_text, label) if lock_text is not None else (None, [])
            found = cost.estimate(expand_spec(spec), None if broken else lock, prices)
            sides.append(CostSide(found.idle_hourly, found.busy_hourly, tuple(found.missing)))
    except ClusterKitError as exc:
        return f"cost delta unavailable ({' '.join(exc.lines())})"
    return CostDelta(sides[0], sides[1], cost.HOURS_30_DAYS)


def _platform_cost_delta(name: str, base_text: str | None, head_text: str | None,
                         base_clusters: dict[str, dict[str, str | None]],
                         head_clusters: dict[str, dict[str, str | None]]) -> CostDelta | str:
    """The platform's own cost on both sides (``clusterkit.cost.platform_cost``), with the clusters naming it on that
    side filling its image store; a short reason instead when a side cannot be priced."""
    try:
        from clusterkit.cost import estimate as cost
        from clusterkit.cost import platform_cost
    except ImportError as exc:
        return f"cost delta unavailable ({exc})"
    try:
        prices = cost.load_prices()
        sides: list[CostSide | None] = []
        for label, text, clusters in (("base", base_text, base_clusters), ("working tree", head_text, head_clusters)):
            if text is None:
                sides.append(None)
                continue
            on = [(files.get("spec"), files.get("lock")) for _, files in sorted(clusters.items())
                  if diff_platforms.platform_of(files.get("spec")) == name]
            found = platform_cost.from_texts(text, on, prices, where=file_path(name, PLATFORM))
            if found is None:
                return f"cost delta unavailable (the {label} platform file does not parse)"
            sides.append(CostSide(found.idle_hourly, found.busy_hourly, tuple(found.missing)))
    except ClusterKitError as exc:
        return f"cost delta unavailable ({' '.join(exc.lines())})"
    return CostDelta(sides[0], sides[1], cost.HOURS_30_DAYS)
