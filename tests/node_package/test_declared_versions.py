"""Versions an image config's Env declares (what the lock records without pulling layers), and where the binaries
the head node reads disagree. Env names as NVIDIA's CUDA images (CUDA_VERSION, NCCL_VERSION=<libnccl2 package
version>), NGC framework images (PYTORCH_VERSION) and AWS's images (EFA_INSTALLER_VERSION, AWS_OFI_NCCL_VERSION)
set them."""
from __future__ import annotations

from clusterkit_node.image.declared_versions import declared_versions, disagreements


def test_the_makers_env_names_and_their_value_forms():
    env = ["PATH=/usr/local/nvidia/bin:/usr/bin", "CUDA_VERSION=12.9.1", "NCCL_VERSION=2.21.5-1",
           "PYTORCH_VERSION=2.6.0a0+ecf3bae", "AWS_OFI_NCCL_VERSION=v1.13.2-aws", "EFA_INSTALLER_VERSION=1.38.0"]
    assert declared_versions(env) == {"cuda": "12.9.1", "nccl": "2.21.5", "pytorch": "2.6.0a0+ecf3bae",
                                      "aws_ofi_nccl": "1.13.2", "efa_installer": "1.38.0"}


def test_junk_never_becomes_a_version():
    env = ["CUDA_VERSION=$(reboot)", "NCCL_VERSION=2.21.5; rm -rf /", "PYTORCH_VERSION=", "EFA_INSTALLER_VERSION",
           42, None, "NCCL_VERSION_X=2.1", "CUDA_VERSION=12"]
    assert declared_versions(env) == {}


def test_disagreements_compare_on_version_boundaries():
    assert disagreements({"cuda": "12.9.1", "nccl": "2.21.5", "pytorch": "2.8"},
                         {"cuda": "12.9", "nccl": "2.32.3", "pytorch": "2.8.0+cu128"}) == {"nccl": ("2.21.5", "2.32.3")}
    assert disagreements({"cuda": "12.9"}, {"cuda": "12.90"}) == {"cuda": ("12.9", "12.90")}
    assert disagreements({"nccl": "2.21.5"}, {}) == {}, "nothing read: nothing to contradict"
