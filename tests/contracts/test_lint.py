"""ruff, with the project's configuration (pyproject.toml [tool.ruff]), over every Python file we own.

Runs the real ruff from .venv (requirements-dev.txt pins it). What is selected (line length 120
included) is said in pyproject.toml.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGETS = ["clusterkit", "clusterkit_node", "stacks", "app.py", "tests", "benchmarks"]


def _ruff() -> Path:
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.fail("ruff missing from the venv: make test installs requirements-dev.txt")
    return ruff


def test_ruff_is_clean() -> None:
    result = subprocess.run([str(_ruff()), "check", "--no-cache", *TARGETS], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_catches_what_it_is_configured_for(tmp_path: Path) -> None:
    """The configuration is live: an unused import and unsorted imports fail under the project's config."""
    bad = tmp_path / "probe.py"
    bad.write_text("import sys\nimport os\n")
    result = subprocess.run([str(_ruff()), "check", "--no-cache", "--config", str(REPO / "pyproject.toml"), str(bad)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "F401" in result.stdout and "I001" in result.stdout
