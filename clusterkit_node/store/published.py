"""The sync's own record of what it published: per store file its size, sha256 and identity at publish.

Why: ``manifest.json`` sits in the store, which the data repository association exports (and, set up
otherwise, imports): it is shared state, not proof. The record, ``<staging>/published.json``, lives in
the staging sibling that is never exported, is written only by the head node's sync (root) and is
trusted only while it and its directory are root-owned and writable by nobody else. The pyxis importer
(the job's user, every container step) compares a store file's ``lstat`` with it before answering: a
few syscalls, never a hash of a 10+ GB file. The head node's sync re-hashes a file whose identity
changed and takes it out of service when its content differs (sync.py).

Identity: inode, size, mtime and ctime (nanoseconds) as ``lstat`` saw them after publishing. A write,
truncate, chmod, replace or an FSx import from S3 changes the ctime, which neither users nor S3 metadata
can set (mtime they can). A time seen in whole seconds (nanoseconds 0) on one side matches the same second
on the other: Lustre may keep second timestamps, so another client need not see the nanoseconds the head
node saw right after the rename.
"""
from __future__ import annotations

import json
import os
import stat
from typing import Any, Dict, List, Optional

RECORD_VERSION = 1
IDENTITY_KEYS = ("ino", "size", "mtime", "ctime")
ENTRY_KEYS = {"digest": str, "sha256": str, "ino": int, "size": int, "mtime": int, "ctime": int}
MAX_RECORD_BYTES = 16 << 20  # a record of a few hundred images is kilobytes; refuse to read a huge one


class RecordError(ValueError):
    """The record is missing, unreadable or not to be trusted (one line: path and why)."""


def identity(st: os.stat_result) -> Dict[str, int]:
    """What the record keeps of an lstat result (see the module docstring for why these)."""
    return {"ino": st.st_ino, "size": st.st_size, "mtime": st.st_mtime_ns, "ctime": st.st_ctime_ns}


def same(key: str, now: int, recorded: Any) -> bool:
    """Equal, or for a time the same second where one side has no nanoseconds (a second-resolution view)."""
    if not isinstance(recorded, int) or now == recorded or key not in ("mtime", "ctime"):
        return isinstance(recorded, int) and now == recorded
    second = 10**9
    return now // second == recorded // second and (now % second == 0 or recorded % second == 0)


def _trusted(st: os.stat_result, path: str, kind: str) -> None:
    """Root-owned and not group/other-writable, so no user can have written it (raises RecordError)."""
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise RecordError(f"{path}: {kind} is owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}: "
                          f"only root (the head node's image sync) may write it; not trusted")


def read_record(path: str) -> Dict[str, Dict[str, Any]]:
    """The record's entries (store-relative file -> entry); RecordError when it cannot be trusted.

    Opened without following a symlink and checked on the open descriptor, its directory checked too,
    so a user can neither point it elsewhere nor swap it between the check and the read."""
    directory = os.path.dirname(path)
    try:
        dir_st = os.lstat(directory)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RecordError(f"{path}: missing: the head node's image sync has not recorded what it published")
    except OSError as exc:
        raise RecordError(f"{exc.filename or path}: cannot read: {exc.strerror}")
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISDIR(dir_st.st_mode):
            raise RecordError(f"{directory}: not a directory")
        _trusted(dir_st, directory, "its directory")
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{path}: not a regular file")
        _trusted(st, path, "the record")
        data = fh.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"{path}: over {MAX_RECORD_BYTES} bytes: not written by the image sync")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"{path}: not valid JSON ({exc})")
    return _entries(path, doc)


def _entries(path: str, doc: Any) -> Dict[str, Dict[str, Any]]:
    if not isinstance(doc, dict) or doc.get("record_version") != RECORD_VERSION \
            or not isinstance(doc.get("files"), dict):
        raise RecordError(f"{path}: not a version {RECORD_VERSION} record of published files")
    for rel, entry in doc["files"].items():
        if not isinstance(entry, dict) or not all(
                isinstance(entry.get(k), t) and not isinstance(entry.get(k), bool) for k, t in ENTRY_KEYS.items()):
            raise RecordError(f"{path}: files.{rel}: malformed entry")
    files: Dict[str, Dict[str, Any]] = doc["files"]
    return files


def record_doc(files: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The JSON document the sync writes (sync_state.write_record)."""
    return {"record_version": RECORD_VERSION, "files": files}


def new_entry(digest: str, sha256: str, st: os.stat_result) -> Dict[str, Any]:
    return dict(identity(st), digest=digest, sha256=sha256)


def changes(entry: Dict[str, Any], st: os.stat_result) -> List[str]:
    """What differs between the recorded identity and st, e.g. ``size 5 (recorded 10)``; [] if nothing."""
    now = identity(st)
    return [f"{key} {now[key]} (recorded {entry.get(key)})" for key in IDENTITY_KEYS
            if not same(key, now[key], entry.get(key))]


def serve_problem(store_path: str, rel: str, digest: str, files: Dict[str, Dict[str, Any]]) -> Optional[str]:
    """Why the file ``rel`` of the store at store_path (a real path) must not be served, or None.

    Cheap: two lstat calls. The image directory must be a real directory (a symlink would lead out of
    the store) and the file a regular file whose identity is the one recorded at publish."""
    entry = files.get(rel)
    if entry is None or entry.get("digest") != digest:
        return ("the head node's image sync has not recorded it as published (a failed or interrupted "
                "import, or a file put there by other means)")
    image_dir = os.path.join(store_path, os.path.dirname(rel))
    if not stat.S_ISDIR(os.lstat(image_dir).st_mode):
        return f"its directory {os.path.dirname(rel)}/ is a symlink or not a directory"
    st = os.lstat(os.path.join(store_path, rel))
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    diff = changes(entry, st)
    if diff:
        return f"it changed after the head node's image sync published it ({', '.join(diff)})"
    return None
