"""``clusterkit platform-users`` / ``make destroy-platform``: the deployed clusters using a platform, from
CloudFormation's own record of imports.

moto implements ListExports but not ListImports, so CloudFormation's answers are botocore's Stubber with the
shapes of the API reference (ListExports: Exports[].Name/Value/ExportingStackId; ListImports: Imports[] of stack
names, and a ValidationError "Export 'X' is not imported by any stack" when none does, which is what the real
service answers for an unused export); botocore validates every request and response against the service model.
"""
from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from clusterkit.cli import main as cli
from clusterkit.deployed import platform_users, status_report

STACK_ARN = "arn:aws:cloudformation:us-east-1:123456789012:stack/{}/0a1b2c3d-0000-0000-0000-000000000000"
EXPORTS = ["Research-East-Network-VpcId", "Research-East-Network-ComputeSubnetId", "Research-East-Storage-FileSystemId"]


def _client(imports: dict[str, list[str]], *, other_exports: tuple[str, ...] = ("Demo-Network-VpcId",)):
    client = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    stub = Stubber(client)
    listed = [{"ExportingStackId": STACK_ARN.format(n.rsplit("-", 1)[0]), "Name": n, "Value": "x"}
              for n in (*EXPORTS, *other_exports)]
    stub.add_response("list_exports", {"Exports": listed}, {})
    for name in sorted(EXPORTS):
        if imports.get(name):
            stub.add_response("list_imports", {"Imports": imports[name]}, {"ExportName": name})
        else:
            stub.add_client_error("list_imports", "ValidationError",
                                  f"Export '{name}' is not imported by any stack", expected_params={"ExportName": name})
    for stack in sorted({s for stacks in imports.values() for s in stacks}):
        cluster = stack.removesuffix("-Cluster").lower()
        stub.add_response("describe_stacks", {"Stacks": [{
            "StackName": stack, "CreationTime": "2026-12-01T00:00:00Z", "StackStatus": "CREATE_COMPLETE",
            "Tags": [{"Key": "clusterkit:cluster", "Value": cluster}]}]}, {"StackName": stack})
    stub.activate()
    return client, stub


def test_no_user_when_nothing_imports_the_exports() -> None:
    client, stub = _client({})
    assert platform_users.users(client, "research-east") == []
    stub.assert_no_pending_responses()


def test_users_are_the_importing_stacks_with_their_clusters() -> None:
    client, stub = _client({"Research-East-Network-VpcId": ["Train-A-Cluster", "Train-B-Cluster"],
                            "Research-East-Storage-FileSystemId": ["Train-A-Cluster"]})
    found = platform_users.users(client, "research-east")
    stub.assert_no_pending_responses()
    assert [(u.stack, u.cluster, u.exports) for u in found] == [
        ("Train-A-Cluster", "train-a", ("Research-East-Network-VpcId", "Research-East-Storage-FileSystemId")),
        ("Train-B-Cluster", "train-b", ("Research-East-Network-VpcId",))]
    assert platform_users.refusal("research-east", found) == (
        "platform research-east is in use by train-a (Train-A-Cluster), train-b (Train-B-Cluster): destroy those "
        "clusters first (make destroy-cluster CLUSTER=train-a, for each), then "
        "`make destroy-platform PLATFORM=research-east`")


def test_the_command_exits_1_with_one_line_while_in_use(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    client, _ = _client({"Research-East-Network-ComputeSubnetId": ["Train-B-Cluster"]})
    monkeypatch.setattr(status_report, "cloudformation_client", lambda region: client)
    assert cli.main(["platform-users", "research-east"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "platform research-east is in use by train-b (Train-B-Cluster): destroy those clusters first "
        "(make destroy-cluster CLUSTER=train-b, for each), then `make destroy-platform PLATFORM=research-east`"]


def test_the_command_exits_0_when_free_and_json_says_so(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    client, _ = _client({})
    monkeypatch.setattr(status_report, "cloudformation_client", lambda region: client)
    assert cli.main(["platform-users", "research-east", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"platform": "research-east", "users": []}


def test_aws_errors_are_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    client = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    stub = Stubber(client)
    stub.add_client_error("list_exports", "AccessDenied", "User is not authorized to perform: "
                          "cloudformation:ListExports")
    stub.activate()
    monkeypatch.setattr(status_report, "cloudformation_client", lambda region: client)
    assert cli.main(["platform-users", "research-east"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("platform research-east: cannot read CloudFormation's exports and imports: ")
    assert "ListExports, ListImports and DescribeStacks are needed" in line


def test_an_unknown_platform_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["platform-users", "research-west"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "no such platform file (known platforms: research-east)" in line
