"""What one sync plans from and changes: the manifest and the sync's record of published files, side by side.

Why a type: the record (``published.json``, published.py) used to ride inside the manifest dict under a key that
``write_manifest`` silently dropped. Here the manifest holds exactly what ``manifest.json`` holds, the record
exactly what ``published.json`` holds, and every change to either is a function below that writes it (under the
sync lock: rule writers-hold-the-sync-lock; the publish order is rule publish-order, concurrency.py).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any, Dict

from clusterkit_node.contract.console import log, warn
from clusterkit_node.contract.layout import RECORD_NAME, TMP_DIR, record_path, tmp_dir
from clusterkit_node.contract.lock import LockedImage
from clusterkit_node.store.atomic_files import write_json_atomic
from clusterkit_node.store.concurrency import PUBLISH_ORDER, require_sync_lock
from clusterkit_node.store.manifest import empty_manifest, load_manifest_for_sync, read_manifest, write_manifest
from clusterkit_node.store.published import RecordError, new_entry, read_record, record_doc
from clusterkit_node.store.stable_names import drop_stable_name, image_dir_problem, quarantine
from clusterkit_node.store.staging import ensure_staging

Files = Dict[str, Dict[str, Any]]  # store-relative file -> its published.json entry


@dataclass
class SyncState:
    """manifest: the document ``write_manifest`` writes (manifest_version, images, rejected); published: the
    entries of ``published.json`` (store-relative file -> digest, sha256, lstat identity at publish)."""

    manifest: Dict[str, Any]
    published: Files = field(default_factory=dict)

    def published_entry(self, rel: str) -> Dict[str, Any]:
        """The record's entry for rel, or {} when it has none."""
        return self.published.get(rel, {})


def load_record(store: str, quiet: bool = False) -> Files:
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


def peek_state(store: str) -> SyncState:
    """The unlocked first look (rule plan-again-under-the-lock: a hint only); an unreadable manifest reads as
    empty here and is dealt with under the lock (load_state)."""
    try:
        manifest = read_manifest(store)
    except ValueError:
        manifest = empty_manifest()
    return SyncState(manifest=manifest, published=load_record(store, quiet=True))


def load_state(store: str) -> SyncState:
    """The state the sync acts on, read under the lock (a corrupt manifest is moved aside)."""
    return SyncState(manifest=load_manifest_for_sync(store), published=load_record(store))


def write_record(store: str, files: Files) -> None:
    """Replace the record atomically (0644 root, in the staging dir that must stay 0755 for the
    importer to trust it). Under the sync lock."""
    require_sync_lock(store, f"writing {record_path(store)}")
    staging = ensure_staging(store, TMP_DIR)
    if stat.S_IMODE(os.lstat(staging).st_mode) & 0o022:
        os.chmod(staging, 0o755)
        log(f"{staging}: made 0755 (the importer trusts the record only in a directory no user can write)")
    write_json_atomic(record_path(store), os.path.join(tmp_dir(store), f"store.{RECORD_NAME}.tmp-{os.getpid()}"),
                      record_doc(files))


def record_published(store: str, state: SyncState, img: LockedImage, sha256: str) -> None:
    """Record img's published file as lstat sees it now (after its final rename and chmod)."""
    entry = new_entry(img.digest, sha256, os.lstat(os.path.join(store, img.rel_file)))
    if state.published.get(img.rel_file) != entry:  # an adopted file the record already knows: nothing to write
        state.published[img.rel_file] = entry
        write_record(store, state.published)


def drop_published(store: str, state: SyncState, rel: str) -> None:
    """Forget rel in the record (the importer refuses it from then on)."""
    if state.published.pop(rel, None) is not None:
        write_record(store, state.published)


def take_out_of_service(store: str, state: SyncState, img: LockedImage, why: str) -> None:
    """Stop serving img's file: stable name and record entry dropped (the importer refuses it from
    then on), then the file (or a symlinked image directory) quarantined. The manifest is not written."""
    require_sync_lock(store, f"taking {img.rel_file} out of service", PUBLISH_ORDER)
    drop_stable_name(store, img)
    drop_published(store, state, img.rel_file)
    if image_dir_problem(store, img):
        quarantine(store, os.path.join(store, img.name), why)
        return
    path = os.path.join(store, img.rel_file)
    if os.path.lexists(path):
        quarantine(store, path, why)


def unpublish(store: str, state: SyncState, img: LockedImage, why: str) -> None:
    """Take a recorded image that failed a check out of service BEFORE re-importing it: stable name
    dropped, file quarantined, entry removed, manifest written. If the re-import then fails, the image
    is missing, never served corrupt."""
    take_out_of_service(store, state, img, why)
    if state.manifest["images"].get(img.name, {}).get("digest") == img.digest:
        del state.manifest["images"][img.name]
    write_manifest(store, state.manifest)
