"""A node whose /dev/fuse users cannot open (mode 0600) never looks healthy while every job fails: with the real
enroot 4.1.2 + pyxis 0.24.0 and squashfuse and a multi-threaded squashfuse_ll installed (ubuntu2404 profile), the
head node measures that an unprivileged user cannot open /dev/fuse, writes no use_squashfuse=1 and says so in one
WARN line; the boot self-test starts a container by extraction as ``nobody``; users' jobs start by extraction.
"""
from __future__ import annotations

import pytest
from cluster_flow import OS_RELEASE, Cluster, bring_up, slurmd_log, srun_container
from images_fakes import serve
from runtime_build import GENERATIONS
from tier import start_node


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    node = start_node(GENERATIONS["gen4"], tmp_path_factory, "ubuntu2404", fuse_mode="0600")
    try:
        with serve() as registry:
            yield bring_up(node, registry, tmp_path_factory.mktemp("spec-fuse0600"))
    finally:
        node.stop()


def test_the_head_node_measures_fuse_and_writes_the_extraction_line(cluster: Cluster) -> None:
    line = cluster.node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf")
    assert "importer=" in line and "use_squashfuse" not in line
    (warn,) = [ln for ln in cluster.bootstrap_log.splitlines() if "containers start by extraction" in ln]
    assert " WARN " in warn
    assert ("/dev/fuse is not usable by unprivileged users (mode 0600, nobody cannot open it: Permission denied)"
            in warn), warn
    assert "selftest: extract start works: enroot create + start as nobody: container ran" in cluster.bootstrap_log


@pytest.mark.parametrize("user", [None, "ckuser1"])
def test_jobs_start_by_extraction(cluster: Cluster, user: str | None) -> None:
    before = len(slurmd_log(cluster.node))
    assert srun_container(cluster, "cat", "/etc/os-release", user=user).stdout == OS_RELEASE
    log = slurmd_log(cluster.node)[before:]
    assert "pyxis: creating container filesystem" in log and "starting container from squashfs" not in log
