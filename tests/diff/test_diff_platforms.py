"""``clusterkit diff`` on a platform change (issue 28 part 8): the platform's changes, what CloudFormation does
with them, and every cluster on it with its update impact.

Was: platform files were not read at all; a changed ``platforms/research-east.yaml`` gave "no cluster config
changes" though it changes every cluster on it. Real: git (throwaway repositories of
tests/diff/fixtures/platform, built by platform_fixtures.py with the real loader and renderer from the shipped
research-east, train-a and train-b), the CLI's entry point, ParallelCluster 3.16.1's own update policies from
.venv-pcluster. Goldens: tests/diff/golden/platforms/<case>.txt and .md (``CK_UPDATE_GOLDEN=1`` rewrites them).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from diff_repo import check_golden, make_repo
from platform_fixtures import CASES, FIXTURES
from test_diff_stale_render import checkout, diff, edit  # noqa: F401  (checkout: a fixture)

from clusterkit.cli.main import main
from clusterkit.diff import platforms
from clusterkit.diff.gate import levels
from clusterkit.diff.impact import FLEET, LIVE, QUEUE, RECREATE, UNKNOWN
from clusterkit.diff.report import build_report
from clusterkit.pcluster.runner import pcluster_python

pytestmark = [pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`"),
              pytest.mark.usefixtures("snapshot_prices")]
EAST = (FIXTURES / "base" / "cluster_configs" / "platforms" / "research-east.yaml").read_text()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["diff", *args])
    out, err = capsys.readouterr()
    return code, out, err


def report_of(repo: Path):
    report = build_report(repo)
    return report, {c.name: c for c in report.clusters}


@pytest.mark.parametrize("case", CASES)
def test_platform_output_matches_golden(case: str, platform_repo_for, capsys) -> None:
    repo = platform_repo_for(case)
    code, text, err = run(capsys, "--repo", str(repo), "--color", "never")
    assert (code, err) == (0, "")
    check_golden(f"platforms/{case}.txt", text)
    code, markdown, err = run(capsys, "--repo", str(repo), "--format", "markdown")
    assert (code, err) == (0, "")
    check_golden(f"platforms/{case}.md", markdown)


def test_capacity_increase_stalls_running_jobs_and_lists_both_clusters(platform_repo_for, capsys) -> None:
    """In place, but /fsx is unavailable while FSx adds file servers: the fleet level, in the levels' words (was
    `live`, said as "in place under running clusters: no cluster config changes")."""
    report, clusters = report_of(platform_repo_for("platform-capacity"))
    (east,) = report.platforms
    assert (east.name, east.status) == ("research-east", "changed")
    assert [(c.dotted, c.old, c.new) for c in east.changes] == [("storage.fsx_lustre.new.capacity_gib", 2400, 4800)]
    (grow,) = east.consequences
    assert (grow.change.dotted, grow.impact.rank, grow.impact.label) == (
        "storage.new.capacity_gib", FLEET, "stop the compute fleet, or running jobs stall while it applies")
    assert [(m.name, m.sides, levels(report)[m.name]) for m in east.members] == [("train-a", "both", "fleet"),
                                                                                 ("train-b", "both", "fleet")]
    for name in ("train-a", "train-b"):
        cluster = clusters[name]
        assert cluster.status == "changed" and not cluster.rendered  # no rendered config changes
        assert [(a.change.dotted, a.impact.rank) for a in cluster.platform_impacts] == [
            ("platforms[research-east].storage.new.capacity_gib", FLEET)]
    assert run(capsys, "--repo", str(platform_repo_for("platform-capacity")), "--fail-on", "head-node")[0] == 0
    code, _, err = run(capsys, "--repo", str(platform_repo_for("platform-capacity")), "--fail-on", "fleet")
    assert (code, err) == (1, "clusterkit diff: --fail-on fleet: train-a (fleet), train-b (fleet)\n")


def test_cidr_change_is_blocked_and_recreates_both_clusters(platform_repo_for) -> None:
    report, clusters = report_of(platform_repo_for("platform-cidr"))
    (east,) = report.platforms
    (cidr,) = east.consequences
    assert (cidr.change.dotted, cidr.change.old, cidr.change.new) == ("network.new.cidr", "10.1.0.0/16", "10.2.0.0/16")
    assert (cidr.impact.rank, cidr.impact.label) == (RECREATE, platforms.BLOCKED_LABEL)
    assert cidr.why.startswith("AWS::EC2::VPC CidrBlock: replacement")
    assert [(m.name, levels(report)[m.name]) for m in east.members] == [("train-a", "recreate"),
                                                                        ("train-b", "recreate")]
    assert all(clusters[n].platform_impacts[0].impact.rank == RECREATE for n in ("train-a", "train-b"))


def test_fail_on_recreate_exits_1_on_the_cidr_change(platform_repo_for, capsys) -> None:
    code, out, err = run(capsys, "--repo", str(platform_repo_for("platform-cidr")), "--color", "never",
                         "--fail-on", "recreate")
    assert code == 1
    assert err == "clusterkit diff: --fail-on recreate: train-a (recreate), train-b (recreate)\n"
    assert "  clusters on it: train-a (recreate), train-b (recreate)\n" in out
    assert "  to apply it: make destroy-cluster for each cluster on it, make deploy-platform, then make deploy " \
           "each" in out


def test_mount_dir_change_reaches_both_rendered_configs(platform_repo_for) -> None:
    report, clusters = report_of(platform_repo_for("platform-mount-dir"))
    (east,) = report.platforms
    assert {c.impact.label for c in east.consequences} == {platforms.REACHES_LABEL}
    for name in ("train-a", "train-b"):
        cluster = clusters[name]
        (mount,) = [a for a in cluster.rendered if a.change.dotted == "SharedStorage[fsx].MountDir"]
        assert (mount.change.old, mount.change.new) == ("/fsx", "/shared")
        assert (mount.impact.policy, mount.impact.rank) == ("SHARED_STORAGE_UPDATE_POLICY", QUEUE)  # DRAIN
        assert not cluster.platform_impacts  # ParallelCluster's own impact, from the rendered config, says it all
    assert [(m.name, levels(report)[m.name]) for m in east.members] == [("train-a", "queue"), ("train-b", "queue")]


def test_mount_dir_change_without_make_render_is_unknown(tmp_path: Path) -> None:
    """The committed renders left as they were (no `make render`, another work tree): not 'unchanged'."""
    repo = make_repo(tmp_path / "repo", "platform-mount-dir", commit=False, fixtures=FIXTURES)
    for name in ("train-a", "train-b"):
        shutil.copyfile(FIXTURES / "base" / "cluster_configs" / "rendered" / f"{name}.yaml",
                        repo / "cluster_configs" / "rendered" / f"{name}.yaml")
    report, clusters = report_of(repo)
    assert [(m.name, levels(report)[m.name]) for m in report.platforms[0].members] == [("train-a", "unknown"),
                                                                                      ("train-b", "unknown")]
    assert clusters["train-a"].platform_impacts[0].impact.rank == UNKNOWN
    assert ("platform research-east changed where the file system is mounted, but the compared "
            "cluster_configs/rendered/train-a.yaml does not show it: run `make render`") in clusters["train-a"].notes


def test_a_new_platform_affects_nothing(platform_repo_for, capsys) -> None:
    report, clusters = report_of(platform_repo_for("platform-added"))
    (north,) = report.platforms
    assert (north.name, north.status, north.members, north.consequences) == ("research-north", "added", (), ())
    assert not any(c.changed for c in clusters.values())
    code, _, err = run(capsys, "--repo", str(platform_repo_for("platform-added")), "--exit-code")
    assert (code, err) == (0, "clusterkit diff: no change reaches --fail-on any\n")


def test_a_cluster_moved_to_another_platform_shows_in_its_own_diff(platform_repo_for) -> None:
    report, clusters = report_of(platform_repo_for("cluster-moved"))
    assert report.platforms == ()  # no platform file changed
    moved = clusters["train-b"]
    assert [(c.dotted, c.old, c.new) for c in moved.spec] == [("platform", "research-east", "research-west")]
    worst = moved.rendered[0]
    assert (worst.change.dotted, worst.impact.rank, worst.impact.policy) == (
        "HeadNode.Networking.SubnetId", RECREATE, "UNSUPPORTED")
    assert (worst.change.old, worst.change.new) == ("${Research-East-Network.HeadNodeSubnetId}",
                                                    "${Research-West-Network.HeadNodeSubnetId}")
    assert not clusters["train-a"].changed


def test_json_platforms_section(platform_repo_for, capsys) -> None:
    code, out, _ = run(capsys, "--repo", str(platform_repo_for("platform-cidr")), "--format", "json")
    data = json.loads(out)
    assert code == 0
    (east,) = data["platforms"]
    assert set(east) == {"name", "file", "status", "notes", "changes", "consequences", "cost", "clusters"}
    assert (east["name"], east["file"], east["status"]) == (
        "research-east", "cluster_configs/platforms/research-east.yaml", "changed")
    assert east["changes"] == [{"path": "network.new.cidr", "kind": "changed", "old": "10.1.0.0/16",
                                "new": "10.2.0.0/16"}]
    (cidr,) = east["consequences"]
    assert cidr["impact"]["level"] == "recreate" and cidr["impact"]["label"] == platforms.BLOCKED_LABEL
    assert cidr["impact"]["why"].startswith("AWS::EC2::VPC CidrBlock: replacement")
    assert east["clusters"] == [{"name": "train-a", "on": "both", "level": "recreate"},
                                {"name": "train-b", "on": "both", "level": "recreate"}]
    train_a = next(c for c in data["clusters"] if c["name"] == "train-a")
    assert (train_a["status"], train_a["level"]) == ("changed", "recreate")
    assert train_a["platform_impacts"][0]["path"] == "platforms[research-east].network.new.cidr"


def test_names_limit_the_platforms_shown(platform_repo_for) -> None:
    report = build_report(platform_repo_for("platform-cidr"), None, ["train-a"])
    assert [(p.name, [m.name for m in p.members]) for p in report.platforms] == [("research-east", ["train-a"])]


# -- what CloudFormation does with each kind of value (clusterkit/diff/platforms.py RULES) ------------------


def _edited(*edits: tuple[str, str]) -> str:
    text = EAST
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize(("edits", "rank", "why"), [
    ([("capacity_gib: 2400", "capacity_gib: 1200")], RECREATE, "FSx storage only grows"),
    ([("deployment_type: PERSISTENT_2", "deployment_type: PERSISTENT_1"),
      ("throughput_mb_per_tib: 250", "throughput_mb_per_tib: 200")], RECREATE, "AWS::FSx::FileSystem LustreConfig"),
    ([("      compression: LZ4\n", "      compression: LZ4\n      kms_key_arn: "
       "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555\n")], RECREATE,
     "AWS::FSx::FileSystem KmsKeyId"),
    ([("compute_subnet_mask: 19", "compute_subnet_mask: 18")], RECREATE, "AWS::EC2::Subnet CidrBlock: the compute"),
    ([("public_subnet_mask: 24", "public_subnet_mask: 25")], FLEET, "AWS::EC2::Subnet CidrBlock: the public"),
    ([("  new:\n    cidr: 10.1.0.0/16\n    public_subnet_mask: 24\n",
       "  head_node_public: true\n  new:\n    cidr: 10.1.0.0/16\n    public_subnet_mask: 24\n")], RECREATE,
     "the head node's subnet changes"),
    ([("throughput_mb_per_tib: 250", "throughput_mb_per_tib: 500")], FLEET,  # was live: /fsx goes away meanwhile
     "AWS::FSx::FileSystem PerUnitStorageThroughput: FSx switches or adds file servers: /fsx unavailable"),
    ([("    compute_subnet_mask: 19", "    compute_subnet_mask: 19\n    flow_logs_retention_days: 30")], LIVE,
     "AWS::Logs::LogGroup RetentionInDays"),
    ([("    new:\n      capacity_gib: 2400\n      deployment_type: PERSISTENT_2\n"
       "      throughput_mb_per_tib: 250\n      compression: LZ4\n",
       "    existing:\n      file_system_id: fs-0123456789abcdef0\n")], RECREATE, "a created file system"),
    ([("  project: clusterkit-research", "  project: clusterkit-research-2")], LIVE, "Tags"),
], ids=["capacity-down", "deployment-type", "kms-key", "compute-mask", "public-mask", "head-node-public",
        "throughput", "flow-log-retention", "existing-fsx", "tags"])
def test_what_cloudformation_does(edits, rank: int, why: str) -> None:
    found = platforms.diff_platform("research-east", EAST, _edited(*edits), where="research-east.yaml")
    assert found.status == "changed" and not found.notes
    worst = found.consequences[0]
    assert (worst.impact.rank, worst.why[:len(why)]) == (rank, why)


def test_writing_out_a_default_is_no_change() -> None:
    """Classified on the effective platform: `flow_logs_retention_days: 90` is the default."""
    found = platforms.diff_platform("research-east", EAST, _edited(
        ("    compute_subnet_mask: 19", "    compute_subnet_mask: 19\n    flow_logs_retention_days: 90")),
        where="research-east.yaml")
    assert (found.status, found.text_only, found.consequences) == ("unchanged", True, ())
    assert [c.dotted for c in found.changes] == ["network.new.flow_logs_retention_days"]  # still listed


def test_a_platform_file_that_does_not_parse_is_of_unknown_impact() -> None:
    found = platforms.diff_platform("research-east", EAST, _edited(("capacity_gib: 2400", "capacity_gib: lots")),
                                    where="cluster_configs/platforms/research-east.yaml")
    assert found.consequences[0].impact.rank == UNKNOWN
    assert found.notes[0].startswith("cluster_configs/platforms/research-east.yaml (working tree): does not parse "
                                     "as a platform (")


def test_a_platform_edit_without_make_render_in_this_checkout(checkout: Path) -> None:  # noqa: F811
    """This checkout renders what `make render` would write now: the platform's mount_dir reaches the clusters."""
    edit(checkout / "cluster_configs" / "platforms" / "research-east.yaml",
         "    mount_dir: /fsx\n    image_store: /fsx/containers\n",
         "    mount_dir: /shared\n    image_store: /shared/containers\n")
    done = diff(checkout, "--fail-on", "queue")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == "clusterkit diff: --fail-on queue: train-a (queue), train-b (queue)\n"
    lines = done.stdout.splitlines()
    assert "  clusters on it: train-a (queue), train-b (queue)" in lines
    assert ("  note: cluster_configs/rendered/train-a.yaml is stale (run `make render`): compared as `make render` "
            "would write it from cluster_configs/train-a.yaml") in lines
    assert "      SharedStorage[fsx].MountDir: /fsx → /shared  [SHARED_STORAGE_UPDATE_POLICY]" in lines


def test_docs_sample_is_the_cidr_golden() -> None:
    review = (Path(__file__).resolve().parents[2] / "docs" / "review.md").read_text(encoding="utf-8")
    sample = review.split("```text\n", 1)[1].split("```\n", 1)[0]
    golden = (Path(__file__).resolve().parent / "golden" / "platforms" / "platform-cidr.txt").read_text(
        encoding="utf-8")
    assert sample == golden, "docs/review.md sample differs from tests/diff/golden/platforms/platform-cidr.txt"


def test_a_removed_platform_recreates_its_clusters(tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo", "platform-added", commit=False, fixtures=FIXTURES)
    (repo / "cluster_configs" / "platforms" / "research-east.yaml").unlink()
    report, clusters = report_of(repo)
    east = next(p for p in report.platforms if p.name == "research-east")
    assert (east.status, east.worst.impact.label) == ("removed", platforms.REMOVED_LABEL)
    assert [(m.name, levels(report)[m.name]) for m in east.members] == [("train-a", "recreate"),
                                                                        ("train-b", "recreate")]
    code, out, err = run(capsys, "--repo", str(repo), "--color", "never", "--fail-on", "recreate")
    assert code == 1 and err == "clusterkit diff: --fail-on recreate: train-a (recreate), train-b (recreate)\n"
    assert ("platform research-east (cluster_configs/platforms/research-east.yaml): removed — most disruptive: "
            f"{platforms.REMOVED_LABEL}") in out
