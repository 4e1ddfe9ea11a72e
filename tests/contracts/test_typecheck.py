"""mypy --strict, with the project's configuration (pyproject.toml [tool.mypy]), over clusterkit and clusterkit_node.

Runs the real mypy from .venv (requirements-dev.txt pins it and the stubs it needs). What is relaxed, and
for which modules (untyped boto3, ParallelCluster only in .venv-pcluster), is said in pyproject.toml.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGETS = ["clusterkit", "clusterkit_node"]


def _mypy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy missing from the venv: make test installs requirements-dev.txt")
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def test_mypy_is_clean() -> None:
    result = _mypy(*TARGETS, cwd=REPO)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_mypy_checks_what_it_is_configured_for(tmp_path: Path) -> None:
    """The configuration is live: an untyped def in either package fails, an untyped boto3 import does not."""
    for package in TARGETS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "probe.py").write_text("import boto3\n\n\ndef untyped(value):\n    return boto3, value\n")
    result = _mypy("--cache-dir", str(tmp_path / "cache"), *(f"{p}/probe.py" for p in TARGETS), cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    for package in TARGETS:
        assert f"{package}/probe.py:4: error: Function is missing a type annotation" in out, out
    assert "import-untyped" not in out and "import-not-found" not in out, out
