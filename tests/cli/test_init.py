"""``clusterkit init``: a commented starter spec from flags, loaded by validate's loader before it is written,
never over an existing file; through the CLI's entry point (tests/in_process.py) from a scratch directory."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterkit import paths
from clusterkit.cli.main import main
from clusterkit.pipeline.loader import load
from tests import in_process


def clusterkit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return in_process.clusterkit(*args, cwd=cwd)


def test_init_writes_a_commented_spec_that_validates(tmp_path: Path) -> None:
    done = clusterkit("init", "--name", "trial", "--region", "us-east-2", "--instance-type", "p5.48xlarge",
                      "--max-nodes", "3", "--os", "ubuntu2404", "-o", "trial.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "wrote trial.yaml; next: `clusterkit validate trial.yaml`, `clusterkit cost trial.yaml`\n"
    text = (tmp_path / "trial.yaml").read_text()
    assert text.count("\n#") >= 5  # commented: what the defaults are and what to run next
    spec = load(str(tmp_path / "trial.yaml")).spec
    assert (spec.name, spec.region, spec.availability_zone, spec.os) == ("trial", "us-east-2", "us-east-2a",
                                                                         "ubuntu2404")
    assert spec.queues[0].compute_resources[0].instance_type == "p5.48xlarge"
    assert spec.queues[0].compute_resources[0].max == 3
    validated = clusterkit("validate", "trial.yaml", cwd=tmp_path)
    assert validated.returncode == 0 and validated.stdout.startswith("trial.yaml: ok (trial"), validated.stderr


def test_init_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("name: mine\n")
    done = clusterkit("init", "--name", "mine", "-o", "mine.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("mine.yaml: already exists; init never overwrites (pick another --name or -o PATH)\n")
    assert (tmp_path / "mine.yaml").read_text() == "name: mine\n"


def test_flags_the_loader_refuses_write_nothing(tmp_path: Path) -> None:
    done = clusterkit("init", "--name", "bad", "--instance-type", "x9.huge", "--max-nodes", "-3", "-o", "bad.yaml",
                      cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "bad.yaml:17:24: queues[0].compute_resources[0].instance_type: unknown instance type 'x9.huge' (nothing "
        "written: change --instance-type)",
        "bad.yaml:19:14: queues[0].compute_resources[0].max: must be >= 1 (got -3) (nothing written: change "
        "--max-nodes)"]
    assert not (tmp_path / "bad.yaml").exists()


def test_an_unwritable_place_is_one_line_and_exit_3(tmp_path: Path) -> None:
    """The machine, not the spec (docs/cli-output.md: exit 3, as render and lock)."""
    done = clusterkit("init", "--name", "t", "-o", str(tmp_path / "missing" / "t.yaml"), cwd=tmp_path)
    assert done.returncode == 3
    assert done.stderr == "missing/t.yaml: cannot write: No such file or directory (choose a writable -o PATH)\n"


def test_a_file_not_named_after_the_cluster_is_refused(tmp_path: Path) -> None:
    """validate refuses a spec whose name differs from its file name: init does not write one."""
    done = clusterkit("init", "--name", "trial", "-o", "other.yaml", cwd=tmp_path)
    assert done.returncode == 2 and not (tmp_path / "other.yaml").exists()
    assert done.stderr == ("other.yaml: a spec's file is named after its cluster (trial.yaml): validate refuses one "
                           "whose name differs (use -o trial.yaml, a directory, or --name other)\n")
    assert clusterkit("init", "--name", "trial", "-o", "trial.txt", cwd=tmp_path).returncode == 2


@pytest.mark.parametrize("output, made", [("sub/", True), ("existing", False), ("existing/", False)])
def test_a_directory_gets_name_yaml(tmp_path: Path, output: str, made: bool) -> None:
    """``-o DIR`` (an existing one, or any path ending in /, made) writes DIR/NAME.yaml, which validates."""
    (tmp_path / "existing").mkdir()
    done = clusterkit("init", "--name", "trial", "-o", output, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = tmp_path / output.rstrip("/") / "trial.yaml"
    assert written.is_file() and load(str(written), check_lock=False).spec.name == "trial"
    assert done.stdout.startswith(f"wrote {output.rstrip('/')}/trial.yaml; next: `clusterkit validate ")
    assert clusterkit("validate", str(written), cwd=tmp_path).returncode == 0


def test_default_place_is_the_checkouts_cluster_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(paths, "CONFIG_DIR", tmp_path)
    assert main(["init", "--name", "fresh"]) == 0
    assert (tmp_path / "fresh.yaml").read_text().startswith("# yaml-language-server: $schema=")
    assert "`clusterkit validate fresh`" in capsys.readouterr().out
