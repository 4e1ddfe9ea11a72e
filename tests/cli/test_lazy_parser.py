"""The command table (clusterkit/cli/command_table.py) and the parser built from it: ``--help`` lists every command
with the table's one line while only the command run is imported, and a parser built for one command is the one
the whole CLI has for it (options, help, completion's view), so being lazy changes nothing a user sees.

Import-only: what a run imports, and Ctrl-C while it does, are tests/app/test_interrupt_at_start.py's (processes).
"""
from __future__ import annotations

import argparse
import types

import pytest

from clusterkit.cli.command_table import BY_NAME, COMMANDS
from clusterkit.cli.main import build_parser
from clusterkit.cli.start import command_word


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_help_lists_every_listed_command_with_the_tables_line_in_its_order() -> None:
    listed = [(a.dest, a.help) for a in _subparsers(build_parser(["--help"]))._choices_actions]
    assert listed == [(c.name, c.summary) for c in COMMANDS if c.summary is not None]
    assert "summary" in BY_NAME and "summary" not in dict(listed)  # internal: `make synth` runs it


@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_the_parser_of_one_command_is_the_whole_clis(name: str) -> None:
    alone = _subparsers(build_parser([name, "--help"])).choices[name]
    whole = _subparsers(build_parser()).choices[name]
    assert alone.format_help() == whole.format_help()
    assert [a.option_strings for a in alone._actions] == [a.option_strings for a in whole._actions]
    assert alone.get_default("run") is whole.get_default("run") is not None


def test_a_command_not_named_gets_an_empty_parser_and_its_module_is_not_asked() -> None:
    parser = build_parser(["validate", "demo"])
    choices = _subparsers(parser).choices
    assert choices["validate"].get_default("run") is not None
    assert choices["lock"].get_default("run") is None and [a.dest for a in choices["lock"]._actions] == ["help"]


def test_completion_gets_every_commands_parser() -> None:
    choices = _subparsers(build_parser(["completion", "bash"])).choices
    assert all(choices[c.name].get_default("run") is not None for c in COMMANDS)


def test_a_module_that_brings_its_own_help_line_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-line help lives in the table only: a module's own ``help=`` would be a second copy."""
    def add_parser(sub: object) -> None:
        sub.add_parser("validate", help="a second summary")  # type: ignore[attr-defined]

    monkeypatch.setattr("importlib.import_module", lambda name: types.SimpleNamespace(add_parser=add_parser))
    with pytest.raises(ValueError, match=r"adds 'validate' with help=; the command table .* holds its one-line"):
        build_parser(["validate"])


@pytest.mark.parametrize("words", [["validate", "demo"], ["lock", "--offline", "demo"],
                                   ["cost", "--format", "json", "demo"]])
def test_the_command_word_is_the_one_argparse_picks(words: list[str]) -> None:
    assert build_parser().parse_args(words).command == command_word(words)
    assert build_parser(words).parse_args(words).command == command_word(words)


@pytest.mark.parametrize("words", [[], ["--version"], ["-h"], ["--"]])
def test_no_command_word(words: list[str]) -> None:
    assert command_word(words) == ""
