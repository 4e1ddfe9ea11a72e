"""A node's files written the way a re-run must find them: atomically, and only when content or mode differ.

Why: OnNodeUpdated re-runs every node script, so a second run must change nothing (no mtime moves, no daemon
reload, no ``scontrol reconfigure``), and a reader (slurmd on any node reading plugstack.conf.d) must never see a
half-written file. So a file goes through a temp file in its own directory (or a given one on the same file
system: pyxis.conf's lives outside plugstack.conf.d, aws-parallelcluster#6459) renamed over the target.

What a step did is printed for the node script, in order: ``LEVEL message`` lines, which its ck_log logs with its
own name and time (so a node's log reads as before these steps left bash), and ``@marker`` lines for what only
bash does (``@changed``, ``@systemd-dirty``, ``@plugstack-changed``, ``@sysctl FILE``). A problem ends the step
with one ``ERROR`` line and exit 1. Paths are the node's real paths; CK_ROOT (tests) prefixes them on disk only.
"""
from __future__ import annotations

import argparse
import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from clusterkit_node.contract.console import os_error_line
from clusterkit_node.node import args as node_args

MODE = re.compile(r"[0-7]{3,4}")


class NodeProblem(Exception):
    """Something on the node is not as ClusterKit needs it: one line naming it (exit 1)."""


@dataclass
class Changes:
    """The lines a step prints for the node script, in the order it did things."""

    lines: List[str] = field(default_factory=list)

    def log(self, level: str, message: str) -> None:
        self.lines.append(f"{level} {message}")

    def mark(self, marker: str) -> None:
        self.lines.append(f"@{marker}")


def root() -> str:
    return os.environ.get("CK_ROOT", "")


def _mode_differs(full: str, mode: str) -> bool:
    return stat.S_IMODE(os.stat(full).st_mode) != int(mode, 8)


def ensure_dir(ch: Changes, path: str, mode: str) -> None:
    """Create ``path`` (with parents, umask modes) and fix its mode; nothing when already right."""
    full = root() + path
    if not os.path.isdir(full):
        os.makedirs(full, exist_ok=True)
        os.chmod(full, int(mode, 8))
        ch.log("INFO", f"created {path} (mode {mode})")
    elif _mode_differs(full, mode):
        os.chmod(full, int(mode, 8))
        ch.log("INFO", f"fixed mode of {path} to {mode}")


def write_file(ch: Changes, path: str, mode: str, content: bytes, tmpdir: Optional[str] = None) -> bool:
    """``content`` (a trailing newline ensured) at ``path`` through a temp file in ``tmpdir`` (default: the
    target's directory). True when the file or its mode changed."""
    if not content.endswith(b"\n"):
        content += b"\n"
    full = root() + path
    if os.path.isfile(full) and not os.path.islink(full):
        with open(full, "rb") as fh:
            same = fh.read() == content
        if same:
            if not _mode_differs(full, mode):
                return False
            os.chmod(full, int(mode, 8))
            ch.log("INFO", f"fixed mode of {path} to {mode}")
            return True
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.ck-",
                               dir=root() + tmpdir if tmpdir else os.path.dirname(full))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())  # the rename must not publish a file whose bytes a crash could still lose
        os.chmod(tmp, int(mode, 8))
        os.replace(tmp, full)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    ch.log("INFO", f"wrote {path} (mode {mode})")
    return True


def remove_file(ch: Changes, path: str) -> bool:
    full = root() + path
    if not os.path.lexists(full):
        return False
    os.unlink(full)
    ch.log("INFO", f"removed {path}")
    return True


def report(step: Callable[[Changes], None]) -> int:
    """Run ``step`` and print its lines; a NodeProblem or an OSError becomes its last line, ERROR, exit 1."""
    ch = Changes()
    code = 0
    try:
        step(ch)
    except NodeProblem as exc:
        ch.log("ERROR", str(exc))
        code = 1
    except OSError as exc:
        ch.log("ERROR", os_error_line(exc))
        code = 1
    node_args.write("".join(f"{line}\n" for line in ch.lines))
    return code


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("node-file", help="write (content on stdin), make or remove one node file, idempotently; "
                                         "prints what changed")
    p.add_argument("action", choices=("write", "dir", "remove"))
    p.add_argument("path", help="the node's absolute path (under CK_ROOT)")
    p.add_argument("mode", nargs="?", help="octal mode (write, dir)")
    p.add_argument("--tmpdir", help="write: the temp file's directory (default: the target's)")


def cmd_node_file(a: argparse.Namespace) -> int:
    if not a.path.startswith("/") or (a.action != "remove" and not (a.mode and MODE.fullmatch(a.mode))):
        node_args.write(f"ERROR node-file {a.action}: needs an absolute path and an octal mode (got {a.path!r} "
                        f"{a.mode!r})\n")
        return 2

    def step(ch: Changes) -> None:
        if a.action == "dir":
            ensure_dir(ch, a.path, a.mode)
        elif a.action == "remove":
            if remove_file(ch, a.path):
                ch.mark("changed")
        elif write_file(ch, a.path, a.mode, sys.stdin.buffer.read(), a.tmpdir):
            ch.mark("changed")
    return report(step)
