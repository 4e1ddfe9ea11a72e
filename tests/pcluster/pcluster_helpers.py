"""Helpers for the ParallelCluster check tests: the sample config, mutations of it, result queries.

Every check spawns the ParallelCluster venv once per batch (imports cost ~1 s, each config then
~0.4 s under moto), so the tests share session-scoped batches instead of one subprocess per test.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from clusterkit.pcluster.runner import pcluster_python

REPO = Path(__file__).resolve().parents[2]
SAMPLE_PATH = Path(__file__).parent / "fixtures" / "sample.yaml"
SAMPLE_TEXT = SAMPLE_PATH.read_text()
SAMPLE_SHOWN = "tests/pcluster/fixtures/sample.yaml"


needs_pcluster_venv = pytest.mark.skipif(
    not pcluster_python().exists(),
    reason=f"ParallelCluster venv missing at {pcluster_python()} (run `make pcluster-venv`)",
)


def mutated(mutation: Callable[[dict[str, Any]], Any]) -> str:
    """The sample config with one change applied, as YAML text (placeholders kept)."""
    data = yaml.safe_load(SAMPLE_TEXT)
    mutation(data)
    return yaml.safe_dump(data, sort_keys=False)


def queue(data: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return data["Scheduling"]["SlurmQueues"][index]


def compute_resource(data: dict[str, Any], queue_index: int = 0) -> dict[str, Any]:
    return queue(data, queue_index)["ComputeResources"][0]


def findings(result: dict[str, Any], level: str | None = None) -> list[dict[str, Any]]:
    return [e for e in result["errors"] if level is None or e["level"] == level]


def types(result: dict[str, Any], level: str = "ERROR") -> set[str]:
    return {e["type"] for e in findings(result, level)}
