"""The store and its staging sibling: their layout, and creating them where every rename is atomic.

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
  <staging>/packages/<component>/<version>/<os>-<arch>/  a verified set of OS packages (NVIDIA's nvidia-container-cli)
                                                     and its packages.json (package_set.py; package_fetch.py writes it)
  <staging>/packages.lock                            flock: one package fetch at a time (not the sync lock)
  <staging>/tmp/pkgset.<component>.<version>.<os>-<arch>.tmp-<pid>  a set being downloaded (0700), then renamed
                                                     into packages/ (package_fetch.py)

Who writes each entry, under which lock, and what readers may see meanwhile: docs/store-concurrency.md
(concurrency.py holds those rules as code). Why one file system: atomic_files.py.
"""
from __future__ import annotations

import os
import shutil
import stat

from clusterkit_node.contract.console import UsageError
from clusterkit_node.contract.layout import inuse_dir, partial_dir, staging_dir
from clusterkit_node.contract.lock import LockedImage
from clusterkit_node.store.atomic_files import ensure_dir


def ensure_store(store: str) -> None:
    """Create the store directory itself, never its parent: a missing /fsx means FSx is not mounted,
    and writing images onto the root volume instead would fill it."""
    if os.path.isdir(store):
        return
    parent = os.path.dirname(os.path.abspath(store))
    if not os.path.isdir(parent):
        raise UsageError([f"{store}: parent directory {parent} does not exist (is FSx mounted?)"])
    ensure_dir(store)


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


def partial_path(store: str, img: LockedImage) -> str:
    """This process's work directory for img (see the layout above)."""
    return os.path.join(partial_dir(store), f"{img.name}.{img.hex}.sqsh.partial-{os.getpid()}")


def remove_partial(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
