"""``clusterkit diff --fail-on LEVEL`` / ``--exit-code`` and ``--format json``, on the fixture pull requests.

Real: git, the committed fixture files, ParallelCluster 3.16.1's update-policy table (.venv-pcluster), the
CLI entry point. Each case's level is what ParallelCluster's policies make of it (the same verdict the
text goldens print as "most disruptive"); every --fail-on level is then checked against it, so an exit
code can only be 1 for a change at least that disruptive.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from diff_fixtures import CASES
from diff_repo import git, make_repo

from clusterkit.cli.main import main
from clusterkit.diff.gate import FAIL_ON, ORDER
from clusterkit.pcluster.runner import pcluster_python

pytestmark = [pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`"),
              pytest.mark.usefixtures("snapshot_prices")]

# case -> {cluster: level}: what ParallelCluster's update policies say each pull request does.
LEVELS = {
    "queue-max": {"demo": "live"},  # MaxCount up: SUPPORTED
    "instance-type": {"demo": "fleet"},  # ComputeResources InstanceType: COMPUTE_FLEET_STOP
    "image-digest": {"demo": "live"},  # bundle sha in HeadNode OnNodeUpdated: SUPPORTED
    "fsx-throughput": {"demo": "fleet"},  # its own FSx's throughput: /fsx unavailable meanwhile (was: live)
    "head-node": {"demo": "recreate"},  # HeadNode InstanceType: UNSUPPORTED
    "pc-version": {"demo": "recreate"},  # another ParallelCluster version: recreate
    "mixed": {"demo": "recreate"},
    "cluster-added-removed": {"p4d-existing": "recreate", "p5-capacity-block": "live"},  # removed / added
}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["diff", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_case_has_a_level() -> None:
    assert set(LEVELS) == set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_json_levels_are_parallelclusters_verdict(case: str, repo_for, capsys) -> None:
    code, out, err = run(capsys, "--repo", str(repo_for(case)), "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert {c["name"]: c["level"] for c in data["clusters"] if c["level"]} == LEVELS[case]


@pytest.mark.parametrize("case", CASES)
def test_fail_on_exits_1_exactly_when_a_change_reaches_the_level(case: str, repo_for, capsys) -> None:
    worst = min(LEVELS[case].values(), key=ORDER.index)
    for fail_on in FAIL_ON:
        code, out, err = run(capsys, "--repo", str(repo_for(case)), "--fail-on", fail_on)
        reaches = ORDER.index(worst) <= ORDER.index("layout" if fail_on == "any" else fail_on)
        assert code == (1 if reaches else 0), (fail_on, err)
        assert out.startswith("clusterkit diff: base ")  # the report is still printed
        (line,) = err.splitlines()
        if reaches:
            assert line.startswith(f"clusterkit diff: --fail-on {fail_on}: ") and f"({worst})" in line
        else:
            assert line == f"clusterkit diff: no change reaches --fail-on {fail_on}"


def test_exit_code_counts_a_comment_only_edit_and_nothing_else(tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo", "queue-max", commit=False)
    git(repo, "checkout", "-q", "--", ".")  # back to the base: no change at all
    assert run(capsys, "--repo", str(repo), "--base", "main", "--exit-code")[0] == 0
    spec = repo / "cluster_configs" / "demo.yaml"
    spec.write_text("# reviewed\n" + spec.read_text())
    code, out, err = run(capsys, "--repo", str(repo), "--base", "main", "--exit-code")
    assert code == 1 and "(comments or layout only)" in out and err == "clusterkit diff: --fail-on any: demo (layout)\n"
    assert run(capsys, "--repo", str(repo), "--base", "main", "--fail-on", "live")[0] == 0


def test_fail_on_and_exit_code_exclude_each_other_and_levels_are_checked(capsys) -> None:
    for args in (["--fail-on", "fleet", "--exit-code"], ["--fail-on", "everything"]):
        with pytest.raises(SystemExit) as exc:
            main(["diff", *args])
        assert exc.value.code == 2
    assert "--fail-on" in capsys.readouterr().err


def test_json_shape_is_pinned(repo_for, capsys) -> None:
    """clusterkit.diff/v1 (clusterkit/diff/json_output.py): keys and types a CI script may rely on."""
    code, out, _ = run(capsys, "--repo", str(repo_for("mixed")), "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["schema"] == "clusterkit.diff/v1"
    assert set(data) == {"schema", "base", "base_sha", "head", "notes", "platforms", "clusters"}
    assert data["platforms"] == []  # no platform file changed (test_diff_platforms pins their shape)
    assert len(data["base_sha"]) == 40 and data["head"] == "working tree"
    demo = next(c for c in data["clusters"] if c["name"] == "demo")
    assert set(demo) == {"name", "status", "level", "cost", "notes", "text_only", "spec", "lock", "rendered",
                         "spec_impacts", "platform_impacts", "images"}
    assert demo["status"] == "changed" and demo["level"] == "recreate"
    first = demo["rendered"][0]  # most disruptive first
    assert set(first) == {"path", "kind", "old", "new", "impact"}
    assert first["path"] == "HeadNode.InstanceType" and (first["old"], first["new"]) == ("c6i.2xlarge", "c6i.4xlarge")
    assert first["impact"] == {"level": "recreate", "label": "cannot be updated: recreate the cluster",
                               "policy": "UNSUPPORTED"}
    assert {i["name"]: i["kind"] for i in demo["images"]} == {"pytorch": "changed"}
    assert demo["images"][0]["new"]["digest"].startswith("sha256:")
    assert set(demo["cost"]) == {"old", "new", "hours_30_days", "delta_idle_hourly", "delta_busy_hourly"}
    assert set(demo["cost"]["new"]) == {"idle_hourly", "busy_hourly", "unpriced"}
    added = [c for c in demo["spec"] if c["kind"] == "changed"]
    assert added and all(set(c) == {"path", "kind", "old", "new"} for c in added)
