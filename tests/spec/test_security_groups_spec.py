"""``network.security_groups``: existing groups for locked-down accounts, refused offline where they cannot be right,
rendered as ParallelCluster's ``SecurityGroups`` where they are. Their rules need the account: tests/cli/
test_validate_aws.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load
from clusterkit.render.pcluster_config import placeholder_refs, render_config
from clusterkit.spec.errors import SpecError
from tests.spec_text import BASE_SPEC

EXISTING = ("network:\n  existing:\n    vpc_id: vpc-0a1b2c3d4e5f60718\n"
            "    head_node_subnet_id: subnet-0a1b2c3d4e5f60719\n    compute_subnet_id: subnet-0a1b2c3d4e5f6071a\n")
NODES, FSX = "sg-0a1b2c3d4e5f60720", "sg-0a1b2c3d4e5f60721"


def _groups(head: str = f"[{NODES}]", compute: str = f"[{NODES}]", fsx: str = f"[{FSX}]") -> str:
    roles = (("head_node", head), ("compute", compute), ("fsx", fsx))
    lines = "".join(f"    {role}: {value}\n" for role, value in roles if value)
    return "  security_groups:\n" + lines


def _errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load(str(path), check_lock=False)
    return [line.removeprefix(f"{path}:") for line in info.value.lines()]


@pytest.mark.parametrize("text,expected", [
    (BASE_SPEC + "network:\n" + _groups(), [
        "11:3: network.security_groups: existing security groups need network.existing: a group belongs to one VPC, "
        "and the VPC ClusterKit creates has none before deploy (give network.existing with the groups' VPC, or remove "
        "network.security_groups)"]),
    (BASE_SPEC + EXISTING + _groups(compute="[sg-12]"), [
        "17:15: network.security_groups.compute[0]: 'sg-12' is not a security group id (like sg-0123456789abcdef0)"]),
    (BASE_SPEC + EXISTING + _groups(fsx=f"[{FSX}, {FSX}]"), [
        f"18:33: network.security_groups.fsx[1]: {FSX} is listed twice (list each group once)"]),
    (BASE_SPEC + EXISTING + _groups(head="[" + ", ".join(f"sg-0000000{i}" for i in range(6)) + "]"), [
        "16:16: network.security_groups.head_node: 6 groups, but a network interface takes at most 5 (EC2 quota "
        "'Security groups per network interface') (at most 5)"]),
    (BASE_SPEC + EXISTING + _groups(compute="", fsx=""), [
        "16:16: network.security_groups.head_node: head_node groups are given but compute and fsx groups are not: "
        "each role's groups must admit the others' (head and compute: Slurm and NFS; all of them: Lustre), which no "
        "existing rule can do for a group ClusterKit creates at deploy (give network.security_groups.compute and "
        "network.security_groups.fsx too (the same ids may serve several))"]),
], ids=["needs-existing-vpc", "bad-id", "listed-twice", "more-than-an-interface-takes", "all-roles-or-none"])
def test_groups_that_cannot_be_right_are_refused_with_the_line(tmp_path: Path, text: str,
                                                                expected: list[str]) -> None:
    assert _errors(tmp_path, text) == expected


def test_given_groups_replace_clusterkits_in_the_rendered_config(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(BASE_SPEC + EXISTING + _groups(compute=f"[{NODES}, sg-0a1b2c3d4e5f60722]"))
    loaded = load(str(path), check_lock=False)
    effective = expand(loaded)
    config = render_config(effective, placeholder_refs(effective), node_artifacts(loaded))
    assert config["HeadNode"]["Networking"]["SecurityGroups"] == [NODES]
    (queue,) = config["Scheduling"]["SlurmQueues"]
    assert queue["Networking"]["SecurityGroups"] == [NODES, "sg-0a1b2c3d4e5f60722"]
    assert "AdditionalSecurityGroups" not in queue["Networking"]
