#!/usr/bin/env python3
"""Build the REAL multi-threaded ``squashfuse_ll`` (squashfuse 0.6.2) from the pinned source, offline.

What it is for: enroot mounts every in-place start with ``squashfuse`` (enroot 4.1.2 ``src/runtime.sh``
``runtime::_mount_rootfs_shim``), and the high-level ``squashfuse`` reads on one thread in every release
(../shared/reference/domain.md, "Reading through squashfuse": parallel reads 4.5x slower than extracted). The
low-level ``squashfuse_ll`` is multi-threaded by default since 0.3.0 (NEWS "Enable multithreading in squashfuse_ll
by default") and takes enroot's ``-o uid=N,gid=N`` since 0.2.0. Debian 12's own package (0.1.105, reporting 0.1.104)
is the single-threaded stand-in the tests keep beside it; this build is the multi-threaded one (standing in for
Ubuntu 24.04's squashfuse 0.5.0, which ships ``/usr/bin/squashfuse_ll``: packages.ubuntu.com noble filelist).

Source: ``../shared/vendor/squashfuse-0.6.2.tar.gz`` (vasi/squashfuse tag 0.6.2), sha256-pinned as in the vendor
README. Recipe: the tree's ``autogen.sh``, ``configure --disable-shared --disable-demo --disable-high-level``
(multi-threading is the default: configure.ac ``--disable-multithreading`` is not given), ``make squashfuse_ll``.
The binary links Debian's libfuse3, zstd, lz4, lzo, xz and zlib dynamically and its own code statically; the build
fails if configure left a compression out.

Cached under ``.cache/real-runtime/squashfuse/`` keyed by the source digest and this file; locked for xdist workers.
Usage: squashfuse_build.py   (prints the path of the built squashfuse_ll)
"""
from __future__ import annotations

import fcntl
import hashlib
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import runtime_build
from runtime_build import CACHE, BuildFailed, Source, SourcesUnavailable

VERSION = "0.6.2"
SQUASHFUSE = Source("squashfuse", VERSION, "https://github.com/vasi/squashfuse.git",
                    "437925319ac150108af4130307f08924eb515cb2",
                    "326c5ec1210485a3697c202553dbe7ca6bd8f28bc63531137b00a745cad0fd67")
CONFIGURE = ["--disable-shared", "--disable-demo", "--disable-high-level"]
# every compression mksquashfs can write (enroot's own default is lzo): distributions' builds link them all (Ubuntu
# noble's squashfuse depends on zlib1g, liblzma5, liblzo2-2, liblz4-1, libzstd1); configure leaves out silently
# what it cannot find, so the build checks its summary line
COMPRESSIONS = ("ZLIB", "XZ", "LZO", "LZ4", "ZSTD")


def _tarball() -> Path:
    tarball = runtime_build.vendor_dir() / SQUASHFUSE.tarball
    if not tarball.is_file():
        raise SourcesUnavailable(f"{tarball} not found (squashfuse {VERSION}: only the vendor tarball is accepted)")
    digest = runtime_build._sha256(tarball)
    if digest != SQUASHFUSE.sha256:
        raise BuildFailed(f"{tarball}: sha256 {digest} is not the pinned {SQUASHFUSE.sha256}")
    return tarball


def stamp_text() -> str:
    return (f"{SQUASHFUSE.sha256} {SQUASHFUSE.tarball}\n"
            f"{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()} squashfuse_build.py\n")


def unavailable_reason() -> str | None:
    """Why the build cannot run here (no cached build and no vendor tarball), or None: node roots of an AMI with a
    multi-threaded squashfuse_ll need it (node_root.ami_layer), so the tier skips, or fails under CI, with this."""
    out = CACHE / "squashfuse"
    stamp = out / ".stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text() and (out / "squashfuse_ll").is_file():
        return None
    try:
        _tarball()
    except SourcesUnavailable as exc:
        return str(exc)
    return None


def build() -> Path:
    """Build (cached) and return the path of the multi-threaded squashfuse_ll."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".squashfuse.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked()


def _build_locked() -> Path:
    out = CACHE / "squashfuse"
    binary, stamp = out / "squashfuse_ll", out / ".stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text() and binary.is_file():
        return binary
    tarball = _tarball()
    work = Path(tempfile.mkdtemp(prefix=".squashfuse-", dir=CACHE))
    try:
        log = work / "build.log"
        with tarfile.open(tarball) as tf:
            tf.extractall(work, filter="tar")
        tree = work / f"squashfuse-{VERSION}"
        runtime_build._run(["./autogen.sh"], tree, None, log)
        runtime_build._run(["./configure", *CONFIGURE], tree, None, log)
        summary = next((ln for ln in log.read_text().splitlines() if ln.startswith("Compression support")), "")
        missing = [c for c in COMPRESSIONS if c not in summary.split(":")[-1].split()]
        if missing:
            raise BuildFailed(f"squashfuse {VERSION} configure found no {', '.join(missing)} (install the -dev "
                              f"packages: runtime_build.DEB_PACKAGES); it said: {summary!r}")
        runtime_build._run(["make", "-j2", "squashfuse_ll"], tree, None, log)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        shutil.copy2(tree / "squashfuse_ll", binary)
        binary.chmod(0o755)
        shutil.copy2(log, out / "build.log")
        (out / "PROVENANCE").write_text(f"{tarball} sha256 {SQUASHFUSE.sha256}\n")
        stamp.write_text(stamp_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return binary


def main() -> int:
    try:
        print(build())
    except SourcesUnavailable as exc:
        print(f"squashfuse_build: {exc}", file=sys.stderr)
        return 3
    except BuildFailed as exc:
        print(f"squashfuse_build: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
