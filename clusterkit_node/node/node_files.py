"""Files the node tools write on a node: atomically, only when content or mode differ, with the node scripts' log
lines.

Why these rules: they are enroot.sh's (ck_ensure_dir, ck_write_file, ck_remove_file), so a file whose render moves
from bash to the node tools keeps its bytes, its mode and its log lines. A re-run changes no file that is already
right (OnNodeUpdated runs on every cluster update); a reader sees the old file or the new one, whole (temp file in
the same directory, one rename). Paths are the node's (``/etc/...``), under CK_ROOT when set (the node scripts' test
root); the log lines name them without it, as the scripts do. Nothing is logged here: the lines ("LEVEL message")
are collected for the calling script, which logs them under its own name.
"""
from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, field
from typing import List


def root() -> str:
    return os.environ.get("CK_ROOT", "")


@dataclass
class NodeFiles:
    """The writes of one command: what it logged, and whether any path changed (a systemd unit: daemon-reload)."""

    root: str = field(default_factory=root)
    log: List[str] = field(default_factory=list)
    changed: bool = False

    def _note(self, message: str) -> None:
        self.log.append(f"INFO {message}")
        self.changed = True

    def ensure_dir(self, path: str, mode: int) -> None:
        """Create PATH (with parents) with MODE, or fix its mode; nothing when it is right."""
        full = self.root + path
        if not os.path.isdir(full):
            os.makedirs(full, exist_ok=True)
            os.chmod(full, mode)
            self._note(f"created {path} (mode {mode:04o})")
        elif stat.S_IMODE(os.stat(full).st_mode) != mode:
            os.chmod(full, mode)
            self._note(f"fixed mode of {path} to {mode:04o}")

    def write(self, path: str, mode: int, content: str) -> None:
        """PATH holds CONTENT (a trailing newline ensured) with MODE; a regular file already right is left alone."""
        data = os.fsencode(content if content.endswith("\n") else content + "\n")
        full = self.root + path
        if os.path.isfile(full) and not os.path.islink(full):
            with open(full, "rb") as fh:
                same = fh.read() == data
            if same:
                if stat.S_IMODE(os.stat(full).st_mode) != mode:
                    os.chmod(full, mode)
                    self._note(f"fixed mode of {path} to {mode:04o}")
                return
        directory, name = os.path.split(full)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.ck-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, full)
        except BaseException:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            raise
        self._note(f"wrote {path} (mode {mode:04o})")

    def remove(self, path: str) -> None:
        """PATH gone (a file or a link); nothing when it is absent."""
        full = self.root + path
        if os.path.lexists(full):
            os.unlink(full)
            self._note(f"removed {path}")
