"""Versions read out of images built from REAL binaries, as the image's programs meet them (issue #27).

Real: NCCL 2.32.3 and 2.21.5 and the CUDA runtime 12.9.79 from their PyPI wheels, aws-ofi-nccl 1.21.1 built from its
vendored source, Debian's libfabric 1.17.0, squashfs-tools with the store's options, and the node package's reader
run as the head node runs it (the zipapp's ``inspect`` command, and ``read_versions`` as sync records it). The
layouts and what in them is a stand-in: layouts.py.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clusterkit_node.image import versions

REPO_NODE = [sys.executable, "-m", "clusterkit_node"]


def inspect(sqsh) -> dict:
    """The zipapp's ``inspect --format json``; exit 1 exactly when an error-level rule is broken."""
    proc = subprocess.run([*REPO_NODE, "inspect", str(sqsh), "--format", "json"], capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert proc.returncode == int(any(f["level"] == "error" for f in doc["findings"]))
    return doc


def test_ngc_cuda_base_reads_the_system_libraries(real_image):
    found = versions.inspect_image(str(real_image("ngc-cuda")))
    assert found.versions == {"cuda": "12.9", "nccl": "2.21.5"}
    assert "libcudart.so.12.9.79" in found.readings["cuda"].source
    # the string NCCL compiled in, and the loader's own route to it (no RPATH: ld.so.conf)
    assert "embedded 'NCCL version 2.21.5+cuda12.4'" in found.readings["nccl"].source
    assert "found by the dynamic loader (/etc/ld.so.conf)" in found.readings["nccl"].source


def test_pip_cuda_is_no_longer_invisible(real_image):
    """The measured gap: a pip-installed CUDA runtime was not read at all."""
    sqsh = real_image("conda-pip-cuda")
    got = inspect(sqsh)
    assert got["versions"] == {"aws_ofi_nccl": "1.21.1", "cuda": "12.9", "libfabric": "1.17.0", "nccl": "2.32.3"}
    src = got["sources"]
    assert src["cuda"].startswith("/opt/conda/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12 "
                                  "(wheel nvidia-cuda-runtime 12.9.79, CUDART_VERSION 12090)")
    assert "(embedded 'NCCL version 2.32.3+cuda12.9')" in src["nccl"]
    assert src["aws_ofi_nccl"].startswith("/opt/aws-ofi-nccl/lib/libnccl-net.so ('aws-ofi-nccl 1.21.1'); the plugin "
                                          "NCCL loads (libnccl-net.so, LD_LIBRARY_PATH /opt/aws-ofi-nccl/lib)")
    assert src["libfabric"].startswith("/usr/lib/x86_64-linux-gnu/libfabric.so.1.20.0 (its version string); linked by "
                                       "the plugin")
    assert versions.read_versions(str(sqsh)) == got["versions"], "sync records what inspect shows"
    # the rules generated from aws-ofi-nccl's notes, on what the binaries say
    assert {f["rule"] for f in got["findings"]} == {"ofi-notes-1.19.0-to-1.21.1-libfabric-aws-min",
                                                   "ofi-notes-1.21.0-to-1.21.1-nccl-tested"}
    assert all(f["level"] == "warning" for f in got["findings"])


def test_two_nccls_the_one_pytorch_loads_counts(real_image):
    got = inspect(real_image("pip-torch"))
    assert got["versions"] == {"cuda": "12.9", "nccl": "2.32.3", "pytorch": "2.8.0+cu128"}
    assert got["sources"]["nccl"].endswith(
        "loaded by PyTorch: /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so needs libnccl.so.2, "
        "found by DT_RPATH $ORIGIN/../../nvidia/nccl/lib")
    assert "loaded by PyTorch (DT_RPATH $ORIGIN/../../nvidia/cuda_runtime/lib)" in got["sources"]["cuda"]
    assert ("NCCL 2.32.3 counts; also present but not loaded: 2.21.5 at /usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"
            in got["notes"])
    assert "PyTorch 2.8.0+cu128 was built for CUDA 12.8" in got["notes"]


def test_efa_installer_layout_prefers_the_binaries_over_the_package_list(real_image):
    got = inspect(real_image("efa-installer"))
    assert got["versions"] == {"aws_ofi_nccl": "1.21.1", "cuda": "12.9", "efa_installer": "1.47.0",
                               "libfabric": "1.17.0", "nccl": "2.21.5"}
    assert got["sources"]["aws_ofi_nccl"].startswith("/opt/amazon/ofi-nccl/lib/libnccl-net.so")
    assert "found by LD_LIBRARY_PATH /opt/amazon/efa/lib" in got["sources"]["libfabric"]


@pytest.mark.parametrize("layout,expect,problems", [
    ("pip-torch", {"nccl": "2.32", "cuda": "12.9"}, []),
    ("pip-torch", {"nccl": "2.21"}, ["expected nccl 2.21, found 2.32.3"]),
    ("conda-pip-cuda", {"cuda": "12.9", "aws_ofi_nccl": "1.21.1", "libfabric": "1.17"}, []),
])
def test_expect_uses_the_same_reader(real_image, layout, expect, problems):
    assert versions.expect_problems(expect, versions.read_versions(str(real_image(layout)))) == problems


def test_make_test_installs_what_the_plugin_build_needs():
    import re
    from pathlib import Path

    import artifacts
    text = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    m = re.search(r"^DEB_PACKAGES := ((?:.*\\\n)*.*)$", text, re.M)
    assert m, "DEB_PACKAGES not found in the Makefile"
    listed = set(m.group(1).replace("\\\n", " ").split())
    assert set(artifacts.DEB_PACKAGES) <= listed, set(artifacts.DEB_PACKAGES) - listed
    assert "test-artifacts" in re.search(r"^test-deps:((?:.*\\\n)*.*)$", text, re.M).group(1)
