"""``manifest.json``: what is in the store, by image name; read by every node, written only by the sync and gc.

Why its shape is checked on every read: a wrong entry is a corrupt manifest (one line naming it), never a traceback
on a compute node. Written atomically (atomic_files.py) under the sync lock, so a reader without the lock sees one
whole version (docs/store-concurrency.md). The sync's private record of published files is not part of it: it
lives in ``published.json`` and travels beside the manifest in sync_state.SyncState.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, Dict, Optional, Tuple

from clusterkit_node.contract.console import error
from clusterkit_node.contract.layout import MANIFEST_NAME, TMP_DIR, manifest_path, tmp_dir
from clusterkit_node.store.atomic_files import write_json_atomic
from clusterkit_node.store.concurrency import require_sync_lock
from clusterkit_node.store.staging import ensure_staging

MANIFEST_VERSION = 1


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
            # the NVIDIA_* settings of the image's /etc/environment; optional (entries written before have none)
            nvidia = entry.get("nvidia", {})
            if not isinstance(nvidia, dict) or not all(isinstance(v, str) for v in nvidia.values()):
                raise ValueError(f"{where}.nvidia: not an object of NVIDIA_* setting strings")


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


def load_manifest_for_sync(store: str) -> Dict[str, Any]:
    """A corrupt manifest (never written by us: we replace it atomically) is moved aside; complete
    .sqsh files are then adopted again cheaply (superblock check + version read, no import). Under the lock."""
    require_sync_lock(store, "moving a corrupt manifest aside")
    try:
        manifest = read_manifest(store)
    except ValueError as exc:
        aside = os.path.join(ensure_staging(store), f"{MANIFEST_NAME}.corrupt-{int(time.time())}")
        error(f"{exc}; moving it to {aside} and rebuilding the manifest")
        os.replace(manifest_path(store), aside)
        manifest = empty_manifest()
    return manifest
