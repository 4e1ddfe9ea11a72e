"""ClusterKit: containerized GPU training clusters on AWS ParallelCluster, from one reviewed spec.

User errors print one line each (file:line:col: path: problem (hint)) and exit 2; see docs/cli-output.md
for JSON output and exit codes."""
from __future__ import annotations

import sys

# First and stdlib only: everything else is imported after Ctrl-C is caught (clusterkit.cli.start), and only
# what the command named needs (clusterkit.cli.command_table). Not even typing: mypy reads any TYPE_CHECKING as true.
from clusterkit.cli import start

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any

    from clusterkit.cli.command_table import Command


def build_parser(words: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``words``: every command listed with its one line (clusterkit.cli.command_table), the options of
    only the command the words name; of every command when ``words`` is None or that command reads every parser
    (completion). A listed command whose module was not imported has an empty parser that these words never reach.
    """
    import argparse
    import importlib

    from clusterkit.cli.command_table import BY_NAME, COMMANDS
    from clusterkit.cli.suggest import SubcommandParser, SuggestingParser
    from clusterkit.cli.version_command import VersionAction

    parser = SuggestingParser(prog="clusterkit", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=VersionAction,
                        help="print the ClusterKit, ParallelCluster and CDK versions, then exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands (`clusterkit COMMAND --help` for each)",
                                parser_class=SubcommandParser)
    named = None if words is None else BY_NAME.get(start.command_word(words))
    every = words is None or (named is not None and named.needs_every_parser)
    for command in COMMANDS:
        if every or command is named:
            importlib.import_module(command.module).add_parser(_Subparsers(sub, command))
        else:
            sub.add_parser(command.name, **_listed(command))
    parser.set_defaults(parser=parser)
    return parser


def _listed(command: Command) -> dict[str, Any]:
    """argparse lists a subcommand in ``--help`` (and did-you-mean offers it) only when it has a help line."""
    return {} if command.summary is None else {"help": command.summary}


class _Subparsers:
    """What a command module's ``add_parser(sub)`` gets: argparse's subparsers, with the name and one-line help of
    the command table (a module that passes its own ``help=`` would say a second time what the table says)."""

    def __init__(self, actions: Any, command: Command) -> None:
        self._actions, self._command = actions, command

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name != self._command.name or "help" in kwargs:
            raise ValueError(f"{self._command.module}.add_parser: adds {name!r}{' with help=' * ('help' in kwargs)}; "
                             f"the command table (clusterkit/cli/command_table.py) names {self._command.name!r} and "
                             "holds its one-line help")
        parser: argparse.ArgumentParser = self._actions.add_parser(name, **kwargs, **_listed(self._command))
        return parser


def main(argv: list[str] | None = None) -> int:
    """The console script and ``python -m clusterkit`` (no ``argv``: this process is clusterkit, and Ctrl-C is one
    line from here to its exit); tests pass ``argv``. Every error a user or the machine can cause ends in
    clusterkit.cli.boundary (one line, the exit codes of docs/cli-output.md)."""
    words = sys.argv[1:] if argv is None else argv
    program = f"clusterkit {start.command_word(words)}".strip()
    if argv is None:
        start.catch_interrupts(program=program)
    import shlex

    from clusterkit.cli.boundary import Boundary, guarded

    boundary = Boundary(program=program, rerun=shlex.join(["clusterkit", *words]))

    def body() -> int:
        args = build_parser(words).parse_args(words)
        code: int = args.run(args)
        return code

    return guarded(body, boundary=boundary)
