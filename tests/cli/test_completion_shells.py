"""``clusterkit completion bash|zsh`` from any directory: cluster names are the checkout's specs (as NAME means
to every command), not ``./cluster_configs``; zsh runs the same function through its own bashcompinit.

bash: the script is sourced in a temporary directory and the function called as ``complete -F`` calls it.
zsh: the script is sourced in ``zsh -f`` (compinit + bashcompinit load as a user's .zshrc would) and the
function called as bashcompinit's ``_bash_complete`` calls it; zsh then keeps the replies that start with the
typed word (compadd's prefix matching), which the test applies the same way.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.paths import ROOT
from tests import shipped

ZSH = shutil.which("zsh")  # Makefile DEB_PACKAGES installs it (`make test-deps`)


def script(shell: str, cwd: Path) -> Path:
    """The script as a user gets it: ``python -m clusterkit completion SHELL`` run in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's code, wherever the command runs
    done = subprocess.run([sys.executable, "-m", "clusterkit", "completion", shell], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    path = cwd / f"clusterkit.{shell}"
    path.write_text(done.stdout)
    return path


def call(*words: str) -> str:
    all_words = ("clusterkit", *words)
    line = " ".join(shlex.quote(w) for w in all_words)
    args = " ".join(shlex.quote(w) for w in ("clusterkit", all_words[-1], all_words[-2]))
    return f"COMP_WORDS=({line}); COMP_CWORD={len(words)}; _clusterkit {args}"


def bash(path: Path, *words: str) -> list[str]:
    program = f"source {shlex.quote(str(path))}; {call(*words)}; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    done = subprocess.run(["bash", "-c", program], cwd=path.parent, capture_output=True, text=True, check=True)
    return [w for w in done.stdout.splitlines() if w]


def zsh(path: Path, *words: str) -> list[str]:
    assert ZSH, "zsh is not installed: `make system-packages` installs it"
    program = (f"source {shlex.quote(str(path))}; PREFIX={shlex.quote(words[-1])}; {call(*words)}; "
               "print -rl -- $COMPREPLY")
    done = subprocess.run([ZSH, "-f", "-c", program], cwd=path.parent, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return [w for w in done.stdout.splitlines() if w and w.startswith(words[-1])]


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    (tmp_path / "cluster_configs").mkdir()  # a directory of its own specs: not what NAME means
    (tmp_path / "cluster_configs" / "not-mine.yaml").write_text("name: not-mine\n")
    return tmp_path


def test_bash_names_are_the_checkouts_from_any_directory(elsewhere: Path) -> None:
    path = script("bash", elsewhere)
    names = bash(path, "validate", "")  # the checkout's: the shipped ones, and whatever specs a user added
    assert set(shipped.SPECS) <= set(names) and "not-mine" not in names
    assert bash(path, "di") == ["diff"]
    assert bash(path, "diff", "--format", "") == ["text", "markdown", "json"]


def test_zsh_completes_the_same(elsewhere: Path) -> None:
    path = script("zsh", elsewhere)
    assert sorted(zsh(path, "validate", "")) == sorted(bash(script("bash", elsewhere), "validate", ""))
    assert zsh(path, "di") == ["diff"]
    assert zsh(path, "validate", "--s") == ["--strict"]
    assert sorted(zsh(path, "diff", "--format", "")) == ["json", "markdown", "text"]
    assert zsh(path, "completion", "z") == ["zsh"]


def test_zsh_with_no_specs_is_quiet(tmp_path: Path) -> None:
    """No spec matches the glob: zsh's NOMATCH would print an error at every TAB without (N)."""
    from clusterkit.cli.completion_command import zsh_script
    from clusterkit.cli.main import build_parser

    path = tmp_path / "clusterkit.zsh"
    path.write_text(zsh_script(build_parser(), config_dir=tmp_path / "empty"))
    assert zsh(path, "validate", "") == []
