"""``clusterkit diff --format json``: the report as data for CI, in a documented, versioned shape.

Shape (``"schema": "clusterkit.diff/v1"``; a new key is not a new version, a changed or removed one is):
``{schema, base, base_sha, head, notes[], clusters: [{name, status, level, cost, notes[], text_only[],
spec[], rendered[], spec_impacts[], images[], lock[]}]}`` where a change is ``{path, kind, old?, new?}``
(a side is absent when the key or element is), an assessed change adds ``impact: {level, label,
policy}``, an image is ``{name, kind, old?, new?}`` with lock entries as written, and ``cost`` is
``{old, new, delta_idle_hourly, delta_busy_hourly, hours_30_days}``, ``{"unavailable": reason}`` or
null. ``level`` is the cluster's most disruptive level (diff_gate.ORDER), null when nothing changed;
``platform_impacts[]`` (assessed changes, ``impact.policy`` the reason) are its platform's consequences.
``platforms: [{name, file, status, notes[], changes[], consequences[], cost, clusters: [{name, on, level}]}]`` lists
each changed platform file: ``changes`` the file's values, ``consequences`` the effective values with what
CloudFormation does (assessed changes, ``impact.why``), ``clusters`` every cluster on it at either side (``on``:
both, base or working tree) with its level, platform included.
"""
from __future__ import annotations

from typing import Any

from clusterkit.diff.gate import BY_RANK, level, levels
from clusterkit.diff.impact import Assessed
from clusterkit.diff.platforms import Consequence, PlatformDiff
from clusterkit.diff.report import ClusterDiff, CostDelta, CostSide, ImageChange, Report
from clusterkit.diff.sources import PLATFORM, file_path
from clusterkit.diff.structure import MISSING, Change
from clusterkit.jsondoc import dumps

SCHEMA = "clusterkit.diff/v1"


def render_json(report: Report) -> str:
    return dumps(report_data(report))


def report_data(report: Report) -> dict[str, Any]:
    return {"schema": SCHEMA, "base": report.base, "base_sha": report.base_sha, "head": report.head,
            "notes": list(report.notes), "platforms": [_platform(p, levels(report)) for p in report.platforms],
            "clusters": [_cluster(c) for c in report.clusters]}


def _platform(platform: PlatformDiff, level_of: dict[str, str | None]) -> dict[str, Any]:
    return {"name": platform.name, "file": file_path(platform.name, PLATFORM), "status": platform.status,
            "notes": list(platform.notes), "changes": [_change(c) for c in platform.changes],
            "consequences": [_consequence(c) for c in platform.consequences], "cost": _cost(platform.cost),
            "clusters": [{"name": m.name, "on": m.sides, "level": level_of.get(m.name)} for m in platform.members]}


def _consequence(item: Consequence) -> dict[str, Any]:
    return {**_change(item.change),
            "impact": {"level": BY_RANK[item.impact.rank], "label": item.impact.label, "why": item.why}}


def _cluster(cluster: ClusterDiff) -> dict[str, Any]:
    return {
        "name": cluster.name, "status": cluster.status, "level": level(cluster), "cost": _cost(cluster.cost),
        "notes": list(cluster.notes), "text_only": list(cluster.text_only),
        "spec": [_change(c) for c in cluster.spec], "lock": [_change(c) for c in cluster.lock],
        "rendered": [_assessed(a) for a in cluster.rendered],
        "spec_impacts": [_assessed(a) for a in cluster.spec_impacts],
        "platform_impacts": [_assessed(a) for a in cluster.platform_impacts],
        "images": [_image(i) for i in cluster.images],
    }


def _change(change: Change) -> dict[str, Any]:
    return _sides({"path": change.dotted, "kind": change.kind}, change.old, change.new, MISSING)


def _sides(out: dict[str, Any], old: Any, new: Any, absent: Any) -> dict[str, Any]:
    """``out`` with ``old``/``new`` added, each only when that side has a value (is not ``absent``)."""
    return {**out, **({"old": old} if old is not absent else {}), **({"new": new} if new is not absent else {})}


def _assessed(item: Assessed) -> dict[str, Any]:
    impact = item.impact
    return {**_change(item.change),
            "impact": {"level": BY_RANK[impact.rank], "label": impact.label, "policy": impact.policy or None}}


def _image(image: ImageChange) -> dict[str, Any]:
    return _sides({"name": image.name, "kind": image.kind}, image.old, image.new, None)


def _side(side: CostSide | None) -> dict[str, Any] | None:
    if side is None:
        return None
    return {"idle_hourly": side.idle_hourly, "busy_hourly": side.busy_hourly, "unpriced": list(side.missing)}


def _cost(cost: CostDelta | str | None) -> dict[str, Any] | None:
    if cost is None:
        return None
    if isinstance(cost, str):
        return {"unavailable": cost}
    return {"old": _side(cost.old), "new": _side(cost.new), "hours_30_days": cost.hours_30_days,
            "delta_idle_hourly": round(cost.delta("idle_hourly"), 6),
            "delta_busy_hourly": round(cost.delta("busy_hourly"), 6)}
