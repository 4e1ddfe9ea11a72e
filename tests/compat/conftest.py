"""Fixtures for tests/compat (helpers and what is real vs stand-in: compat_harness.py)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compat_harness import RULES, make_node  # noqa: E402

for _k, _v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
    os.environ.setdefault(_k, _v)


@pytest.fixture(scope="session")
def compat():
    """clusterkit_node.contract.compat: the evaluator clusterkit.rules.compat_rules imports and the zipapp ships."""
    import clusterkit_node.contract.compat
    return clusterkit_node.contract.compat


@pytest.fixture(scope="session")
def ruleset(compat):
    return compat.load_rules(str(RULES))


@pytest.fixture
def node(tmp_path: Path):
    from real_enroot import Registry  # on sys.path once compat_harness loaded the image_sync harness

    registry = Registry()
    try:
        yield make_node(tmp_path, registry)
    finally:
        registry.close()
