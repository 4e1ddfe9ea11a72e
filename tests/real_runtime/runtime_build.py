#!/usr/bin/env python3
"""Build the REAL NVIDIA Enroot and Pyxis, two generations, from pinned sources (no stand-ins).

Generations (what ParallelCluster AMIs have shipped, see ../shared/vendor/README.md):
  gen3: enroot 3.4.1 + pyxis 0.20.0  (cookbook pins of the 3.11-3.12 era)
  gen4: enroot 4.1.2 + pyxis 0.24.0  (later cookbook pins; 4.2.1 is not mirrored, 4.1.2 is the nearest tag)

Sources: ``../shared/vendor/<name>-<version>.tar.gz`` (sha256 checked against the table below, which
repeats the vendor README's), or, where that directory is absent, the upstream git tag, accepted only
when its commit id is the pinned one. The recipe is the one measured in
../shared/reference/real-runtime.md: enroot with FORCE_GLIBC=1 against Debian's libbsd (its git
submodules are not in a `git archive`), installed like NVIDIA's packages (prefix /usr, sysconfdir /etc)
into a staging tree, with the file capabilities of the ``enroot+caps`` package; pyxis with plain
``make`` against Debian's libslurm-dev, staged at ParallelCluster's path
/usr/local/lib/slurm/spank_pyxis.so. A build takes a few seconds and is cached under
``.cache/real-runtime/<gen>/`` keyed by the source digests.

The real nvidia-container-cli is built by the sibling nvidia_build.py (key ``nvidia`` here).

Usage: runtime_build.py [gen3|gen4|nvidia|all]   (prints the stage directory of each)
Exit: 0 built, 1 build failed, 3 sources unavailable (offline and no vendor dir).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "real-runtime"
PYXIS_SO = "usr/local/lib/slurm/spank_pyxis.so"


@dataclass(frozen=True)
class Source:
    name: str
    version: str
    upstream: str
    commit: str
    sha256: str

    @property
    def tarball(self) -> str:
        return f"{self.name}-{self.version}.tar.gz"


SOURCES = {
    "enroot-3.4.1": Source("enroot", "3.4.1", "https://github.com/NVIDIA/enroot.git",
                           "4dd13f69358cbc878135354ba3eac78db4a3970f",
                           "476b7acd3829c4d94f8731b908dc928ae5e4d4bb67666bff689cbdb84a16fe17"),
    "pyxis-0.20.0": Source("pyxis", "0.20.0", "https://github.com/NVIDIA/pyxis.git",
                           "424563865a491f2d8f3c396a095d18db81f1fb07",
                           "5feae97f7f52e16aa006180dfd7375e28d2d8fcc7f067b0a2d10026a7c12422b"),
    "enroot-4.1.2": Source("enroot", "4.1.2", "https://github.com/NVIDIA/enroot.git",
                           "bd51f53b6fa954805ae3e1985c5dc7594ff66d05",
                           "65d7098241b5a86faf48ba29bbca1462e19682bf49d6b89c8a2d934f0196b4da"),
    "pyxis-0.24.0": Source("pyxis", "0.24.0", "https://github.com/NVIDIA/pyxis.git",
                           "107519944221822ea1dace4db8e7234b2eaa4cd5",
                           "ede95ba2d48542881f137d9c07c417c5c765994710a74c593a21b3328f311f5d"),
}


@dataclass(frozen=True)
class Generation:
    key: str
    enroot: str
    pyxis: str

    @property
    def enroot_version(self) -> str:
        return SOURCES[self.enroot].version

    @property
    def pyxis_version(self) -> str:
        return SOURCES[self.pyxis].version


GENERATIONS = {
    "gen3": Generation("gen3", "enroot-3.4.1", "pyxis-0.20.0"),
    "gen4": Generation("gen4", "enroot-4.1.2", "pyxis-0.24.0"),
}

# Debian packages the build and the real-runtime tier need (real-runtime.md, "Build"); the Makefile's
# DEB_PACKAGES holds the same names so `make test` installs them.
DEB_PACKAGES = ("slurmctld slurmd slurm-client munge libslurm-dev gcc make libbsd-dev makeself jq parallel "
                "squashfs-tools squashfuse fuse-overlayfs fuse3 curl zstd pigz busybox-static util-linux "
                "libcap2-bin binutils qemu-user libpmix2 libpmix-dev mmdebstrap iproute2").split()
# ... and what the real nvidia-container-cli build (nvidia_build.py) and its package stand-ins
# (nvidia_packages.py: dpkg-deb, rpmbuild, createrepo_c) need.
DEB_PACKAGES += ("bmake golang-go libtirpc-dev libelf-dev libseccomp-dev libcap-dev pkg-config lsb-release patch "
                 "dpkg-dev rpm createrepo-c").split()
# ... and what building the multi-threaded squashfuse_ll 0.6.2 needs (squashfuse_build.py: autotools are above).
DEB_PACKAGES += "libfuse3-dev libzstd-dev liblz4-dev liblzo2-dev".split()


class SourcesUnavailable(Exception):
    """Neither the vendor tarball nor the upstream tag could be had (offline, no ../shared/vendor)."""


class BuildFailed(Exception):
    pass


def vendor_dir() -> Path:
    return Path(os.environ.get("CK_VENDOR_DIR", REPO.parent / "shared" / "vendor"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, log: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    if log is not None:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{proc.stdout}\n")
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise BuildFailed(f"{' '.join(cmd)} (in {cwd}) exited {proc.returncode}:\n{tail}")


def fetch_source(key: str, dest: Path) -> str:
    """Unpack source KEY into dest/<name>-<version>; returns a one-line provenance."""
    src = SOURCES[key]
    tarball = vendor_dir() / src.tarball
    if tarball.is_file():
        digest = _sha256(tarball)
        if digest != src.sha256:
            raise BuildFailed(f"{tarball}: sha256 {digest} is not the pinned {src.sha256}")
        with tarfile.open(tarball) as tf:
            tf.extractall(dest, filter="tar")
        return f"{tarball} sha256 {digest}"
    # No vendor dir: the upstream tag, accepted only at the pinned commit.
    clone = dest / f".git-{key}"
    try:
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch", f"v{src.version}",
                        src.upstream, str(clone)], check=True, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise SourcesUnavailable(
            f"{tarball} not found and {src.upstream} tag v{src.version} unreachable "
            f"({detail.strip().splitlines()[-1] if detail.strip() else exc})") from exc
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if head != src.commit:
        raise BuildFailed(f"{src.upstream} v{src.version} is commit {head}, not the pinned {src.commit}")
    archive = subprocess.run(["git", "-C", str(clone), "archive", f"--prefix={key}/", "HEAD"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tf:
        tf.extractall(dest, filter="tar")
    shutil.rmtree(clone)
    return f"{src.upstream} v{src.version} at commit {head}"


def build_enroot(tree: Path, stage: Path, version: str, log: Path) -> None:
    # Submodule deps (musl, linux-headers, makeself; libbsd too for 3.x) are absent from a git
    # archive: mark them built and use Debian's libbsd and makeself instead (FORCE_GLIBC=1).
    deps = ["musl", "linux-headers", "makeself"] + (["libbsd"] if version.startswith("3.") else [])
    for dep in deps:
        (tree / "deps" / dep).mkdir(parents=True, exist_ok=True)
        (tree / "deps" / dep / ".stamp").touch()
    makeself = tree / "deps/dist/makeself/bin/enroot-makeself"
    makeself.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(shutil.which("makeself") or "/usr/bin/makeself", makeself)
    if version.startswith("3."):
        env = {"CPPFLAGS": "-isystem /usr/include/bsd"}  # libbsd overlay mode; env, so the Makefile appends it
        args = ["FORCE_GLIBC=1"]
    else:
        # 4.x builds its vendored libbsd subset but calls strlcpy/strlcat, missing from glibc 2.36.
        env = {"CPPFLAGS": "-D_GNU_SOURCE -include /usr/include/bsd/string.h"}
        args = ["FORCE_GLIBC=1", "LDLIBS=-l:libbsd.a -l:libbsd.so.0"]
    # prefix/sysconfdir at build time too: they are baked into the enroot script when it is built.
    args += ["prefix=/usr", "sysconfdir=/etc"]
    _run(["make", "-j2", *args], tree, env, log)
    _run(["make", "install", *args, f"DESTDIR={stage}"], tree, env, log)
    # What the enroot+caps package does on ParallelCluster AMIs: unprivileged imports need them.
    _run(["setcap", "cap_sys_admin+pe", str(stage / "usr/bin/enroot-mksquashovlfs")], tree, log=log)
    _run(["setcap", "cap_sys_admin,cap_mknod+pe", str(stage / "usr/bin/enroot-aufs2ovlfs")], tree, log=log)


def build_pyxis(tree: Path, stage: Path, log: Path) -> None:
    _run(["make", "-j2"], tree, log=log)
    target = stage / PYXIS_SO
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(tree / "spank_pyxis.so", target)
    target.chmod(0o755)


def build(gen_key: str) -> Path:
    """Build generation gen_key (cached); returns its stage directory (a root-like tree: usr/, etc/).
    Concurrent callers (pytest-xdist workers) wait for one another on a lock file."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{gen_key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(gen_key)


def _build_locked(gen_key: str) -> Path:
    gen = GENERATIONS[gen_key]
    out = CACHE / gen_key
    stamp_text = "\n".join(SOURCES[k].sha256 + " " + k for k in (gen.enroot, gen.pyxis)) + "\n" + \
        hashlib.sha256(Path(__file__).read_bytes()).hexdigest() + " runtime_build.py\n"
    stage = out / "stage"
    stamp = out / ".stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text and (stage / PYXIS_SO).is_file():
        return stage
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{gen_key}-", dir=CACHE))
    try:
        log = work / "build.log"
        provenance = [fetch_source(k, work / "src") for k in (gen.enroot, gen.pyxis)]
        new_stage = work / "stage"
        build_enroot(work / "src" / gen.enroot, new_stage, gen.enroot_version, log)
        build_pyxis(work / "src" / gen.pyxis, new_stage, log)
        (new_stage / "PROVENANCE").write_text("\n".join(provenance) + "\n")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        new_stage.rename(stage)
        shutil.copy2(log, out / "build.log")
        stamp.write_text(stamp_text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return stage


def main(argv: list[str]) -> int:
    keys = [*GENERATIONS, "nvidia"] if not argv or argv[0] == "all" else argv
    for key in keys:
        if key == "nvidia":  # the real nvidia-container-cli (nvidia_build.py)
            import nvidia_build
            rc = nvidia_build.main()
            if rc:
                return rc
            continue
        if key not in GENERATIONS:
            print(f"runtime_build: unknown generation {key!r} (gen3, gen4, nvidia, all)", file=sys.stderr)
            return 2
        try:
            print(f"{key}: {build(key)}")
        except SourcesUnavailable as exc:
            print(f"runtime_build: {key}: {exc}", file=sys.stderr)
            return 3
        except BuildFailed as exc:
            print(f"runtime_build: {key}: {exc}", file=sys.stderr)
            return 1
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
