"""Test images in the layouts real GPU images use, built from the real artifacts (artifacts.py) and squashed
with the image store's own mksquashfs options. Each layout names the public source it follows.

Real: every NCCL, CUDA runtime, aws-ofi-nccl and libfabric binary (PyPI wheels, the vendored plugin source built
here, Debian's libfabric), the wheels' dist-info and headers, PyTorch's version.py text (torch 2.8.0's, verbatim)
and DT_RPATH (read from the torch-2.8.0-cp311-manylinux_2_28_x86_64 wheel's torch/lib/libtorch_*.so, 2026-12-02).
Stand-ins: PyTorch's 1 GB libtorch_cuda.so is a small library compiled here with that same DT_RPATH and the
NEEDED entries the loader resolves (libnccl.so.2, libcudart.so.12); the EFA installer's package list is written in
efa_installer.sh's format; libfabric is Debian's 1.17.0 standing in for the EFA installer's libfabric-aws.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import artifacts

from clusterkit_node.contract.settings import DEFAULT_SQUASH_OPTIONS

TORCH_VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']
__version__ = '2.8.0+cu128'
debug = False
cuda: Optional[str] = '12.8'
git_version = 'a1cb3cc05d46d198467bebbb6e8fba50a325d4e7'
hip: Optional[str] = None
xpu: Optional[str] = None
"""
TORCH_RPATH = ("$ORIGIN/../../nvidia/cublas/lib:$ORIGIN/../../nvidia/cuda_cupti/lib:"
               "$ORIGIN/../../nvidia/cuda_nvrtc/lib:"
               "$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cudnn/lib:$ORIGIN/../../nvidia/cufft/lib:"
               "$ORIGIN/../../nvidia/curand/lib:$ORIGIN/../../nvidia/cusolver/lib:$ORIGIN/../../nvidia/cusparse/lib:"
               "$ORIGIN/../../nvidia/cusparselt/lib:$ORIGIN/../../cusparselt/lib:$ORIGIN/../../nvidia/nccl/lib:"
               "$ORIGIN/../../nvidia/nvtx/lib:$ORIGIN/../../nvidia/cufile/lib:$ORIGIN")
DEBIAN_LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
NCCL_NEW, NCCL_OLD, CUDART = (artifacts.WHEELS[0], artifacts.WHEELS[1], artifacts.WHEELS[2])


class Tree:
    """An image root being assembled: files copied in, symlinks, text."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, rel: str) -> Path:
        path = self.root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def copy(self, src: Path, rel: str) -> None:
        dest = self._path(rel)
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dest)

    def link(self, rel: str, target: str) -> None:
        os.symlink(target, self._path(rel))

    def text(self, rel: str, content: str) -> None:
        self._path(rel).write_text(content)

    def squash(self, out: Path) -> Path:
        subprocess.run(["mksquashfs", str(self.root), str(out), "-noappend", "-quiet", "-no-progress", "-all-root",
                        *shlex.split(DEFAULT_SQUASH_OPTIONS)], check=True, stdout=subprocess.DEVNULL)
        return out


def _nccl_lib(wheel: artifacts.Wheel) -> Path:
    return artifacts.unpacked(wheel) / "nvidia" / "nccl" / "lib" / "libnccl.so.2"


def _site(tree: Tree, site: str, *wheels: artifacts.Wheel) -> None:
    """pip's layout: site-packages/nvidia/<component>/... and <dist>-<version>.dist-info beside it."""
    for wheel in wheels:
        src = artifacts.unpacked(wheel)
        for entry in src.iterdir():
            if entry.name != ".done":
                tree.copy(entry, f"{site}/{entry.name}")


def ngc_cuda_base(tree: Tree) -> None:
    """NVIDIA's CUDA runtime images (gitlab.com/nvidia/container-images/cuda, dist/12.9.1/ubuntu2404 base + runtime
    Dockerfiles): cuda-cudart-12-9 puts libcudart.so.12.9.79 under /usr/local/cuda-12.9/targets/x86_64-linux/lib
    (lib64 links there), /usr/local/cuda -> /etc/alternatives/cuda -> /usr/local/cuda-12.9 (update-alternatives);
    libnccl2 installs /usr/lib/x86_64-linux-gnu/libnccl.so.2.X.Y with libnccl.so.2 beside it;
    ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 (enroot writes ENV to /etc/environment)."""
    rt = artifacts.unpacked(CUDART) / "nvidia" / "cuda_runtime"
    lib = "/usr/local/cuda-12.9/targets/x86_64-linux/lib"
    tree.copy(rt / "lib" / "libcudart.so.12", f"{lib}/libcudart.so.12.9.79")
    tree.link(f"{lib}/libcudart.so.12", "libcudart.so.12.9.79")
    tree.copy(rt / "include" / "cuda_runtime_api.h", "/usr/local/cuda-12.9/targets/x86_64-linux/include/"
              "cuda_runtime_api.h")
    tree.link("/usr/local/cuda-12.9/lib64", "targets/x86_64-linux/lib")
    tree.link("/etc/alternatives/cuda", "/usr/local/cuda-12.9")
    tree.link("/usr/local/cuda", "/etc/alternatives/cuda")
    tree.copy(_nccl_lib(NCCL_OLD), "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")
    tree.link("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "libnccl.so.2.21.5")
    tree.text("/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
    tree.text("/etc/ld.so.conf.d/x86_64-linux-gnu.conf", "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n"
              "/usr/lib/x86_64-linux-gnu\n")
    tree.text("/etc/ld.so.conf.d/000_cuda.conf", "/usr/local/cuda-12.9/targets/x86_64-linux/lib\n")
    tree.text("/etc/environment", "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
              "/usr/sbin:/usr/bin:/sbin:/bin\nCUDA_VERSION=12.9.1\n"
              "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64\n")


def pip_torch(tree: Tree, work: Path) -> None:
    """`pip install torch` on the CUDA base, then `pip install -U nvidia-nccl-cu12==2.32.3` (the usual way to a newer
    NCCL): torch and the nvidia-* wheels in /usr/local/lib/python3.12/dist-packages; the image now holds TWO NCCLs,
    the base's 2.21.5 (the higher-looking file name) and the wheel's 2.32.3, which torch's DT_RPATH loads."""
    ngc_cuda_base(tree)
    site = "/usr/local/lib/python3.12/dist-packages"
    _site(tree, site, NCCL_NEW, CUDART)
    tree.text(f"{site}/torch/version.py", TORCH_VERSION_PY)
    nvidia = tree.root / site.lstrip("/") / "nvidia"
    stand_in = work / "libtorch_cuda.c"
    stand_in.write_text("void clusterkit_libtorch_cuda_stand_in(void) {}\n")
    out = tree.root / site.lstrip("/") / "torch" / "lib" / "libtorch_cuda.so"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(stand_in), "-Wl,--no-as-needed",
                    "-Wl,--disable-new-dtags", f"-Wl,-rpath,{TORCH_RPATH}",
                    f"-L{nvidia / 'nccl' / 'lib'}", "-l:libnccl.so.2", f"-L{nvidia / 'cuda_runtime' / 'lib'}",
                    "-l:libcudart.so.12"], check=True)


def _plugin_and_fabric(tree: Tree, plugin_dir: str, fabric_dir: str) -> None:
    prefix = artifacts.plugin()
    for name in ("libnccl-net.so", "libnccl-net-ofi.so"):
        tree.copy(prefix / "lib" / name, f"{plugin_dir}/{name}")
    for name in ("libfabric.so.1", "libhwloc.so.15"):
        real = (DEBIAN_LIBDIR / name).resolve()
        tree.copy(real, f"{fabric_dir}/{real.name}")
        if real.name != name:
            tree.link(f"{fabric_dir}/{name}", real.name)


def conda_pip_cuda(tree: Tree) -> None:
    """The case that read no CUDA at all before: NCCL and the CUDA runtime only as pip wheels (a conda/venv
    site-packages, no /usr/local/cuda), aws-ofi-nccl built from source into /opt/aws-ofi-nccl (aws-samples'
    awsome-distributed-training Dockerfiles before EFA installer 1.30), libfabric from the distribution."""
    _site(tree, "/opt/conda/lib/python3.11/site-packages", NCCL_NEW, CUDART)
    _plugin_and_fabric(tree, "/opt/aws-ofi-nccl/lib", "/usr/lib/x86_64-linux-gnu")
    tree.text("/etc/environment", "LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:/opt/conda/lib\n")


def efa_installer(tree: Tree) -> None:
    """aws-samples' nccl-tests image (awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile)
    on the CUDA base: the EFA installer's libfabric in /opt/amazon/efa/lib (its /etc/ld.so.conf.d/000_efa.conf),
    its aws-ofi-nccl in /opt/amazon/ofi-nccl/lib, /opt/amazon/efa_installed_packages, and
    ENV LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:... The package list names libfabric-aws
    2.3.1amzn1.0 while the library present is Debian's 1.17.0: what the plugin links wins over a list."""
    ngc_cuda_base(tree)
    _plugin_and_fabric(tree, "/opt/amazon/ofi-nccl/lib", "/opt/amazon/efa/lib")
    tree.text("/etc/ld.so.conf.d/000_efa.conf", "/opt/amazon/efa/lib\n")
    tree.text("/opt/amazon/efa_installed_packages",
              "# EFA installer version: 1.47.0\n# Debug packages installed: no\n"
              "libfabric1-aws_2.3.1amzn1.0_amd64.deb libfabric-aws-bin_2.3.1amzn1.0_amd64.deb "
              "libnccl-ofi_1.21.1-1_amd64.deb efa-config_1.18-1_all.deb\n")
    tree.text("/etc/environment", "CUDA_VERSION=12.9.1\nLD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:"
              "/opt/amazon/efa/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64\n")


LAYOUTS = {"ngc-cuda": ngc_cuda_base, "conda-pip-cuda": conda_pip_cuda, "efa-installer": efa_installer}


def build(name: str, work: Path) -> Path:
    """The layout's .sqsh in ``work`` (built once per call)."""
    tree = Tree(work / f"{name}-root")
    if name == "pip-torch":
        pip_torch(tree, work)
    else:
        LAYOUTS[name](tree)
    return tree.squash(work / f"{name}.sqsh")
