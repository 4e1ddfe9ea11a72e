"""Disk preflight: refuse to start imports that would fill a filesystem halfway through.

A root volume filled by enroot's unpacked layers breaks the head node for everyone, and an import that
fails after an hour wastes the hour; both are cheaper to refuse up front with a message that names the
setting to change. The factors live in sizing.py, which clusterkit/rules/advice.py imports for its sizing
advice: one set of numbers for the advice and the refusal.
"""
from __future__ import annotations

import os
import shutil
from typing import Dict, List, Tuple

from clusterkit_node.contract.console import mb, warn
from clusterkit_node.contract.lock import LockedImage
from clusterkit_node.contract.sizing import (
    CACHE_FACTOR,
    STORE_FACTOR_COMPRESSED,
    STORE_FACTOR_UNCOMPRESSED_DATA,
    TEMP_FACTOR,
    data_uncompressed,
)
from clusterkit_node.store.sync_config import SyncConfig, enroot_setting


def preflight(cfg: SyncConfig, todo: List[LockedImage]) -> List[str]:
    """Fail before importing if a filesystem cannot hold what the imports will write there. Images of
    unknown size (``compressed_size: null``, an offline lock) cannot be checked: said once, skipped."""
    unknown = [im.name for im in todo if im.compressed_size is None]
    if unknown:
        warn(f"preflight: size unknown for {', '.join(unknown)} (offline lock: compressed_size null); "
             f"disk space not checked for them (run `make lock` with registry access to record sizes)")
    todo = [im for im in todo if im.compressed_size is not None]
    if not todo:
        return []
    needs: List[Tuple[str, str, int, str]] = []  # (path, setting, bytes, why)
    sizes = {im.name: int(im.compressed_size or 0) for im in todo}
    largest = max(todo, key=lambda im: sizes[im.name])
    needs.append((enroot_setting("ENROOT_TEMP_PATH", cfg.env), "ENROOT_TEMP_PATH",
                  int(TEMP_FACTOR * sizes[largest.name]),
                  f"{TEMP_FACTOR:g}x the largest compressed image, {largest.name}: the unpacked "
                  f"root filesystem lives there during import"))
    total = sum(sizes.values())
    needs.append((enroot_setting("ENROOT_CACHE_PATH", cfg.env), "ENROOT_CACHE_PATH",
                  int(CACHE_FACTOR * total), "the downloaded layers are cached there"))
    factor = STORE_FACTOR_UNCOMPRESSED_DATA if data_uncompressed(cfg.squash_options) \
        else STORE_FACTOR_COMPRESSED
    needs.append((cfg.store, "--store", int(factor * total),
                  f"{factor:g}x the compressed layers for the .sqsh files "
                  f"(ENROOT_SQUASH_OPTIONS '{cfg.squash_options}')"))
    by_dev: Dict[int, List[Tuple[str, str, int, str]]] = {}
    probe: Dict[int, str] = {}
    for path, setting, need, why in needs:
        existing = path
        while not os.path.exists(existing):
            parent = os.path.dirname(existing.rstrip("/")) or "/"
            if parent == existing:
                break
            existing = parent
        dev = os.stat(existing).st_dev
        by_dev.setdefault(dev, []).append((path, setting, need, why))
        probe.setdefault(dev, existing)
    problems = []
    for dev, items in by_dev.items():
        need = sum(i[2] for i in items)
        free = shutil.disk_usage(probe[dev]).free
        if need > free:
            what = "; ".join(f"{p} ({s}) {n} bytes: {w}" for p, s, n, w in items)
            problems.append(
                f"preflight: not enough disk space on the filesystem of {items[0][0]}: needs {need} "
                f"bytes ({mb(need):.1f} MB), {free} bytes ({mb(free):.1f} MB) available [{what}] "
                f"(free space, or point {items[0][1]} at a larger local disk)")
    return problems
