"""Test tiers you can see: every test file belongs to one tier (tests/tiers.py), the tiers are the markers
pyproject registers, a file outside them stops collection, and `make test-fast` is exactly the unit tier."""
from __future__ import annotations

import runpy
import subprocess
import sys
import tomllib
from pathlib import Path

_TIERS = runpy.run_path(str(Path(__file__).resolve().parents[1] / "tiers.py"))
TESTS, TIERS, TIER_OF_FILE, TIER_OF_FOLDER = (_TIERS[k] for k in ("TESTS", "TIERS", "TIER_OF_FILE", "TIER_OF_FOLDER"))
tier_of = _TIERS["tier_of"]
REPO = TESTS.parent


def test_every_test_file_has_a_tier():
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 50
    assert [f for f in files if tier_of(f) not in TIERS] == []
    folders = {f.relative_to(TESTS).parts[0] for f in files}
    assert set(TIER_OF_FOLDER) == folders, "TIER_OF_FOLDER names exactly the folders that hold tests"
    assert all((TESTS / rel).is_file() for rel in TIER_OF_FILE), "an override names a file that is gone"


def test_the_tiers_are_the_registered_markers():
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert [m.split(":")[0] for m in markers] == list(TIERS)
    assert all(TIERS[t] for t in TIERS)


def test_an_untiered_test_file_stops_collection(tmp_path):
    """tests/conftest.py refuses to collect a test file outside every tier, so no test can silently fall out
    of `make test-fast` and every -m selection: shown on a scratch tree with the same conftest and tiers."""
    scratch = tmp_path / "tests"
    (scratch / "newtier").mkdir(parents=True)
    for name in ("conftest.py", "tiers.py", "oldest_python.py"):
        (scratch / name).write_text((TESTS / name).read_text())
    (scratch / "newtier" / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", str(scratch)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "test_x.py: in no test tier: add its folder to TIER_OF_FOLDER in tests/tiers.py" in proc.stdout + proc.stderr


def test_make_test_fast_runs_exactly_the_unit_tier():
    """`make test-fast` passes the unit folders and -m unit: every unit test, nothing else."""
    dry = subprocess.run(["make", "--no-print-directory", "-n", "test-fast"], cwd=REPO, capture_output=True,
                         text=True, timeout=60).stdout
    (line,) = [ln for ln in dry.splitlines() if " -m unit " in ln]
    assert line.split(" -m unit ", 1)[1].split() == [f"tests/{f}" for f in _TIERS["folders"]("unit")]
