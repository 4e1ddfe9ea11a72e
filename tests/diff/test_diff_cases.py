"""``clusterkit diff`` on a throwaway git repository, one case per kind of pull request.

Real: git (two commits; the default base is the merge base with ``main``), the committed fixture files
(rendered by the real renderer when tests/diff/diff_fixtures.py built them), ParallelCluster 3.16.1's
own update-policy metadata read in .venv-pcluster, and clusterkit.cost.estimate over both sides' specs, priced
from a snapshot of the price file (tests/diff/fixtures/prices.json) so the goldens do not move with
price updates. Made up: the bumped pytorch digest.

Goldens: tests/diff/golden/<case>.txt (terminal, no colour) and <case>.md (PR comment), compared
exactly. After an intended output change: ``CK_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/diff -q``
and review ``git diff tests/diff/golden``.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from diff_fixtures import CASES, NEW_PYTORCH, OLD_PYTORCH, PRICES
from diff_repo import check_golden, make_repo

from clusterkit.cli.main import main
from clusterkit.diff.impact import FLEET, LIVE, RECREATE, VERSION_LABEL
from clusterkit.diff.report import CostDelta, build_report
from clusterkit.pcluster.runner import pcluster_python

pytestmark = [pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`"),
              pytest.mark.usefixtures("snapshot_prices")]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["diff", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES)
def test_diff_output_matches_golden(case: str, repo_for, capsys) -> None:
    repo = repo_for(case)
    code, text, err = run(capsys, "--repo", str(repo), "--color", "never")
    assert (code, err) == (0, "")
    check_golden(f"{case}.txt", text)
    code, markdown, err = run(capsys, "--repo", str(repo), "--format", "markdown")
    assert (code, err) == (0, "")
    check_golden(f"{case}.md", markdown)


def _demo(repo: Path, base: str | None = None):
    report = build_report(repo, base)
    return report, {c.name: c for c in report.clusters}["demo"]


def _rendered(cluster) -> list[tuple[str, int, str]]:
    return [(a.change.dotted, a.impact.rank, a.impact.policy) for a in cluster.rendered]


def test_queue_max_grows_live(repo_for) -> None:
    report, demo = _demo(repo_for("queue-max"))
    assert report.base == "merge base with main"
    assert [(c.dotted, c.old, c.new) for c in demo.spec] == [("queues[gpu].compute_resources[p5].max", 4, 8)]
    assert _rendered(demo) == [
        ("Scheduling.SlurmQueues[gpu].ComputeResources[p5].MaxCount", LIVE, "RESIZE_UPDATE_STRATEGY_ON_REMOVE")]


def test_instance_type_needs_fleet_stop(repo_for) -> None:
    _, demo = _demo(repo_for("instance-type"))
    worst = demo.rendered[0]
    assert (worst.change.dotted, worst.change.old, worst.change.new) == (
        "Scheduling.SlurmQueues[gpu].ComputeResources[p5].InstanceType", "p5.48xlarge", "p5en.48xlarge")
    assert (worst.impact.rank, worst.impact.policy, worst.impact.label) == (
        FLEET, "COMPUTE_FLEET_STOP", "stop the compute fleet")


def test_image_digest_bump_touches_only_on_node_updated(repo_for) -> None:
    """The launcher design: a new lock changes the bundle hash in OnNodeUpdated (SUPPORTED) and never
    HeadNode OnNodeConfigured (UNSUPPORTED) or the compute queues."""
    _, demo = _demo(repo_for("image-digest"))
    assert _rendered(demo) == [("HeadNode.CustomActions.OnNodeUpdated.Args", LIVE, "SUPPORTED")]
    (args,) = demo.rendered
    gone = [a for a in args.change.old if a not in args.change.new]
    came = [a for a in args.change.new if a not in args.change.old]
    assert [a.split("=")[0] for a in gone + came] == ["CK_BUNDLE_SHA256", "CK_BUNDLE_SHA256"]
    (image,) = demo.images
    assert (image.name, image.kind) == ("pytorch", "changed")
    assert (image.old["digest"], image.new["digest"]) == (f"sha256:{OLD_PYTORCH}", f"sha256:{NEW_PYTORCH}")
    assert image.new["expect"] == {"cuda": "12.8"}


def test_fsx_throughput_is_outside_parallelcluster(repo_for) -> None:
    _, demo = _demo(repo_for("fsx-throughput"))
    assert demo.rendered == ()
    assert [(c.dotted, c.old, c.new) for c in demo.spec] == [
        ("storage.fsx_lustre.new.throughput_mb_per_tib", 250, 500)]
    # its own Storage stack updates FSx in place, and /fsx is unavailable meanwhile: not "live" (was: no impact)
    (impact,) = demo.spec_impacts
    assert impact.change.dotted == "storage.fsx_lustre.new.throughput_mb_per_tib"
    assert impact.impact.label == "stop the compute fleet, or running jobs stall while it applies"
    assert "/fsx unavailable for minutes" in impact.impact.policy


def test_head_node_change_means_recreate_and_comes_first(repo_for) -> None:
    _, demo = _demo(repo_for("head-node"))
    first = demo.rendered[0]
    assert (first.change.dotted, first.impact.rank, first.impact.policy) == (
        "HeadNode.InstanceType", RECREATE, "UNSUPPORTED")
    assert first.impact.label == "cannot be updated: recreate the cluster"


def test_parallelcluster_version_change_means_recreate(repo_for) -> None:
    """Not in the rendered config (it picks the provider template), yet ParallelCluster refuses the update."""
    _, demo = _demo(repo_for("pc-version"))
    assert demo.rendered == ()
    assert [(c.dotted, c.old, c.new) for c in demo.spec] == [("parallelcluster_version", "3.16.1", "3.14.0")]
    ((path, rank, label),) = [(a.change.dotted, a.impact.rank, a.impact.label) for a in demo.spec_impacts]
    assert (path, rank, label) == ("parallelcluster_version", RECREATE, VERSION_LABEL)


def test_clusters_added_and_removed(repo_for) -> None:
    report = build_report(repo_for("cluster-added-removed"))
    status = {c.name: c.status for c in report.clusters}
    assert status == {"demo": "unchanged", "p4d-existing": "removed", "p5-capacity-block": "added"}
    added = {c.name: c for c in report.clusters}["p5-capacity-block"]
    assert {i.name for i in added.images} and all(i.kind == "added" for i in added.images)


def test_working_tree_changes_count_without_a_commit(tmp_path: Path) -> None:
    """The head side is the working tree: an uncommitted edit shows against HEAD."""
    repo = make_repo(tmp_path / "repo", "queue-max", commit=False)
    report, demo = _demo(repo, "HEAD")
    assert report.base == "HEAD"
    assert [c.dotted for c in demo.spec] == ["queues[gpu].compute_resources[p5].max"]


def test_names_limit_the_report(repo_for) -> None:
    report = build_report(repo_for("queue-max"), None, ["p4d-existing"])
    assert [(c.name, c.status) for c in report.clusters] == [("p4d-existing", "unchanged")]


def test_cost_delta_prices_both_sides_with_the_cost_module(repo_for) -> None:
    """The queue grows by 4 p5.48xlarge: the busy delta is 4 x the price file's p5 price, idle stays."""
    import json

    p5 = json.loads(PRICES.read_text())["regions"]["us-east-1"]["ec2_on_demand_linux"]["usd_per_hour"]["p5.48xlarge"]
    _, demo = _demo(repo_for("queue-max"))
    assert isinstance(demo.cost, CostDelta)
    assert demo.cost.delta("busy_hourly") == pytest.approx(4 * p5)
    assert demo.cost.delta("idle_hourly") == pytest.approx(0.0)
    _, fsx = _demo(repo_for("fsx-throughput"))
    assert fsx.cost.old.missing != fsx.cost.new.missing  # each side names its own unpriced FSx tier


def test_docs_sample_is_the_mixed_golden() -> None:
    review = (Path(__file__).resolve().parents[2] / "docs" / "review.md").read_text(encoding="utf-8")
    sample = review.split("```markdown\n", 1)[1].split("```\n", 1)[0]
    golden = (Path(__file__).resolve().parent / "golden" / "mixed.md").read_text(encoding="utf-8")
    assert sample == golden, "docs/review.md sample differs from tests/diff/golden/mixed.md: copy the golden into it"


def test_comment_only_edits_and_unparsable_files_are_reported_not_fatal(tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo", "queue-max")
    spec = repo / "cluster_configs" / "p4d-existing.yaml"
    spec.write_text("# reviewed again\n" + spec.read_text())
    (repo / "cluster_configs" / "rendered" / "demo.yaml").write_text("Region: [unclosed\n")
    code, out, err = run(capsys, "--repo", str(repo), "--color", "never", "--base", "main")
    assert (code, err) == (0, "")
    assert "  note: cluster_configs/rendered/demo.yaml (working tree): cannot parse: " in out
    assert "unchanged: p4d-existing (comments or layout only)" in out
    assert "(whole file)" not in out  # a broken file is named, not diffed as removed
