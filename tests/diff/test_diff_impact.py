"""Update impact of rendered-config changes from ParallelCluster 3.16.1's own update-policy metadata.

Real: the policy table read from the installed aws-parallelcluster schema in .venv-pcluster, and the
committed demo rendered config (tests/diff/fixtures) edited in Python the way a spec change would.
The conditional cases follow pcluster/config/update_policy.py for a cluster whose compute nodes run.
"""
from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from diff_fixtures import FIXTURES

from clusterkit.diff.impact import FLEET, LIVE, QUEUE, RECREATE, UNKNOWN, Assessor, load_policies, lookup
from clusterkit.diff.structure import diff_values
from clusterkit.pcluster.runner import pcluster_python

pytestmark = pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`")
BASE: dict[str, Any] = yaml.safe_load((FIXTURES / "base/cluster_configs/rendered/demo.yaml").read_text())
DRAIN = "QueueUpdateStrategy DRAIN: nodes replaced as their jobs finish"
TERMINATE = "QueueUpdateStrategy TERMINATE: running jobs stopped, nodes replaced"


def impacts(edit, base: dict | None = None) -> dict[str, tuple[int, str, str]]:
    old = copy.deepcopy(base or BASE)
    new = copy.deepcopy(old)
    edit(new)
    assessed = Assessor().assess(diff_values(old, new), old, new)
    return {a.change.dotted: (a.impact.rank, a.impact.label, a.impact.policy) for a in assessed}


def queue(config: dict, name: str) -> dict:
    return next(q for q in config["Scheduling"]["SlurmQueues"] if q["Name"] == name)


def p5(config: dict) -> dict:
    return queue(config, "gpu")["ComputeResources"][0]


def with_strategy(strategy: str) -> dict:
    config = copy.deepcopy(BASE)
    config["Scheduling"]["SlurmSettings"]["QueueUpdateStrategy"] = strategy
    return config


def test_policy_names_come_from_parallelcluster() -> None:
    policies, note = load_policies()
    assert note is None and policies is not None
    assert lookup(policies, ("HeadNode", "CustomActions", "OnNodeConfigured", "Args")) == "UNSUPPORTED"
    assert lookup(policies, ("HeadNode", "CustomActions", "OnNodeUpdated", "Args")) == "SUPPORTED"
    names = {entry["policy"] for entry in policies.values()}
    assert {"UNSUPPORTED", "SUPPORTED", "COMPUTE_FLEET_STOP", "QUEUE_UPDATE_STRATEGY",
            "RESIZE_UPDATE_STRATEGY_ON_REMOVE", "IGNORED"} <= names


def test_shrinking_a_queue_needs_terminate_or_a_fleet_stop() -> None:
    shrink = lambda c: p5(c).update(MaxCount=2)  # noqa: E731
    path = "Scheduling.SlurmQueues[gpu].ComputeResources[p5].MaxCount"
    assert impacts(shrink)[path] == (
        FLEET, "stop the compute fleet (or set QueueUpdateStrategy TERMINATE)", "RESIZE_UPDATE_STRATEGY_ON_REMOVE")
    assert impacts(shrink, with_strategy("TERMINATE"))[path] == (QUEUE, TERMINATE, "RESIZE_UPDATE_STRATEGY_ON_REMOVE")


def test_min_count_is_live_only_when_max_count_grows_as_much() -> None:
    both = impacts(lambda c: p5(c).update(MinCount=2, MaxCount=6))
    assert {rank for rank, _, _ in both.values()} == {LIVE}
    alone = impacts(lambda c: p5(c).update(MinCount=2))
    assert alone["Scheduling.SlurmQueues[gpu].ComputeResources[p5].MinCount"][0] == FLEET


def test_adding_a_queue_is_live_removing_one_is_not() -> None:
    def add(c: dict) -> None:
        extra = copy.deepcopy(queue(c, "cpu"))
        extra["Name"] = "cpu2"
        c["Scheduling"]["SlurmQueues"].append(extra)

    assert impacts(add) == {"Scheduling.SlurmQueues[cpu2]": (LIVE, "live", "RESIZE_UPDATE_STRATEGY_ON_REMOVE")}
    drop = lambda c: c["Scheduling"]["SlurmQueues"].remove(queue(c, "cpu"))  # noqa: E731
    assert impacts(drop)["Scheduling.SlurmQueues[cpu]"][0] == FLEET


def test_queue_settings_follow_the_queue_update_strategy() -> None:
    spot = lambda c: queue(c, "cpu").update(CapacityType="SPOT")  # noqa: E731
    path = "Scheduling.SlurmQueues[cpu].CapacityType"
    assert impacts(spot)[path] == (QUEUE, DRAIN, "QUEUE_UPDATE_STRATEGY")
    assert impacts(spot, with_strategy("TERMINATE"))[path] == (QUEUE, TERMINATE, "QUEUE_UPDATE_STRATEGY")
    assert impacts(spot, with_strategy("COMPUTE_FLEET_STOP"))[path] == (FLEET, "stop the compute fleet",
                                                                        "QUEUE_UPDATE_STRATEGY")


def test_removing_a_managed_placement_group_needs_a_fleet_stop() -> None:
    off = lambda c: queue(c, "gpu")["Networking"]["PlacementGroup"].update(Enabled=False)  # noqa: E731
    assert impacts(off)["Scheduling.SlurmQueues[gpu].Networking.PlacementGroup.Enabled"] == (
        FLEET, "stop the compute fleet (managed placement group removed)", "MANAGED_PLACEMENT_GROUP")
    on = lambda c: queue(c, "cpu")["Networking"].update(PlacementGroup={"Enabled": True})  # noqa: E731
    assert impacts(on)["Scheduling.SlurmQueues[cpu].Networking.PlacementGroup"] == (
        QUEUE, DRAIN, "MANAGED_PLACEMENT_GROUP")


def test_subnets_may_be_added_live_but_not_replaced() -> None:
    path = "Scheduling.SlurmQueues[cpu].Networking.SubnetIds"
    add = lambda c: queue(c, "cpu")["Networking"]["SubnetIds"].append("subnet-0123456789abcdef0")  # noqa: E731
    assert impacts(add)[path] == (LIVE, "live", "MANAGED_FSX")
    swap = lambda c: queue(c, "cpu")["Networking"].update(SubnetIds=["subnet-0123456789abcdef0"])  # noqa: E731
    assert impacts(swap)[path] == (QUEUE, DRAIN, "MANAGED_FSX")


def test_shared_storage_external_mounts_are_live_home_is_not() -> None:
    efs = {"Name": "home2", "StorageType": "Efs", "MountDir": "/data", "EfsSettings": {"FileSystemId": "fs-12345678"}}
    assert impacts(lambda c: c["SharedStorage"].append(efs))["SharedStorage[home2]"][0] == LIVE
    home = dict(efs, MountDir="/home")
    assert impacts(lambda c: c["SharedStorage"].append(home))["SharedStorage[home2]"][:2] == (
        RECREATE, "cannot be updated (/home mount): recreate the cluster")


def test_ignored_sections_are_judged_by_what_they_hold() -> None:
    base = copy.deepcopy(BASE)
    del base["Monitoring"]
    found = impacts(lambda c: c.update(Monitoring=copy.deepcopy(BASE["Monitoring"])), base)
    assert found["Monitoring"] == (RECREATE, "cannot be updated: recreate the cluster", "UNSUPPORTED")  # Logs
    strategy = impacts(lambda c: c["Scheduling"]["SlurmSettings"].update(QueueUpdateStrategy="TERMINATE"))
    assert strategy["Scheduling.SlurmSettings.QueueUpdateStrategy"] == (LIVE, "live", "IGNORED")


def test_free_form_values_take_their_parents_policy_and_disruptive_sorts_first() -> None:
    def edit(c: dict) -> None:
        queue(c, "gpu")["CustomSlurmSettings"] = {"Weight": 10}
        c["Scheduling"]["SlurmSettings"]["ScaledownIdletime"] = 30
        c["HeadNode"]["Imds"]["Secured"] = False

    found = impacts(edit)
    assert list(found.items()) == [
        ("HeadNode.Imds.Secured", (RECREATE, "cannot be updated: recreate the cluster", "UNSUPPORTED")),
        ("Scheduling.SlurmSettings.ScaledownIdletime", (FLEET, "stop the compute fleet", "COMPUTE_FLEET_STOP")),
        ("Scheduling.SlurmQueues[gpu].CustomSlurmSettings", (LIVE, "live", "SUPPORTED")),
    ]


def test_flexible_instance_lists_grow_live_and_shrink_with_a_fleet_stop() -> None:
    base = copy.deepcopy(BASE)
    p5(base).pop("InstanceType")
    p5(base)["Instances"] = [{"InstanceType": "p5.48xlarge"}]
    path = "Scheduling.SlurmQueues[gpu].ComputeResources[p5].Instances"
    grow = lambda c: p5(c)["Instances"].append({"InstanceType": "p5en.48xlarge"})  # noqa: E731
    assert impacts(grow, base)[path] == (LIVE, "live", "COMPUTE_FLEET_STOP_ON_REMOVE")
    swap = lambda c: p5(c).update(Instances=[{"InstanceType": "p5en.48xlarge"}])  # noqa: E731
    assert impacts(swap, base)[path][0] == FLEET


def test_without_the_policy_table_impact_is_unknown() -> None:
    assessor = Assessor(loader=lambda: (None, "ParallelCluster venv missing: update impact unknown"))
    new = copy.deepcopy(BASE)
    p5(new)["MaxCount"] = 9
    (item,) = assessor.assess(diff_values(BASE, new), BASE, new)
    assert (item.impact.rank, item.impact.label, item.impact.policy) == (UNKNOWN, "impact unknown", "")
    assert assessor.notes == ["ParallelCluster venv missing: update impact unknown"]


def test_a_whole_rendered_file_appearing_is_a_create() -> None:
    from clusterkit.diff.structure import MISSING

    (item,) = Assessor().assess(diff_values(MISSING, BASE), MISSING, BASE)
    assert (item.change.dotted, item.impact.rank) == ("(whole file)", RECREATE)
    assert item.impact.label == "whole config added or removed: the cluster is created or deleted"
