"""What a deploy does to a cluster's login nodes, decided by ParallelCluster 3.16.1's own update policies (as
tests/app/test_update_contract.py does for head and compute nodes): a pool's OnNodeStart/OnNodeConfigured can never
change (UNSUPPORTED), so no spec, lock or script change may touch them; the pool's size changes live.

Real: PC's update-policy table read from .venv-pcluster, the conditional policies as clusterkit/diff/impact.py
resolves them, configs rendered by the real loader and renderer from the shipped p5-capacity-block spec.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from clusterkit.artifacts.bundle import Artifact, NodeArtifacts, node_artifacts
from clusterkit.diff.impact import LIVE, RECREATE, Assessor
from clusterkit.diff.structure import diff_values
from clusterkit.effective.expand import expand
from clusterkit.pcluster.runner import pcluster_python
from clusterkit.pipeline.loader import Loaded, load
from clusterkit.render.pcluster_config import placeholder_refs, render_config

pytestmark = pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`")
SPEC = "p5-capacity-block"
ASSESSOR = Assessor()


def _render(loaded: Loaded, artifacts: NodeArtifacts | None = None) -> dict[str, Any]:
    effective = expand(loaded)
    return render_config(effective, placeholder_refs(effective), artifacts or node_artifacts(loaded))


def _edited(artifacts: NodeArtifacts, field: str) -> NodeArtifacts:
    old: Artifact = getattr(artifacts, field)
    return dataclasses.replace(artifacts, **{field: dataclasses.replace(old, data=old.data + b"\n# edited\n")})


def _impacts(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[int, str, str]]:
    found = ASSESSOR.assess(diff_values(old, new), old, new)
    assert ASSESSOR.notes == [], ASSESSOR.notes
    return {a.change.dotted: (a.impact.rank, a.impact.label, a.impact.policy) for a in found}


def _variant(tmp_path: Path, old: str, new: str) -> Loaded:
    base = load(SPEC)
    text = base.source.path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path = tmp_path / f"{SPEC}.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    (tmp_path / f"{SPEC}.images.lock").write_bytes(base.lock_path.read_bytes())
    return load(str(path))


@pytest.fixture(scope="module")
def p5() -> tuple[Loaded, NodeArtifacts, dict[str, Any]]:
    loaded = load(SPEC)
    artifacts = node_artifacts(loaded)
    return loaded, artifacts, _render(loaded, artifacts)


@pytest.mark.parametrize("field", ["bundle", "compute_start", "compute_configured"])
def test_bundle_and_compute_script_changes_leave_login_pools_alone(p5, field) -> None:
    loaded, artifacts, base = p5
    impacts = _impacts(base, _render(loaded, _edited(artifacts, field)))
    assert impacts and not [path for path in impacts if path.startswith("LoginNodes")]


def test_a_settings_change_leaves_login_pools_alone(p5, tmp_path) -> None:
    _, _, base = p5
    impacts = _impacts(base, _render(_variant(tmp_path, "transfer_retries: 8", "transfer_retries: 9")))
    assert impacts and not [path for path in impacts if path.startswith("LoginNodes")]


def test_login_stage0_change_would_need_a_new_cluster(p5) -> None:
    """Why login_node_stage0.sh is frozen (tests/node/test_node_login.py): its key is both pool actions."""
    loaded, artifacts, base = p5
    impacts = _impacts(base, _render(loaded, _edited(artifacts, "login_stage0")))
    recreate = (RECREATE, "cannot be updated: recreate the cluster", "UNSUPPORTED")
    assert impacts == {"LoginNodes.Pools[login].CustomActions.OnNodeStart.Script": recreate,
                       "LoginNodes.Pools[login].CustomActions.OnNodeConfigured.Script": recreate}


def test_pool_size_and_gracetime_change_live(p5, tmp_path) -> None:
    _, _, base = p5
    new = _render(_variant(tmp_path, "    count: 2\n    gracetime_minutes: 15\n",
                           "    count: 0\n    gracetime_minutes: 30\n"))
    assert {path: impact[0] for path, impact in _impacts(base, new).items()} == {
        "LoginNodes.Pools[login].Count": LIVE, "LoginNodes.Pools[login].GracetimePeriod": LIVE}
