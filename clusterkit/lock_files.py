"""Write ``cluster_configs/<name>.images.lock`` from a spec: online through the registries, or offline.

Offline mode exists because a lock must be writable where no registry is reachable (CI, air-gapped
review machines): it records only images the spec already pins by digest and marks their size unknown
(``compressed_size: null``) so the node-side disk preflight falls back to its conservative default.
"""
from __future__ import annotations

from pathlib import Path

from . import images
from .errors import ClusterKitError
from .imageref import parse_image_ref
from .loader import all_spec_paths, image_specs, load, lock_path, platform, resolve


def offline_lock(name: str, specs: list[images.ImageSpec], plat: str) -> dict:
    entries = []
    for item in specs:
        ref = parse_image_ref(item.uri)
        if ref.digest is None:
            raise ClusterKitError(f"{name}: image '{item.name}' ({item.uri}) has no @sha256 digest; "
                                  "offline locking needs one (or run `make lock` with registry access)")
        entries.append({
            "name": item.name, "source": item.uri, "registry": ref.registry, "repository": ref.repository,
            "digest": ref.digest, "enroot_uri": ref.enroot_uri(ref.digest), "platform": plat,
            "compressed_size": None, "expect": dict(item.expect),
        })
    return {"cluster": name, "images": sorted(entries, key=lambda e: e["name"]), "lock_version": 1}


def lock_all(names: list[str], *, offline: bool) -> list[Path]:
    written: list[Path] = []
    for name in names or [p.stem for p in all_spec_paths()]:
        loaded = load(name, check_lock=False)
        spec = loaded.spec
        specs, plat = image_specs(spec), platform(spec)
        lock = offline_lock(spec.name, specs, plat) if offline else images.resolve_lock(spec.name, specs, plat)
        path = lock_path(resolve(name))
        path.write_text(images.dump_lock(lock), encoding="utf-8")
        written.append(path)
    return written
