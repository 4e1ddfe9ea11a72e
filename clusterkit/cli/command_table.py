"""The one table of ``clusterkit`` commands: name, the module that parses and runs it, and the one line
``clusterkit --help`` lists for it.

Why a table: the help lists every command, but a run needs only one command's module, and importing all of them
(their parsers' imports, then the spec model, the loader, the registry client) cost more than ``--version`` or
``validate`` of one spec. So the summary lives here, never in the module (``add_parser`` is refused a ``help=``), and
a module is imported only when its command runs, its ``--help`` is asked, or every parser is needed (completion).
Stdlib only: the CLI imports this before anything else.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Command:
    name: str
    module: str  # ``add_parser(sub)`` adds its options, ``run(args) -> int`` runs it
    summary: str | None  # None: not listed in ``--help`` and not offered by did-you-mean (internal)
    needs_every_parser: bool = False  # its run reads every command's parser (completion generates from them)


# In the order ``clusterkit --help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command(name="init", module="clusterkit.cli.init_command",
            summary="write a commented starter spec: clusterkit init --name NAME"),
    Command(name="validate", module="clusterkit.cli.validate_command",
            summary="check specs (all of cluster_configs/*.yaml by default)"),
    Command(name="render", module="clusterkit.cli.render_command",
            summary="write <spec dir>/rendered/<name>.yaml (cluster_configs/rendered/ by default)"),
    Command(name="lock", module="clusterkit.cli.lock_command",
            summary="resolve image digests into <name>.images.lock next to each spec"),
    Command(name="export", module="clusterkit.cli.export_command",
            summary="concrete ParallelCluster YAML from the deployed stacks, for `pcluster`"),
    Command(name="expand", module="clusterkit.cli.expand_command",
            summary="print the effective spec: every default and derived value resolved"),
    Command(name="summary", module="clusterkit.cli.summary_command", summary=None),  # `make synth` prints it
    Command(name="reference", module="clusterkit.cli.reference_command", summary="print the spec reference (markdown)"),
    Command(name="schema", module="clusterkit.cli.schema_command",
            summary="print the spec's JSON Schema (committed as cluster_configs/clusterkit-spec.schema.json, for "
                    "editors)"),
    Command(name="cost", module="clusterkit.cli.cost_command",
            summary="hourly and 30-day cost estimate from list prices (clusterkit/data/prices.json)"),
    Command(name="status", module="clusterkit.cli.status_command",
            summary="deployed stacks, TTL expiry, head node and SSM command (needs AWS credentials)"),
    Command(name="diff", module="clusterkit.cli.diff_command",
            summary="review: semantic diff of specs, rendered configs and image locks against a git ref"),
    Command(name="platform-users", module="clusterkit.cli.platform_users_command",
            summary="deployed clusters using a platform's exports (needs AWS credentials)"),
    Command(name="completion", module="clusterkit.cli.completion_command",
            summary="print a completion script: source <(clusterkit completion bash|zsh)", needs_every_parser=True),
)
BY_NAME = {command.name: command for command in COMMANDS}

