"""``clusterkit status NAME --nodes``: each compute node's health checks and Slurm state, read on the head node.

Real: boto3's SSM client (botocore's Stubber answers SendCommand and GetCommandInvocation, with the fields AWS
returns), the head node's answer made by the node package's own ``health show --format json`` over a store with a
drained node's history (so the two sides are checked against each other), the CLI in-process. Stand-in: SSM itself
(no head node here) and moto's CloudFormation for the stack outputs (test_status_moto.py says how).
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from clusterkit.cli.main import main
from clusterkit.deployed import node_checks
from clusterkit_node.commands import main as node_main
from clusterkit_node.fleet import health_record as record
from clusterkit_node.fleet.health_checks import Result

HEAD = "i-0123456789abcdef0"
REGION = "us-east-1"
COMMAND_ID = "5f1d0c6e-1111-2222-3333-444455556666"


def head_node_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``health show --format json`` prints on a head node whose store holds one drained node's history and
    one healthy node's (the node package, in-process; slurmctld's view as sinfo gives it, stood in)."""
    from clusterkit_node.fleet import health

    reason = "clusterkit health quick: gpus: 7 GPUs, expected 8; history: clusterkit_node.pyz health show gpu-st-p5-2"
    monkeypatch.setattr(health, "slurm_states", lambda env: {
        "gpu-st-p5-1": {"state": "idle", "reason": ""}, "gpu-st-p5-2": {"state": "drained", "reason": reason},
        "gpu-dy-p5-3": {"state": "idle~", "reason": ""}})
    store = tmp_path / "fsx" / "containers"
    store.mkdir(parents=True)
    bad = [Result("store", True, "ok"), Result("gpus", False, "7 GPUs, expected 8")]
    record.append(str(store), "demo", record.Entry.of("gpu-st-p5-2", "quick", "prolog", bad, 0.2, "0a1b2c3d4e",
                                                      drained="clusterkit health quick: gpus: 7 GPUs, expected 8"))
    record.append(str(store), "demo", record.Entry.of("gpu-st-p5-1", "quick", "idle", [Result("store", True, "ok")],
                                                      0.1, "99"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert node_main(["health", "show", "--store", str(store), "--cluster", "demo", "--summary",
                          "--format", "json"]) == 0
    return out.getvalue()


def stubbed(answers: list[dict], *, send_error: str | None = None):
    ssm = boto3.client("ssm", region_name=REGION)
    stub = Stubber(ssm)
    params = {"InstanceIds": [HEAD], "DocumentName": "AWS-RunShellScript",
              "Parameters": {"commands": [node_checks.COMMAND]}, "TimeoutSeconds": 60,
              "Comment": "clusterkit status --nodes: health show"}
    if send_error:
        stub.add_client_error("send_command", service_error_code=send_error, service_message="not authorized",
                              expected_params=params)
    else:
        stub.add_response("send_command", {"Command": {"CommandId": COMMAND_ID}}, params)
        for answer in answers:
            stub.add_response("get_command_invocation", {"CommandId": COMMAND_ID, "InstanceId": HEAD, **answer},
                              {"CommandId": COMMAND_ID, "InstanceId": HEAD})
    stub.activate()
    return ssm, stub


def test_the_head_nodes_answer_becomes_one_line_per_node(tmp_path: Path, monkeypatch) -> None:
    ssm, stub = stubbed([{"Status": "InProgress"},
                         {"Status": "Success", "StandardOutputContent": head_node_answer(tmp_path, monkeypatch)}])
    checks = node_checks.read(ssm, HEAD, sleep=lambda s: None)
    stub.assert_no_pending_responses()
    assert checks.unread is None
    lines = node_checks.lines(checks)
    assert lines[0] == "  nodes:"
    assert lines[1] == "    gpu-dy-p5-3: idle~: never checked", "a powered-down dynamic node Slurm knows"
    assert lines[2].startswith("    gpu-st-p5-1: idle: ok, last check ") and lines[2].endswith(" quick/idle")
    assert lines[3].startswith("    gpu-st-p5-2: drained (clusterkit health quick: gpus: 7 GPUs, expected 8; "
                               "history: clusterkit_node.pyz health show gpu-st-p5-2): FAILED gpus: 7 GPUs, "
                               "expected 8, last check ")
    assert "last drained " in lines[3] and lines[3].endswith("(boot 0a1b2c3d)")


@pytest.mark.parametrize(("answers", "send_error", "said"), [
    ([], "AccessDeniedException", "SSM refused: AccessDeniedException: not authorized (needs ssm:SendCommand"),
    ([{"Status": "Failed", "StandardErrorContent": "python3: can't open file"}], None,
     "health show on the head node ended Failed: python3: can't open file"),
    ([{"Status": "Success", "StandardOutputContent": "usage: clusterkit_node.pyz ..."}], None,
     "the head node's answer is not JSON (a bundle from before the health loop?)"),
    ([{"Status": "Success", "StandardOutputContent": json.dumps({"schema": "other", "nodes": {}})}], None,
     "the head node's answer is not clusterkit.node-health/v1"),
    ([{"Status": "Pending"}] * 3, None, "the head node did not answer within 2 s (SSM command"),
])
def test_what_the_head_node_cannot_say_is_one_line(answers, send_error, said) -> None:
    ssm, _ = stubbed(answers, send_error=send_error)
    ticks = iter(range(100))
    checks = node_checks.read(ssm, HEAD, timeout_s=2, sleep=lambda s: None, clock=lambda: float(next(ticks)))
    assert checks.nodes == () and checks.unread is not None and checks.unread.startswith(said), checks.unread
    assert node_checks.lines(checks) == [f"  nodes: {checks.unread}"]


def test_an_instance_id_that_is_not_one_never_reaches_ssm() -> None:
    checks = node_checks.read(object(), "i-0123; rm -rf /")
    assert checks.unread == "the stack's HeadNodeInstanceId 'i-0123; rm -rf /' is not an instance id"


def test_the_cli_adds_the_nodes_to_text_and_json(tmp_path: Path, capsys, monkeypatch) -> None:
    answer = head_node_answer(tmp_path, monkeypatch)
    clients = []

    def client(region: str):
        ssm, _ = stubbed([{"Status": "Success", "StandardOutputContent": answer}])
        clients.append(region)
        return ssm

    monkeypatch.setattr(node_checks, "ssm_client", client)
    monkeypatch.setattr(node_checks.time, "sleep", lambda s: None)
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name=REGION)
        for name, outputs in (("Demo-Network", {}), ("Demo-Storage", {}), ("Demo-Cluster",
                                                                          {"HeadNodeInstanceId": HEAD})):
            cfn.create_stack(StackName=name, TemplateBody=json.dumps({
                "Resources": {"M": {"Type": "AWS::SSM::Parameter", "Properties": {
                    "Name": f"/t/{name}", "Type": "String", "Value": "x"}}},
                "Outputs": {k: {"Value": v} for k, v in outputs.items()}}))
        assert main(["status", "demo", "--nodes"]) == 0
        text = capsys.readouterr().out
        assert main(["status", "demo", "--nodes", "--format", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert main(["status", "demo"]) == 0
        assert "nodes:" not in capsys.readouterr().out, "SSM is asked only with --nodes"
    assert clients == [REGION, REGION]
    assert "\n    gpu-st-p5-1: idle: ok" in text and "gpu-st-p5-2: drained (clusterkit health quick" in text
    assert data["schema"] == "clusterkit.status/v1" and data["nodes"]["unread"] is None
    bad = next(n for n in data["nodes"]["nodes"] if n["node"] == "gpu-st-p5-2")
    assert bad["last_check"]["ok"] is False and bad["last_check"]["failed"] == ["gpus: 7 GPUs, expected 8"]
    assert bad["last_drain"]["boot"] == "0a1b2c3d" and bad["slurm_state"] == "drained"


def test_a_cluster_that_is_not_deployed_has_no_head_node_to_ask(capsys) -> None:
    with mock_aws():
        assert main(["status", "demo", "--nodes"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "  nodes: no head node: the cluster stack is not deployed"
