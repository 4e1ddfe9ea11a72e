"""Fixtures of the real-runtime tier: REAL enroot + pyxis (two generations) on Debian's Slurm (see
tier.py for when it skips and when it must fail)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "images"))

import runtime_build  # noqa: E402
from cluster_flow import bring_up  # noqa: E402
from images_fakes import serve  # noqa: E402
from tier import start_node  # noqa: E402


@pytest.fixture(scope="module", params=sorted(runtime_build.GENERATIONS))
def generation(request: pytest.FixtureRequest) -> runtime_build.Generation:
    return runtime_build.GENERATIONS[request.param]




# The AMIs the tier's nodes are (clusterkit/data/node_profiles.json): alinux2023 has no squashfuse; ubuntu2404, the
# default spec's OS, has every package and a multi-threaded squashfuse_ll. A module may narrow this with its own
# `node_profile` fixture (ubuntu2204, whose squashfuse reads on one thread: test_squashfuse_reader.py).
PROFILES = ("alinux2023", "ubuntu2404")


@pytest.fixture(scope="module", params=PROFILES)
def node_profile(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def cluster(generation, node_profile, tmp_path_factory):
    """One cluster brought up for real per generation, node profile and test module (cluster_flow.bring_up)."""
    node = start_node(generation, tmp_path_factory, node_profile)
    try:
        with serve() as registry:
            yield bring_up(node, registry, tmp_path_factory.mktemp(f"spec-{generation.key}-{node_profile}"))
    finally:
        node.stop()
