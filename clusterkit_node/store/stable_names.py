"""What a published path shows readers: the stable name ``<name>.sqsh``, a real image directory, and what is
moved out of the way (quarantined) rather than served.

Why: jobs start from ``<store>/<name>.sqsh``; it is swapped by one rename, so a reader sees the old or the new
target, never none (rule readers-take-no-lock, concurrency.py). Anything at a published path that must not be
served goes to ``<staging>/quarantine/`` in one rename: gone from the store at once, kept for inspection.
"""
from __future__ import annotations

import os
import stat
import time
from typing import Optional

from clusterkit_node.contract.console import log
from clusterkit_node.contract.layout import TMP_DIR, tmp_dir
from clusterkit_node.contract.lock import LockedImage
from clusterkit_node.store.atomic_files import ensure_dir, fsync_dir
from clusterkit_node.store.staging import ensure_staging

QUARANTINE_DIR = "quarantine"


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
