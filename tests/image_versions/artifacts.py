"""The real NVIDIA and AWS artifacts the image-versions tier builds its test images from, and where they come from.

- Wheels from PyPI, pinned by sha256: the NCCL and CUDA runtime wheels exactly as ``pip install torch`` images carry
  them (site-packages/nvidia/...), an older NCCL that plays the system NCCL of an NGC-style base, and nvcc's
  headers, which the aws-ofi-nccl build needs. ``make test-artifacts`` (part of ``make test``) downloads them
  with pip into ``$CK_TEST_CACHE/wheels`` (default ~/.cache/clusterkit-tests), outside the clone: the tests
  themselves never reach the network.
- aws-ofi-nccl 1.21.1 built from the vendored, unmodified upstream tarball (../shared/vendor) with Debian's
  libfabric, by the recipe in ../shared/reference/real-runtime.md, cached by content next to the wheels.

Run as a script: ``python tests/image_versions/artifacts.py fetch|plugin``.
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
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGIN_TARBALL = "aws-ofi-nccl-1.21.1.tar.gz"
# as ../shared/vendor/SHA256SUMS lists it
PLUGIN_SHA256 = "38b02765b120497d3fcc46a2965566312529d17d25bc28fa6a4ad9f71918e665"
PLUGIN_VERSION = "1.21.1"
# Debian packages the plugin build needs (the Makefile's DEB_PACKAGES lists them too; a test checks).
DEB_PACKAGES = ("libfabric-dev", "libhwloc-dev", "autoconf", "automake", "libtool", "gcc", "make")


@dataclass(frozen=True)
class Wheel:
    project: str
    version: str
    sha256: str
    why: str

    @property
    def dist(self) -> str:
        return self.project.replace("-", "_")


WHEELS = (
    Wheel("nvidia-nccl-cu12", "2.32.3", "bb94b2348e4861d5e8aa00b36c3d12d9bdf9c6369b82cbb723de0b582280a21c",
          "the NCCL a pip-style PyTorch image loads"),
    Wheel("nvidia-nccl-cu12", "2.21.5", "8579076d30a8c24988834445f8d633c697d42397e92ffc3f63fa26766d25e0a0",
          "the system NCCL of an NGC-style base (libnccl2's /usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5)"),
    Wheel("nvidia-cuda-runtime-cu12", "12.9.79", "25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3",
          "the CUDA runtime, pip layout and (renamed) toolkit layout"),
    Wheel("nvidia-cuda-nvcc-cu12", "12.9.86", "5d6a0d32fdc7ea39917c20065614ae93add6f577d840233237ff08e9a38f58f0",
          "crt/host_defines.h and friends for building aws-ofi-nccl"),
)
PLATFORMS = ("manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_12_x86_64",
             "manylinux2010_x86_64")


class Unavailable(Exception):
    """An artifact is not in the cache (run `make test-artifacts`) or cannot be built here."""


def cache_root() -> Path:
    return Path(os.environ.get("CK_TEST_CACHE") or Path.home() / ".cache" / "clusterkit-tests")


def vendor_dir() -> Path:
    return Path(os.environ.get("CK_VENDOR_DIR", REPO.parent / "shared" / "vendor"))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_file(wheel: Wheel) -> Path:
    """The downloaded wheel, hash-checked (the file name carries project and version)."""
    found = sorted((cache_root() / "wheels").glob(f"{wheel.dist}-{wheel.version}-*.whl"))
    if not found:
        raise Unavailable(f"{wheel.project}=={wheel.version} is not in {cache_root() / 'wheels'}: "
                          "run `make test-artifacts`")
    if sha256_of(found[0]) != wheel.sha256:
        raise Unavailable(f"{found[0]}: sha256 is not the pinned {wheel.sha256}: delete it, run `make test-artifacts`")
    return found[0]


def unpacked(wheel: Wheel) -> Path:
    """The wheel unpacked once into the cache (keyed by its sha256): site-packages content."""
    out = cache_root() / "unpacked" / wheel.sha256[:16]
    if (out / ".done").exists():
        return out
    src = wheel_file(wheel)
    with _locked(out.parent, out.name):
        if not (out / ".done").exists():
            shutil.rmtree(out, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
            with zipfile.ZipFile(src) as zf:
                zf.extractall(work)
            (work / ".done").write_text(f"{src.name}\n")
            work.rename(out)
    return out


class _locked:
    def __init__(self, parent: Path, name: str):
        parent.mkdir(parents=True, exist_ok=True)
        self.path = parent / f".{name}.lock"

    def __enter__(self) -> None:
        self.fh = open(self.path, "w")
        fcntl.flock(self.fh, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def fetch() -> int:
    """Download every pinned wheel that is not cached yet (pip, hash-checked); the `make test-artifacts` step."""
    dest = cache_root() / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    for wheel in WHEELS:
        try:
            wheel_file(wheel)
            continue
        except Unavailable:
            pass
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as req:
            req.write(f"{wheel.project}=={wheel.version} --hash=sha256:{wheel.sha256}\n")
            req.flush()
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                   "--python-version", "3.11", "-d", str(dest), "-r", req.name]
            for platform in PLATFORMS:
                cmd += ["--platform", platform]
            proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "is ignored" not in ln]
            print(f"cannot download {wheel.project}=={wheel.version}: {lines[-1] if lines else proc.returncode}",
                  file=sys.stderr)
            return 1
        print(f"downloaded {wheel.project}=={wheel.version} ({wheel.why})")
    return 0


def plugin() -> Path:
    """aws-ofi-nccl built from the vendored tarball: the install prefix (lib/libnccl-net.so ...), cached."""
    tarball = vendor_dir() / PLUGIN_TARBALL
    if not tarball.is_file():
        raise Unavailable(f"{tarball} not found (../shared/vendor beside the clone)")
    runtime, nvcc = (next(w for w in WHEELS if w.project == p) for p in ("nvidia-cuda-runtime-cu12",
                                                                         "nvidia-cuda-nvcc-cu12"))
    recipe = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    fabric = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libfabric-dev"], capture_output=True,
                            text=True).stdout.strip()
    if not fabric:
        raise Unavailable(f"libfabric-dev is not installed (apt-get install {' '.join(DEB_PACKAGES)})")
    if sha256_of(tarball) != PLUGIN_SHA256:
        raise Unavailable(f"{tarball}: sha256 is not the pinned {PLUGIN_SHA256}")
    key = hashlib.sha256(f"{PLUGIN_SHA256} {runtime.sha256} {nvcc.sha256} {fabric} {recipe}".encode()
                         ).hexdigest()[:16]
    out = cache_root() / "aws-ofi-nccl" / key
    if (out / ".done").exists():
        return out
    with _locked(out.parent, key):
        if not (out / ".done").exists():
            _build_plugin(tarball, unpacked(runtime), unpacked(nvcc), out)
    return out


def _build_plugin(tarball: Path, runtime: Path, nvcc: Path, out: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    try:
        cuda = work / "cuda"  # a CUDA dir configure accepts: the runtime wheel plus nvcc's headers, lib -> lib64
        shutil.copytree(runtime / "nvidia" / "cuda_runtime", cuda)
        shutil.copytree(nvcc / "nvidia" / "cuda_nvcc" / "include", cuda / "include", dirs_exist_ok=True)
        shutil.copytree(cuda / "lib", cuda / "lib64")
        with tarfile.open(tarball) as tf:
            tf.extractall(work, filter="tar")
        src = work / f"aws-ofi-nccl-{PLUGIN_VERSION}"
        # a git archive has no tag: m4/get_version.sh reads .release_version first
        (src / ".release_version").write_text(f"{PLUGIN_VERSION}\n")
        stage = work / "prefix"
        for cmd in (["./autogen.sh"],
                    # not --with-libfabric=/usr: it adds -isystem /usr/include, which breaks libstdc++'s #include_next
                    ["./configure", f"--prefix={stage}", f"--with-cuda={cuda}", "--disable-tests"],
                    ["make", f"-j{os.cpu_count() or 2}"], ["make", "install"]):
            proc = subprocess.run(cmd, cwd=src, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                raise Unavailable(f"aws-ofi-nccl build step {' '.join(cmd)} failed:\n{tail}")
        (stage / ".done").write_text(f"{tarball.name}\n")
        shutil.rmtree(out, ignore_errors=True)
        stage.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    """`make test-artifacts`: never fails the make run. What cannot be had here is said in one line, and the
    image-versions tests then skip (or fail where CI requires them: tests/image_versions/conftest.py)."""
    try:
        if argv == ["fetch"]:
            if fetch() != 0:
                print("image-versions tier: wheels missing; its tests will skip (fail in CI)", file=sys.stderr)
            return 0
        if argv == ["plugin"]:
            print(plugin())
            return 0
    except Unavailable as exc:
        print(f"image-versions tier: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 0
    print("usage: artifacts.py fetch|plugin", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
