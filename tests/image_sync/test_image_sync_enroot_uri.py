"""clusterkit_node/contract/enroot_uri.py: which URI form each enroot version gets (the real enroot's view of
these forms is pinned in tests/real_runtime/test_enroot_uri_grammar.py)."""
from __future__ import annotations

import pytest

HEX = "ab" * 32
DIGEST = f"sha256:{HEX}"


@pytest.fixture(scope="module")
def enroot_uri():
    import importlib
    return importlib.import_module("clusterkit_node.contract.enroot_uri")


@pytest.mark.parametrize("locked, version, expected", [
    (f"docker://nvcr.io#nvidia/pytorch@{DIGEST}", "4.1.2", f"docker://nvcr.io#nvidia/pytorch@{DIGEST}"),
    (f"docker://nvcr.io#nvidia/pytorch@{DIGEST}", "3.4.1", f"docker://nvcr.io#nvidia/pytorch:{DIGEST}"),
    (f"docker://127.0.0.1:5000#a/b@{DIGEST}", "3.5.0", f"docker://127.0.0.1:5000#a/b:{DIGEST}"),
    (f"docker://library/ubuntu@{DIGEST}", "3.4.1", f"docker://registry-1.docker.io#library/ubuntu:{DIGEST}"),
    (f"docker://library/ubuntu@{DIGEST}", "4.0.0", f"docker://library/ubuntu@{DIGEST}"),
    # an enroot that does not say its version gets the form every version parses
    (f"docker://nvcr.io#nvidia/pytorch@{DIGEST}", "unknown (exit 127)", f"docker://nvcr.io#nvidia/pytorch:{DIGEST}"),
])
def test_import_uri(enroot_uri, locked, version, expected):
    assert enroot_uri.import_uri(locked, version) == expected


@pytest.mark.parametrize("bad", [
    "nvcr.io/nvidia/pytorch@" + DIGEST,               # no scheme
    "docker://nvcr.io#nvidia/pytorch:25.01",          # a tag, not a digest
    f"docker://nvcr.io#nvidia/pytorch@sha256:{HEX[:-1]}",
    f"docker://nvcr.io#Nvidia/pytorch@{DIGEST}",      # enroot's image grammar is lowercase
    f"docker://nvcr.io#nvidia/pytorch@{DIGEST}\n",
])
def test_import_uri_refuses_what_is_not_a_locked_uri(enroot_uri, bad):
    with pytest.raises(ValueError, match="is not docker://"):
        enroot_uri.import_uri(bad, "4.1.2")
