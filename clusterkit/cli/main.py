"""ClusterKit: containerized GPU training clusters on AWS ParallelCluster, from one reviewed spec.

User errors print one line each (file:line:col: path: problem (hint)) and exit 2; see docs/cli-output.md
for JSON output and exit codes."""
from __future__ import annotations

import argparse
import shlex
import sys

from clusterkit.cli import (
    completion_command,
    cost_command,
    diff_command,
    expand_command,
    export_command,
    init_command,
    lock_command,
    platform_users_command,
    reference_command,
    render_command,
    schema_command,
    status_command,
    summary_command,
    validate_command,
)
from clusterkit.cli.boundary import Boundary, guarded
from clusterkit.cli.suggest import SubcommandParser, SuggestingParser
from clusterkit.cli.version_command import VersionAction

# In the order ``clusterkit --help`` lists them; each module adds its parser and sets ``run``.
COMMANDS = (init_command, validate_command, render_command, lock_command, export_command, expand_command,
            summary_command, reference_command, schema_command, cost_command, status_command, diff_command,
            platform_users_command, completion_command)


def build_parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(prog="clusterkit", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=VersionAction,
                        help="print the ClusterKit, ParallelCluster and CDK versions, then exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands (`clusterkit COMMAND --help` for each)",
                                parser_class=SubcommandParser)
    for command in COMMANDS:
        command.add_parser(sub)
    parser.set_defaults(parser=parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The console script and ``python -m clusterkit``; every error a user or the machine can cause ends in
    clusterkit.cli.boundary (one line, the exit codes of docs/cli-output.md)."""
    words = sys.argv[1:] if argv is None else argv
    command = next((w for w in words if not w.startswith("-")), "")
    boundary = Boundary(program=f"clusterkit {command}".strip(), rerun=shlex.join(["clusterkit", *words]))

    def body() -> int:
        args = build_parser().parse_args(words)
        code: int = args.run(args)
        return code

    return guarded(body, boundary=boundary)
