"""``clusterkit lock``: write ``cluster_configs/<name>.images.lock`` from a spec, online or offline.

Offline mode exists because a lock must be writable where no registry is reachable (CI, air-gapped
review machines): it records only images the spec already pins by digest and marks their size unknown
(``compressed_size: null``) so the node-side disk preflight falls back to its conservative default.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clusterkit.images import resolve as images
from clusterkit.images.lock_file import ImageLock, write_lock
from clusterkit.pipeline.loader import all_spec_paths, image_specs, load, lock_path, platform, resolve


def lock_all(names: list[str], *, offline: bool,
             progress: Callable[[str], None] | None = None) -> list[tuple[Path, ImageLock]]:
    """Lock every named cluster (all specs when none is named); what was written, in order.

    ``progress`` gets one line per image as the registry answers (a lock of many images takes a while)."""
    written: list[tuple[Path, ImageLock]] = []
    for name in names or [p.stem for p in all_spec_paths()]:
        spec = load(name, check_lock=False).spec
        specs, plat = image_specs(spec), platform(spec)
        if offline:
            lock = images.offline_lock(spec.name, specs, plat)
        else:
            lock = images.resolve_lock(spec.name, specs, plat, progress=progress)
        path = lock_path(resolve(name))
        write_lock(path, lock)
        written.append((path, lock))
    return written
