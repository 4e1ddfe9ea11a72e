"""The image store on FSx: its layout, the manifest, the sync lock, stable names and crash debris.

Layout (the contract every other part of ClusterKit reads)::

  <store>/<name>/<digest-hex>.sqsh        mode 0644, written once, never modified in place
  <store>/<name>.sqsh -> <name>/<hex>.sqsh relative symlink: the stable name jobs use
  <store>/manifest.json                    what is in the store; replaced atomically, never half-written
  <store>/.sync.lock                       flock: one importer at a time
  <store>/<name>/.<hex>.sqsh.partial-<pid> import in progress (or debris of a crashed run)
  <store>/.nodes/<hostname>.json           what each compute node runs (``fingerprint``, read by ``drift``)

Why: every write goes to a dot temp name in the same directory (same filesystem, so the final
``rename`` is atomic); a crash leaves only dot-files that the next sync removes while holding the lock.
Nothing half-written is ever visible under a final name.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import time
from typing import TYPE_CHECKING, Iterator, List, Optional, Tuple

from console import UsageError, error, log

if TYPE_CHECKING:  # only for annotations: image_lock imports this module
    from image_lock import LockedImage

MANIFEST_VERSION = 1
MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".sync.lock"
PARTIAL_RE = re.compile(r"^\.([0-9a-f]{64})\.sqsh\.partial-(\d+)$")
LINK_TMP_RE = re.compile(r"^\..+\.sqsh\.link-\d+$")
MANIFEST_TMP_RE = re.compile(r"^\.manifest\.json\.tmp-\d+$")


def manifest_path(store: str) -> str:
    return os.path.join(store, MANIFEST_NAME)


def empty_manifest() -> dict:
    return {"manifest_version": MANIFEST_VERSION, "images": {}}


def read_manifest(store: str) -> dict:
    """The store's manifest; a missing file is an empty store. Raises ValueError if unreadable."""
    path = manifest_path(store)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return empty_manifest()
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}")
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), dict):
        raise ValueError(f"{path}: images: missing or not an object")
    if doc.get("manifest_version") != MANIFEST_VERSION:
        raise ValueError(f"{path}: manifest_version {doc.get('manifest_version')!r} is not "
                         f"{MANIFEST_VERSION} (written by a different image_sync?)")
    doc.setdefault("rejected", {})
    return doc


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(directory: str, name: str, doc: dict) -> str:
    """<directory>/<name> via a dot temp file in the same directory (same filesystem: atomic rename)."""
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
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
    fsync_dir(directory)
    return final


def write_manifest(store: str, manifest: dict) -> None:
    """Replace manifest.json atomically: temp file + fsync + rename + fsync(dir).

    A reader (or a crash at any instant) sees either the old or the new complete file, never a mix.
    """
    doc = {"manifest_version": MANIFEST_VERSION, "images": manifest.get("images", {})}
    if manifest.get("rejected"):
        doc["rejected"] = manifest["rejected"]
    write_json_atomic(store, MANIFEST_NAME, doc)


def read_manifest_bytes(store: str) -> Tuple[Optional[str], dict]:
    """(sha256 of manifest.json as read, its content); (None, empty) when there is none yet."""
    try:
        with open(manifest_path(store), "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None, empty_manifest()
    except OSError as exc:
        raise ValueError(f"{manifest_path(store)}: cannot read: {exc.strerror}")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{manifest_path(store)}: not valid JSON ({exc})")
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), dict):
        raise ValueError(f"{manifest_path(store)}: images: missing or not an object")
    return hashlib.sha256(data).hexdigest(), doc


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def partials(store: str) -> List[Tuple[str, str, int]]:
    """(path, hex, pid) of every import temp file in the store."""
    found = []
    try:
        names = sorted(os.listdir(store))
    except OSError:
        return found
    for name in names:
        d = os.path.join(store, name)
        if name.startswith(".") or not os.path.isdir(d) or os.path.islink(d):
            continue
        for f in sorted(os.listdir(d)):
            m = PARTIAL_RE.match(f)
            if m:
                found.append((os.path.join(d, f), m.group(1), int(m.group(2))))
    return found


def clean_debris(store: str) -> None:
    """Remove temp files of crashed runs. Called only while holding the sync lock: no other importer
    can be running, so every partial is debris (whatever its pid)."""
    for path, _hex, pid in partials(store):
        state = "live pid" if pid_alive(pid) else "dead pid"
        log(f"removing stale temp file {path} ({state} {pid}, left by an interrupted sync)")
        os.unlink(path)
    for f in os.listdir(store):
        if LINK_TMP_RE.match(f) or MANIFEST_TMP_RE.match(f):
            log(f"removing stale temp file {os.path.join(store, f)}")
            os.unlink(os.path.join(store, f))


def point_stable_name(store: str, img: LockedImage) -> None:
    """<store>/<name>.sqsh -> <name>/<hex>.sqsh, swapped atomically (symlink to a temp name + rename)."""
    link = os.path.join(store, f"{img.name}.sqsh")
    tmp = os.path.join(store, f".{img.name}.sqsh.link-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(img.rel_file, tmp)
    os.replace(tmp, link)
    fsync_dir(store)


def stable_name_ok(store: str, img: LockedImage) -> bool:
    try:
        return os.readlink(os.path.join(store, f"{img.name}.sqsh")) == img.rel_file
    except OSError:
        return False


def drop_stable_name(store: str, img: LockedImage) -> None:
    if stable_name_ok(store, img):
        os.unlink(os.path.join(store, f"{img.name}.sqsh"))
        fsync_dir(store)


def ensure_dir(path: str) -> None:
    """mkdir with mode 0755 regardless of umask (other users must be able to traverse the store)."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        return
    os.chmod(path, 0o755)


def file_size(path: str) -> Optional[int]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size


@contextlib.contextmanager
def sync_lock(store: str) -> Iterator[None]:
    """Hold <store>/.sync.lock: one importer at a time; a second sync waits here, then plans again.

    flock dies with its process (kill -9 included), so a crashed sync never blocks the next one.
    """
    lock_fd = os.open(os.path.join(store, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            log(f"waiting for {os.path.join(store, LOCK_NAME)} (another sync is running)")
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock_fd)


def ensure_store(store: str) -> None:
    """Create the store directory itself, never its parent: a missing /fsx means FSx is not mounted,
    and writing images onto the root volume instead would fill it."""
    if os.path.isdir(store):
        return
    parent = os.path.dirname(os.path.abspath(store))
    if not os.path.isdir(parent):
        raise UsageError([f"{store}: parent directory {parent} does not exist (is FSx mounted?)"])
    ensure_dir(store)


def load_manifest_for_sync(store: str) -> dict:
    """A corrupt manifest (never written by us: we replace it atomically) is moved aside; complete
    .sqsh files are then adopted again cheaply (superblock check + version read, no import)."""
    try:
        return read_manifest(store)
    except ValueError as exc:
        aside = f"{manifest_path(store)}.corrupt-{int(time.time())}"
        error(f"{exc}; moving it to {aside} and rebuilding the manifest")
        os.replace(manifest_path(store), aside)
        return {"manifest_version": MANIFEST_VERSION, "images": {}, "rejected": {}}
