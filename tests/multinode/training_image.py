"""The training image the multi-node tier runs: Debian bookworm with PyTorch (gloo) and Open MPI, built by
mmdebstrap from Debian packages, served by the loopback registry as a one-layer OCI image.

Why Debian's packages: they are what this machine can reach (no Docker Hub, no NGC), and they are the real
thing: ``python3-torch`` 1.13 links gloo, ``openmpi-bin`` 4.1 is built with PMIx (``libpmix2``), and
``python3-mpi4py`` drives it. The image sets ``PYTORCH_VERSION`` as NGC's PyTorch images do, which is what
enroot's ``50-slurm-pytorch.sh`` hook keys on to give ranks MASTER_ADDR, RANK, WORLD_SIZE.

Cached by content outside the clone (``$CK_TEST_CACHE``, default ``~/.cache/clusterkit-tests``): the key
is the package list, the suite, the mirror and mmdebstrap's options, so a fresh machine builds it once
(3 m 54 s here on 2 busy cores; the layer is 469 MB gzip'd, about 1.5 GB unpacked, because python3-torch
brings OpenCV, GDAL and Qt) and later runs reuse it. Reproducible up to the
mirror's current package versions: SOURCE_DATE_EPOCH fixes file times, ``versions.txt`` records what apt
installed.
"""
from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3-torch", "python3-mpi4py", "openmpi-bin", "libpmix2", "python3-minimal", "procps",
            "iproute2", "hostname")
TORCH_VERSION = "1.13.1"
SOURCE_DATE_EPOCH = "1700000000"
OPTIONS = ("--variant=apt", "--aptopt=APT::Install-Recommends \"false\"",
           "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
           "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-exclude=/usr/share/info/*")
ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"PYTORCH_VERSION={TORCH_VERSION}",
       "OMPI_MCA_btl=tcp,self", "OMPI_MCA_btl_tcp_if_include=eth0", "OMPI_MCA_oob_tcp_if_include=eth0",
       "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")


class Unavailable(RuntimeError):
    """mmdebstrap or the Debian mirror is not there: the tier says so in one line."""


@dataclass(frozen=True)
class Layer:
    path: Path      # the gzip'd layer tarball
    diff_id: str    # sha256 of the uncompressed tar (the image config's rootfs.diff_ids)
    versions: str   # "package version" per line, as apt installed them


def cache_root() -> Path:
    return Path(os.environ.get("CK_TEST_CACHE") or Path.home() / ".cache" / "clusterkit-tests")


def key() -> str:
    text = json.dumps({"suite": SUITE, "mirror": MIRROR, "packages": PACKAGES, "options": OPTIONS,
                       "epoch": SOURCE_DATE_EPOCH, "recipe": 1}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build() -> Layer:
    """The layer, from the cache or built now (one builder at a time: a lock file beside it)."""
    out = cache_root() / "training-image" / key()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "meta.json").exists():
            _build_into(out)
    meta = json.loads((out / "meta.json").read_text())
    return Layer(out / "layer.tar.gz", meta["diff_id"], (out / "versions.txt").read_text())


def _build_into(out: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        raise Unavailable("mmdebstrap is not installed (apt-get install mmdebstrap)")
    work = Path(tempfile.mkdtemp(prefix=f".{key()}-", dir=out.parent))
    try:
        tar = work / "rootfs.tar"
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        proc = subprocess.run(
            ["mmdebstrap", "--quiet", *OPTIONS, f"--include={','.join(PACKAGES)}",
             "--customize-hook=chroot \"$1\" dpkg-query -W -f='${Package} ${Version}\\n' > \"$1/versions.txt\"",
             "--customize-hook=copy-out /versions.txt " + str(work),
             "--customize-hook=rm -f \"$1/versions.txt\"",
             SUITE, str(tar), MIRROR],
            capture_output=True, text=True, env=env, timeout=1200)
        if proc.returncode != 0:
            raise Unavailable(f"mmdebstrap failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
        digest = hashlib.sha256()
        gz = work / "layer.tar.gz"
        with open(tar, "rb") as src, open(gz, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as dst:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    dst.write(chunk)
        tar.unlink()
        (work / "meta.json").write_text(json.dumps({"diff_id": f"sha256:{digest.hexdigest()}"}))
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def serve(registry, repo: str, tag: str, layer: Layer) -> str:
    """Put the image on the loopback registry (``images_fakes.FakeRegistry``); returns its manifest digest."""
    from images_fakes import DOCKER_CONFIG, DOCKER_LAYER, DOCKER_MANIFEST

    blob = layer.path.read_bytes()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": list(ENV), "Cmd": ["/bin/bash"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
    }).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG, "size": len(config), "digest": registry.put_blob(repo, config)},
        "layers": [{"mediaType": DOCKER_LAYER, "size": len(blob), "digest": registry.put_blob(repo, blob)}],
    }
    return registry.put_manifest(repo, manifest, DOCKER_MANIFEST, tag=tag)
