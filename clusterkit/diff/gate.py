"""``clusterkit diff --fail-on LEVEL`` / ``--exit-code``: whether a report should stop a merge.

The levels are ParallelCluster's own update policies as ``diff_impact`` ranks them, so a CI job can
refuse, say, any change that stops the compute fleet (compare ``terraform plan -detailed-exitcode`` and
``git diff --exit-code``). Exit codes: 0 nothing reaches the level, 1 something does, 2 the diff could
not be made (a user error, as everywhere in the CLI).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from clusterkit.diff.impact import FLEET, HEAD_NODE, LIVE, QUEUE, RECREATE, UNKNOWN

if TYPE_CHECKING:  # the CLI builds its parser from FAIL_ON without loading the diff machinery
    from clusterkit.diff.report import ClusterDiff, Report

EXIT_GATE = 1
# Every level a cluster's change can have, most disruptive first. An impact ParallelCluster's table
# cannot name is not shown to be milder than a recreation, so it comes first.
ORDER = ("unknown", "recreate", "head-node", "fleet", "queue", "live", "layout")
BY_RANK = {UNKNOWN: "unknown", RECREATE: "recreate", HEAD_NODE: "head-node", FLEET: "fleet", QUEUE: "queue",
            LIVE: "live"}
# --fail-on LEVEL: fail when a change is at LEVEL or more disruptive.
FAIL_ON = {
    "recreate": "the cluster is recreated or removed, or the impact is unknown",
    "head-node": "... or the head node is stopped",
    "fleet": "... or the compute fleet (or the login nodes) is stopped",
    "queue": "... or queue nodes are replaced (QueueUpdateStrategy)",
    "live": "... or any config change, even one applied live (a new cluster counts here)",
    "any": "... or any file change, comments and layout included (what --exit-code means)",
}
_FAIL_AT = {**{name: name for name in FAIL_ON}, "any": "layout"}


def level(cluster: ClusterDiff) -> str | None:
    """The cluster's most disruptive level (a name in ORDER), None when no file changed.

    A removed cluster is destroyed ("recreate"); a change with no assessed impact (a new cluster, a spec
    value outside the ParallelCluster config) is "live"; comments or layout only is "layout". A change of
    its platform counts as the cluster's own (clusterkit/diff/platforms.py: "recreate" when blocked)."""
    if not cluster.changed:
        return "layout" if cluster.text_only else None
    if cluster.status == "removed":
        return "recreate"
    found = [BY_RANK[a.impact.rank] for a in (*cluster.rendered, *cluster.spec_impacts, *cluster.platform_impacts)]
    return min(found, key=ORDER.index, default="live")


def levels(report: Report) -> dict[str, str | None]:
    """Every cluster's level, by name (what a platform's list of its clusters shows)."""
    return {cluster.name: level(cluster) for cluster in report.clusters}


def reaching(report: Report, fail_on: str) -> list[tuple[str, str]]:
    """(cluster, level) of every cluster whose changes reach ``fail_on`` (a key of FAIL_ON)."""
    limit = ORDER.index(_FAIL_AT[fail_on])
    found = [(cluster.name, level(cluster)) for cluster in report.clusters]
    return [(name, lvl) for name, lvl in found if lvl is not None and ORDER.index(lvl) <= limit]


def verdict(report: Report, fail_on: str) -> tuple[int, str]:
    """(exit code, one line for stderr)."""
    found = reaching(report, fail_on)
    if not found:
        return 0, f"clusterkit diff: no change reaches --fail-on {fail_on}"
    shown = ", ".join(f"{name} ({lvl})" for name, lvl in found)
    return EXIT_GATE, f"clusterkit diff: --fail-on {fail_on}: {shown}"
