"""Versions an image's config declares in its environment (``CUDA_VERSION=12.9.1``), read at lock time.

Why: the lock resolves a tag to a digest without pulling layers, but the config blob it already fetches carries
the ``Env`` the image's makers set: NVIDIA's CUDA images set CUDA_VERSION and NCCL_VERSION (libnccl2's package
version, ``2.21.5-1``), NGC framework images PYTORCH_VERSION, AWS's images EFA_INSTALLER_VERSION and
AWS_OFI_NCCL_VERSION. Recording them in the lock lets a reviewer see in the pull request that a digest bump moved
NCCL from X to Y. They are declarations, not the binaries: the head node reads the binaries at import
(versions.py) and says when the two disagree. Values are checked against a version pattern before use.
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, Tuple

# image config Env name -> component (the keys compat rules and ``expect`` use)
ENV_COMPONENTS: Tuple[Tuple[str, str], ...] = (
    ("CUDA_VERSION", "cuda"),
    ("NCCL_VERSION", "nccl"),
    ("PYTORCH_VERSION", "pytorch"),
    ("EFA_INSTALLER_VERSION", "efa_installer"),
    ("AWS_OFI_NCCL_VERSION", "aws_ofi_nccl"),
)
_VERSION = re.compile(r"v?(\d+(?:\.\d+){1,3})(?:-(?:\d+|aws))?")
_PYTORCH = re.compile(r"(\d+(?:\.\d+){1,3}(?:[a-z]+\d*)?(?:\+[0-9A-Za-z.]+)?)")
NOTHING_DECLARED = ("the image config declares none of " + ", ".join(n for n, _ in ENV_COMPONENTS)
                    + ": the head node reads the versions from the layers at import")


def declared_versions(env: Iterable[object]) -> Dict[str, str]:
    """{component: version} from an image config's ``Env`` list ("KEY=VALUE" strings); junk is ignored."""
    values: Dict[str, str] = {}
    for item in env:
        if isinstance(item, str) and "=" in item:
            key, _, value = item.partition("=")
            values[key] = value.strip()
    found: Dict[str, str] = {}
    for name, component in ENV_COMPONENTS:
        raw = values.get(name, "")
        m = (_PYTORCH if component == "pytorch" else _VERSION).fullmatch(raw)
        if m:
            found[component] = m.group(1)
    return found


def disagreements(declared: Dict[str, str], read: Dict[str, str]) -> Dict[str, Tuple[str, str]]:
    """{component: (declared, read)} where the binaries say otherwise (version prefixes agree: 12.9 ~ 12.9.1)."""
    out = {}
    for key, want in declared.items():
        got = read.get(key)
        if got is not None and not (got == want or got.startswith(want + ".") or want.startswith(got + ".")):
            out[key] = (want, got)
    return out
