"""The store's concurrency rules as code: who holds the sync lock, what readers rely on, what gc may remove.

Why one module: head nodes of several clusters write one store, and every compute node and every job user (through
pyxis' importer) reads it at any instant. The rules that keep that safe used to live in comments across the store's
modules; here each is a ``Rule`` with an id (a section of docs/store-concurrency.md, which a test keeps in step),
and the ones that are cheap to check are checked: a write that needs the sync lock calls ``require_sync_lock``
and raises ``LockRuleBroken`` (a bug, never a user error) when this thread does not hold it.

One lock, ``<staging>/sync.lock``: an flock, so it dies with its holder (kill -9 included) and a crashed sync
never blocks the next. It is not re-entrant: a second flock on another descriptor of the same file waits for its
own process, so ``sync_lock`` refuses to nest.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence, Set, Tuple

from clusterkit_node.contract.console import log
from clusterkit_node.contract.layout import PACKAGES_DIR, PARTIAL_DIR, TMP_DIR, lock_path, packages_lock_path
from clusterkit_node.store.staging import ensure_staging


@dataclass(frozen=True)
class Rule:
    """One rule: its id (a heading of docs/store-concurrency.md), who it binds, what it says."""

    id: str
    binds: str
    says: str


WRITERS_HOLD_THE_LOCK = Rule(
    "writers-hold-the-sync-lock", "sync, gc --apply, heartbeat (head nodes, root)",
    "every change to published files, stable names, manifest.json, published.json, cluster records or staging "
    "debris happens while holding <staging>/sync.lock")
PLAN_AGAIN_UNDER_THE_LOCK = Rule(
    "plan-again-under-the-lock", "sync, gc --apply",
    "what was decided without the lock is a hint: it is decided again under the lock before anything changes")
PUBLISH_ORDER = Rule(
    "publish-order", "sync",
    "publish: file renamed to its final name, published.json entry, stable name, manifest entry; take out of "
    "service in the reverse order: stable name, published.json entry, file quarantined, manifest entry")
READERS_TAKE_NO_LOCK = Rule(
    "readers-take-no-lock", "compute nodes, the pyxis importer, another cluster's head node",
    "readers never take the sync lock: every file they read is replaced by one rename, so they see the old or the "
    "new file whole, never a mix")
IMPORTER_SERVES_ONLY_RECORDED = Rule(
    "importer-serves-only-recorded", "the pyxis importer (as the job's user)",
    "a store file is answered only when published.json records it and its lstat still matches the record")
LEASE_PROTECTS = Rule(
    "lease-protects", "the pyxis importer (writes), gc (reads)",
    "a lease in <staging>/inuse/ protects its file until it is released or older than --lease-days")
GC_REMOVES_ONLY_UNUSED = Rule(
    "gc-removes-only-unused", "gc --apply",
    "gc removes a file only under the sync lock, and only when no live cluster record names it, no process on "
    "its node holds it, no active lease names it, and its grace period since first seen unreferenced is over")
DEBRIS_ONLY_UNDER_THE_LOCK = Rule(
    "debris-only-under-the-lock", "sync",
    "staging temp files are debris only while holding the lock (no importer can be running then); node "
    "fingerprint temp files never are (compute nodes write them without the lock)")

PACKAGE_SETS_PUBLISH_WHOLE = Rule(
    "package-sets-publish-whole", "packages-fetch (head nodes, root); GPU compute nodes read",
    "a package set is downloaded and checked in a private temp dir while holding <staging>/packages.lock (not the "
    "sync lock: an hours-long import never delays it), packages.json written last inside it, and published by one "
    "rename of the directory; readers take no lock and check every file against packages.json")

RULES: Tuple[Rule, ...] = (WRITERS_HOLD_THE_LOCK, PLAN_AGAIN_UNDER_THE_LOCK, PUBLISH_ORDER, READERS_TAKE_NO_LOCK,
                           IMPORTER_SERVES_ONLY_RECORDED, LEASE_PROTECTS, GC_REMOVES_ONLY_UNUSED,
                           DEBRIS_ONLY_UNDER_THE_LOCK, PACKAGE_SETS_PUBLISH_WHOLE)


class LockRuleBroken(RuntimeError):
    """Code broke a concurrency rule (e.g. wrote shared state without the sync lock): a bug, not a user error."""


# (thread, lock path) of every sync lock held here: flock is per open file, so only we can know who holds ours.
_HELD: Set[Tuple[int, str]] = set()
_HELD_GUARD = threading.Lock()


def _key(store: str) -> Tuple[int, str]:
    return threading.get_ident(), lock_path(store)


@contextlib.contextmanager
def _registered(store: str) -> Iterator[None]:
    key = _key(store)
    with _HELD_GUARD:
        _HELD.add(key)
    try:
        yield
    finally:
        with _HELD_GUARD:
            _HELD.discard(key)


def holds_sync_lock(store: str) -> bool:
    """Does this thread hold the store's sync lock (sync_lock or a successful try_sync_lock)?"""
    with _HELD_GUARD:
        return _key(store) in _HELD


def require_sync_lock(store: str, doing: str, rule: Rule = WRITERS_HOLD_THE_LOCK) -> None:
    """The checked precondition of every write the rules allow only under the lock."""
    if not holds_sync_lock(store):
        raise LockRuleBroken(f"{doing} without holding {lock_path(store)} (rule {rule.id}: {rule.says}; "
                             f"docs/store-concurrency.md)")


@contextlib.contextmanager
def flock_file(path: str, create: bool = True) -> Iterator[bool]:
    """Hold an exclusive flock on path (waiting, with a log line, while another process holds it);
    yields False without locking when create is off and the file does not exist."""
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        if create:
            raise
        yield False
        return
    try:
        if not _flock_now(fd):
            log(f"waiting for {path} (another sync is running)")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)


def _flock_now(fd: int) -> bool:
    """An exclusive flock on fd if nobody holds one (True), else False at once."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


@contextlib.contextmanager
def sync_lock(store: str) -> Iterator[None]:
    """Hold <staging>/sync.lock: one writer at a time; a second sync (or gc) waits here, then plans again."""
    if holds_sync_lock(store):
        raise LockRuleBroken(f"{lock_path(store)}: already held by this thread (flock on a second descriptor "
                             f"would wait for itself)")
    ensure_staging(store, PARTIAL_DIR, TMP_DIR)
    with flock_file(lock_path(store)), _registered(store):
        yield


@contextlib.contextmanager
def try_sync_lock(store: str) -> Iterator[bool]:
    """The sync lock if it is free now (True), else False at once: a sync importing for hours, or a gc, holds it."""
    fd = os.open(lock_path(store), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _flock_now(fd):
            yield False
            return
        with _registered(store):
            yield True
    finally:
        os.close(fd)


@contextlib.contextmanager
def packages_lock(store: str) -> Iterator[None]:
    """Hold <staging>/packages.lock (rule package-sets-publish-whole): one package fetch at a time across the head
    nodes sharing the store; held for a download of a few MB, never while an image imports."""
    ensure_staging(store, TMP_DIR, PACKAGES_DIR)
    with flock_file(packages_lock_path(store)):
        yield


def lease_active(lease_mtime: float, *, now: float, lease_days: float) -> bool:
    """Rule lease-protects: a lease no older than --lease-days still protects its file (a node that died mid-job
    never releases, so an older one does not)."""
    return now - lease_mtime <= lease_days * 86400


def gc_keeps(*, live_users: Sequence[str], holders: Sequence[str], now: float, grace_until: float,
             grace_until_text: str) -> Optional[str]:
    """Rule gc-removes-only-unused: why gc must keep a file (its status line), or None when it may go. Checked in
    this order, any one keeps it: a live cluster record names it, a process or an active lease holds it, its grace
    period (from when gc first saw it unreferenced) still runs."""
    if live_users:
        return f"kept: referenced by {', '.join(live_users)}"
    if holders:
        return f"kept: in use by {'; '.join(holders)}"
    if now < grace_until:
        return f"kept: within grace until {grace_until_text}"
    return None
