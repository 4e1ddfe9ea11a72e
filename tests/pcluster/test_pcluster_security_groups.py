"""ClusterKit's security-group checker agrees with ParallelCluster's own validators on the same groups.

In ``.venv-pcluster``, under moto, each case makes a node group and a file system group, then runs ParallelCluster
3.16.1's ``EfaSecurityGroupValidator`` and the access check its ``ExistingFsxNetworkingValidator`` uses
(``_is_access_allowed``, Lustre port 988 from the nodes' groups), and prints what DescribeSecurityGroups said. The
same answers go to ``clusterkit.rules.security_groups.check`` here. Where ParallelCluster refuses, ClusterKit
refuses; where ParallelCluster accepts, ClusterKit accepts too, except for what it checks beyond ParallelCluster
(1018-1023, the file servers' and the clients' rules: the FSx user guide's), which the last case shows.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from clusterkit.pcluster.runner import pcluster_python
from clusterkit.pipeline.loader import load
from clusterkit.rules.security_groups import Described, check
from tests.pcluster.pcluster_helpers import needs_pcluster_venv
from tests.spec_text import BASE_SPEC

pytestmark = needs_pcluster_venv

SCRIPT = r'''
import json, os, sys
os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                  AWS_EC2_METADATA_DISABLED="true")
import boto3
from moto import mock_aws

CASES = json.loads(sys.stdin.read())
out = {}
for name, case in CASES.items():
    with mock_aws():
        from pcluster.aws.aws_api import AWSApi
        AWSApi._instance = None  # a fresh client inside this mock
        from pcluster.validators.cluster_validators import EfaSecurityGroupValidator, _is_access_allowed
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
        head = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.8.0/24", AvailabilityZone="us-east-1a")["Subnet"]
        compute = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.0.0/21", AvailabilityZone="us-east-1a")["Subnet"]
        ids = {role: ec2.create_security_group(GroupName=role, Description=role, VpcId=vpc)["GroupId"]
               for role in ("nodes", "fsx")}
        for role, group in ids.items():
            ec2.revoke_security_group_egress(GroupId=group, IpPermissions=[
                {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
        for role, key, rule, peer in case:
            permission = dict(rule)
            if peer in ids:
                permission["UserIdGroupPairs"] = [{"GroupId": ids[peer]}]
            else:
                permission["IpRanges"] = [{"CidrIp": peer}]
            call = ec2.authorize_security_group_ingress if key == "in" else ec2.authorize_security_group_egress
            call(GroupId=ids[role], IpPermissions=[permission])
        efa = EfaSecurityGroupValidator().execute(efa_enabled=True, security_groups=[ids["nodes"]],
                                                  additional_security_groups=None)
        lustre = _is_access_allowed([ids["fsx"]], [head["SubnetId"], compute["SubnetId"]], port=988,
                                    security_groups_by_nodes={frozenset([ids["nodes"]])}, protocol="tcp")
        groups = ec2.describe_security_groups(GroupIds=list(ids.values()))["SecurityGroups"]
        out[name] = {"ids": ids, "efa_ok": not [f for f in efa if f.level.name == "ERROR"], "lustre_988_ok": lustre,
                     "groups": groups, "subnets": [head["CidrBlock"], compute["CidrBlock"]],
                     "vpc": vpc, "head": head["SubnetId"], "compute": compute["SubnetId"]}
print(json.dumps(out, default=str))
'''

ALL = {"IpProtocol": "-1"}
LUSTRE = [{"IpProtocol": "tcp", "FromPort": 988, "ToPort": 988},
          {"IpProtocol": "tcp", "FromPort": 1018, "ToPort": 1023}]


def _rules(*, efa_out: bool = True, fsx_from_nodes: tuple[dict[str, Any], ...] = tuple(LUSTRE),
           node_peer: str = "nodes") -> list[tuple[str, str, dict[str, Any], str]]:
    """(group, in|out, rule, peer group or CIDR): the rules stacks/network.py makes, less what a case leaves out."""
    rules = [("nodes", "in", ALL, "nodes")] + ([("nodes", "out", ALL, "nodes")] if efa_out else [])
    rules += [("nodes", key, r, "fsx") for key in ("in", "out") for r in LUSTRE]
    rules += [("fsx", key, r, "fsx") for key in ("in", "out") for r in LUSTRE]
    rules += [("fsx", "in", r, node_peer) for r in fsx_from_nodes] + [("fsx", "out", r, node_peer) for r in LUSTRE]
    return rules


CASES = {
    "good": _rules(),
    "efa-egress-only-to-anywhere": _rules(efa_out=False) + [("nodes", "out", ALL, "0.0.0.0/0")],
    "no-988-from-nodes": _rules(fsx_from_nodes=(LUSTRE[1],)),
    "lustre-by-cidr": _rules(node_peer="10.20.0.0/16"),
    "no-1018-1023-from-nodes": _rules(fsx_from_nodes=(LUSTRE[0],)),
}


@pytest.fixture(scope="module")
def answers() -> dict[str, Any]:
    done = subprocess.run([str(pcluster_python()), "-c", SCRIPT], input=json.dumps(CASES), capture_output=True,
                          text=True, timeout=300, check=True)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def _clusterkit(tmp_path: Path, answer: dict[str, Any]) -> tuple[bool, bool, list[str]]:
    ids = answer["ids"]
    path = tmp_path / "t.yaml"
    path.write_text(BASE_SPEC + f"network:\n  existing:\n    vpc_id: {answer['vpc']}\n"
                    f"    head_node_subnet_id: {answer['head']}\n    compute_subnet_id: {answer['compute']}\n"
                    f"  security_groups:\n    head_node: [{ids['nodes']}]\n    compute: [{ids['nodes']}]\n"
                    f"    fsx: [{ids['fsx']}]\n")
    loaded = load(str(path), check_lock=False)
    described = Described(groups={g["GroupId"]: g for g in answer["groups"]}, subnet_cidrs=tuple(answer["subnets"]))
    messages = [p.message for p in check(loaded.spec, loaded.source.marks, described)]
    efa_ok = not any("EFA" in m for m in messages)
    fsx_988_ok = not any(m.startswith(f"{ids['fsx']}: Lustre needs TCP 988 IN from the node groups") for m in messages)
    return efa_ok, fsx_988_ok, messages


@pytest.mark.parametrize("case", ["good", "efa-egress-only-to-anywhere", "no-988-from-nodes", "lustre-by-cidr"])
def test_clusterkit_and_parallelcluster_accept_and_refuse_the_same_groups(answers, tmp_path, case):
    answer = answers[case]
    efa_ok, fsx_988_ok, _ = _clusterkit(tmp_path, answer)
    assert (efa_ok, fsx_988_ok) == (answer["efa_ok"], answer["lustre_988_ok"])
    assert (answer["efa_ok"], answer["lustre_988_ok"]) == {
        "good": (True, True), "efa-egress-only-to-anywhere": (False, True), "no-988-from-nodes": (True, False),
        "lustre-by-cidr": (True, True)}[case]


def test_clusterkit_also_wants_1018_1023_which_parallelcluster_does_not_check(answers, tmp_path):
    answer = answers["no-1018-1023-from-nodes"]
    assert (answer["efa_ok"], answer["lustre_988_ok"]) == (True, True)
    _, _, messages = _clusterkit(tmp_path, answer)
    assert [m.split(",")[0] for m in messages] == [
        f"{answer['ids']['fsx']}: Lustre needs TCP 1018-1023 IN from the node groups ({answer['ids']['nodes']})"]
