"""Crash debris and the previous layout's leftovers: found by anyone, removed only by the sync under its lock.

Why under the lock: no importer can be running then, so every partial, manifest, record and link temp file is
debris whatever its pid says (rule debris-only-under-the-lock, concurrency.py). Fingerprint temp files are not:
compute nodes write them without the lock.

Migration from the previous layout (lock, temp files and ``.nodes/`` inside the store): ``sync`` takes
the old ``<store>/.sync.lock`` too (waiting for a sync of the previous version still running) and removes
it, moves ``<store>/.nodes/<host>.json`` into ``<staging>/nodes/`` (a newer one already there wins) and
removes the old temp files and partials; ``drift`` reads ``<store>/.nodes/`` as well, for fingerprints a
node of the previous version writes after that.
"""
from __future__ import annotations

import os
import time
from typing import List, Tuple

from clusterkit_node.contract.console import log
from clusterkit_node.contract.layout import (
    LEGACY_FINGERPRINT_TMP_RE,
    LEGACY_LOCK_NAME,
    LEGACY_PARTIAL_RE,
    LEGACY_TMP_RE,
    LINK_TMP_RE,
    MANIFEST_TMP_RE,
    NODES_DIR,
    PARTIAL_RE,
    RECORD_TMP_RE,
    legacy_nodes_dir,
    lock_path,
    nodes_dir,
    partial_dir,
    tmp_dir,
)
from clusterkit_node.store.atomic_files import fsync_dir
from clusterkit_node.store.concurrency import DEBRIS_ONLY_UNDER_THE_LOCK, flock_file, require_sync_lock
from clusterkit_node.store.staging import ensure_staging, remove_partial

# A fingerprint write takes milliseconds: an older temp file of the previous layout is debris (its
# writer ran on a compute node, so pid_alive on the head node cannot tell).
LEGACY_TMP_STALE_SECONDS = 600


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
    require_sync_lock(store, "removing crash debris", DEBRIS_ONLY_UNDER_THE_LOCK)
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


def legacy_present(store: str) -> bool:
    """Does the store still hold the previous layout's lock or fingerprints? (two stats: O(1))"""
    return os.path.lexists(os.path.join(store, LEGACY_LOCK_NAME)) or \
        os.path.isdir(legacy_nodes_dir(store))


def migrate_legacy(store: str) -> None:
    """Move the previous layout's housekeeping out of the store (under the sync lock).

    The old lock is taken before it is removed, so a sync of the previous version still running
    finishes first. Its partials and temp files go with ``clean_debris``.
    """
    require_sync_lock(store, "migrating the previous layout")
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
