"""The file primitives every store write is built from: traversable directories, atomic JSON replace, fsync.

Why: every write goes to a temp name in the staging directory and is renamed to its final name. The store is
strictly inside the FSx mount dir (spec rules), so the store, its parent and the staging directory are on one
file system (staging.ensure_staging refuses otherwise) and ``rename`` is atomic: a reader, or a crash at any
instant, sees the old or the new file whole, never a mix (docs/store-concurrency.md, readers-take-no-lock).
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
from typing import Any, Dict, Optional


def ensure_dir(path: str) -> None:
    """mkdir with mode 0755 regardless of umask (other users must be able to traverse the store)."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        return
    os.chmod(path, 0o755)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(final: str, tmp: str, doc: Dict[str, Any]) -> str:
    """Write doc to tmp (0644, fsync), rename it to final, fsync both directories.

    tmp is in the staging tmp/ dir and final in the store (or nodes/): the same file system, so
    os.replace is one atomic rename(2) across directories; readers see the old or the new file, whole.
    """
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, 0o644)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except OSError as exc:
        # a full disk mid-write: the old file stays whole, and the partial temp file goes now
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.filename is None:  # write(2)/fsync(2) errors name no file: name the one being replaced
            raise OSError(exc.errno, f"writing it: {exc.strerror}", final) from None
        raise
    fsync_dir(os.path.dirname(final))
    if os.path.dirname(tmp) != os.path.dirname(final):
        fsync_dir(os.path.dirname(tmp))
    return final


def file_size(path: str) -> Optional[int]:
    """Size of the regular file at path; None when there is none (a directory or a symlink in its place
    counts as none: only a regular file can be an image, and a link could lead out of the store)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None
