"""``clusterkit diff`` knows stale renders (issue 25): it compares what ``make render`` would write.

Was: after ``max: 4 -> 8`` without ``make render``, diff reported the rendered config unchanged and no
update impact. Real: a copy of this checkout's tracked files in a throwaway git repository (the copy's
own clusterkit, through PYTHONPATH, so the copy is "this checkout" and renders with its own bootstrap
scripts), the CLI in a subprocess and ParallelCluster's own update policies from .venv-pcluster.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from diff_repo import git

from clusterkit.pcluster.runner import PYTHON_ENV_VAR, pcluster_python

REPO = Path(__file__).resolve().parents[2]
needs_pcluster = pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`")
STALE = ("note: cluster_configs/rendered/demo.yaml is stale (run `make render`): compared as `make render` "
         "would write it from cluster_configs/demo.yaml")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """This checkout's tracked files, committed as one commit of a new repository."""
    copy = tmp_path / "checkout"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in filter(None, listed.stdout.split("\0")):
        source = REPO / rel
        if source.is_file() and not source.is_symlink():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy / rel)
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "commit", "-q", "-m", "base")
    return copy


def diff(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(checkout), PYTHON_ENV_VAR: str(pcluster_python()), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "clusterkit", "diff", "--base", "HEAD", *args], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@needs_pcluster
def test_a_spec_edit_without_render_still_shows_the_update_impact(checkout: Path) -> None:
    committed = (checkout / "cluster_configs" / "rendered" / "demo.yaml").read_bytes()
    edit(checkout / "cluster_configs" / "demo.yaml", "        max: 4\n", "        max: 8\n")
    done = diff(checkout)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "demo: changed — most disruptive: live" in lines
    assert f"  {STALE}" in lines
    assert ("      Scheduling.SlurmQueues[gpu].ComputeResources[p5].MaxCount: 4 → 8  "
            "[RESIZE_UPDATE_STRATEGY_ON_REMOVE]") in lines
    gate = diff(checkout, "--fail-on", "live")
    assert gate.returncode == 1 and gate.stderr == "clusterkit diff: --fail-on live: demo (live)\n"
    assert (checkout / "cluster_configs" / "rendered" / "demo.yaml").read_bytes() == committed  # diff writes nothing


def test_a_current_render_adds_no_note(checkout: Path) -> None:
    done = diff(checkout)
    assert done.returncode == 0, done.stderr
    assert "stale" not in done.stdout
    assert done.stdout.rstrip().endswith(
        "no cluster config changes (unchanged: demo, p4d-existing, p5-capacity-block, train-a, train-b)")


def test_a_spec_that_does_not_render_says_its_render_is_compared_as_committed(checkout: Path) -> None:
    edit(checkout / "cluster_configs" / "demo.yaml", "        max: 4\n", "        max: -1\n")
    done = diff(checkout, "demo")
    assert done.returncode == 0, done.stderr
    (note,) = [line.strip() for line in done.stdout.splitlines() if "note: cluster_configs" in line]
    assert note.startswith("note: cluster_configs/rendered/demo.yaml compared as committed, maybe stale: "
                           "cluster_configs/demo.yaml does not render (1 error")
    assert note.endswith(": run `clusterkit validate demo`)")
