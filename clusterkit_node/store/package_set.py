"""A set of OS packages in the store (packages.json): what the head node fetched once, and what GPU nodes install.

Why a record of its own: compute nodes must not each reach the internet, and must not install a file that changed
on the shared file system after it was checked. The head node downloads NVIDIA's packages for the cluster's OS and
architecture, checks each against the sha256 NVIDIA's repository index gives (and a pin, where the spec has one),
and publishes them with this record; every node checks each file against it again before installing. Layout:
``layout.package_set_dir``; written atomically (the record last, so a reader never sees a set without its files).

Stdlib only, Python 3.9.
"""
from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from clusterkit_node.contract.layout import PACKAGE_SET_NAME, PACKAGES_DIR, package_set_dir, staging_dir
from clusterkit_node.image.squashfs import content_sha256
from clusterkit_node.store.atomic_files import file_size

FORMATS = ("rpm", "deb")
_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]*\.(rpm|deb)$")
_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
# how each format names an architecture (NVIDIA's repository directories use these)
FORMAT_ARCH = {("deb", "x86_64"): "amd64", ("deb", "aarch64"): "arm64",
               ("rpm", "x86_64"): "x86_64", ("rpm", "aarch64"): "aarch64"}


class PackageSetError(Exception):
    """The record is missing, unreadable or does not match its files (one line)."""


@dataclass(frozen=True)
class PackageFile:
    file: str      # the file name in the set's directory
    package: str   # the package it holds (libnvidia-container1, ...)
    version: str   # the package's full version (1.18.2-1)
    sha256: str
    size: int


@dataclass(frozen=True)
class PackageSet:
    component: str            # "nvidia-container-cli"
    version: str              # the upstream version pinned (1.18.2)
    os: str                   # node profile (alinux2023, ubuntu2204, ...)
    arch: str                 # x86_64 or aarch64
    format: str               # rpm or deb
    files: Tuple[PackageFile, ...]  # in install order (library first)
    verified_against: str     # what the sha256s were checked against, e.g. the repository index URL
    pinned: bool              # True when the sha256s also matched a pin (the spec), not the index alone

    def to_json(self) -> str:
        doc = asdict(self)
        doc["files"] = [asdict(f) for f in self.files]
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def file_name_ok(name: str, fmt: str) -> bool:
    """Can ``name`` be a file of a set of format ``fmt``? A plain name (no directory, no leading dot), .rpm/.deb."""
    return bool(_FILE_RE.match(name)) and name.endswith("." + fmt)


def normalize_arch(machine: str) -> str:
    return _ARCH.get(machine, machine)


def parse(doc: Any, where: str) -> PackageSet:
    """A PackageSet from a decoded packages.json; PackageSetError names the first problem."""
    if not isinstance(doc, dict):
        raise PackageSetError(f"{where}: not a JSON object")
    try:
        files = tuple(PackageFile(str(f["file"]), str(f["package"]), str(f["version"]), str(f["sha256"]),
                                  int(f["size"])) for f in doc["files"])
        out = PackageSet(str(doc["component"]), str(doc["version"]), str(doc["os"]), str(doc["arch"]),
                         str(doc["format"]), files, str(doc["verified_against"]), bool(doc["pinned"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise PackageSetError(f"{where}: missing or malformed field ({exc})") from None
    if out.format not in FORMATS or not files:
        raise PackageSetError(f"{where}: format must be rpm or deb and files not empty")
    for f in files:
        # names become paths and package-manager arguments: nothing but a plain file name passes
        if not file_name_ok(f.file, out.format) or not _HEX_RE.match(f.sha256):
            raise PackageSetError(f"{where}: refused file entry {f.file!r} (a plain .{out.format} name and a "
                                  "sha256 hex digest)")
    return out


def record_path(store: str, component: str, version: str, os_name: str, arch: str) -> str:
    return os.path.join(package_set_dir(store, component, version, os_name, arch), PACKAGE_SET_NAME)


def read(store: str, component: str, version: str, os_name: str, arch: str) -> Optional[PackageSet]:
    """The published set, or None when the head node has not published one; PackageSetError when broken."""
    path = record_path(store, component, version, os_name, arch)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise PackageSetError(f"{path}: unreadable ({exc})") from None
    found = parse(doc, path)
    if (found.component, found.version, found.os, found.arch) != (component, version, os_name, arch):
        raise PackageSetError(f"{path}: records {found.component} {found.version} {found.os}-{found.arch}, "
                              f"not {component} {version} {os_name}-{arch}")
    return found


def published(store: str) -> List[Tuple[str, Optional[PackageSet], str]]:
    """Every set under the store's packages dir, for ``status``: (its directory, the record or None, "" when its
    files have the recorded sizes, else what is wrong). Sizes only: status stays cheap and lock-free; nodes check
    sha256 before installing (``verified_paths``)."""
    root = os.path.join(staging_dir(store), PACKAGES_DIR)
    found: List[Tuple[str, Optional[PackageSet], str]] = []
    for record in sorted(glob.glob(os.path.join(root, "*", "*", "*", PACKAGE_SET_NAME))):
        directory = os.path.dirname(record)
        try:
            with open(record, encoding="utf-8") as fh:
                pset = parse(json.load(fh), record)
        except (OSError, ValueError, PackageSetError) as exc:
            found.append((directory, None, f"unreadable record: {exc}"))
            continue
        wrong = [f.file for f in pset.files if file_size(os.path.join(directory, f.file)) != f.size]
        found.append((directory, pset, f"size differs: {', '.join(wrong)}" if wrong else ""))
    return found


def verified_paths(directory: str, pset: PackageSet) -> List[str]:
    """The set's files as paths, each checked against its size and sha256 now; PackageSetError on the first that
    differs (a file changed or truncated on the shared file system is never installed)."""
    out = []
    for f in pset.files:
        path = os.path.join(directory, f.file)
        try:
            size = os.stat(path).st_size
            digest = content_sha256(path) if size == f.size else ""
        except OSError as exc:
            raise PackageSetError(f"{path}: unreadable ({exc.strerror})") from None
        if size != f.size or digest != f.sha256:
            raise PackageSetError(f"{path}: does not match {PACKAGE_SET_NAME} (size {size} vs {f.size}, sha256 "
                                  f"{digest[:12] or '-'}... vs {f.sha256[:12]}...): the head node's sync re-fetches it")
        out.append(path)
    return out


def as_dict(pset: PackageSet) -> Dict[str, Any]:
    doc: Dict[str, Any] = json.loads(pset.to_json())
    return doc
