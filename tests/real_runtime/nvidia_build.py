#!/usr/bin/env python3
"""Build the REAL nvidia-container-cli (libnvidia-container 1.17.0) from pinned sources, offline.

What it is for: enroot's ``98-nvidia.sh`` hook runs ``nvidia-container-cli --user configure`` to put the GPU
and the driver's libraries into a container; ParallelCluster's AMIs do not ship it (../shared/reference/domain.md,
"GPUs in containers"). Sources: ``../shared/vendor/libnvidia-container-1.17.0-63d366ee.tar.gz`` (a commit on
main whose build reports 1.17.0) and ``nvidia-modprobe-550.54.14.tar.gz``, sha256-pinned below as in the vendor
README. There is no upstream-tag fallback (the commit is not a tag): without the vendor dir the build is
unavailable.

Recipe (../shared/reference/real-runtime.md, "libnvidia-container"): nvidia-modprobe's ``modprobe-utils`` unpacked
and patched exactly as the tree's ``mk/nvidia-modprobe.mk`` download rule would (``--strip-components=1``, then
``mk/nvidia-modprobe.patch``, then its ``.download_stamp``), then the tree's Makefile with ``WITH_LIBELF=yes
WITH_SECCOMP=yes WITH_NVCGO=yes`` against Debian's libelf/libseccomp/libcap, its nvcgo part with Go's vendored
modules (``GOFLAGS=-mod=vendor GOPROXY=off``), the version given as ``LIB_VERSION`` and ``REVISION`` (a git
archive has no tag). One deviation: glibc 2.36 has no Sun RPC, so the RPC code compiles against Debian's libtirpc
(``-isystem /usr/include/tirpc``, ``-ltirpc``); NVIDIA's own builds use the older glibc's or a bundled one.

Staged twice, once per package format, with the install variables NVIDIA's packaging uses:
  ``stage/deb``: the Makefile's ``deb`` target, ``prefix=/usr libdir=/usr/lib/$(DEB_HOST_MULTIARCH)``
                 (x86_64-linux-gnu here; pkg/deb/*.install pick ``usr/bin/*`` and ``usr/lib/<multiarch>/lib*.so.*``)
  ``stage/rpm``: pkg/rpm/SPECS/libnvidia-container.spec ``%install``, ``libdir=%{_libdir}`` (/usr/lib64) and
                 ``docdir=%{_licensedir}`` (/usr/share/licenses)
Each is a root tree: usr/bin/nvidia-container-cli, <libdir>/libnvidia-container.so.1 -> .so.1.17.0 and
libnvidia-container-go.so.1 -> .so.1.17.0 (plus the -dev/-dbg files the other packages take). The CLI's RUNPATH is
``$ORIGIN/../$LIB`` (Makefile BIN_LDFLAGS): it finds its library beside it wherever the tree is rooted, as long as
glibc's ``$LIB`` names that lib dir (lib/x86_64-linux-gnu on Debian, lib64 on Amazon Linux/RHEL). ``stage/pkg`` is
the tree's packaging directory, unchanged (nvidia_packages.py reads it).

Cached under ``.cache/real-runtime/nvidia/`` keyed by the source digests and this file; locked for xdist workers.
Usage: nvidia_build.py   (prints the stage directory; also ``runtime_build.py nvidia``)
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import runtime_build
from runtime_build import CACHE, BuildFailed, Source, SourcesUnavailable

VERSION = "1.17.0"          # what the tree's build reports (cli-version / lib-version)
MAJOR = VERSION.split(".")[0]
LIBNVC = Source("libnvidia-container", "1.17.0-63d366ee", "https://github.com/NVIDIA/libnvidia-container.git",
                "63d366ee3b4183513c310ac557bf31b05b83328f",
                "ea7c815ae4ff67f1a08586c7a4257053e47a2e47b3122be4c88c545a08edf27e")
MODPROBE = Source("nvidia-modprobe", "550.54.14", "https://github.com/NVIDIA/nvidia-modprobe.git",
                  "149440ca0654d928f27df5ebff485a122bfe43b1",
                  "8ad9ba2f39072142674cfc5a57c5f738fa3c112af571c1f7a2fda1ab7d3b2dac")
CLI = "usr/bin/nvidia-container-cli"
# the lib dir each format installs to (pkg/deb: /usr/lib/@DEB_HOST_MULTIARCH@; the rpm spec: %{_libdir})
LIBDIRS = {"deb": f"usr/lib/{platform.machine()}-linux-gnu", "rpm": "usr/lib64"}
_INSTALL_VARS = {
    "deb": ["prefix=/usr", f"libdir=/{LIBDIRS['deb']}"],
    "rpm": ["prefix=/usr", "exec_prefix=/usr", "bindir=/usr/bin", f"libdir=/{LIBDIRS['rpm']}",
            "includedir=/usr/include", "docdir=/usr/share/licenses"],
}


def _vendor_tarball(src: Source) -> Path:
    tarball = runtime_build.vendor_dir() / src.tarball
    if not tarball.is_file():
        raise SourcesUnavailable(f"{tarball} not found ({src.name} {src.version} is an untagged upstream commit "
                                 f"{src.commit[:12]}: only the vendor tarball is accepted)")
    digest = runtime_build._sha256(tarball)
    if digest != src.sha256:
        raise BuildFailed(f"{tarball}: sha256 {digest} is not the pinned {src.sha256}")
    return tarball


def _unpack(work: Path) -> tuple[Path, list[str]]:
    """The libnvidia-container tree with nvidia-modprobe's utils where its Makefile would have downloaded them."""
    nvc_tar, mp_tar = _vendor_tarball(LIBNVC), _vendor_tarball(MODPROBE)
    with tarfile.open(nvc_tar) as tf:
        tf.extractall(work / "src", filter="tar")
    tree = work / "src" / f"{LIBNVC.name}-{LIBNVC.version}"
    # mk/nvidia-modprobe.mk's $(SRCS_DIR)/.download_stamp rule, minus the curl
    mp_dir = tree / "deps" / "src" / f"{MODPROBE.name}-{MODPROBE.version}"
    mp_dir.mkdir(parents=True)
    prefix = f"{MODPROBE.name}-{MODPROBE.version}/modprobe-utils"
    with tarfile.open(mp_tar) as tf:
        members = []
        for m in tf.getmembers():
            if m.name == prefix or m.name.startswith(prefix + "/"):
                m.name = m.name.split("/", 1)[1]
                members.append(m)
        tf.extractall(mp_dir, members=members, filter="tar")
    runtime_build._run(["patch", "-d", str(mp_dir), "-p1", "-i", str(tree / "mk/nvidia-modprobe.patch")], tree,
                       log=work / "build.log")
    (mp_dir / ".download_stamp").touch()
    return tree, [f"{nvc_tar} sha256 {LIBNVC.sha256}", f"{mp_tar} sha256 {MODPROBE.sha256}"]


def _make_args() -> list[str]:
    return ["WITH_LIBELF=yes", "WITH_SECCOMP=yes", "WITH_NVCGO=yes", f"LIB_VERSION={VERSION}",
            f"REVISION={LIBNVC.commit}"]


def _env(work: Path) -> dict[str, str]:
    return {"CPPFLAGS": "-isystem /usr/include/tirpc", "LDLIBS": "-ltirpc",
            "GOFLAGS": "-mod=vendor", "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOCACHE": str(work / "gocache"),
            "GOPATH": str(work / "gopath")}


def build() -> Path:
    """Build (cached) and return the stage directory holding ``deb/`` and ``rpm/`` root trees."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".nvidia.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked()


def stamp_text() -> str:
    return (f"{LIBNVC.sha256} {LIBNVC.tarball}\n{MODPROBE.sha256} {MODPROBE.tarball}\n"
            f"{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()} nvidia_build.py\n")


def _build_locked() -> Path:
    out = CACHE / "nvidia"
    stage, stamp = out / "stage", out / ".stamp"
    text = stamp_text()
    if stamp.is_file() and stamp.read_text() == text and all((stage / f / CLI).is_file() for f in LIBDIRS):
        return stage
    work = Path(tempfile.mkdtemp(prefix=".nvidia-", dir=CACHE))
    try:
        log = work / "build.log"
        tree, provenance = _unpack(work)
        env = _env(work)
        runtime_build._run(["make", "-j2", *_INSTALL_VARS["deb"], *_make_args()], tree, env, log)
        new_stage = work / "stage"
        for fmt, install_vars in _INSTALL_VARS.items():
            runtime_build._run(["make", "install", f"DESTDIR={new_stage / fmt}", *install_vars, *_make_args()],
                               tree, env, log)
        # NVIDIA's packaging files (pkg/deb control + *.install, pkg/rpm spec): what nvidia_packages.py follows
        shutil.copytree(tree / "pkg", new_stage / "pkg")
        (new_stage / "PROVENANCE").write_text("\n".join(provenance) + "\n")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        new_stage.rename(stage)
        shutil.copy2(log, out / "build.log")
        stamp.write_text(text)
    finally:
        # Go's module cache is read-only files: make them removable first
        for root, dirs, _files in os.walk(work):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        shutil.rmtree(work, ignore_errors=True)
    return stage


def main() -> int:
    try:
        print(f"nvidia: {build()}")
    except SourcesUnavailable as exc:
        print(f"nvidia_build: {exc}", file=sys.stderr)
        return 3
    except BuildFailed as exc:
        print(f"nvidia_build: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
