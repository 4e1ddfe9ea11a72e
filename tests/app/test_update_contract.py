"""What each change ClusterKit makes between two deploys of one cluster does to the running cluster,
decided by ParallelCluster 3.16.1's own update policies.

Real: the update-policy table read from the installed aws-parallelcluster schema in .venv-pcluster
(clusterkit/pcluster/runner.py), the conditional policies resolved as pcluster/config/update_policy.py
does (clusterkit/diff/impact.py, pinned by tests/diff/test_diff_impact.py), and configs rendered by the
real loader and renderer from the demo spec. Each case changes one input the way a pull request would
(new lock digest, an edited node script, a resized queue) and asserts the exact set of rendered paths
that change and the impact PC gives each, so a regression in where ClusterKit puts things (for example,
a content-hashed key back in HeadNode OnNodeConfigured) fails here, offline.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from clusterkit.artifacts.bundle import Artifact, NodeArtifacts, node_artifacts
from clusterkit.diff.impact import FLEET, LIVE, QUEUE, RECREATE, Assessor
from clusterkit.diff.structure import diff_values
from clusterkit.effective.expand import expand
from clusterkit.pcluster.runner import pcluster_python
from clusterkit.pipeline.loader import Loaded, load
from clusterkit.render.pcluster_config import placeholder_refs, render_config

pytestmark = pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`")
DRAIN = "QueueUpdateStrategy DRAIN: nodes replaced as their jobs finish"
ASSESSOR = Assessor()


def _render(loaded: Loaded, artifacts: NodeArtifacts | None = None) -> dict[str, Any]:
    effective = expand(loaded)
    return render_config(effective, placeholder_refs(effective), artifacts or node_artifacts(loaded))


def _edited(artifacts: NodeArtifacts, field: str) -> NodeArtifacts:
    """``artifacts`` with one file's bytes changed, as an edit of that script would."""
    old: Artifact = getattr(artifacts, field)
    return dataclasses.replace(artifacts, **{field: dataclasses.replace(old, data=old.data + b"\n# edited\n")})


def _impacts(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[int, str, str]]:
    found = ASSESSOR.assess(diff_values(old, new), old, new)
    assert ASSESSOR.notes == [], ASSESSOR.notes
    return {a.change.dotted: (a.impact.rank, a.impact.label, a.impact.policy) for a in found}


def _spec_variant(tmp_path: Path, old: str, new: str) -> Loaded:
    """The demo spec with one text edit, loaded (rules, lock check) from a copy next to its lock."""
    demo = load("demo")
    text = demo.source.path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path = tmp_path / "demo.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    (tmp_path / "demo.images.lock").write_bytes(demo.lock_path.read_bytes())
    return load(str(path))


@pytest.fixture(scope="module")
def demo() -> tuple[Loaded, NodeArtifacts, dict[str, Any]]:
    loaded = load("demo")
    artifacts = node_artifacts(loaded)
    return loaded, artifacts, _render(loaded, artifacts)


@pytest.mark.parametrize("field", ["bundle", "launcher"])
def test_bundle_or_launcher_change_is_live(demo, field) -> None:
    """A new image lock, node.args or any bundled script (bundle) and the head-node launcher (launcher)
    change only HeadNode OnNodeUpdated, which PC applies live; OnNodeConfigured stays as created."""
    loaded, artifacts, base = demo
    impacts = _impacts(base, _render(loaded, _edited(artifacts, field)))
    changed = {"bundle": "HeadNode.CustomActions.OnNodeUpdated.Args",
               "launcher": "HeadNode.CustomActions.OnNodeUpdated.Script"}[field]
    assert impacts == {changed: (LIVE, "live", "SUPPORTED")}


def test_stage0_change_would_need_a_new_cluster(demo) -> None:
    """Why head_node_stage0.sh is frozen (tests/node/test_head_stage0.py): its key is OnNodeConfigured."""
    loaded, artifacts, base = demo
    impacts = _impacts(base, _render(loaded, _edited(artifacts, "stage0")))
    assert impacts == {"HeadNode.CustomActions.OnNodeConfigured.Script":
                       (RECREATE, "cannot be updated: recreate the cluster", "UNSUPPORTED")}


@pytest.mark.parametrize("field", ["compute_start", "compute_configured"])
def test_compute_script_change_replaces_nodes_by_queue_strategy(demo, field) -> None:
    """A compute script edit changes every queue's CustomActions: PC replaces the nodes as the queue
    update strategy says (DRAIN in every shipped spec), no fleet stop."""
    loaded, artifacts, base = demo
    impacts = _impacts(base, _render(loaded, _edited(artifacts, field)))
    action = {"compute_start": "OnNodeStart", "compute_configured": "OnNodeConfigured"}[field]
    queues = [q["Name"] for q in base["Scheduling"]["SlurmQueues"]]
    expected = (QUEUE, DRAIN, "QUEUE_UPDATE_STRATEGY")
    assert impacts == {f"Scheduling.SlurmQueues[{q}].CustomActions.{action}.Script": expected for q in queues}


def test_queue_growth_is_live_and_shrink_stops_the_fleet(demo, tmp_path) -> None:
    """PC's RESIZE_UPDATE_STRATEGY_ON_REMOVE: more nodes apply live; fewer need a fleet stop, or the
    TERMINATE strategy (DRAIN is not enough)."""
    loaded, _, base = demo
    grown = _render(_spec_variant(tmp_path, "        max: 4\n", "        max: 8\n"))
    (path,) = _impacts(base, grown)
    assert _impacts(base, grown)[path][:2] == (LIVE, "live") and path.endswith(".MaxCount")
    shrunk = _impacts(grown, base)
    assert shrunk[path][:2] == (FLEET, "stop the compute fleet (or set QueueUpdateStrategy TERMINATE)")


def test_instance_type_change_stops_the_fleet(demo, tmp_path) -> None:
    loaded, _, base = demo
    other = _render(_spec_variant(tmp_path, "        instance_type: p5.48xlarge\n",
                                  "        instance_type: p5en.48xlarge\n"))
    # the node health plan in the bundle follows the type (p5en: H200s, 16 EFA devices): the head node gets it live
    impacts = _impacts(base, other)
    assert impacts.pop("HeadNode.CustomActions.OnNodeUpdated.Args") == (LIVE, "live", "SUPPORTED")
    (impact,) = impacts.values()
    assert impact == (FLEET, "stop the compute fleet", "COMPUTE_FLEET_STOP")


def test_version_change_is_invisible_to_the_config(demo, tmp_path) -> None:
    """PC's policies cannot see a ParallelCluster upgrade: the ClusterConfiguration does not change, only
    the provider template does, and PC refuses to update a cluster made by another version. That is why
    the Cluster stack carries a version guard (tests/stacks/test_version_guard.py)."""
    loaded, _, base = demo
    upgraded = _spec_variant(tmp_path, "parallelcluster_version: 3.16.1\n", "parallelcluster_version: 3.15.0\n")
    assert upgraded.spec.parallelcluster_version != loaded.spec.parallelcluster_version
    assert _impacts(base, _render(upgraded)) == {}
