"""Machine-readable CLI output: validate/cost/lock ``--format json``, ``validate --format github``,
``validate --strict`` and ``--version``. Each JSON shape is pinned here (clusterkit/cli/machine_output.py documents
them); the specs are the shipped ones, through the real loader, rules and price file."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clusterkit.cli.machine_output import github_annotations
from clusterkit.cli.main import main
from clusterkit.paths import CONFIG_DIR
from clusterkit.spec.errors import Problem
from tests import shipped


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _bad_spec(tmp_path: Path) -> Path:
    shutil.copyfile(CONFIG_DIR / "demo.images.lock", tmp_path / "demo.images.lock")
    spec = tmp_path / "demo.yaml"
    spec.write_text((CONFIG_DIR / "demo.yaml").read_text().replace("region: us-east-1", "region: us-east-9"))
    return spec


def test_validate_json_on_the_shipped_specs(capsys) -> None:
    code, out, err = run(capsys, "validate", "--format", "json", *sorted(shipped.SPECS))
    data = json.loads(out)
    assert (code, err) == (0, "")
    assert set(data) == {"schema", "ok", "clusters", "problems", "acknowledged"}
    assert data["schema"] == "clusterkit.validate/v1"
    (ack,) = data["acknowledged"]  # the demo's untested aws-ofi-nccl + NCCL pairing, with its reason
    assert (ack["id"], ack["file"]) == ("image-combination-untested", "cluster_configs/demo.yaml")
    assert ack["reason"].startswith("AWS publishes this aws-ofi-nccl 1.19.0 + NCCL 2.30.4 pairing")
    assert data["ok"] is True
    assert [c["name"] for c in data["clusters"]] == sorted(shipped.SPECS)
    warning = next(p for p in data["problems"] if p["path"] == "storage.fsx_lustre.new.throughput_mb_per_tib")
    assert set(warning) == {"file", "line", "col", "path", "message", "hint", "level", "id"}
    assert warning["level"] == "warning" and warning["file"] == "cluster_configs/demo.yaml" and warning["line"] > 0
    assert warning["id"] == "image-fanout-slow"
    assert all(p["id"] for p in data["problems"] if p["level"] == "warning")


def test_validate_json_reports_errors_with_positions_and_exit_2(tmp_path: Path, capsys) -> None:
    code, out, err = run(capsys, "validate", "--format", "json", str(_bad_spec(tmp_path)))
    data = json.loads(out)
    assert (code, err, data["ok"], data["clusters"]) == (2, "", False, [])
    (error,) = [p for p in data["problems"] if p["level"] == "error"]
    assert error["path"] == "region" and error["line"] > 0 and error["col"] > 0 and "us-east-9" in error["message"]
    assert error["id"] == ""


def test_validate_github_annotations(tmp_path: Path, capsys) -> None:
    code, out, _ = run(capsys, "validate", "--format", "github", str(_bad_spec(tmp_path)))
    assert code == 2
    error = next(line for line in out.splitlines() if line.startswith("::error "))
    props, message = error[len("::error "):].split("::", 1)
    fields = dict(item.split("=", 1) for item in props.split(","))
    assert fields["file"].endswith("demo.yaml") and int(fields["line"]) > 0 and fields["title"] == "region"
    assert "us-east-9" in message
    assert all(line.startswith(("::error ", "::warning ")) for line in out.splitlines())


def test_github_annotations_escape_what_the_runner_would_cut() -> None:
    """actions/toolkit core/src/command.ts: %, CR, LF in data; also : and , in properties."""
    problem = Problem("dir,x/a:b.yaml", 3, 4, "queues[0].name", "50% off\nsecond line", "a, b: c")
    assert github_annotations([problem]) == (
        "::error file=dir%2Cx/a%3Ab.yaml,line=3,col=4,title=queues[0].name::50%25 off%0Asecond line (a, b: c)\n")
    no_position = Problem("f.yaml", 0, 0, "", "no file", level="warning")
    assert github_annotations([no_position]) == "::warning file=f.yaml::no file\n"


def test_github_annotation_titles_carry_the_warning_id(capsys) -> None:
    code, out, _ = run(capsys, "validate", "--format", "github", "demo")
    assert code == 0 and out.startswith(
        "::warning file=cluster_configs/demo.yaml,line=26,col=30,"
        "title=[image-fanout-slow] storage.fsx_lustre.new.throughput_mb_per_tib::image fan-out: ")
    unplaced = Problem("f.yaml", 0, 0, "", "m", level="warning", id="pcluster-validator")
    assert github_annotations([unplaced]) == "::warning file=f.yaml,title=[pcluster-validator]::m\n"


def test_validate_strict_turns_warnings_into_errors(capsys) -> None:
    assert run(capsys, "validate", "demo")[0] == 0
    code, out, err = run(capsys, "validate", "--strict", "demo")
    assert code == 2 and out == ""
    assert "demo.yaml:" in err and "warning" not in err and "throughput_mb_per_tib" in err
    assert "error[image-fanout-slow]: storage.fsx_lustre.new.throughput_mb_per_tib: " in err


def test_cost_json_shape_and_totals(capsys) -> None:
    code, out, err = run(capsys, "cost", "--format", "json", "demo")
    data = json.loads(out)
    assert (code, err) == (0, "")
    assert data["schema"] == "clusterkit.cost/v1" and data["cluster"] == "demo" and data["currency"] == "USD"
    assert set(data) == {"schema", "kind", "name", "cluster", "region", "currency", "hours_30_days", "idle_hourly",
                         "busy_hourly", "idle_30_days", "busy_30_days", "complete", "missing", "lines",
                         "not_in_totals", "refreshed", "not_in_price_list", "price_sources"}
    assert (data["kind"], data["name"], data["complete"], data["missing"]) == ("cluster", "demo", True, [])
    line_keys = {"item", "detail", "idle_hourly", "busy_hourly", "note", "missing"}
    assert all(set(line) == line_keys for line in data["lines"])
    assert data["idle_hourly"] == pytest.approx(sum(line["idle_hourly"] or 0 for line in data["lines"]))
    assert data["busy_30_days"] == pytest.approx(data["busy_hourly"] * data["hours_30_days"], abs=0.01)
    assert data["not_in_totals"] == [line["missing"] for line in data["lines"] if line["missing"]]
    assert data["price_sources"]


def test_lock_json_lists_what_was_written(tmp_path: Path, capsys) -> None:
    for name in ("demo.yaml", "demo.images.lock"):
        shutil.copyfile(CONFIG_DIR / name, tmp_path / name)
    code, out, _ = run(capsys, "lock", "--offline", "--format", "json", str(tmp_path / "demo.yaml"))
    data = json.loads(out)
    assert code == 0 and data["schema"] == "clusterkit.lock/v1"
    (lock,) = data["locks"]
    assert lock["cluster"] == "demo" and lock["path"] == str(tmp_path / "demo.images.lock")
    assert {i["name"] for i in lock["images"]} == {"nccl-tests", "pytorch"}
    assert all(set(i) == {"name", "digest", "compressed_size", "platform", "source"} for i in lock["images"])
    assert (tmp_path / "demo.images.lock").read_text() == (CONFIG_DIR / "demo.images.lock").read_text()


def test_version_names_every_piece(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    lines = out.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["clusterkit", "ParallelCluster", "aws-cdk-lib", "aws-cdk"]
    assert "ParallelCluster 3.16.1 " in out and "not installed" not in lines[0] + lines[2]
