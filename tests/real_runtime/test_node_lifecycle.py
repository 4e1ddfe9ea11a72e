"""ClusterKit's node scripts through ParallelCluster's real phase order (lifecycle.py), on the real
enroot + pyxis of both generations: first boot, a static compute node racing the head node's first
import, an unrelated cluster update during that import, and a cluster with no images at all."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from cluster_flow import STORE, SYNC_UNIT, prepare, wait_unit
from lifecycle import PHASES, Lifecycle, pc_phase_order
from node_root import NodeRoot
from tier import stage_for

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "image_sync"))

from real_enroot import Registry  # noqa: E402

UNIT_DIR = "/run/ck-test/units"


def pc_file(rel: str) -> str:
    found = sorted(REPO.glob(f".venv-pcluster/lib/python3*/site-packages/pcluster/{rel}"))
    assert found, "the ParallelCluster 3.16.1 venv is missing: `make test` builds it (make pcluster-venv)"
    return found[0].read_text()


def test_compute_lifecycle_order_is_parallelclusters():
    """The harness's phase order is the one the installed aws-parallelcluster 3.16.1 wheel runs."""
    assert pc_phase_order(pc_file("resources/compute_node/user_data.sh")) == list(PHASES)


def test_head_lifecycle_order_is_parallelclusters():
    stack = pc_file("templates/cluster_stack.py")
    sets = re.search(r'"default": \[([^\]]*)\]', stack)
    assert sets and re.findall(r'"(\w+)"', sets.group(1)) == [
        "chefPrepEnv", "shellRunPreInstall", "chefConfig", "shellRunPostInstall", "chefFinalize"]
    # the configs are defined in that order; an update runs chefUpdate, which ends in OnNodeUpdated
    assert pc_phase_order(stack) == [*PHASES, "update", "OnNodeUpdated"]


@pytest.fixture
def booting(generation, node_profile, tmp_path_factory):
    """A node of ``node_profile``'s AMI (alinux2023: no squashfuse) booting through PC's phases."""
    node = NodeRoot(tmp_path_factory.mktemp(f"life-{generation.key}-{node_profile}"), stage_for(generation.key),
                    fsx_at_start=False, profile=node_profile)
    registry = Registry()
    try:
        node.start()
        yield node, registry
    finally:
        registry.close()
        node.stop()


def sync_running(node: NodeRoot) -> bool:
    return node.run(["test", "-s", f"{UNIT_DIR}/{SYNC_UNIT}.rc"], check=False).returncode != 0


def test_first_boot_static_node_races_the_first_import_and_an_update_leaves_it_running(booting, tmp_path):
    node, registry = booting
    prep = prepare(node, registry.fake, tmp_path)
    registry.faults = {"ck/pytorch": {"hold": True}}  # the first import takes "hours"
    life = Lifecycle(node, prep.compute_args)

    head = life.head_boot()
    assert "started clusterkit-image-sync.service" in head.output
    node.wait(lambda: any(m == "GET" and "/ck/pytorch/blobs/" in p for m, p, _ in registry.fake.log),
              "the first import to be downloading")
    pid = node.read(f"{UNIT_DIR}/{SYNC_UNIT}.pid")
    assert sync_running(node)

    # A static compute node boots now: no manifest yet, the image missing. It must boot (not fail,
    # which after 10 nodes puts the queue into protected mode), with enroot on the NVMe PC just mounted.
    first = life.compute_boot(first=True)
    assert [phase for phase, _ in first.steps] == list(PHASES)
    assert f"verify: warning: no {STORE}/manifest.json yet" in first.output
    assert "start works: " in first.output, first.output  # the self-test needs no store image: it ran anyway
    assert "pytorch: " in first.output and "missing from /fsx/containers" in first.output
    conf = node.read("/etc/enroot/enroot.conf")
    assert "ENROOT_DATA_PATH /scratch/enroot/data/user-$(id -u)" in conf
    assert node.node_state() == "IDLE"

    # An unrelated cluster update (say MaxCount) runs OnNodeUpdated: the import keeps going.
    update = life.update()
    assert "clusterkit-image-sync.service is running with unchanged inputs: left alone" in update
    assert node.read(f"{UNIT_DIR}/{SYNC_UNIT}.pid") == pid and sync_running(node)

    registry.faults = {}
    assert wait_unit(node, SYNC_UNIT) == "0", node.read(f"{UNIT_DIR}/{SYNC_UNIT}.log")
    log = node.read(f"{UNIT_DIR}/{SYNC_UNIT}.log")
    # the start line of an import attempt (heartbeats read "importing for Ns" and may repeat on a slow machine)
    assert log.count("pytorch: importing docker://") == 1, "one import, never restarted"

    # The static node runs the image now; pyxis unpacks it on the instance store.
    state, out = node.sbatch(
        "#!/bin/bash\nset -euo pipefail\n"
        "srun --container-image=/fsx/containers/pytorch.sqsh --container-name=ckkeep true\n"
        "ls /scratch/enroot/data/user-$(id -u)\n", user="ckuser1")
    assert state == "COMPLETED", out
    assert "ckkeep" in out, out

    # A node booting after the import finds the image.
    later = life.compute_boot(first=False)
    assert "verify: 1/1 locked images present in /fsx/containers" in later.output


def test_a_cluster_without_images_boots(booting, tmp_path):
    node, registry = booting
    prep = prepare(node, registry.fake, tmp_path, with_image=False)
    life = Lifecycle(node, prep.compute_args)
    life.head_boot()
    assert wait_unit(node, SYNC_UNIT) == "0", node.read(f"{UNIT_DIR}/{SYNC_UNIT}.log")
    boot = life.compute_boot(first=True)
    assert "verify: 0/0 locked images present in /fsx/containers" in boot.output
    assert node.node_state() == "IDLE"
