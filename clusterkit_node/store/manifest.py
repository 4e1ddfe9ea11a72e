"""The image store on FSx: its layout, the manifest, the sync lock, stable names and crash debris.

Layout (the contract every other part of ClusterKit reads). The store directory holds published content
only, because an FSx data repository association exports everything under it to S3::

  <store>/<name>/<digest-hex>.sqsh        mode 0644, written once, never modified in place
  <store>/<name>.sqsh -> <name>/<hex>.sqsh relative symlink: the stable name jobs use
  <store>/manifest.json                    what is in the store; replaced atomically, never half-written

Staging and housekeeping live in a sibling directory on the same file system, outside the linked path
(``/fsx/containers`` -> ``/fsx/.containers.clusterkit``; every directory mode 0755)::

  <staging>/sync.lock                                flock: one importer at a time
  <staging>/published.json                           mode 0644 root: the sync's record of each published
                                                    file's size, sha256 and lstat identity (published.py;
                                                    the importer trusts the store only through it)
  <staging>/quarantine/<name>+<hex>.sqsh.<time>-<pid>  a published file that failed a check (or
                                                    a directory in the way), moved out of the store
  <staging>/partial/<name>.<hex>.sqsh.partial-<pid>/  an import in progress (or debris of a crashed
                                                    run): created when the attempt starts, so `status`
                                                    sees it while enroot still downloads; enroot writes
                                                    image.sqsh inside (older versions: a plain file), the
                                                    sync progress.json (its last heartbeat, progress.py)
  <staging>/tmp/store.manifest.json.tmp-<pid>        manifest being written (renamed over manifest.json)
  <staging>/tmp/store.published.json.tmp-<pid>       record being written (renamed over published.json)
  <staging>/tmp/link.<name>.sqsh.tmp-<pid>           stable-name symlink being swapped in
  <staging>/tmp/node.<host>.json.tmp-<pid>           fingerprint being written (renamed into nodes/)
  <staging>/nodes/<hostname>.json                    mode 0644: what each compute node runs
                                                     (``fingerprint`` writes it, ``drift`` reads it)
  <staging>/manifest.json.corrupt-<time>             an unparsable manifest, moved aside by ``sync``
  <staging>/clusters/<cluster>.json                  mode 0644: each cluster's record of the images it uses
                                                     (cluster_records.py: ``sync`` writes it under the lock,
                                                     ``heartbeat`` refreshes its seen_at; sync and gc read all)
  <staging>/tmp/cluster.<cluster>.json.tmp-<pid>     cluster record being written (renamed into clusters/)
  <staging>/inuse/<host>.<job>.<step>.<uid>.json     mode 1777 dir (like /tmp): a container step's lease on the
                                                     store file the pyxis importer answered (``release``
                                                     removes it; gc.py keeps a leased file)
  <staging>/gc.json                                  when gc first saw each unreferenced file (its grace period)

Why: every write goes to a temp name in the staging directory and is renamed to its final name; the
store is strictly inside the FSx mount dir (spec rules), so its parent and the staging directory are on
the same file system and ``rename`` is atomic (``ensure_staging`` refuses otherwise). A crash leaves only
staging debris that the next sync removes while holding the lock; nothing half-written is ever visible
under a final name, and S3 receives each ``.sqsh`` once (as a new file at its final name), never the
multi-GB temp file, the lock or the fingerprints.

Migration from the previous layout (lock, temp files and ``.nodes/`` inside the store): ``sync`` takes
the old ``<store>/.sync.lock`` too (waiting for a sync of the previous version still running) and removes
it, moves ``<store>/.nodes/<host>.json`` into ``<staging>/nodes/`` (a newer one already there wins) and
removes the old temp files and partials; ``drift`` reads ``<store>/.nodes/`` as well, for fingerprints a
node of the previous version writes after that.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from clusterkit_node.contract.console import UsageError, error, log, warn
from clusterkit_node.contract.layout import (
    LEGACY_FINGERPRINT_TMP_RE,
    LEGACY_LOCK_NAME,
    LEGACY_PARTIAL_RE,
    LEGACY_TMP_RE,
    LINK_TMP_RE,
    MANIFEST_NAME,
    MANIFEST_TMP_RE,
    NODES_DIR,
    PARTIAL_DIR,
    PARTIAL_RE,
    RECORD_NAME,
    RECORD_TMP_RE,
    TMP_DIR,
    inuse_dir,
    legacy_nodes_dir,
    lock_path,
    manifest_path,
    nodes_dir,
    partial_dir,
    record_path,
    staging_dir,
    tmp_dir,
)
from clusterkit_node.contract.lock import LockedImage
from clusterkit_node.store.published import RecordError, new_entry, read_record, record_doc

MANIFEST_VERSION = 1
# A fingerprint write takes milliseconds: an older temp file of the previous layout is debris (its
# writer ran on a compute node, so pid_alive on the head node cannot tell).
LEGACY_TMP_STALE_SECONDS = 600


def partial_path(store: str, img: LockedImage) -> str:
    """This process's work directory for img (see the layout above)."""
    return os.path.join(partial_dir(store), f"{img.name}.{img.hex}.sqsh.partial-{os.getpid()}")


def remove_partial(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def ensure_staging(store: str, *subdirs: str) -> str:
    """Create the staging directory (and the given subdirectories), mode 0755; refuse a staging
    directory on another file system than the store (rename would fail, and the disk preflight counts
    the partial files on the store's file system): the store must not be a mount point itself."""
    staging = staging_dir(store)
    dev = os.stat(store).st_dev
    other = None
    if os.stat(os.path.dirname(staging)).st_dev != dev:
        other = os.path.dirname(staging)
    else:
        ensure_dir(staging)
        if os.stat(staging).st_dev != dev:  # a mount point of its own
            other = staging
    if other:
        raise UsageError([f"{store}: the store is a mount point or on another file system than "
                          f"{other}, where {staging} holds the lock and import temp files (use a "
                          f"directory inside the mount, e.g. {os.path.join(store, 'containers')})"])
    for sub in subdirs:
        ensure_dir(os.path.join(staging, sub))
    return staging


def ensure_inuse_dir(store: str) -> str:
    """``<staging>/inuse/``, mode 1777 (like /tmp): the pyxis importer writes each step's lease there as the job's
    user; the sticky bit keeps users from removing or replacing each other's leases (gc.py reads them)."""
    path = inuse_dir(store)
    ensure_dir(path)
    if stat.S_IMODE(os.lstat(path).st_mode) != 0o1777:
        os.chmod(path, 0o1777)
    return path


def empty_manifest() -> Dict[str, Any]:
    """The manifest of a store nothing was synced into yet (every reader may use both sections)."""
    return {"manifest_version": MANIFEST_VERSION, "images": {}, "rejected": {}}


def read_manifest(store: str) -> Dict[str, Any]:
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
    check_entries(path, doc)
    return doc


# What every reader of an entry relies on (a wrong shape is a corrupt manifest, never a traceback).
ENTRY_FIELDS = {"digest": str, "file": str, "size": int}


def check_entries(path: str, doc: Dict[str, Any]) -> None:
    """Raise ValueError naming the first entry of images/rejected that readers could not use."""
    for section in ("images", "rejected"):
        entries = doc.get(section)
        if not isinstance(entries, dict):
            raise ValueError(f"{path}: {section}: not an object")
        for name, entry in entries.items():
            where = f"{path}: {section}.{name}"
            if not isinstance(entry, dict):
                raise ValueError(f"{where}: not an object")
            for key, kind in ENTRY_FIELDS.items():
                value = entry.get(key)
                if not isinstance(value, kind) or isinstance(value, bool):
                    raise ValueError(f"{where}.{key}: {value!r} is not a {kind.__name__}")
            versions = entry.get("versions", {})
            if not isinstance(versions, dict) or not all(isinstance(v, str) for v in versions.values()):
                raise ValueError(f"{where}.versions: not an object of version strings")


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


def write_manifest(store: str, manifest: Dict[str, Any]) -> None:
    """Replace manifest.json atomically: staging temp file + fsync + rename + fsync(dirs).

    A reader (or a crash at any instant) sees either the old or the new complete file, never a mix.
    """
    doc = {"manifest_version": MANIFEST_VERSION, "images": manifest.get("images", {})}
    if manifest.get("rejected"):
        doc["rejected"] = manifest["rejected"]
    ensure_staging(store, TMP_DIR)
    write_json_atomic(manifest_path(store),
                      os.path.join(tmp_dir(store), f"store.{MANIFEST_NAME}.tmp-{os.getpid()}"), doc)


def read_manifest_bytes(store: str) -> Tuple[Optional[str], Dict[str, Any]]:
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
    doc.setdefault("rejected", {})
    check_entries(manifest_path(store), doc)
    return hashlib.sha256(data).hexdigest(), doc


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def partials(store: str) -> List[Tuple[str, str, str, int]]:
    """(path, name, hex, pid) of every import temp file: in the staging partial/ dir, and in the
    store's image dirs where the previous layout put them."""
    found = []
    try:
        for f in sorted(os.listdir(partial_dir(store))):
            m = PARTIAL_RE.match(f)
            if m:
                found.append((os.path.join(partial_dir(store), f), m.group("name"), m.group("hex"),
                              int(m.group("pid"))))
    except OSError:
        pass
    try:
        names = sorted(os.listdir(store))
    except OSError:
        return found
    for name in names:
        d = os.path.join(store, name)
        if name.startswith(".") or not os.path.isdir(d) or os.path.islink(d):
            continue
        for f in sorted(os.listdir(d)):
            m = LEGACY_PARTIAL_RE.match(f)
            if m:
                found.append((os.path.join(d, f), name, m.group(1), int(m.group(2))))
    return found


def clean_debris(store: str) -> None:
    """Remove temp files of crashed runs. Called only while holding the sync lock: no other importer
    can be running, so every partial, manifest and link temp file is debris (whatever its pid).
    Fingerprint temp files are not: compute nodes write them without the lock."""
    for path, _name, _hex, pid in partials(store):
        state = "live pid" if pid_alive(pid) else "dead pid"
        log(f"removing stale temp file {path} ({state} {pid}, left by an interrupted sync)")
        remove_partial(path)
    for d, pattern in ((tmp_dir(store), MANIFEST_TMP_RE), (tmp_dir(store), LINK_TMP_RE),
                       (tmp_dir(store), RECORD_TMP_RE), (store, LEGACY_TMP_RE)):
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            continue
        for f in names:
            if pattern.match(f):
                log(f"removing stale temp file {os.path.join(d, f)}")
                os.unlink(os.path.join(d, f))


def point_stable_name(store: str, img: LockedImage) -> None:
    """<store>/<name>.sqsh -> <name>/<hex>.sqsh, swapped atomically (symlink at a staging temp name,
    renamed into the store: the store never holds the temp link)."""
    link = os.path.join(store, f"{img.name}.sqsh")
    ensure_staging(store, TMP_DIR)
    tmp = os.path.join(tmp_dir(store), f"link.{img.name}.sqsh.tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(img.rel_file, tmp)
    os.replace(tmp, link)
    fsync_dir(store)
    fsync_dir(tmp_dir(store))


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
    """Size of the regular file at path; None when there is none (a directory or a symlink in its place
    counts as none: only a regular file can be an image, and a link could lead out of the store)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


QUARANTINE_DIR = "quarantine"


def quarantine(store: str, path: str, why: str) -> str:
    """Move what sits at a published path and must not be served (a corrupt image, a directory in the
    way) into the staging quarantine/ dir: gone from the store in one rename, kept for inspection."""
    qdir = os.path.join(ensure_staging(store), QUARANTINE_DIR)
    ensure_dir(qdir)
    rel = os.path.relpath(path, store).replace(os.sep, "+")
    dest = os.path.join(qdir, f"{rel}.{int(time.time())}-{os.getpid()}")
    os.replace(path, dest)
    fsync_dir(os.path.dirname(path))
    log(f"moved {path} aside to {dest} ({why})")
    return dest


def image_dir_problem(store: str, img: LockedImage) -> Optional[str]:
    """Why ``<store>/<name>`` cannot hold the image, or None (missing is fine: publishing creates it).
    A symlink there would lead the published file out of the store, where FSx never exports it."""
    path = os.path.join(store, img.name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return None
    kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
    return f"{path} is {kind}: the image directory must be a real directory inside the store"


def ensure_image_dir(store: str, img: LockedImage) -> str:
    """``<store>/<name>/``, a real directory: a symlink or file in its place is moved aside first."""
    path = os.path.join(store, img.name)
    problem = image_dir_problem(store, img)
    if problem:
        quarantine(store, path, problem)
    ensure_dir(path)
    return path


def take_out_of_service(store: str, manifest: Dict[str, Any], img: LockedImage, why: str) -> None:
    """Stop serving img's file: stable name and record entry dropped (the importer refuses it from
    then on), then the file (or a symlinked image directory) quarantined. The manifest is not written."""
    drop_stable_name(store, img)
    drop_record(store, manifest, img.rel_file)
    if image_dir_problem(store, img):
        quarantine(store, os.path.join(store, img.name), why)
        return
    path = os.path.join(store, img.rel_file)
    if os.path.lexists(path):
        quarantine(store, path, why)


def unpublish(store: str, manifest: Dict[str, Any], img: LockedImage, why: str) -> None:
    """Take a recorded image that failed a check out of service BEFORE re-importing it: stable name
    dropped, file quarantined, entry removed, manifest written. If the re-import then fails, the image
    is missing, never served corrupt."""
    take_out_of_service(store, manifest, img, why)
    if manifest["images"].get(img.name, {}).get("digest") == img.digest:
        del manifest["images"][img.name]
    write_manifest(store, manifest)


# In memory only: the sync's record (published.py) travels with the manifest it planned from.
RECORD_KEY = "record"


def load_record(store: str, quiet: bool = False) -> Dict[str, Dict[str, Any]]:
    """The record of published files for the sync; an untrusted or unreadable one is dropped (every
    image is then re-hashed once and recorded again: sync.py's recheck; quiet: the unlocked first
    look, which the locked one repeats)."""
    path = record_path(store)
    if not os.path.lexists(path):
        return {}
    try:
        return read_record(path)
    except RecordError as exc:
        if not quiet:
            warn(f"{exc}; re-hashing every published image once to record it again")
        return {}


def write_record(store: str, files: Dict[str, Dict[str, Any]]) -> None:
    """Replace the record atomically (0644 root, in the staging dir that must stay 0755 for the
    importer to trust it)."""
    staging = ensure_staging(store, TMP_DIR)
    if stat.S_IMODE(os.lstat(staging).st_mode) & 0o022:
        os.chmod(staging, 0o755)
        log(f"{staging}: made 0755 (the importer trusts the record only in a directory no user can write)")
    write_json_atomic(record_path(store), os.path.join(tmp_dir(store), f"store.{RECORD_NAME}.tmp-{os.getpid()}"),
                      record_doc(files))


def record_published(store: str, manifest: Dict[str, Any], img: LockedImage, sha256: str) -> None:
    """Record img's published file as lstat sees it now (after its final rename and chmod)."""
    files = manifest.setdefault(RECORD_KEY, {})
    entry = new_entry(img.digest, sha256, os.lstat(os.path.join(store, img.rel_file)))
    if files.get(img.rel_file) != entry:  # an adopted file the record already knows: nothing to write
        files[img.rel_file] = entry
        write_record(store, files)


def drop_record(store: str, manifest: Dict[str, Any], rel: str) -> None:
    files = manifest.setdefault(RECORD_KEY, {})
    if files.pop(rel, None) is not None:
        write_record(store, files)


@contextlib.contextmanager
def flock_file(path: str, create: bool = True) -> Iterator[bool]:
    """Hold an exclusive flock on path (waiting, with a log line, while another process holds it);
    yields False without locking when create is off and the file does not exist.

    flock dies with its process (kill -9 included), so a crashed sync never blocks the next one.
    """
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        if create:
            raise
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            log(f"waiting for {path} (another sync is running)")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)


@contextlib.contextmanager
def sync_lock(store: str) -> Iterator[None]:
    """Hold <staging>/sync.lock: one importer at a time; a second sync waits here, then plans again."""
    ensure_staging(store, PARTIAL_DIR, TMP_DIR)
    with flock_file(lock_path(store)):
        yield


def legacy_present(store: str) -> bool:
    """Does the store still hold the previous layout's lock or fingerprints? (two stats: O(1))"""
    return os.path.lexists(os.path.join(store, LEGACY_LOCK_NAME)) or \
        os.path.isdir(legacy_nodes_dir(store))


def migrate_legacy(store: str) -> None:
    """Move the previous layout's housekeeping out of the store (under the sync lock).

    The old lock is taken before it is removed, so a sync of the previous version still running
    finishes first. Its partials and temp files go with ``clean_debris``.
    """
    old_lock = os.path.join(store, LEGACY_LOCK_NAME)
    with flock_file(old_lock, create=False) as held:
        if held:
            os.unlink(old_lock)
            log(f"removed {old_lock} (the lock now lives in {lock_path(store)})")
    old_nodes = legacy_nodes_dir(store)
    try:
        names = sorted(os.listdir(old_nodes))
    except FileNotFoundError:
        return
    ensure_staging(store, NODES_DIR)
    moved = 0
    for f in names:
        path = os.path.join(old_nodes, f)
        if not f.startswith(".") and f.endswith(".json") and os.path.isfile(path):
            if os.path.lexists(os.path.join(nodes_dir(store), f)):
                os.unlink(path)  # the node wrote a newer one in the new layout
            else:
                os.replace(path, os.path.join(nodes_dir(store), f))
                moved += 1
        elif LEGACY_FINGERPRINT_TMP_RE.match(f) and \
                time.time() - os.lstat(path).st_mtime > LEGACY_TMP_STALE_SECONDS:
            os.unlink(path)
    fsync_dir(nodes_dir(store))
    try:
        os.rmdir(old_nodes)
    except OSError as exc:  # something else is in there: leave it, drift still reads the directory
        log(f"kept {old_nodes} ({exc.strerror}); drift keeps reading it")
    else:
        log(f"moved {moved} node fingerprint(s) from {old_nodes} to {nodes_dir(store)}")
    fsync_dir(store)


def ensure_store(store: str) -> None:
    """Create the store directory itself, never its parent: a missing /fsx means FSx is not mounted,
    and writing images onto the root volume instead would fill it."""
    if os.path.isdir(store):
        return
    parent = os.path.dirname(os.path.abspath(store))
    if not os.path.isdir(parent):
        raise UsageError([f"{store}: parent directory {parent} does not exist (is FSx mounted?)"])
    ensure_dir(store)


def load_manifest_for_sync(store: str) -> Dict[str, Any]:
    """A corrupt manifest (never written by us: we replace it atomically) is moved aside; complete
    .sqsh files are then adopted again cheaply (superblock check + version read, no import)."""
    try:
        manifest = read_manifest(store)
    except ValueError as exc:
        aside = os.path.join(ensure_staging(store), f"{MANIFEST_NAME}.corrupt-{int(time.time())}")
        error(f"{exc}; moving it to {aside} and rebuilding the manifest")
        os.replace(manifest_path(store), aside)
        manifest = empty_manifest()
    manifest[RECORD_KEY] = load_record(store)
    return manifest
