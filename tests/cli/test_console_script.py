"""The installed ``clusterkit`` command (``pip install -e .``, run by `make`): it works from any directory.

Run as a subprocess from a temporary working directory, so nothing is found through the CWD or the
pytest ``pythonpath``: the editable install and clusterkit.paths must find the checkout on their own.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from clusterkit.paths import ROOT
from tests import shipped

BIN = Path(sys.executable).parent
CONSOLE_SCRIPT = BIN / "clusterkit"
INSTALL_HINT = f"run `{BIN / 'pip'} install -e {ROOT}` (the Makefile's .venv/.stamp-runtime recipe does)"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the install may find clusterkit
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def distribution() -> importlib.metadata.Distribution:
    """The installed metadata in this environment's site-packages (the checkout's clusterkit.egg-info, on
    sys.path through pytest's pythonpath, is the build's by-product, not an install)."""
    found = list(importlib.metadata.distributions(name="clusterkit", path=[sysconfig.get_path("purelib")]))
    if not found:
        pytest.fail(f"clusterkit is not installed in {sys.prefix}: {INSTALL_HINT}")
    return found[0]


def test_editable_install_of_this_checkout(distribution: importlib.metadata.Distribution) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert distribution.version == project["version"]
    direct_url = json.loads(distribution.read_text("direct_url.json") or "{}")
    assert direct_url.get("dir_info", {}).get("editable") is True, f"not an editable install: {INSTALL_HINT}"
    assert direct_url["url"] == ROOT.as_uri(), f"installed from {direct_url['url']}, not this checkout: {INSTALL_HINT}"


def test_console_script_entry_point(distribution: importlib.metadata.Distribution) -> None:
    scripts = {e.name: e.value for e in distribution.entry_points if e.group == "console_scripts"}
    assert scripts == {"clusterkit": "clusterkit.cli.main:main"}
    assert CONSOLE_SCRIPT.is_file(), f"no {CONSOLE_SCRIPT}: {INSTALL_HINT}"


def test_help_from_any_directory(tmp_path: Path) -> None:
    done = run(str(CONSOLE_SCRIPT), "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "validate" in done.stdout and "render" in done.stdout


def test_validate_from_any_directory(tmp_path: Path) -> None:
    """The specs come from the checkout (clusterkit.paths), not from the empty working directory."""
    done = run(str(CONSOLE_SCRIPT), "validate", *shipped.SPECS, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for spec in shipped.spec_paths():  # "ok (demo)" or "ok (demo; 1 acknowledged warning: ...)"
        assert any(line.startswith(f"{spec}: ok ({spec.stem}") for line in lines), lines


def test_user_error_exit_code_through_the_console_script(tmp_path: Path) -> None:
    done = run(str(CONSOLE_SCRIPT), "validate", "no-such-cluster", cwd=tmp_path)
    assert done.returncode == 2
    assert "no such spec file" in done.stderr and "Traceback" not in done.stderr


def test_python_m_clusterkit_still_works(tmp_path: Path) -> None:
    done = run(sys.executable, "-m", "clusterkit", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "validate" in done.stdout
