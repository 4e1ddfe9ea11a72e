"""The REAL enroot (4.1.2, built by tests/real_runtime/runtime_build.py) for the image_sync tests, plus the
loopback registry it pulls from and the test images it serves.

Why: image_sync's import path was proven only against a fake `enroot` that accepted what the real one
rejects. Here the real enroot runs on the host, as root like the head node's sync unit, with every one of
its working directories inside the test's tmp dir (ENROOT_*_PATH; it would create /run/enroot and
~/.cache/enroot otherwise). What is still a stand-in:
  - the registry (tests/images/images_fakes.py: OCI distribution API on 127.0.0.1, plain http, which
    enroot allows with ENROOT_ALLOW_HTTP); faults are injected THERE, not into enroot: ``fail`` answers
    503 to the first N manifest requests of a repository (each import attempt makes one before any
    other), ``sleep`` holds every blob of a repository for that long (an import stuck downloading),
    ``hold`` holds them until the test removes the fault, ``rate`` trickles every blob of a repository at
    that many bytes per second (a slow registry: enroot's download grows on disk while it runs);
  - ``wrap/enroot``, a wrapper that logs each ``import`` URI and then execs the real enroot unchanged
    (the tests count imports with it);
  - the image content: ``rootfs`` builds the marker files of real CUDA/NCCL/EFA stacks (the layouts
    image_versions.py reads), not real libraries.
"""
from __future__ import annotations

import json
import random
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
for _p in (TESTS / "images", TESTS / "real_runtime"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import images_fakes  # noqa: E402
import tier  # noqa: E402

WRAP = HERE / "wrap"
GENERATION = "gen4"  # the host-side tests use one generation; tests/real_runtime runs both


def stage(gen: str = GENERATION) -> Path:
    """The built enroot (skips or, in CI, fails with the tier's one-line reason when it cannot run)."""
    return tier.stage_for(gen)


def enroot_env(root: Path, gen: str = GENERATION) -> dict[str, str]:
    """Environment for the node zipapp with the real enroot on PATH (behind the logging wrapper)."""
    built = stage(gen)
    dirs = {k: root / f"enroot-{k.lower()}" for k in ("RUNTIME", "DATA", "CACHE", "TEMP", "CONFIG")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    (root / "home").mkdir(exist_ok=True)
    return {
        "PATH": f"{WRAP}:{built / 'usr/bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "CK_REAL_ENROOT": str(built / "usr/bin/enroot"),
        "CK_ENROOT_WRAP_LOG": str(root / "enroot.log"),
        "ENROOT_LIBRARY_PATH": str(built / "usr/lib/enroot"),
        "ENROOT_SYSCONF_PATH": str(built / "etc/enroot"),
        "ENROOT_ALLOW_HTTP": "yes",
        **{f"ENROOT_{k}_PATH": str(d) for k, d in dirs.items()},
        # image_sync reads enroot.conf for the preflight; the real one is not installed on this host
        "CK_ENROOT_CONF": str(root / "no-enroot.conf"),
    }


def imports(log: Path) -> list[str]:
    """URIs passed to `enroot import`, one per attempt (from the wrapper's log)."""
    if not log.exists():
        return []
    return [ln.split(" ", 2)[2] for ln in log.read_text().splitlines() if ln.startswith("import ")]


# ------------------------------------------------------------------------------------ registry

class Registry:
    """A loopback registry with per-repository faults, for one test."""

    def __init__(self) -> None:
        self._cm = images_fakes.serve()
        self.fake: images_fakes.FakeRegistry = self._cm.__enter__()
        self.faults: dict[str, dict] = {}
        self._failed: dict[str, int] = {}
        self._stop = threading.Event()
        self.fake.hook = self._hook
        self.fake.blob_rate = self._rate

    def reset_counts(self) -> None:
        self._failed.clear()

    @property
    def host(self) -> str:
        return self.fake.host

    def _hook(self, repo: str, kind: str) -> int | None:
        """Called by the registry before answering; returns an HTTP status to answer instead."""
        fault = self.faults.get(repo, self.faults.get("*", {}))
        fail = fault.get("fail", 0)
        if kind == "manifests" and fail:
            done = self._failed.get(repo, 0)
            if fail == "always" or done < fail:
                self._failed[repo] = done + 1
                return 503
        if kind == "blobs" and fault.get("sleep"):
            deadline = time.monotonic() + float(fault["sleep"])
            while time.monotonic() < deadline and not self._stop.is_set():
                time.sleep(0.05)
        while kind == "blobs" and self.faults.get(repo, {}).get("hold") and not self._stop.is_set():
            time.sleep(0.05)  # held until the test releases it (faults changed) or the registry closes
        return None

    def _rate(self, repo: str) -> float | None:
        """Bytes per second to serve the repository's blobs at (``rate`` fault), None for full speed."""
        rate = self.faults.get(repo, self.faults.get("*", {})).get("rate")
        return float(rate) if rate and not self._stop.is_set() else None

    def close(self) -> None:
        self._stop.set()
        self._cm.__exit__(None, None, None)


# ------------------------------------------------------------------------------------ image content

def _write(files: dict, rel: str, data: bytes | str, mode: int = 0o644) -> None:
    files[rel.lstrip("/")] = (data.encode() if isinstance(data, str) else data, mode)


def _link(files: dict, rel: str, target: str) -> None:
    files[rel.lstrip("/")] = "->" + target


def _binary(rng: random.Random, size: int, embed: bytes = b"") -> bytes:
    """Random bytes standing in for a shared library, optionally with a string compiled in."""
    data = bytearray(rng.randbytes(size))
    if embed:
        at = size // 2
        data[at:at + len(embed)] = embed
    return bytes(data)


def rootfs(seed: str, spec: dict) -> dict:
    """Files of a test image. spec: {"versions": {cuda, nccl, aws_ofi_nccl, efa_installer, libfabric,
    pytorch}, "layout": "efa-installer" (default) | "source-build", "big_mb": N}; "env" (KEY=VALUE strings) goes
    to the image config's Env (serve_image), which enroot import writes to the image's /etc/environment. The
    marker files are where real NGC / AWS images keep them (see clusterkit_node/image/versions.py)."""
    rng = random.Random(seed)
    files: dict = {}
    _write(files, "/etc/os-release", 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n')
    _write(files, "/etc/image-seed", seed + "\n")
    _write(files, "/usr/bin/hello", _binary(rng, 64 << 10), 0o755)
    for i in range(20):
        _write(files, f"/usr/share/doc/pkg{i}/copyright", f"package {i} of {seed}\n" * 20)
    if spec.get("big_mb"):
        _write(files, "/opt/data/big.bin", rng.randbytes(int(spec["big_mb"]) << 20))
    v = spec.get("versions", {})
    layout = spec.get("layout", "efa-installer")
    if "cuda" in v:  # NGC layout: /usr/local/cuda -> /etc/alternatives/cuda -> /usr/local/cuda-X.Y
        majmin = ".".join(v["cuda"].split(".")[:2])
        _write(files, f"/usr/local/cuda-{majmin}/version.json", json.dumps(
            {"cuda": {"name": "CUDA SDK", "version": v["cuda"]},
             "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": v["cuda"]}}, indent=3))
        _link(files, "/etc/alternatives/cuda", f"/usr/local/cuda-{majmin}")
        _link(files, "/usr/local/cuda", "/etc/alternatives/cuda")
    if "nccl" in v:
        major, minor, patch = (v["nccl"].split(".") + ["0", "0"])[:3]
        libdir = "/usr/lib/x86_64-linux-gnu" if layout == "efa-installer" else "/opt/nccl/build/lib"
        _write(files, f"{libdir}/libnccl.so.{v['nccl']}", _binary(rng, 32 << 10))
        _link(files, f"{libdir}/libnccl.so.{major}", f"libnccl.so.{v['nccl']}")
        incdir = "/usr/include" if layout == "efa-installer" else "/opt/nccl/build/include"
        _write(files, f"{incdir}/nccl.h", f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n"
                                          f'#define NCCL_PATCH {patch}\n#define NCCL_SUFFIX ""\n')
    pkgs = []
    if "libfabric" in v:
        pkgs += [f"libfabric-aws_{v['libfabric']}_amd64", f"libfabric-aws-bin_{v['libfabric']}_amd64"]
        _write(files, "/opt/amazon/efa/lib/libfabric.so.1.25.0", _binary(rng, 16 << 10))
        _link(files, "/opt/amazon/efa/lib/libfabric.so.1", "libfabric.so.1.25.0")
    if "aws_ofi_nccl" in v:
        embed = f"Initializing aws-ofi-nccl {v['aws_ofi_nccl']}".encode()
        if layout == "source-build":  # ADT Dockerfiles: built from source into /opt/aws-ofi-nccl
            _write(files, "/opt/aws-ofi-nccl/lib/libnccl-net.so", _binary(rng, 48 << 10, embed))
        else:  # EFA installer >= 1.29 bundles the plugin as the libnccl-ofi package
            _write(files, "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so",
                   _binary(rng, 48 << 10, embed))
            _link(files, "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so", "libnccl-net-ofi.so")
            pkgs.append(f"libnccl-ofi_{v['aws_ofi_nccl']}-1_amd64")
    if "efa_installer" in v:
        pkgs = ["ibacm_50.0-1_amd64", "efa-config_1.17-1_all", "efa-profile_1.7-1_all"] + pkgs
        _write(files, "/opt/amazon/efa_installed_packages",
               f"# EFA installer version: {v['efa_installer']}\n# Debug packages installed: no\n"
               f"# Packages installed:\n{' '.join(pkgs)}\n")
    if "pytorch" in v:
        _write(files, "/usr/local/lib/python3.12/dist-packages/torch/version.py",
               "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version']\n"
               f"__version__ = '{v['pytorch']}'\ndebug = False\ncuda: Optional[str] = '12.8'\n")
    return files


def serve_image(registry: Registry, repo: str, seed: str, spec: dict) -> tuple[str, int]:
    """Publish the image; returns (digest, compressed size as `clusterkit lock` records it)."""
    digest = images_fakes.add_rootfs_image(registry.fake, repo, "latest", [rootfs(seed, spec)],
                                           env=tuple(spec.get("env", ())))
    body, _ = registry.fake.manifests[(repo, digest)]
    doc = json.loads(body)
    size = doc["config"]["size"] + sum(layer["size"] for layer in doc["layers"])
    return digest, size


@pytest.fixture
def registry():
    reg = Registry()
    try:
        yield reg
    finally:
        reg.close()
