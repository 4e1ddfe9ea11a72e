"""``clusterkit lock``: write ``cluster_configs/<name>.images.lock`` from a spec, online or offline.

Offline mode exists because a lock must be writable where no registry is reachable (CI, air-gapped
review machines): it records only images the spec already pins by digest and marks their size unknown
(``compressed_size: null``) so the node-side disk preflight falls back to its conservative default.
"""
from __future__ import annotations

from pathlib import Path

from . import images
from .loader import all_spec_paths, image_specs, load, lock_path, platform, resolve
from .lock_file import write_lock


def lock_all(names: list[str], *, offline: bool) -> list[Path]:
    """Lock every named cluster (all specs when none is named); the paths written, in order."""
    written: list[Path] = []
    for name in names or [p.stem for p in all_spec_paths()]:
        spec = load(name, check_lock=False).spec
        specs, plat = image_specs(spec), platform(spec)
        lock = images.offline_lock(spec.name, specs, plat) if offline else images.resolve_lock(spec.name, specs, plat)
        path = lock_path(resolve(name))
        write_lock(path, lock)
        written.append(path)
    return written
