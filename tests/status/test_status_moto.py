"""``clusterkit status``: stack states, TTL expiry, head node and SSM command from DescribeStacks.

Real: boto3's CloudFormation client and the status code. Stand-in: moto's CloudFormation holds three
stacks named as app.py names them, made from a one-parameter template whose Outputs carry the values
the real cluster stack exports (ExpiresAt, HeadNodeInstanceId, SsmSession); no real cluster exists.
"""
from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws

from clusterkit.cli import main
from clusterkit.loader import load
from clusterkit.naming import stack_names
from clusterkit.status import status_lines, time_left

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
HEAD = "i-0123456789abcdef0"


def _create(cfn, name: str, outputs: dict[str, str]) -> None:
    template = {"Resources": {"Marker": {"Type": "AWS::SSM::Parameter", "Properties": {
        "Name": f"/status-test/{name}", "Type": "String", "Value": name}}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()}}
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))


@pytest.fixture
def cfn():
    with mock_aws():
        yield boto3.client("cloudformation", region_name="us-east-1")


def _deploy(cfn, cluster_outputs: dict[str, str] | None) -> None:
    names = stack_names("demo")
    _create(cfn, names["network"], {})
    _create(cfn, names["storage"], {})
    if cluster_outputs is not None:
        _create(cfn, names["cluster"], cluster_outputs)


CLUSTER_OUTPUTS = {"ExpiresAt": "2026-12-04T08:00:00Z", "HeadNodeInstanceId": HEAD,
                   "SsmSession": f"aws ssm start-session --region us-east-1 --target {HEAD}"}


def test_deployed_cluster_with_ttl(cfn):
    _deploy(cfn, CLUSTER_OUTPUTS)
    assert status_lines(load("demo").spec, cfn, now=NOW) == [
        "demo (us-east-1)",
        "  Demo-Network                       CREATE_COMPLETE",
        "  Demo-Storage                       CREATE_COMPLETE",
        "  Demo-Cluster                       CREATE_COMPLETE",
        "  expires                            2026-12-04T08:00:00Z, in 3d; extend: make deploy CLUSTER=demo "
        "TTL=<hours from now>",
        f"  head node                          {HEAD}",
        f"  shell                              aws ssm start-session --region us-east-1 --target {HEAD}",
    ]


def test_expired_cluster_points_at_the_teardown(cfn):
    _deploy(cfn, CLUSTER_OUTPUTS)
    later = datetime(2026, 12, 4, 9, 25, tzinfo=UTC)
    assert status_lines(load("demo").spec, cfn, now=later)[4] == (
        "  expires                            2026-12-04T08:00:00Z, expired 1h 25m ago: "
        "the teardown should be under way (see the stack's events)")


def test_cluster_without_ttl(cfn):
    _deploy(cfn, {"HeadNodeInstanceId": HEAD})
    lines = status_lines(load("demo").spec, cfn, now=NOW)
    assert lines[4] == "  expires                            never (no lifecycle.ttl_hours)"
    assert lines[5] == f"  head node                          {HEAD}" and len(lines) == 6


def test_torn_down_cluster_keeps_network_and_storage(cfn):
    _deploy(cfn, None)
    assert status_lines(load("demo").spec, cfn, now=NOW)[1:] == [
        "  Demo-Network                       CREATE_COMPLETE",
        "  Demo-Storage                       CREATE_COMPLETE",
        "  Demo-Cluster                       not deployed",
        "  no cluster: `make deploy CLUSTER=demo` creates it (network and storage are reused)",
    ]


def test_cli(cfn, capsys):
    _deploy(cfn, CLUSTER_OUTPUTS)
    assert main(["status", "demo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "demo (us-east-1)" and out[3].split() == ["Demo-Cluster", "CREATE_COMPLETE"]
    assert out[4].startswith("  expires                            2026-12-04T08:00:00Z, ")


def test_no_credentials_is_one_line(monkeypatch, capsys):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # should credentials turn up after all: loopback
    assert main(["status", "demo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("stack Demo-Network: Unable to locate credentials")


@pytest.mark.parametrize("minutes,text", [(0, "in 0m"), (59, "in 59m"), (60 * 24 * 2 + 61, "in 2d 1h 1m"),
                                          (-5, "expired 5m ago")])
def test_time_left(minutes, text):
    from datetime import timedelta

    assert time_left(NOW + timedelta(minutes=minutes), NOW) == text
