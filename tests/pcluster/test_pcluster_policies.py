"""Update policies read from ParallelCluster 3.16.1's schema metadata (real package, its own venv)."""
from __future__ import annotations

import subprocess

import pytest
from pcluster_helpers import REPO, needs_pcluster_venv

from clusterkit.pcluster.runner import pcluster_python, update_policies

pytestmark = needs_pcluster_venv


@pytest.fixture(scope="module")
def policies():
    return update_policies()


@pytest.mark.parametrize(
    ("path", "policy"),
    [
        ("Scheduling.SlurmQueues[].ComputeResources[].MaxCount", "RESIZE_UPDATE_STRATEGY_ON_REMOVE"),
        ("Scheduling.SlurmQueues[].ComputeResources[].InstanceType", "COMPUTE_FLEET_STOP"),
        ("HeadNode.InstanceType", "UNSUPPORTED"),
        ("SharedStorage[].FsxLustreSettings.PerUnitStorageThroughput", "UNSUPPORTED"),
        ("Scheduling.SlurmSettings.QueueUpdateStrategy", "IGNORED"),
        ("Scheduling.SlurmSettings.ScaledownIdletime", "COMPUTE_FLEET_STOP"),
        ("Scheduling.SlurmQueues[].ComputeResources[].Efa.Enabled", "QUEUE_UPDATE_STRATEGY"),
        ("Scheduling.SlurmQueues[].Networking.SubnetIds", "MANAGED_FSX"),
        ("Scheduling.SlurmQueues[].Networking.PlacementGroup.Enabled", "MANAGED_PLACEMENT_GROUP"),
        ("HeadNode.CustomActions.OnNodeUpdated.Script", "SUPPORTED"),
        ("HeadNode.CustomActions.OnNodeConfigured.Script", "UNSUPPORTED"),
        ("SharedStorage", "SHARED_STORAGE_UPDATE_POLICY"),
    ],
)
def test_known_policies(policies, path, policy):
    assert policies[path]["policy"] == policy


def test_lists_name_their_match_key(policies):
    assert policies["Scheduling.SlurmQueues"]["kind"] == "list"
    assert policies["Scheduling.SlurmQueues"]["update_key"] == "Name"
    assert policies["Scheduling.SlurmQueues[].ComputeResources"]["update_key"] == "Name"
    assert policies["HeadNode"]["kind"] == "section"


def test_every_policy_is_described(policies):
    undescribed = sorted({entry["policy"] for entry in policies.values() if not entry["description"]})
    assert undescribed == []


def test_output_is_deterministic_and_sorted():
    command = [str(pcluster_python()), "-m", "clusterkit.pcluster.policies"]
    first = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert first == second
    keys = [line.split('"')[1] for line in first.splitlines() if line.startswith('  "')]
    assert keys == sorted(keys) and len(keys) > 200
