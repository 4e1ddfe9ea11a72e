"""What the operator sees: timestamped progress lines, tables, one-line usage errors and exit codes.

Every node command writes through these, so the journal (``journalctl -u clusterkit-image-sync``), the boot log
and a terminal show the same "<UTC time> <command>: ..." lines, each naming the command that wrote it (``sync`` as
``image_sync``, the unit's name; ``verify``, ``selftest``, ``gpu-health``, ... as themselves: a node's log must not
blame the image sync for another command's line), and every command exits with the same codes: 0 fine, 1 an image
or a node check failed, 2 the operator must fix something first.
"""
from __future__ import annotations

import datetime as _dt
import errno
import sys
from typing import Dict, List

PROG = "image_sync"  # the sync's log name (and every line's until a command says its own: ``use_name``)
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_NAMES = {"sync": PROG}  # commands whose log name is not the command word
_current = {"name": PROG}


def use_name(command: str) -> None:
    """Log as ``command`` (commands.main calls it once the command is known)."""
    _current["name"] = _NAMES.get(command, command)


def name() -> str:
    """The log name of the command running."""
    return _current["name"]


def _said(msg: str) -> str:
    """A module that names its command first (``verify: ...``) says it once when that is the log name."""
    return msg.removeprefix(f"{name()}: ")


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def log(msg: str) -> None:
    """Timestamped progress line on stdout (the systemd journal keeps it)."""
    print(f"{now_utc()} {name()}: {_said(msg)}", flush=True)


def warn(msg: str) -> None:
    print(f"{now_utc()} {name()}: warning: {_said(msg)}", file=sys.stderr, flush=True)


def error(msg: str) -> None:
    print(f"{now_utc()} {name()}: error: {_said(msg)}", file=sys.stderr, flush=True)


# What an operator can do about the file-system errors a node meets (read-only or full FSx, something
# in the way of a name the store owns).
_OS_HINTS = {
    errno.EROFS: "the file system is read-only: is FSx mounted read-write?",
    errno.ENOSPC: "the file system is full: free space or grow it (FSx storage capacity)",
    errno.EDQUOT: "a quota is exhausted on this file system",
    errno.EISDIR: "a directory is in the way of a file the store owns: move it aside",
    errno.ENOTDIR: "a file is in the way of a directory the store owns: move it aside",
    errno.EACCES: "permission denied: image_sync runs as root on the head node",
    errno.EPERM: "operation not permitted: image_sync runs as root on the head node",
    errno.EIO: "I/O error: check the file system's health (dmesg, FSx console)",
}


def os_error_line(exc: OSError) -> str:
    """One line for an OSError a node can cause: what failed, on which path, and what to do."""
    where = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    what = exc.strerror or str(exc)
    hint = _OS_HINTS.get(exc.errno or 0, "")
    return f"{where + ': ' if where else ''}{what}{f' ({hint})' if hint else ''}"


class UsageError(Exception):
    """A problem the operator must fix before anything can run (exit 2); one line per problem."""

    def __init__(self, lines: List[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def mb(n: int) -> float:
    return n / 1e6


def format_bytes(n: float) -> str:
    """Decimal units, as ``mb`` and the tables: ``512 B``, ``3.4 kB``, ``8.2 MB``, ``1.23 GB``."""
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} kB"
    return f"{int(n)} B"


def format_duration(seconds: float) -> str:
    """``45s``, ``2m30s``, ``1h05m`` (whole seconds; progress lines and ``status``)."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_versions(versions: Dict[str, str]) -> str:
    return " ".join(f"{k}={versions[k]}" for k in sorted(versions)) or "-"


def print_table(headers: List[str], rows: List[List[str]]) -> None:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [headers] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    sys.stdout.flush()
