"""``clusterkit_node.pyz verify``: a compute node's check that the store is usable (never imports or writes).

A node whose FSx is not mounted or whose unsquashfs cannot decompress the store's images fails here,
at boot, instead of failing every container job later; missing images, a missing manifest (the head
node's first sync still running) and an unreadable one (the head node rebuilds it) are only warned about.
"""
from __future__ import annotations

import argparse
import os
import shutil
from typing import Any, Dict, List, Tuple

from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, error, format_versions, log, mb, warn
from clusterkit_node.contract.layout import manifest_path, record_path
from clusterkit_node.contract.lock import LockedImage, load_lock
from clusterkit_node.image.squashfs import content_sha256, read_superblock, unsquashfs_can_read
from clusterkit_node.store.atomic_files import file_size
from clusterkit_node.store.manifest import empty_manifest, read_manifest
from clusterkit_node.store.published import RecordError, read_record


def cmd_verify(args: argparse.Namespace) -> int:
    """Compute-node check: never imports, never writes to the store."""
    images = load_lock(args.lock)
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        error(f"verify: image store {store} is not a directory (is FSx mounted at "
              f"{os.path.dirname(store)}?)")
        return EXIT_FAILED
    # A store without a (readable) manifest is the head node's business, not this node's: on a new
    # cluster static nodes boot before the first import ends, and failing them would only feed Slurm's
    # protected mode. Jobs using an image that is not there yet fail on their own, with a clear error.
    if not os.path.isfile(manifest_path(store)):
        warn(f"verify: no {manifest_path(store)} yet: the head node's first image sync has not finished "
             f"(or there is nothing to sync); this node boots, jobs using locked images wait for it")
    try:
        manifest = read_manifest(store)
    except ValueError as exc:
        warn(f"verify: {exc} (the head node's next image sync moves it aside and rebuilds it); "
             f"images cannot be checked from this node until then")
        manifest = empty_manifest()
    present: List[Tuple[LockedImage, str]] = []
    for img in images:
        entry = manifest["images"].get(img.name)
        path = os.path.join(store, img.rel_file)
        size = file_size(path)
        if entry and entry.get("digest") == img.digest and size is not None and size == entry.get("size"):
            log(f"verify: {img.name}: present {img.short} ({mb(size):.1f} MB) "
                f"{format_versions(entry.get('versions', {}))}")
            present.append((img, path))
        elif manifest["rejected"].get(img.name, {}).get("digest") == img.digest:
            warn(f"verify: {img.name}: {img.short} was rejected by the head node's sync "
                 f"({manifest['rejected'][img.name].get('reason', '')}); jobs using {img.name}.sqsh "
                 f"will fail")
        else:
            warn(f"verify: {img.name}: {img.short} missing from {store} (the head node may still be "
                 f"importing it; jobs using {img.name}.sqsh will fail until it is present)")
    if present:
        if shutil.which("unsquashfs") is None:
            error("verify: unsquashfs not found (install squashfs-tools: enroot needs it to create "
                  "containers from .sqsh files)")
            return EXIT_FAILED
        by_comp: Dict[str, Tuple[LockedImage, str]] = {}
        for img, path in present:
            try:
                comp = read_superblock(path).compressor
            except (OSError, ValueError) as exc:
                warn(f"verify: {img.name}: {exc}")
                continue
            by_comp.setdefault(comp, (img, path))
        for comp, (img, path) in sorted(by_comp.items()):
            ok, detail = unsquashfs_can_read(path)
            if not ok:
                error(f"verify: this node's unsquashfs cannot read {comp}-compressed images "
                      f"({path}; unsquashfs says '{detail}'): install a squashfs-tools with {comp} "
                      f"support or sync with other ENROOT_SQUASH_OPTIONS")
                return EXIT_FAILED
            if detail:
                warn(f"verify: {img.name}: unsquashfs could not list {path}: {detail}")
            else:
                log(f"verify: unsquashfs reads {comp} images ({img.name})")
    log(f"verify: {len(present)}/{len(images)} locked images present in {store}")
    if args.deep and not deep_check(manifest, present, store):
        return EXIT_FAILED
    return EXIT_OK


def recorded_sha256(store: str) -> Dict[str, str]:
    """sha256 per store file from the sync's record (published.py), which no user or S3 can change; the
    manifest's (exported state) where there is no trusted record."""
    try:
        return {rel: entry["sha256"] for rel, entry in read_record(record_path(store)).items()}
    except RecordError as exc:
        warn(f"verify: {exc}; comparing with the sha256 in the manifest instead")
        return {}


def deep_check(manifest: Dict[str, Any], present: List[Tuple[LockedImage, str]], store: str) -> bool:
    """Every present image's bytes against the sha256 recorded when it was published."""
    ok = True
    record = recorded_sha256(store) if present else {}
    for img, path in present:
        recorded = record.get(img.rel_file) or manifest["images"][img.name].get("sha256")
        if not recorded:
            warn(f"verify: {img.name}: no sha256 recorded at import (an older ClusterKit imported it); "
                 f"`sync --verify-all` re-checks it with unsquashfs only")
            continue
        actual = content_sha256(path)
        if actual != recorded:
            error(f"verify: {img.name}: {path} is corrupt: sha256 {actual[:12]} is not the {recorded[:12]} "
                  f"recorded at import (`clusterkit_node.pyz sync --verify-all` on the head node re-imports it)")
            ok = False
        else:
            log(f"verify: {img.name}: content matches the sha256 recorded at import")
    return ok


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    v = sub.add_parser("verify", help="compute node: store mounted, manifest readable (never imports)")
    v.add_argument("--store", required=True)
    v.add_argument("--lock", required=True)
    v.add_argument("--deep", action="store_true",
                   help="also re-read every present image and compare its sha256 with the one recorded "
                        "at import (catches same-size corruption; reads every byte: run it on the head "
                        "node, not at every compute boot)")
