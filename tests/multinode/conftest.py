"""Fixtures of the multi-node tier: a head node and three compute nodes, each in its own namespaces, with
REAL enroot + pyxis (both generations) on Debian's Slurm, one shared store, the Debian-built training image.

It skips or fails exactly as the real-runtime tier does (tests/real_runtime/tier.py: CI and
CK_REQUIRE_REAL_RUNTIME=1 make "cannot run here" a failure)."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent / "real_runtime", HERE.parent / "images"):
    sys.path.insert(0, str(path))

import runtime_build  # noqa: E402
import training_image  # noqa: E402
from fleet_flow import fleet_up  # noqa: E402
from tier import check_host, unavailable  # noqa: E402


@pytest.fixture(scope="session")
def training_layer() -> training_image.Layer:
    check_host()  # not root or no Slurm: say so before building a 1.5 GB image
    try:
        return training_image.build()
    except training_image.Unavailable as exc:
        unavailable(f"training image: {exc}")
        raise


@pytest.fixture(scope="session")
def shared_fsx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One FSx directory for every fleet of the session: the second generation's cluster starts on the store
    the first one filled (what an ephemeral cluster on a persistent file system sees)."""
    return tmp_path_factory.mktemp("fsx")


@pytest.fixture(scope="session")
def fleets(training_layer, shared_fsx, tmp_path_factory):
    """Each generation's cluster, brought up on first use and kept until the session ends: however the
    scheduler orders the tests of both generations, each cluster comes up once (tests that change a cluster
    use one of their own, test_multinode_newest.py)."""
    with contextlib.ExitStack() as stack:
        made: dict = {}

        def get(gen_key: str):
            if gen_key not in made:
                made[gen_key] = stack.enter_context(
                    contextlib.contextmanager(fleet_up)(gen_key, training_layer, shared_fsx, tmp_path_factory))
            return made[gen_key]

        yield get


@pytest.fixture(scope="module", params=sorted(runtime_build.GENERATIONS))
def up(request, fleets):
    """A fleet with ClusterKit up, per generation (fleet_flow.fleet_up), shared by the tests that only read it."""
    return fleets(request.param)
