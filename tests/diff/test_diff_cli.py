"""``python -m clusterkit diff`` as a user meets it: base choice, one-line errors, colour, no PC venv.

Real: git repositories built from tests/diff/fixtures, the CLI in a subprocess where the environment
or a terminal matters (a real pseudo-terminal for the colour check). The missing-venv case points
CLUSTERKIT_PCLUSTER_PYTHON at a path that does not exist.
"""
from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from diff_repo import git, make_repo

from clusterkit.cli.main import main
from clusterkit.pcluster.runner import pcluster_python

REPO = Path(__file__).resolve().parents[2]
needs_pcluster = pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`")
ANSI = "\x1b["


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", "diff", *args], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=120, check=False)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("cli") / "repo", "head-node")


def test_bad_ref_is_one_line_and_exit_2(repo: Path, capsys) -> None:
    assert main(["diff", "--repo", str(repo), "--base", "no-such-branch"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "unknown git ref 'no-such-branch' (give a branch, tag or commit; in a shallow clone fetch it first)\n"


def test_outside_a_git_work_tree_is_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["diff", "--repo", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"{tmp_path}: not a git work tree (clusterkit diff compares against a git ref)\n"


def test_unknown_cluster_name_is_exit_2(repo: Path, capsys) -> None:
    assert main(["diff", "--repo", str(repo), "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no cluster named nope" in err and "known: demo, p4d-existing" in err


def test_default_base_prefers_origin_main_then_main_then_head(tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo", "queue-max")
    first = git(repo, "rev-parse", "main")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--ff-only", "change")  # main now holds the change
    git(repo, "update-ref", "refs/remotes/origin/main", first)  # origin/main does not yet
    assert main(["diff", "--repo", str(repo), "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert f"base merge base with origin/main ({first[:12]})" in out and "MaxCount: 4 → 8" in out
    git(repo, "update-ref", "-d", "refs/remotes/origin/main")
    assert main(["diff", "--repo", str(repo), "--color", "never"]) == 0  # merge base with main = HEAD
    assert "no cluster config changes" in capsys.readouterr().out
    git(repo, "branch", "-q", "-m", "main", "trunk")
    assert main(["diff", "--repo", str(repo), "--color", "never"]) == 0
    assert "base HEAD (" in capsys.readouterr().out


def test_help_explains_the_default_base() -> None:
    done = cli("--help")
    assert done.returncode == 0
    assert "merge base of HEAD and origin/main" in " ".join(done.stdout.split())


@needs_pcluster
def test_colour_on_a_terminal_only(repo: Path) -> None:
    primary, secondary = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "clusterkit", "diff", "--repo", str(repo)], cwd=REPO,
                              stdout=secondary, stderr=subprocess.PIPE, env={**os.environ, "TERM": "xterm"},
                              timeout=120, check=False)
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(primary)
    on_tty = b"".join(chunks).decode()
    assert done.returncode == 0
    assert "\x1b[1;31mcannot be updated: recreate the cluster\x1b[0m" in on_tty
    piped = cli("--repo", str(repo))
    assert ANSI not in piped.stdout and "cannot be updated: recreate the cluster" in piped.stdout
    assert ANSI in cli("--repo", str(repo), "--color", "always").stdout
    assert ANSI not in cli("--repo", str(repo), "--color", "auto", env={"NO_COLOR": "1"}).stdout


def test_the_pull_request_comment_names_no_runner_path(repo: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: `(no interpreter at /home/runner/work/x/x/.venv-pcluster/bin/python)` in the PR comment."""
    from clusterkit.pcluster import runner

    monkeypatch.setenv("CLUSTERKIT_PCLUSTER_PYTHON", str(repo / ".venv-pcluster" / "bin" / "python"))
    runner._policies_json.cache_clear()  # another test in this process may have read the real venv's table
    assert main(["diff", "--repo", str(repo), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "> **Note:** ParallelCluster venv missing: run `make pcluster-venv` (no interpreter at " \
           ".venv-pcluster/bin/python): update impact unknown\n" in out
    assert str(repo) not in out and str(repo.resolve()) not in out


def test_missing_pcluster_venv_is_a_note_not_a_failure(repo: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-venv" / "bin" / "python"
    done = cli("--repo", str(repo), env={"CLUSTERKIT_PCLUSTER_PYTHON": str(missing)})
    assert done.returncode == 0, done.stderr
    assert f"note: ParallelCluster venv missing: run `make pcluster-venv` (no interpreter at {missing}): " \
           "update impact unknown\n" in done.stdout
    assert "    impact unknown\n      HeadNode.InstanceType: c6i.2xlarge → c6i.4xlarge\n" in done.stdout
    markdown = cli("--repo", str(repo), "--format", "markdown", env={"CLUSTERKIT_PCLUSTER_PYTHON": str(missing)})
    assert "| ⚪ impact unknown | `HeadNode.InstanceType` | `c6i.2xlarge` | `c6i.4xlarge` | — |" in markdown.stdout
