"""The node package's one command table (clusterkit_node/commands.py): every command is served by the module the
table names, and running one imports only that module's part of the package.

Why: the Slurm prolog runs ``clusterkit_node.pyz user-dirs`` at every job start, on every node of the allocation;
importing all 36 modules first cost more than the command (docs/benchmarks.md). Real: the package, argparse,
a fresh interpreter per check.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit_node import commands

REPO = Path(__file__).resolve().parents[2]


def _commands_of(module: str) -> list[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    commands._module(module).add_parser(sub)
    return list(sub.choices)


@pytest.mark.parametrize("module,served", commands.COMMAND_TABLE, ids=[m for m, _ in commands.COMMAND_TABLE])
def test_each_module_adds_exactly_the_commands_the_table_gives_it(module: str, served) -> None:
    assert _commands_of(module) == [command for command, _ in served]
    for _, function in served:
        assert callable(getattr(commands._module(module), function))


def test_the_whole_parser_lists_every_command_once_in_the_tables_order() -> None:
    sub = next(a for a in commands.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(commands.COMMANDS)


def _loaded_after(argv: list[str]) -> list[str]:
    code = ("import json, sys\n"
            "from clusterkit_node import commands\n"
            "try:\n"
            f"    commands.main({argv!r})\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('clusterkit_node.'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_prologs_command_imports_only_what_it_uses() -> None:
    loaded = _loaded_after(["user-dirs", "--help"])
    assert "clusterkit_node.node.user_dirs" in loaded
    assert not [m for m in loaded if m.startswith(("clusterkit_node.fleet", "clusterkit_node.image"))], loaded
    assert "clusterkit_node.store.sync" not in loaded and "clusterkit_node.node.selftest" not in loaded


def test_an_unknown_command_still_names_every_command(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        commands.main(["user-dir"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'user-dir'" in err and "'user-dirs'" in err and "'store-units'" in err
    assert len(_loaded_after(["--help"])) > 30  # --help builds the whole table
