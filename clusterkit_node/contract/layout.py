"""The image store's names: every path the store and its staging sibling hold, and which image names fit.

The leaf the two sides of the store meet at: the lock reader (lock.py) refuses an image name that would
collide with a store entry, and the store package (reads and writes the store; the layout is store/staging.py's
docstring, who writes what under which lock docs/store-concurrency.md) builds every path from here. Nothing
here touches the file system.
"""
from __future__ import annotations

import os
import re
from typing import Optional

# A store path the nodes accept (the CK_STORE setting's pattern, settings.py): absolute, parts of letters, digits,
# . _ - that do not start with a dot (so no '..'). Here, not in settings.py, so pyxis' importer checks a store path
# without importing the settings table.
STORE_PATTERN = r"(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+"
MANIFEST_NAME = "manifest.json"
STAGING_SUFFIX = ".clusterkit"
LOCK_NAME = "sync.lock"
RECORD_NAME = "published.json"  # the sync's own record of published files (published.py)
PARTIAL_DIR, TMP_DIR, NODES_DIR = "partial", "tmp", "nodes"
CLUSTERS_DIR = "clusters"  # one record per cluster syncing into the store (cluster_records.py)
HEALTH_DIR = "health"  # each node's health check history, per cluster (fleet/health_record.py)
INUSE_DIR = "inuse"  # leases of store files jobs on any node started from (pyxis_importer.py; gc.py reads them)
GC_STATE_NAME = "gc.json"  # when gc first saw each unreferenced file (gc.py: the grace period)
RECORD_TMP_RE = re.compile(r"^cluster\.[A-Za-z][A-Za-z0-9-]*\.json\.tmp-\d+$")
PARTIAL_RE = re.compile(r"^(?P<name>.+)\.(?P<hex>[0-9a-f]{64})\.sqsh\.partial-(?P<pid>\d+)$")
LINK_TMP_RE = re.compile(r"^link\..+\.sqsh\.tmp-\d+$")
MANIFEST_TMP_RE = re.compile(r"^store\.(manifest|published)\.json\.tmp-\d+$")  # the manifest, the record
FINGERPRINT_TMP_RE = re.compile(r"^node\.(?P<host>.+)\.json\.tmp-(?P<pid>\d+)$")
# The previous layout kept these inside the store (migrated by migrate_legacy, read by drift).
LEGACY_LOCK_NAME = ".sync.lock"
LEGACY_NODES_DIR = ".nodes"
LEGACY_PARTIAL_RE = re.compile(r"^\.([0-9a-f]{64})\.sqsh\.partial-(\d+)$")
LEGACY_TMP_RE = re.compile(r"^\.(.+\.sqsh\.link-\d+|manifest\.json\.tmp-\d+)$")
LEGACY_FINGERPRINT_TMP_RE = re.compile(r"^\..+\.json\.tmp-\d+$")
IMPORT_FILE = "image.sqsh"  # what enroot writes inside a partial work directory
PROGRESS_FILE = "progress.json"  # the sync's heartbeat record next to it (progress.py; `status` reads it)
# An image name: a directory and a stable name in the store, so no leading dot (staging and legacy entries).
IMAGE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def image_name_problem(name: str) -> Optional[str]:
    """None when ``name`` can name an image in the store, else why not (one line)."""
    if not IMAGE_NAME_RE.fullmatch(name):
        return f"{name!r} is not a store name (letters, digits, . _ -; no leading dot)"
    if name.endswith(".sqsh") or name == MANIFEST_NAME or name.startswith(MANIFEST_NAME + "."):
        # <name>/ and <name>.sqsh must not collide with another image's link or the manifest
        return f"{name!r} collides with store entries (drop the .sqsh suffix; {MANIFEST_NAME} is reserved)"
    return None


def image_file(name: str, hexdigest: str) -> str:
    """The published file of an image, relative to the store: <name>/<digest hex>.sqsh."""
    return f"{name}/{hexdigest}.sqsh"


# --- paths -------------------------------------------------------------------------------------------

def staging_dir(store: str) -> str:
    """<parent(store)>/.<basename(store)>.clusterkit: next to the store, outside the linked path."""
    parent, base = os.path.split(os.path.abspath(store))
    return os.path.join(parent, f".{base}{STAGING_SUFFIX}")


def partial_dir(store: str) -> str:
    return os.path.join(staging_dir(store), PARTIAL_DIR)


def tmp_dir(store: str) -> str:
    return os.path.join(staging_dir(store), TMP_DIR)


def nodes_dir(store: str) -> str:
    return os.path.join(staging_dir(store), NODES_DIR)


def health_dir(store: str) -> str:
    return os.path.join(staging_dir(store), HEALTH_DIR)


def clusters_dir(store: str) -> str:
    return os.path.join(staging_dir(store), CLUSTERS_DIR)


def inuse_dir(store: str) -> str:
    return os.path.join(staging_dir(store), INUSE_DIR)


def gc_state_path(store: str) -> str:
    return os.path.join(staging_dir(store), GC_STATE_NAME)


def lock_path(store: str) -> str:
    return os.path.join(staging_dir(store), LOCK_NAME)


def record_path(store: str) -> str:
    return os.path.join(staging_dir(store), RECORD_NAME)


def legacy_nodes_dir(store: str) -> str:
    return os.path.join(store, LEGACY_NODES_DIR)


def manifest_path(store: str) -> str:
    return os.path.join(store, MANIFEST_NAME)


# --- packages the head node fetches once for every node (store/package_set.py) ---------------------------

PACKAGES_DIR = "packages"
PACKAGE_SET_NAME = "packages.json"
PACKAGES_LOCK_NAME = "packages.lock"  # flock: one package fetch at a time per store (store/package_fetch.py)
# a fetch in progress (or debris of a killed one), in <staging>/tmp/; removed only under the packages lock
PACKAGE_SET_TMP_RE = re.compile(r"^pkgset\.[A-Za-z0-9._+-]+\.(tmp|old)-\d+$")


def package_set_dir(store: str, component: str, version: str, os_name: str, arch: str) -> str:
    """<staging>/packages/<component>/<version>/<os>-<arch>: one verified set of OS packages, outside the linked
    store (FSx never exports it to S3), the same for every node of that OS and architecture."""
    return os.path.join(staging_dir(store), PACKAGES_DIR, component, version, f"{os_name}-{arch}")


def packages_lock_path(store: str) -> str:
    return os.path.join(staging_dir(store), PACKAGES_LOCK_NAME)


def package_set_tmp(store: str, component: str, version: str, os_name: str, arch: str, kind: str = "tmp") -> str:
    """<staging>/tmp/pkgset.<component>.<version>.<os>-<arch>.<tmp|old>-<pid>: a set being downloaded (tmp), or the
    published set it replaces, moved aside for the moment of the swap (old)."""
    return os.path.join(tmp_dir(store), f"pkgset.{component}.{version}.{os_name}-{arch}.{kind}-{os.getpid()}")
