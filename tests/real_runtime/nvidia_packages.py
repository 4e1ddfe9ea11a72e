#!/usr/bin/env python3
"""Stand-ins of NVIDIA's libnvidia-container packages and repository, made from the REAL build (nvidia_build.py).

What stands in for what, and why: real nodes install NVIDIA's signed ``libnvidia-container1`` and
``libnvidia-container-tools`` from https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)/ (a flat apt
repository: ``Packages`` beside the .debs) or .../stable/rpm/$basearch/ (``repodata/`` beside the .rpms); see
clusterkit/data/node_profiles.json. Tests and the GPU check run offline, so they cannot fetch those. This module
packs the binaries nvidia_build.py compiled from NVIDIA's own sources at the version that source reports
(1.17.0, package release 1) into packages with NVIDIA's names, file layout and dependency between the two, and
serves them from a directory laid out like NVIDIA's URL paths:

  dest/deb/amd64/Packages (+ Packages.gz), libnvidia-container1_1.17.0-1_amd64.deb,
                 libnvidia-container-tools_1.17.0-1_amd64.deb
  dest/rpm/x86_64/repodata/ (createrepo_c), libnvidia-container1-1.17.0-1.x86_64.rpm,
                  libnvidia-container-tools-1.17.0-1.x86_64.rpm

Followed from the tree's packaging (copied unchanged into the stage's ``pkg/``):
  pkg/deb/control: the two binary packages, Source libnvidia-container, Multi-Arch: same for the library;
  pkg/deb/libnvidia-container@MAJOR@.install: ``usr/lib/@DEB_HOST_MULTIARCH@/lib*.so.*`` (the library package);
  pkg/deb/libnvidia-container-tools.install: ``usr/bin/*`` (the tools package);
  pkg/deb/libnvidia-container@MAJOR@.symbols: the tools' shlibs dependency, ``libnvidia-container1 (>= 1.17.0)``;
  pkg/rpm/SPECS/libnvidia-container.spec: ``%files -n %{name}%{_major}``: ``%{_libdir}/lib*.so.*`` and
  ``%license %{_licensedir}/*``; ``%files tools``: ``%{_bindir}/*``; tools ``Requires: %{name}%{_major}%{?_isa}
  >= %{version}-%{release}``; the library's ``%post -p /sbin/ldconfig``.
Where the stand-ins differ, on purpose:
  * unsigned; no Release/InRelease file and no repomd signature (tests trust the files by sha256, as the store's
    package-set record does, clusterkit_node/store/package_set.py);
  * tools depend on ``libnvidia-container1 (>= 1.17.0-1)`` (deb) / ``libnvidia-container1(x86-64) >= 1.17.0-1``
    (rpm), the spec's ``>= version-release``; no libc6/libcap2/libseccomp2/libelf1/libtirpc3 dependencies
    (``AutoReqProv: no`` for rpm), so an empty test root's package database accepts them. The binaries are
    Debian 12 builds (glibc 2.36, libtirpc): they run where Debian's libraries are, not on Amazon Linux;
  * no -dev/-dbg/-static packages, no debhelper changelog or md5sums; the rpm library has no ``%post -p
    /sbin/ldconfig`` (an interpreter the empty root lacks, and a Requires on it); the deb library carries the
    ``activate-noawait ldconfig`` trigger and shlibs file dh_makeshlibs writes, no maintainer script. The CLI finds
    its library without ld.so.cache anyway: its RUNPATH is ``$ORIGIN/../$LIB`` (see nvidia_build.py).
Cached: ``dest`` is rebuilt only when the stage (its build stamp) or this file changes.

Usage: nvidia_packages.py [DEST]   (default .cache/real-runtime/nvidia-repo; prints DEST)
"""
from __future__ import annotations

import fcntl
import gzip
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nvidia_build
import runtime_build
from runtime_build import CACHE, BuildFailed, SourcesUnavailable

RELEASE = "1"
FULL_VERSION = f"{nvidia_build.VERSION}-{RELEASE}"
LIB_PKG = f"libnvidia-container{nvidia_build.MAJOR}"
TOOLS_PKG = "libnvidia-container-tools"
MAINTAINER = "NVIDIA CORPORATION <cudatools@nvidia.com>"
DEB_ARCH, RPM_ARCH = "amd64", "x86_64"
DEB_DIR, RPM_DIR = Path("deb") / DEB_ARCH, Path("rpm") / RPM_ARCH
DEB_FILES = {LIB_PKG: f"{LIB_PKG}_{FULL_VERSION}_{DEB_ARCH}.deb",
             TOOLS_PKG: f"{TOOLS_PKG}_{FULL_VERSION}_{DEB_ARCH}.deb"}
RPM_FILES = {LIB_PKG: f"{LIB_PKG}-{FULL_VERSION}.{RPM_ARCH}.rpm",
             TOOLS_PKG: f"{TOOLS_PKG}-{FULL_VERSION}.{RPM_ARCH}.rpm"}
_DESCRIPTION = ("NVIDIA container runtime library", "NVIDIA container runtime library (command-line tools)")
DEFAULT_DEST = CACHE / "nvidia-repo"


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    runtime_build._run(cmd, cwd, log=log)


def _sha256(path: Path) -> str:
    return runtime_build._sha256(path)


def _copy_matching(root: Path, dest_root: Path, rel_dir: str, pattern: str) -> None:
    for path in sorted((root / rel_dir).glob(pattern)):
        target = dest_root / rel_dir / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            target.symlink_to(path.readlink())
        else:
            shutil.copy2(path, target)


# ---- deb ----------------------------------------------------------------------------------------------------

def _deb(stage: Path, pkg: str, work: Path, out: Path, log: Path) -> None:
    root = stage / "deb"
    tree = work / f"deb-{pkg}"
    libdir = nvidia_build.LIBDIRS["deb"]
    if pkg == LIB_PKG:
        _copy_matching(root, tree, libdir, "lib*.so.*")                 # libnvidia-container1.install
        extra = "Multi-Arch: same\nSection: libs\n"
        depends = ""
    else:
        _copy_matching(root, tree, "usr/bin", "*")                     # libnvidia-container-tools.install
        extra = "Section: utils\n"
        depends = f"Depends: {LIB_PKG} (>= {FULL_VERSION})\n"
    doc = tree / "usr/share/doc" / pkg
    doc.mkdir(parents=True)
    shutil.copy2(stage / "pkg/deb/copyright", doc / "copyright")     # dh_installdocs
    debian = tree / "DEBIAN"
    debian.mkdir()
    summary = _DESCRIPTION[pkg != LIB_PKG]
    (debian / "control").write_text(
        f"Package: {pkg}\nSource: libnvidia-container\nVersion: {FULL_VERSION}\nArchitecture: {DEB_ARCH}\n"
        f"Maintainer: {MAINTAINER}\n{extra}Priority: optional\n{depends}"
        f"Homepage: https://github.com/NVIDIA/libnvidia-container\n"
        f"Description: {summary}\n Stand-in built by ClusterKit's tests from NVIDIA's sources "
        f"(commit {nvidia_build.LIBNVC.commit[:12]}).\n")
    if pkg == LIB_PKG:  # what dh_makeshlibs writes for a library package (no maintainer script)
        (debian / "triggers").write_text("activate-noawait ldconfig\n")
        dep = f"{nvidia_build.MAJOR} {LIB_PKG} (>= {nvidia_build.VERSION})"
        (debian / "shlibs").write_text(f"libnvidia-container {dep}\nlibnvidia-container-go {dep}\n")
    _run(["dpkg-deb", "--root-owner-group", "-Zxz", "-b", str(tree), str(out / DEB_FILES[pkg])], work, log)


def _packages_index(repo: Path) -> str:
    """The ``Packages`` stanzas dpkg-scanpackages would write for a flat repository (Filename relative to it)."""
    stanzas = []
    for pkg in (LIB_PKG, TOOLS_PKG):
        deb = repo / DEB_FILES[pkg]
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True,
                                 check=True).stdout.rstrip("\n")
        head, _, desc = control.partition("\nDescription:")
        stanzas.append(f"{head}\nFilename: ./{deb.name}\nSize: {deb.stat().st_size}\n"
                       f"MD5sum: {hashlib.md5(deb.read_bytes()).hexdigest()}\n"
                       f"SHA1: {hashlib.sha1(deb.read_bytes()).hexdigest()}\n"
                       f"SHA256: {_sha256(deb)}\nDescription:{desc}\n")
    return "\n".join(stanzas)


# ---- rpm ----------------------------------------------------------------------------------------------------

_SPEC = """\
Name: libnvidia-container
Version: {version}
Release: {release}
Summary: NVIDIA container runtime library
License: Apache-2.0
Vendor: NVIDIA CORPORATION
Packager: {maintainer}
URL: https://github.com/NVIDIA/libnvidia-container
AutoReqProv: no
%define debug_package %{{nil}}
%define __os_install_post %{{nil}}
%define _build_id_links none
%description
Stand-in built by ClusterKit's tests from NVIDIA's sources (commit {commit}).

%install
mkdir -p %{{buildroot}}
cp -a {stage}/. %{{buildroot}}/

%package -n {lib}
Summary: NVIDIA container runtime library
AutoReqProv: no
%description -n {lib}
Stand-in built by ClusterKit's tests from NVIDIA's sources (commit {commit}).
%files -n {lib}
%license /usr/share/licenses/libnvidia-container-{upstream}/*
/{libdir}/lib*.so.*

%package tools
Summary: NVIDIA container runtime library (command-line tools)
Requires: {lib}(x86-64) >= {version}-{release}
AutoReqProv: no
%description tools
Stand-in built by ClusterKit's tests from NVIDIA's sources (commit {commit}).
%files tools
%license /usr/share/licenses/libnvidia-container-{upstream}/*
/usr/bin/*
"""


def _rpms(stage: Path, work: Path, out: Path, log: Path) -> None:
    # only what the two packages' %files take travels into the buildroot (rpmbuild refuses unpackaged files)
    root, picked = stage / "rpm", work / "rpm-root"
    libdir = nvidia_build.LIBDIRS["rpm"]
    _copy_matching(root, picked, libdir, "lib*.so.*")
    _copy_matching(root, picked, "usr/bin", "*")
    _copy_matching(root, picked, f"usr/share/licenses/libnvidia-container-{nvidia_build.VERSION}", "*")
    top = work / "rpmbuild"
    spec = work / "libnvidia-container.spec"
    spec.write_text(_SPEC.format(version=nvidia_build.VERSION, release=RELEASE, maintainer=MAINTAINER,
                                 commit=nvidia_build.LIBNVC.commit[:12], stage=picked, lib=LIB_PKG, libdir=libdir,
                                 upstream=nvidia_build.VERSION))
    _run(["rpmbuild", "-bb", "--target", RPM_ARCH, "--define", f"_topdir {top}", "--define", "_binary_payload w6.xzdio",
          str(spec)], work, log)
    for pkg, name in RPM_FILES.items():
        built = top / "RPMS" / RPM_ARCH / name
        if not built.is_file():
            raise BuildFailed(f"rpmbuild did not produce {name} (see {log})")
        shutil.copy2(built, out / name)


# ---- the repository -----------------------------------------------------------------------------------------

def stamp_text() -> str:
    return nvidia_build.stamp_text() + f"{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()} nvidia_packages.py\n"


def build_repo(dest: Path = DEFAULT_DEST) -> Path:
    """The stand-in repository under ``dest`` (built when missing or stale); returns ``dest``.
    Builds the CLI first when needed (nvidia_build.build); concurrent callers wait on a lock."""
    dest = Path(dest)
    stage = nvidia_build.build()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = stamp_text()
        stamp = dest / ".stamp"
        if stamp.is_file() and stamp.read_text() == text:
            return dest
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
        try:
            log = work / "build.log"
            new = work / "repo"
            (new / DEB_DIR).mkdir(parents=True)
            (new / RPM_DIR).mkdir(parents=True)
            for pkg in (LIB_PKG, TOOLS_PKG):
                _deb(stage, pkg, work, new / DEB_DIR, log)
            index = _packages_index(new / DEB_DIR)
            (new / DEB_DIR / "Packages").write_text(index)
            with gzip.GzipFile(new / DEB_DIR / "Packages.gz", "wb", mtime=0) as fh:
                fh.write(index.encode())
            _rpms(stage, work, new / RPM_DIR, log)
            _run(["createrepo_c", "--quiet", str(new / RPM_DIR)], work, log)
            shutil.copy2(log, new / "build.log")
            (new / ".stamp").write_text(text)
            if dest.exists():
                shutil.rmtree(dest)
            new.rename(dest)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return dest


def main(argv: list[str]) -> int:
    try:
        print(build_repo(Path(argv[0]) if argv else DEFAULT_DEST))
    except SourcesUnavailable as exc:
        print(f"nvidia_packages: {exc}", file=sys.stderr)
        return 3
    except (BuildFailed, subprocess.CalledProcessError) as exc:
        print(f"nvidia_packages: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
