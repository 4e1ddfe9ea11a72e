"""``clusterkit validate NAME --aws``: the spec's existing security groups read from (moto's) EC2 and checked.

No network: moto answers every call, with dummy credentials and instance metadata off. Each case builds the
groups as an account owner would, writes a spec naming them and runs the CLI's own ``main``; the lines are
asserted exactly (file:line:col, the group, the missing rule and the command that adds it).
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from clusterkit.cli.main import main
from tests.spec_text import BASE_SPEC

REGION = "us-east-1"
LUSTRE = ((988, 988), (1018, 1023))


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_EC2_METADATA_DISABLED", "true"), ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "n")),
                       ("AWS_CONFIG_FILE", str(tmp_path / "n"))):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _pair(group: str) -> dict[str, Any]:
    return {"UserIdGroupPairs": [{"GroupId": group}]}


def _account(ec2: Any, *, efa_egress: bool = True, fsx_ports: tuple[tuple[int, int], ...] = LUSTRE) -> dict[str, str]:
    """A VPC, two subnets, the nodes' group and the file system's group, with the rules stacks/network.py makes
    (less what a case leaves out). The default all-outbound egress is revoked: a locked-down account's groups."""
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    head = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.8.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    compute = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.0.0/21",
                                AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    nodes = ec2.create_security_group(GroupName="nodes", Description="cluster nodes", VpcId=vpc)["GroupId"]
    fsx = ec2.create_security_group(GroupName="fsx", Description="lustre", VpcId=vpc)["GroupId"]
    everywhere = [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    for group in (nodes, fsx):
        ec2.revoke_security_group_egress(GroupId=group, IpPermissions=everywhere)
    ec2.authorize_security_group_ingress(GroupId=nodes, IpPermissions=[{"IpProtocol": "-1", **_pair(nodes)}])
    if efa_egress:
        ec2.authorize_security_group_egress(GroupId=nodes, IpPermissions=[{"IpProtocol": "-1", **_pair(nodes)}])
    lustre = [{"IpProtocol": "tcp", "FromPort": low, "ToPort": high} for low, high in LUSTRE]
    ec2.authorize_security_group_ingress(GroupId=nodes, IpPermissions=[{**r, **_pair(fsx)} for r in lustre])
    ec2.authorize_security_group_egress(GroupId=nodes, IpPermissions=[{**r, **_pair(fsx)} for r in lustre])
    fsx_rules = [{"IpProtocol": "tcp", "FromPort": low, "ToPort": high,
                  "UserIdGroupPairs": [{"GroupId": nodes}, {"GroupId": fsx}]} for low, high in fsx_ports]
    ec2.authorize_security_group_ingress(GroupId=fsx, IpPermissions=fsx_rules)
    ec2.authorize_security_group_egress(GroupId=fsx, IpPermissions=[{**r, "UserIdGroupPairs": [
        {"GroupId": nodes}, {"GroupId": fsx}]} for r in lustre])
    return {"vpc": vpc, "head": head, "compute": compute, "nodes": nodes, "fsx": fsx}


def _spec(tmp_path: Path, ids: dict[str, str], *, fsx: list[str] | None = None) -> Path:
    fsx_ids = ", ".join(fsx or [ids["fsx"]])
    text = BASE_SPEC.replace("name: t\n", "name: sg\n") + (
        "network:\n"
        "  existing:\n"
        f"    vpc_id: {ids['vpc']}\n"
        f"    head_node_subnet_id: {ids['head']}\n"
        f"    compute_subnet_id: {ids['compute']}\n"
        "  security_groups:\n"
        f"    head_node: [{ids['nodes']}]\n"
        f"    compute: [{ids['nodes']}]\n"
        f"    fsx: [{fsx_ids}]\n")
    path = tmp_path / "sg.yaml"
    path.write_text(text)
    return path


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    code = main(["validate", str(path), "--aws"])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_groups_with_the_rules_efa_and_lustre_need_pass(ec2: Any, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = _spec(tmp_path, _account(ec2))
    code, out, err = _validate(path, capsys)
    assert (code, err) == (0, [])
    assert out[-1] == (f"{path}: 2 existing security groups read from us-east-1 (validate --aws): the EFA and Lustre "
                       "rules checked")


def test_missing_efa_self_egress_is_one_line_naming_the_group_and_the_command(
        ec2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = _account(ec2, efa_egress=False)
    path = _spec(tmp_path, ids)
    code, _, err = _validate(path, capsys)
    nodes = ids["nodes"]
    assert code == 2
    assert err == [
        f"{path}:17:15: network.security_groups.compute[0]: {nodes}: EFA (gpu/p5) needs all traffic OUT to the group "
        "itself, and no compute group allows it both ways (0.0.0.0/0 does not count: ParallelCluster's "
        "EfaSecurityGroupValidator; https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html"
        f"#efa-start-security) (aws ec2 authorize-security-group-egress --region us-east-1 --group-id {nodes} "
        f"--ip-permissions 'IpProtocol=-1,UserIdGroupPairs=[{{GroupId={nodes}}}]')"]


def test_missing_lustre_1018_1023_names_each_missing_rule(ec2: Any, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ids = _account(ec2, fsx_ports=((988, 988),))
    path = _spec(tmp_path, ids)
    code, _, err = _validate(path, capsys)
    fsx, nodes = ids["fsx"], ids["nodes"]
    assert code == 2
    where = f"{path}:18:11: network.security_groups.fsx[0]: {fsx}: Lustre needs TCP 1018-1023 IN from"
    tail = "and no file system group allows it (FSx for Lustre User Guide, file system access control with Amazon VPC)"
    command = (f"aws ec2 authorize-security-group-ingress --region us-east-1 --group-id {fsx} --ip-permissions "
               "'IpProtocol=tcp,FromPort=1018,ToPort=1023,UserIdGroupPairs=[{GroupId=%s}]'")
    assert err == [f"{where} the node groups ({nodes}), {tail} ({command % nodes})",
                   f"{where} itself, {tail} ({command % fsx})"]


def test_a_group_that_does_not_exist_is_one_line_without_traceback(ec2: Any, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ids = _account(ec2)
    path = _spec(tmp_path, ids, fsx=[ids["fsx"], "sg-0123456789abcdef0"])
    code, _, err = _validate(path, capsys)
    assert code == 2
    assert err == [f"{path}:18:33: network.security_groups.fsx[1]: sg-0123456789abcdef0 does not exist in us-east-1 "
                   "(InvalidGroup.NotFound) (check the id and the region: aws ec2 describe-security-groups --region "
                   "us-east-1 --group-ids sg-0123456789abcdef0)"]


def test_without_credentials_it_is_one_line(no_aws_credentials: None, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    ids = {"vpc": "vpc-0a1b2c3d4e5f60718", "head": "subnet-0a1b2c3d4e5f60719", "compute": "subnet-0a1b2c3d4e5f6071a",
           "nodes": "sg-0a1b2c3d4e5f60720", "fsx": "sg-0a1b2c3d4e5f60721"}
    path = _spec(tmp_path, ids)
    code, out, err = _validate(path, capsys)
    assert code == 2
    assert err == [f"{path}:15:3: network.security_groups: cannot read the security groups in us-east-1: Unable to "
                   "locate credentials (set AWS credentials: aws configure, or AWS_PROFILE; or run validate without "
                   "--aws)"]


def test_a_spec_without_existing_groups_reads_nothing(no_aws_credentials: None,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "demo", "--aws"]) == 0
    assert "read from" not in capsys.readouterr().out


def test_python_m_clusterkit_without_credentials_is_one_line_and_exit_2(no_aws_credentials: None,
                                                                        tmp_path: Path) -> None:
    """The real entry point (the error boundary included): no traceback, whatever botocore raises."""
    ids = {"vpc": "vpc-0a1b2c3d4e5f60718", "head": "subnet-0a1b2c3d4e5f60719", "compute": "subnet-0a1b2c3d4e5f6071a",
           "nodes": "sg-0a1b2c3d4e5f60720", "fsx": "sg-0a1b2c3d4e5f60721"}
    path = _spec(tmp_path, ids)
    done = subprocess.run([sys.executable, "-m", "clusterkit", "validate", str(path), "--aws"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
                               "NO_COLOR": "1"})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "sg.yaml:15:3: network.security_groups: cannot read the security groups in us-east-1: Unable to locate "
        "credentials (set AWS credentials: aws configure, or AWS_PROFILE; or run validate without --aws)"]
