"""The node reads every lock `clusterkit lock` can write: the committed ones (offline locks record
`compressed_size: null`, unknown) and the enroot URIs in them."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import shipped

REPO = Path(__file__).resolve().parents[2]
COMMITTED = shipped.lock_paths()


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_every_committed_lock_loads_with_the_node_code(path, image_lock):
    images = image_lock.load_lock(str(path))
    assert images, f"{path.name} locks no image"
    for img in images:
        assert img.compressed_size is None or img.compressed_size > 0


def test_a_lock_of_unknown_sizes_syncs_and_says_the_disk_check_was_skipped(sandbox):
    entry = sandbox.image("app")
    entry["compressed_size"] = None  # as `clusterkit lock --offline` writes it
    sandbox.write_lock([entry])
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert ("preflight: size unknown for app (offline lock: compressed_size null); disk space not checked "
            "for them") in proc.stderr
    assert sandbox.manifest()["images"]["app"]["status"] == "ok"


def test_an_enroot_uri_that_is_not_the_locked_form_is_a_lock_error(sandbox):
    entry = sandbox.image("app")
    entry["enroot_uri"] = entry["enroot_uri"].replace("docker://", "docker://user@")
    sandbox.write_lock([entry])
    proc = sandbox.sync()
    assert proc.returncode == 2
    assert "images[0].enroot_uri: 'docker://user@" in proc.stderr
    assert "is not docker://[REGISTRY#]REPOSITORY@sha256:<64 hex>" in proc.stderr
