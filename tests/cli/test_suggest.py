"""Mistakes on the command line, through the CLI's entry point (tests/in_process.py): a mistyped option shows the
usage of the subcommand it was given to and the closest real option; a mistyped command offers only listed
commands."""
from __future__ import annotations

import subprocess

import pytest

from clusterkit.cli.main import build_parser
from clusterkit.cli.suggest import listed_choices
from clusterkit.paths import ROOT
from tests import in_process


def clusterkit(*args: str) -> subprocess.CompletedProcess[str]:
    return in_process.clusterkit(*args, cwd=ROOT)


@pytest.mark.parametrize("args, usage, error", [
    (("validate", "demo", "--fromat", "json"), "usage: clusterkit validate ",
     "clusterkit validate: error: unrecognized arguments: --fromat json; did you mean --format?"),
    (("validate", "demo", "--fromat=json"), "usage: clusterkit validate ",
     "clusterkit validate: error: unrecognized arguments: --fromat=json; did you mean --format?"),
    (("cost", "demo", "--refersh"), "usage: clusterkit cost ",
     "clusterkit cost: error: unrecognized arguments: --refersh; did you mean --refresh?"),
    (("diff", "--format", "jsn"), "usage: clusterkit diff ",
     "clusterkit diff: error: argument --format: invalid choice: 'jsn'; did you mean json? (choose from text, "
     "markdown, json)"),
])
def test_a_mistyped_option_shows_its_subcommands_usage(args: tuple[str, ...], usage: str, error: str) -> None:
    done = clusterkit(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(usage), done.stderr
    assert done.stderr.splitlines()[-1] == error


def test_a_mistyped_command_never_offers_a_hidden_one() -> None:
    done = clusterkit("rendr")
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert "did you mean render?" in last
    assert "summary" not in done.stderr  # internal (`make synth` prints it): not in --help, so not offered
    assert "summary" not in clusterkit("summry").stderr


def test_hidden_commands_still_run() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert "summary" in (sub.choices or {}) and "summary" not in listed_choices(sub)
