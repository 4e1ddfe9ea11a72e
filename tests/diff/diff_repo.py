"""A throwaway git repository of cluster files for the ``clusterkit diff`` tests.

Commit 1 on ``main`` holds tests/diff/fixtures/base; a branch ``change`` applies one case from
tests/diff/fixtures/cases (committed as commit 2, or left in the working tree). Author, committer
and dates are fixed, so commit ids, and with them the goldens, are the same on every machine.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from diff_fixtures import DELETE_LIST, FIXTURES

GOLDEN = Path(__file__).resolve().parent / "golden"
_IDENTITY = ("-c", "user.name=ClusterKit Tests", "-c", "user.email=tests@clusterkit.invalid",
             "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main")
_ENV = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
        "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *_IDENTITY, *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **_ENV}, check=True)
    return done.stdout.strip()


def apply_case(repo: Path, case: str, fixtures: Path = FIXTURES) -> None:
    source = fixtures / "cases" / case
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_file() and rel.name != DELETE_LIST:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, repo / rel)
    deletions = source / DELETE_LIST
    for rel in deletions.read_text().split() if deletions.exists() else []:
        (repo / rel).unlink()


def make_repo(root: Path, case: str, *, commit: bool = True, fixtures: Path = FIXTURES) -> Path:
    """The repository at ``root``: base committed on main, ``case`` on branch ``change`` (``fixtures``: the
    tree holding ``base`` and ``cases``)."""
    shutil.copytree(fixtures / "base", root)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "checkout", "-q", "-b", "change")
    apply_case(root, case, fixtures)
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"change: {case}")
    return root


def check_golden(name: str, text: str) -> None:
    """Compare with tests/diff/golden/<name> exactly; CK_UPDATE_GOLDEN=1 rewrites it instead."""
    path = GOLDEN / name
    if os.environ.get("CK_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} missing: run CK_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/diff"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"output differs from {path} (review, then CK_UPDATE_GOLDEN=1 to accept)"
