"""Availability and start-up of the real-runtime tier (shared by its conftest, tests and benchmarks).

Skips with a one-line reason when the tier cannot run here (not root, packages missing, sources
unavailable offline), EXCEPT under CI=true or CK_REQUIRE_REAL_RUNTIME=1 (.ci/run sets both): then it
fails, so CI can never go green without this evidence. `make test` installs the Debian packages.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import runtime_build
from node_root import NodeRoot

TOOLS = ("unshare", "nsenter", "setpriv", "munged", "slurmctld", "slurmd", "srun", "mksquashfs", "unsquashfs",
         "curl", "jq", "parallel", "zstd", "pigz", "busybox", "setcap", "make", "gcc", "makeself", "ip", "mmdebstrap")


def required() -> bool:
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("CK_REQUIRE_REAL_RUNTIME") == "1")


def unavailable(reason: str) -> None:
    if required():
        pytest.fail(f"real Enroot/Pyxis tier required here but cannot run: {reason}")
    pytest.skip(f"real Enroot/Pyxis tier skipped: {reason}")


def check_host() -> None:
    if os.geteuid() != 0:
        unavailable("needs root (mount namespaces, munged, slurmd)")
    search = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [t for t in TOOLS if shutil.which(t, path=search) is None]
    # spank.h builds pyxis; fuse3's and zstd's headers the multi-threaded squashfuse_ll (squashfuse_build.py)
    missing += [h for h in ("/usr/include/slurm/spank.h", "/usr/include/fuse3/fuse_lowlevel.h", "/usr/include/zstd.h")
                if not Path(h).exists()]
    if missing:
        unavailable(f"missing {' '.join(missing)} (apt-get install {' '.join(runtime_build.DEB_PACKAGES)})")
    import squashfuse_build  # ubuntu2404 node roots carry the multi-threaded squashfuse_ll it builds (ami_layer)

    reason = squashfuse_build.unavailable_reason()
    if reason:
        unavailable(reason)


_stages: dict[str, Path] = {}
_unavailable: dict[str, str] = {}


def stage_for(gen: str) -> Path:
    """The built generation (cached across the session and across runs, see runtime_build). Sources
    that cannot be had are tried once per session: every later caller gets the same one-line reason."""
    check_host()
    if gen in _unavailable:
        unavailable(_unavailable[gen])
    if gen not in _stages:
        try:
            _stages[gen] = runtime_build.build(gen)
        except runtime_build.SourcesUnavailable as exc:
            _unavailable[gen] = str(exc)
            unavailable(str(exc))
    return _stages[gen]


# What building the real nvidia-container-cli and packing its deb/rpm stand-ins runs (nvidia_build, nvidia_packages).
NVIDIA_TOOLS = ("make", "gcc", "go", "rpcgen", "pkg-config", "patch", "dpkg-deb", "dpkg", "rpm", "rpmbuild",
                "createrepo_c")


def nvidia_repo() -> Path:
    """The stand-in NVIDIA repository (nvidia_packages.build_repo, default dest: cached across runs), after the
    same availability rules as the enroot builds: root, the tools, the vendored sources."""
    import nvidia_packages

    if os.geteuid() != 0:
        unavailable("needs root (dpkg/rpm into scratch roots)")
    search = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [t for t in NVIDIA_TOOLS if shutil.which(t, path=search) is None]
    headers = [h for h in ("/usr/include/tirpc/rpc/rpc.h", "/usr/include/libelf.h", "/usr/include/seccomp.h",
                           "/usr/include/sys/capability.h") if not Path(h).exists()]
    if missing or headers:
        unavailable(f"missing {' '.join(missing + headers)} (apt-get install {' '.join(runtime_build.DEB_PACKAGES)})")
    if "nvidia" in _unavailable:
        unavailable(_unavailable["nvidia"])
    try:
        return nvidia_packages.build_repo()
    except runtime_build.SourcesUnavailable as exc:
        _unavailable["nvidia"] = str(exc)
        unavailable(str(exc))
        raise


def start_node(gen: runtime_build.Generation, tmp_path_factory: pytest.TempPathFactory,
               profile: str = "ubuntu2404", fuse_mode: str | None = None) -> NodeRoot:
    """A started node root of ``profile``'s AMI (``fuse_mode``: /dev/fuse's mode, else the profile's) with munged,
    slurmctld and slurmd running (caller stops it)."""
    stage = stage_for(gen.key)
    node = NodeRoot(tmp_path_factory.mktemp(f"node-{gen.key}-{profile}"), stage, profile=profile, fuse_mode=fuse_mode)
    try:
        node.start()
        node.start_slurm()
    except Exception:
        node.stop()
        raise
    return node
