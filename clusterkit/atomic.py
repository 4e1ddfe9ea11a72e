"""Writing a generated file so a reader sees the old text or the new, never half of it."""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary sibling and one rename; the temporary never stays behind.

    A failure names ``path`` (not the temporary) and is the only error raised: removing a temporary that a
    read-only or full disk never let us create fails too, and that second error would hide the first.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def check_writable(path: Path) -> None:
    """Raise now the OSError that ``write_text(path, ...)`` would meet later, before the work that produces the text
    (``export -o`` asks AWS first). Unlike ``write_text``, a missing folder is an error: a mistyped ``-o`` path
    should not create folders."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    try:  # the rename in write_text needs what creating a file there needs; root passes mode checks, not EROFS
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.probe-")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    os.close(fd)
    os.unlink(probe)
