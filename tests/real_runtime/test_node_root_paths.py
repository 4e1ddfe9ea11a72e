"""The checkout is visible in every node root wherever it lives, while the node's own /tmp, /var/tmp and /run stay its
own (node_root.py, "kept paths").

Why: a node root puts its own directories over the host's /var/tmp and /run (and a multi-node node over /tmp, as a
machine has its own); a checkout under one of them (the README's clean clone under /tmp, a CI runner's /var/tmp)
was hidden, and every script the tiers run in a node failed with "No such file or directory" (#35 item 7).
Real: the node root as the tiers build it (mount namespace, private directories, pivot_root), bash running a script
from a checkout under each directory. Stand-in: the checkout is a directory holding one script.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import runtime_build  # noqa: E402
from node_root import REPO, NodeRoot  # noqa: E402
from tier import stage_for  # noqa: E402

# The host directories a node root has its own of. The single-node tier's node shares the host's /tmp.
OWN_DIRS = {"single": ("/var/tmp", "/run"), "multi-node": ("/var/tmp", "/run", "/tmp")}
STAGE0 = Path("bootstrap_scripts") / "head_node_stage0.sh"


@pytest.fixture
def host_dirs():
    """Makes temporary directories under host directories a node hides (removed after the test)."""
    made: list[Path] = []

    def make(parent: str, prefix: str) -> Path:
        made.append(Path(tempfile.mkdtemp(prefix=prefix, dir=parent)))
        return made[-1]

    yield make
    for directory in made:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("kind", sorted(OWN_DIRS))
def test_a_checkout_under_a_directory_the_node_has_its_own_of_runs_there(kind, host_dirs, tmp_path) -> None:
    checkouts = {}
    for parent in OWN_DIRS[kind]:
        checkout = host_dirs(parent, "ck-clone-") / "main"  # as `git clone ... $d/main` makes it
        (checkout / STAGE0).parent.mkdir(parents=True)
        (checkout / STAGE0).write_text(f"#!/bin/bash\necho stage0 from {checkout}\n")
        (checkout / STAGE0).chmod(0o755)
        checkouts[parent] = checkout
    siblings = {parent: host_dirs(parent, "ck-sibling-") for parent in OWN_DIRS[kind]}
    node = NodeRoot(tmp_path / "node", stage_for(max(runtime_build.GENERATIONS)), profile="alinux2023",
                    node_name="ck-keep-1" if kind == "multi-node" else None, keep=(REPO, *checkouts.values()))
    try:
        node.start()
        for checkout in checkouts.values():
            ran = node.run([str(checkout / STAGE0)], check=False)
            assert ran.stdout == f"stage0 from {checkout}\n", f"{checkout} in the node: {ran.stderr.strip()}"
        assert node.run(["test", "-r", str(REPO / STAGE0)], check=False).returncode == 0, "the checkout itself"
        # the rest of the node's own directories stays its own: the host's other files are not there, and what the
        # node writes there is not the host's
        for parent, sibling in siblings.items():
            assert node.run(["test", "-e", str(sibling)], check=False).returncode != 0, f"host's {sibling} in node"
            mine = f"{parent}/ck-node-own-{uuid.uuid4().hex}"
            node.run(["touch", mine])
            assert not Path(mine).exists(), f"the node's {mine} is the host's"
    finally:
        node.stop()
