"""A platform's cost, a cluster's share of it, a platform change priced by ``diff``, and totals that say when a price
is missing (issue 35 items 1 and 2).

Was: ``clusterkit cost <platform>`` said "no such spec file" (a path: "a platform file, not a cluster spec"), a
cluster on a platform showed its nodes only, a platform's FSx throughput change was not priced by ``diff``, and a
spec with missing prices printed a total that read as complete (exit 0, no flag in JSON).
Real: the CLI entry point, the loader, the committed price file, git for the diff. Fixture specs are written here;
figures are worked by hand from clusterkit/data/prices.json (us-east-1: PERSISTENT_2/250 $0.21 and /500 $0.34 per
GB-month, NAT $0.045/h, c6i.2xlarge $0.34/h, S3 $0.023 per GB-month; us-west-2 prices instances only).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from clusterkit.cli.main import main
from clusterkit.cost import estimate as cost

HOURS_PER_MONTH = 730
PLATFORM = """name: lab
region: us-east-1
availability_zone: us-east-1a
network:
  new:
    cidr: 10.1.0.0/16
storage:
  fsx_lustre:
    new:
      capacity_gib: 2400
      deployment_type: PERSISTENT_2
      throughput_mb_per_tib: 250
"""
CLUSTER = """name: {name}
region: us-east-1
availability_zone: us-east-1a
platform: lab
queues:
  - name: cpu
    compute_resources:
      - name: c
        instance_type: c6i.2xlarge
        min: {min}
        max: 4
"""
FSX = 2400 * 0.21 / HOURS_PER_MONTH
PLATFORM_HOURLY = FSX + 0.045  # no images locked or named: the store holds 0 GiB


def _configs(root: Path) -> Path:
    configs = root / "cluster_configs"
    (configs / "platforms").mkdir(parents=True)
    (configs / "platforms" / "lab.yaml").write_text(PLATFORM)
    (configs / "one.yaml").write_text(CLUSTER.format(name="one", min=1))
    (configs / "two.yaml").write_text(CLUSTER.format(name="two", min=0))
    return configs


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["cost", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cost_of_a_platform(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = _configs(tmp_path)
    code, out, err = _run(capsys, str(configs / "platforms" / "lab.yaml"))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("platform lab (us-east-1): list prices in USD")
    assert lines[1].split() == ["FSx", "for", "Lustre", "2400", "GiB", "PERSISTENT_2", "250", "MB/s/TiB",
                                cost.hourly(FSX), "[SSD:", "$0.21", "per", "GB-month]"]
    assert "NAT gateway        1 gateway" in lines[2] and "0 GB assumed" in lines[2]
    assert lines[3].startswith("  VPC flow logs") and "not estimated" in lines[3]
    assert f"  total              {cost.hourly(PLATFORM_HOURLY)} = " in out
    assert (f"  shared by the 2 cluster specs in {configs}/ naming it (one, two), split evenly: "
            f"{cost.hourly(PLATFORM_HOURLY / 2)} each") in lines

    code, out, _ = _run(capsys, "--format", "json", str(configs / "platforms" / "lab.yaml"))
    data = json.loads(out)
    assert (data["kind"], data["name"], data["clusters"], data["complete"], data["missing"]) == (
        "platform", "lab", ["one", "two"], True, [])
    assert data["idle_hourly"] == data["busy_hourly"] == pytest.approx(PLATFORM_HOURLY, abs=1e-6)
    assert [line["item"] for line in data["lines"]] == ["FSx for Lustre", "NAT gateway", "VPC flow logs",
                                                         "S3 image store"]


def test_a_cluster_on_a_platform_carries_its_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = _configs(tmp_path)
    code, out, err = _run(capsys, str(configs / "one.yaml"))
    assert (code, err) == (0, "")
    share = next(line for line in out.splitlines() if line.startswith("  platform share"))
    assert share.split()[2:7] == ["1/2", "of", "platform", "lab", cost.hourly(PLATFORM_HOURLY / 2)]
    assert f"split evenly between the 2 cluster specs in {configs}/ naming it: one, two" in share
    idle = 0.34 + 0.34 + PLATFORM_HOURLY / 2  # head, 1 static node, half the platform
    assert f"  total              idle {cost.hourly(idle)} = " in out
    assert f"  platform lab in all: {cost.hourly(PLATFORM_HOURLY)} = " in out

    code, out, _ = _run(capsys, "--format", "json", str(configs / "one.yaml"))
    data = json.loads(out)
    assert data["idle_hourly"] == pytest.approx(idle, abs=1e-6)
    assert data["busy_hourly"] == pytest.approx(0.34 + 4 * 0.34 + PLATFORM_HOURLY / 2, abs=1e-6)
    platform = data["platform"]
    assert (platform["name"], platform["kind"], platform["share"]["fraction"], platform["share"]["clusters"]) == (
        "lab", "platform", 0.5, ["one", "two"])
    assert platform["idle_hourly"] == pytest.approx(PLATFORM_HOURLY, abs=1e-6)


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "-c", "commit.gpgsign=false",
                    "-c", "init.defaultBranch=main", *args], cwd=repo, env=env, check=True, capture_output=True)


def test_diff_prices_a_platform_throughput_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    configs = _configs(repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    lab = configs / "platforms" / "lab.yaml"
    lab.write_text(PLATFORM.replace("throughput_mb_per_tib: 250", "throughput_mb_per_tib: 500"))

    from clusterkit.diff.report import build_report

    (platform,) = build_report(repo, "main").platforms
    assert platform.cost.old.busy_hourly == pytest.approx(PLATFORM_HOURLY, rel=1e-12)
    change = 2400 * (0.34 - 0.21) / HOURS_PER_MONTH
    assert platform.cost.delta("busy_hourly") == pytest.approx(change, rel=1e-12)
    assert platform.cost.new.missing == ()

    assert main(["diff", "--repo", str(repo), "--base", "main", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert (f"  cost: ${PLATFORM_HOURLY:,.2f}/h → ${PLATFORM_HOURLY + change:,.2f}/h (+${change:,.2f}/h, "
            f"+${change * 720:,.2f} per 30 days), shared by the clusters on it") in out
    assert main(["diff", "--repo", str(repo), "--base", "main", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["platforms"][0]["cost"]["delta_busy_hourly"] == pytest.approx(change, abs=1e-6)


# -- honest totals ------------------------------------------------------------------------------------------

G5_WEST = """name: g5-west
region: us-west-2
availability_zone: us-west-2a
head_node:
  instance_type: m6i.2xlarge
queues:
  - name: gpu
    compute_resources:
      - name: g5
        instance_type: g5.12xlarge
        max: 4
"""
MISSING = ["FSx PERSISTENT_2 250 MB/s/TiB in us-west-2", "the NAT gateway in us-west-2", "S3 Standard in us-west-2"]


def test_a_missing_price_makes_the_total_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "g5-west.yaml"
    spec.write_text(G5_WEST)
    code, out, err = _run(capsys, str(spec))
    assert (code, err) == (0, "")  # the estimate was made; --fail-on is how automation asks for more
    lines = out.splitlines()
    total = next(line for line in lines if line.startswith("  total"))
    assert total.startswith("  total (incomplete) idle $0.3840/h")  # m6i.2xlarge: the only priced part
    at = lines.index("  incomplete: 3 prices missing: the totals are a lower bound, without:")
    assert [cost.brief(line.strip()) for line in lines[at + 1:at + 4]] == MISSING

    code, out, err = _run(capsys, "--format", "json", str(spec))
    data = json.loads(out)
    assert (code, err, data["complete"]) == (0, "", False)
    assert [cost.brief(m) for m in data["missing"]] == MISSING

    code, out, err = _run(capsys, "--fail-on", "incomplete", str(spec))
    assert code == 1 and "total (incomplete)" in out
    assert err == f"clusterkit cost: --fail-on incomplete: 3 prices missing ({'; '.join(MISSING)})\n"


def test_a_complete_estimate_passes_fail_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = _configs(tmp_path)
    code, out, err = _run(capsys, "--fail-on", "incomplete", "--format", "json", str(configs / "two.yaml"))
    assert (code, err, json.loads(out)["complete"]) == (0, "", True)


def test_a_platform_price_missing_makes_its_clusters_incomplete(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    configs = _configs(tmp_path)
    lab = configs / "platforms" / "lab.yaml"
    lab.write_text(PLATFORM.replace("throughput_mb_per_tib: 250", "throughput_mb_per_tib: 1000")
                   .replace("deployment_type: PERSISTENT_2", "deployment_type: PERSISTENT_1")
                   .replace("throughput_mb_per_tib: 1000", "throughput_mb_per_tib: 100"))
    code, out, err = _run(capsys, "--fail-on", "incomplete", str(configs / "one.yaml"))
    assert code == 1
    assert err == ("clusterkit cost: --fail-on incomplete: 1 price missing (platform lab: FSx PERSISTENT_1 100 "
                   "MB/s/TiB in us-east-1)\n")
    assert "  platform lab in all: $0.0450/h = $32.40 per 30 days (incomplete: 1 price missing)" in out
