"""Spec changes whose update impact the rendered ParallelCluster config cannot show: the PC version.

Pure Python, no git and no ParallelCluster. Why a version change means a new cluster: ParallelCluster's
``update_cluster`` refuses a cluster created by another version (aws-parallelcluster
``api/controllers/cluster_operations_controller.py``); the version is not a ParallelCluster config field,
it picks the provider template (stacks/cluster.py), so the rendered file does not change with it.
"""
from __future__ import annotations

from clusterkit.diff.impact import RECREATE, VERSION_LABEL, default_version, spec_impacts
from clusterkit.diff.report import ClusterDiff, Report
from clusterkit.diff.structure import diff_values
from clusterkit.diff.text import render_markdown, render_text
from clusterkit.spec.model import ClusterSpec


def impacts(old: dict, new: dict, default: str = "3.16.1") -> list[tuple[str, int, str]]:
    found = spec_impacts(diff_values(old, new), default=lambda: default)
    return [(a.change.dotted, a.impact.rank, a.impact.label) for a in found]


def test_a_version_change_means_recreate_either_way() -> None:
    for old, new in (("3.15.0", "3.16.1"), ("3.16.1", "3.14.0")):
        assert impacts({"parallelcluster_version": old}, {"parallelcluster_version": new}) == [
            ("parallelcluster_version", RECREATE, VERSION_LABEL)]


def test_an_absent_key_is_the_default() -> None:
    assert impacts({}, {"parallelcluster_version": "3.16.1"}) == []  # the default made explicit
    assert impacts({"parallelcluster_version": "3.16.1"}, {}) == []
    assert impacts({}, {"parallelcluster_version": "3.15.0"}) == [
        ("parallelcluster_version", RECREATE, VERSION_LABEL)]
    assert impacts({"parallelcluster_version": "3.15.0"}, {}) == [
        ("parallelcluster_version", RECREATE, VERSION_LABEL)]


def test_other_spec_changes_have_no_spec_level_impact() -> None:
    old, new = {"head_node": {"instance_type": "c6i.2xlarge"}}, {"head_node": {"instance_type": "c6i.4xlarge"}}
    assert impacts(old, new) == []


def test_the_default_is_the_spec_models() -> None:
    (field,) = [f for f in ClusterSpec.__dataclass_fields__.values() if f.name == "parallelcluster_version"]
    assert default_version() == field.default


def test_the_version_impact_is_the_headline_and_says_what_to_do() -> None:
    old, new = {"parallelcluster_version": "3.16.1"}, {"parallelcluster_version": "3.14.0"}
    (assessed,) = spec_impacts(diff_values(old, new))
    cluster = ClusterDiff("demo", "changed", spec=(assessed.change,), spec_impacts=(assessed,))
    report = Report("main", "0" * 40, (cluster,))
    text = render_text(report)
    assert f"demo: changed — most disruptive: {VERSION_LABEL}" in text
    assert "make destroy-cluster, then make deploy" in text
    markdown = render_markdown(report)
    assert f"| `demo` | changed | 🔴 {VERSION_LABEL} |" in markdown
    assert (assessed.change.old, assessed.change.new) == ("3.16.1", "3.14.0")
