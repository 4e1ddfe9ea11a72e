"""The node scripts' Args: KEY=VALUE strings from the ParallelCluster CustomActions, checked against the one
settings table (settings.py), and the /etc/clusterkit/node.env they become.

Why here and not in bash: the table, its patterns and the "did you mean" live once, in Python, which the CLI
checks specs with too. The node scripts run ``clusterkit_node.pyz node-args --role ROLE -- ARG...`` first
thing; its stdout is node.env (shell syntax, single-quoted values) which they write and evaluate, so the
shell only ever sees values this module accepted. A bad Arg is one line on stdout and exit 2: the scripts
log it as their ERROR line (a user or a spec can cause it, so never a traceback).
"""
from __future__ import annotations

import argparse
import os
import sys
import unicodedata
from typing import Dict, List, Optional, Sequence

from clusterkit_node.contract.settings import BY_KEY, SETTINGS

ROLES = ("head", "compute")
EXIT_BAD_ARGS = 2


class ArgsError(Exception):
    """One line naming the bad Arg and what is expected."""


def role_keys(role: str) -> List[str]:
    """The keys ROLE's script accepts, sorted. CK_BUNDLE (head_only) is the head node's alone (contract)."""
    return sorted(s.key for s in SETTINGS if role == "head" or not s.head_only)


def required_keys(role: str) -> List[str]:
    return sorted(s.key for s in SETTINGS if role in s.required_on)


def suggest(key: str, known: Sequence[str]) -> Optional[str]:
    """A "did you mean" for the common slips: wrong case, a missing prefix, a typo'd tail."""
    upper = key.upper()
    for k in known:
        if k in (upper, f"CK_{upper}", f"ENROOT_{upper}", f"PYXIS_{upper}"):
            return k
    if len(upper) >= 6:
        for k in known:
            if k.startswith(upper[:len(upper) - 2]) or upper.startswith(k[:len(k) - 2]):
                return k
    return None


def one_line(text: str) -> str:
    """``text`` for a one-line message: control characters (a line break in a value) escaped, all else as given
    (bytes that are not UTF-8 come back as they were: ``write``)."""
    return "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cc" else c for c in text)


def parse(role: str, args: Sequence[str], script: str) -> Dict[str, str]:
    """Every key ROLE accepts -> its value (the documented default unless an Arg sets it); ArgsError on the first
    problem. Nothing comes from the environment: settings are the Args and the defaults, nothing else."""
    known = role_keys(role)
    values = {k: BY_KEY[k].default for k in known}
    seen: Dict[str, int] = {}
    for i, arg in enumerate(args, start=1):
        if "=" not in arg:
            raise ArgsError(f"Args[{i}] '{one_line(arg)}': not KEY=VALUE "
                            "(each CustomActions Args entry is one KEY=VALUE string)")
        key, value = arg.split("=", 1)
        shown = one_line(key)
        if key not in values:
            if key == "CK_BUNDLE":
                raise ArgsError(f"Args[{i}] {key}: unknown key {key} for {script} (CK_BUNDLE is head-node only)")
            hint = suggest(key, known)
            if hint is not None:
                raise ArgsError(f"Args[{i}] {shown}: unknown key {shown} (did you mean {hint}?)")
            raise ArgsError(f"Args[{i}] {shown}: unknown key {shown} (known keys: {' '.join(known)})")
        if key in seen:
            raise ArgsError(f"Args[{i}] {key}: given twice (first at Args[{seen[key]}]; keep one)")
        seen[key] = i
        setting = BY_KEY[key]
        if setting.problem(value) is not None:
            raise ArgsError(f"Args[{i}] {key}={one_line(value)}: invalid value (expected {setting.hint})")
        values[key] = value
    for key in required_keys(role):
        if not values[key]:
            raise ArgsError(f"Args: missing required key {key} "
                            f"(add '{key}=<{BY_KEY[key].hint}>' to the CustomActions Args)")
    return values


def shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def node_env(values: Dict[str, str], script: str) -> str:
    """/etc/clusterkit/node.env: every accepted key with its effective value, in shell syntax."""
    lines = [f"# ClusterKit node settings ({script} Args + documented defaults); shell syntax.",
             "# Written by the node scripts on every run; edit the cluster spec, not this file."]
    lines += [f"{key}={shell_quote(values[key])}" for key in sorted(values)]
    return "\n".join(lines) + "\n"


def add_role_arguments(p: argparse.ArgumentParser) -> None:
    """What every command that reads the node's Args takes: its role, its script's name, the Args themselves."""
    p.add_argument("--role", choices=ROLES, required=True)
    p.add_argument("--script", default="clusterkit_node.pyz", help="the node script (named in messages)")
    p.add_argument("args", nargs="*", metavar="KEY=VALUE", help="the CustomActions Args (after --)")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("node-args", help="check a node script's KEY=VALUE Args; print node.env (exit 2: bad Args, "
                                         "one line)")
    add_role_arguments(p)


def parsed_or_reported(a: "argparse.Namespace", error_prefix: str = "") -> Optional[Dict[str, str]]:
    """A node-setup command's Args (``--role``, ``--script``, ``-- KEY=VALUE...``), or None once the one error
    line is written (the caller exits EXIT_BAD_ARGS)."""
    try:
        return parse(a.role, a.args, a.script)
    except ArgsError as exc:
        write(f"{error_prefix}{exc}\n")
        return None


def write(text: str) -> None:
    """``text`` on stdout as the bytes the Args came in (argv is decoded with the file-system encoding and
    surrogateescape; os.fsencode is its inverse), so a node's file and log get what PC passed."""
    sys.stdout.flush()
    sys.stdout.buffer.write(os.fsencode(text))
    sys.stdout.buffer.flush()


def cmd_node_args(args: argparse.Namespace) -> int:
    values = parsed_or_reported(args)
    if values is None:
        return EXIT_BAD_ARGS
    write(node_env(values, args.script))
    return 0
