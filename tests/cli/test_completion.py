"""``clusterkit completion bash``: generated from the parser, checked by shellcheck, completed by real bash.

Each case sources the script in bash, sets COMP_WORDS/COMP_CWORD as bash's programmable completion does
and calls the function, so what is checked is what a user's shell would offer.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.cli.completion_command import bash_script
from clusterkit.cli.main import build_parser, main
from clusterkit.diff.gate import FAIL_ON
from clusterkit.paths import ROOT
from tests import shipped

SHELLCHECK = Path(sys.executable).parent / "shellcheck"


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "clusterkit.bash"
    path.write_text(bash_script(build_parser()))
    return path


def complete(script: Path, *words: str, cwd: Path = ROOT) -> list[str]:
    """What bash's ``complete -F`` does: COMP_WORDS/COMP_CWORD set, the function called as ``F cmd cur prev``."""
    all_words = ("clusterkit", *words)
    line = " ".join(shlex.quote(w) for w in all_words)
    call = " ".join(shlex.quote(w) for w in ("clusterkit", all_words[-1], all_words[-2] if words else ""))
    program = (f"source {shlex.quote(str(script))}; COMP_WORDS=({line}); COMP_CWORD={len(words)}; "
               f"_clusterkit {call}; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    done = subprocess.run(["bash", "-c", program], cwd=cwd, capture_output=True, text=True, check=True)
    return [w for w in done.stdout.splitlines() if w]


def test_the_cli_prints_the_generated_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    assert capsys.readouterr().out == bash_script(build_parser())


def test_shellcheck_is_clean(script: Path) -> None:
    done = subprocess.run([str(SHELLCHECK), "-s", "bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_commands_options_and_choices_complete(script: Path) -> None:
    assert complete(script, "di") == ["diff"]
    assert "summary" not in complete(script, "")  # internal commands stay hidden, as in --help
    assert complete(script, "diff", "--fail-on", "") == list(FAIL_ON)
    assert complete(script, "diff", "--format", "") == ["text", "markdown", "json"]
    assert complete(script, "validate", "--s") == ["--strict"]
    assert complete(script, "completion", "") == ["bash", "zsh"]


def test_names_complete_to_the_specs_of_the_checkout(script: Path, tmp_path: Path) -> None:
    """The names are the spec folder's when completing (the checkout's by default: the CLI's script is the
    default one, test_the_cli_prints_the_generated_script); here a folder of the shipped examples only."""
    names = sorted(shipped.SPECS)
    specs = bash_script(build_parser(), config_dir=shipped.copy_examples(tmp_path / "specs"))
    (tmp_path / "ck.bash").write_text(specs)
    assert complete(tmp_path / "ck.bash", "validate", "") == names
    assert complete(tmp_path / "ck.bash", "cost", "p") == [n for n in names if n.startswith("p")]
    assert sorted(complete(script, "validate", "cluster_configs/dem")) == ["cluster_configs/demo.images.lock",
                                                                            "cluster_configs/demo.yaml"]
