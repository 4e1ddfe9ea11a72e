"""The ParallelCluster version guard: its handler against a real HTTP endpoint, its synthesized template.

Real: the handler module (the exact text the stack ships inline, loaded as ``index`` the way Lambda loads
``index.handler``) PUTting to a loopback ``http.server``; aws-cdk-lib synth with cdk-nag AwsSolutions;
cfn-lint 1.58 over the template. Stand-ins: the request events, written from the examples of the AWS
CloudFormation User Guide (crpg-ref-requesttypes-create.html, -update.html, -delete.html: RequestType,
RequestId, ResponseURL, ResourceType, LogicalResourceId, StackId, PhysicalResourceId, ResourceProperties,
OldResourceProperties); the loopback server for S3's presigned URL; no Lambda runtime, no deploy.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from cfnlint.api import ManualArgs, lint

from clusterkit.artifacts import nag_report
from clusterkit.artifacts.stack_inputs import version_guard_code as handler_code
from stacks import nag, version_guard
from stacks.version_guard import RESOURCE_TYPE, ParallelClusterVersionGuard, guard_depends

STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/Demo-Cluster/5b918d10-cd98-11ea-90d5-0a9cd3354c10"
PRESIGNED_PATH = "/cloudformation-custom-resource-response-useast1/arn%3Aaws%3Acloudformation/abc?X-Amz-Signature=f00"
CREATED_ID = "clusterkit-version-guard/demo/3.16.1"
RESPONSE_FIELDS = {"Status", "Reason", "PhysicalResourceId", "StackId", "RequestId", "LogicalResourceId",
                   "NoEcho", "Data"}
REFUSAL = ('ParallelCluster version change 3.16.1 -> 3.17.0 refused for cluster demo: ParallelCluster updates '
           'only clusters created by the same version. Upgrade: make destroy-cluster CLUSTER=demo, then make '
           'deploy CLUSTER=demo (network and FSx stay); docs/operations.md "Upgrading ParallelCluster"')


# --- the handler, run for real ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The inline code as Lambda runs it: a file named index.py, entry point ``index.handler``."""
    path = tmp_path_factory.mktemp("lambda") / "index.py"
    path.write_text(handler_code(), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("index", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Received:
    """What the loopback "presigned URL" got."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def only(self) -> dict[str, Any]:
        assert len(self.requests) == 1, self.requests
        return self.requests[0]


@pytest.fixture
def response_url() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.requests.append({"method": "PUT", "path": self.path, "headers": dict(self.headers.items()),
                                      "content_type": self.headers.get("Content-Type"), "body": body})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{PRESIGNED_PATH}", received
    finally:
        server.shutdown()
        server.server_close()


def event(kind: str, url: str, *, version: str = "3.16.1", old: str | None = None,
          physical_id: str | None = CREATED_ID) -> dict[str, Any]:
    """A request shaped like the User Guide's examples (ServiceToken is one of the template's Properties)."""
    properties = {"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:Demo-Cluster-VersionGuard",
                  "ClusterName": "demo", "ParallelClusterVersion": version}
    request: dict[str, Any] = {
        "RequestType": kind, "RequestId": f"unique id for this {kind.lower()} request", "ResponseURL": url,
        "ResourceType": RESOURCE_TYPE, "LogicalResourceId": "VersionGuard70749495", "StackId": STACK_ID,
        "ResourceProperties": properties}
    if kind != "Create":
        request["PhysicalResourceId"] = physical_id
    if kind == "Update":
        request["OldResourceProperties"] = {**properties, "ParallelClusterVersion": old or version}
    return request


def answered(index: ModuleType, request: dict[str, Any], received: Received) -> dict[str, Any]:
    """Run the handler; check the PUT is the documented one; return the response body."""
    result = index.handler(request, None)
    got = received.only()
    assert got["method"] == "PUT" and got["path"] == PRESIGNED_PATH  # the presigned URL as given, query included
    assert got["content_type"] == ""  # present and empty: the signature covers no content type
    assert int(got["headers"]["Content-Length"]) == len(got["body"]) <= 4096  # crpg-ref-responses: body limit
    body = json.loads(got["body"])
    assert set(body) == RESPONSE_FIELDS
    for field in ("StackId", "RequestId", "LogicalResourceId"):  # "copied verbatim from the request"
        assert body[field] == request[field]
    assert body["PhysicalResourceId"]  # non-empty string
    assert result == {"Status": body["Status"], "Sent": True}
    return body


@pytest.mark.parametrize(("kind", "versions"), [
    ("Create", {}),  # records the created version
    ("Update", {"version": "3.16.1", "old": "3.16.1"}),  # the same version: keeps the physical id
    # CloudFormation rolls a refused resource back with swapped properties; refusing that too would leave the
    # stack in UPDATE_ROLLBACK_FAILED
    ("Update", {"version": "3.16.1", "old": "3.17.0"}),
    ("Delete", {}),  # echoes the physical id
], ids=["create", "update-same-version", "rollback-to-created-version", "delete"])
def test_what_must_succeed_succeeds_and_keeps_the_physical_id(index, response_url, kind, versions) -> None:
    url, received = response_url
    body = answered(index, event(kind, url, **versions), received)
    assert (body["Status"], body["PhysicalResourceId"]) == ("SUCCESS", CREATED_ID)


def test_update_that_changes_the_version_fails_with_the_way_out(index, response_url) -> None:
    url, received = response_url
    body = answered(index, event("Update", url, version="3.17.0", old="3.16.1"), received)
    assert (body["Status"], body["Reason"], body["PhysicalResourceId"]) == ("FAILED", REFUSAL, CREATED_ID)
    assert "\n" not in body["Reason"]


def test_a_downgrade_is_refused_too(index, response_url) -> None:
    url, received = response_url
    body = answered(index, event("Update", url, version="3.15.0", old="3.16.1"), received)
    assert body["Status"] == "FAILED" and "3.16.1 -> 3.15.0" in body["Reason"]


def test_a_malformed_delete_still_succeeds(index, response_url) -> None:
    url, received = response_url
    request = event("Delete", url)
    del request["PhysicalResourceId"], request["ResourceProperties"]
    body = answered(index, request, received)
    assert body["Status"] == "SUCCESS"
    assert body["PhysicalResourceId"] == "clusterkit-version-guard/unique id for this delete request"


@pytest.mark.parametrize("breakage", ["no properties", "no version", "unknown type"])
def test_a_malformed_create_or_update_fails_with_a_reason(index, response_url, breakage: str) -> None:
    url, received = response_url
    request = event("Update" if breakage == "no version" else "Create", url)
    if breakage == "no properties":
        del request["ResourceProperties"]
    elif breakage == "no version":
        del request["ResourceProperties"]["ParallelClusterVersion"]
    else:
        request["RequestType"] = "Replace" + "x" * 5000
    body = answered(index, request, received)
    assert body["Status"] == "FAILED"
    assert body["Reason"].startswith("ClusterKit version guard: malformed ")
    assert len(body["Reason"]) <= index.REASON_MAX


def test_an_unreachable_response_url_is_logged_not_raised(index, capsys) -> None:
    with socket.socket() as probe:  # a port nobody listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = index.handler(event("Update", f"http://127.0.0.1:{port}/x", version="3.17.0", old="3.16.1"), None)
    assert result == {"Status": "FAILED", "Sent": False}
    assert "response FAILED NOT sent: " in capsys.readouterr().out


def test_a_response_url_that_never_answers_times_out(index, monkeypatch, capsys) -> None:
    """A peer that accepts the connection and never replies: the PUT gives up after TIMEOUT."""
    monkeypatch.setattr(index, "TIMEOUT", 0.5)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # the kernel completes the handshake; nobody ever reads or writes
        started = time.monotonic()
        result = index.handler(event("Create", f"http://127.0.0.1:{silent.getsockname()[1]}/x"), None)
        elapsed = time.monotonic() - started
    assert result == {"Status": "SUCCESS", "Sent": False}
    assert elapsed < 5, elapsed
    assert "response SUCCESS NOT sent: " in capsys.readouterr().out


@pytest.mark.parametrize("request_", [{}, None, "not a request", {"RequestType": "Delete"}])
def test_a_request_without_a_response_url_returns(index, request_: object) -> None:
    assert index.handler(request_, None)["Sent"] is False


def test_the_response_url_is_not_logged(index, response_url, capsys) -> None:
    """The presigned URL is a credential for one response; the logs do not need it."""
    url, received = response_url
    answered(index, event("Update", url, version="3.17.0", old="3.16.1"), received)
    assert "X-Amz-Signature" not in capsys.readouterr().out


def test_handler_is_stdlib_only_and_fits_inline() -> None:
    """CloudFormation used to cap ZipFile at 4096 characters (aws-cdk PR #20624 records the limit's removal);
    the handler stays under it anyway, and imports nothing a bare Lambda runtime lacks."""
    text = handler_code()
    assert len(text.encode("utf-8")) <= 4096, len(text.encode("utf-8"))
    imported = {alias.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ImportFrom)}
    assert imported == {"json", "urllib.request"}


# --- the construct, synthesized ------------------------------------------------------------------------------

CLUSTER_TYPE = "Custom::PclusterCluster"


def build(outdir: Path, *, wire: bool = True) -> dict[str, Any]:
    """A small cluster-like stack: the guard, a provider nested stack and a cluster custom resource whose
    ServiceToken comes from the provider (as stacks/cluster.py does), synthesized with cdk-nag on."""
    app = cdk.App(outdir=str(outdir))
    nag.add_checks(app)
    stack = cdk.Stack(app, "Demo-Cluster", synthesizer=cdk.DefaultStackSynthesizer(),
                      env=cdk.Environment(account="123456789012", region="us-east-1"))
    guard = ParallelClusterVersionGuard(stack, "VersionGuard", cluster_name="demo", version="3.16.1",
                                        handler_code=handler_code())
    provider = cdk.CfnStack(stack, "ParallelClusterProvider",
                            template_url="https://example.com/parallelcluster/3.16.1/templates/custom_resource/cluster.yaml")
    cdk.CustomResource(stack, "ParallelCluster", resource_type=CLUSTER_TYPE,
                       service_token=provider.get_att("Outputs.ServiceToken").to_string(),
                       properties={"ClusterName": "demo"})
    if wire:
        guard_depends(provider, guard)
    return app.synth().get_stack_artifact(stack.artifact_id).template


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build(tmp_path_factory.mktemp("guard") / "cdk.out")


def of_type(template: dict[str, Any], type_name: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_name}


def test_resource_type_and_properties(template) -> None:
    ((_, guard),) = of_type(template, RESOURCE_TYPE).items()
    (function_id,) = of_type(template, "AWS::Lambda::Function")
    assert guard["Properties"] == {"ServiceToken": {"Fn::GetAtt": [function_id, "Arn"]}, "ServiceTimeout": "300",
                                   "ClusterName": "demo", "ParallelClusterVersion": "3.16.1"}
    assert guard["DeletionPolicy"] == "Delete"


def test_function_runs_the_handler_inline_on_the_newest_python(template) -> None:
    ((_, function),) = of_type(template, "AWS::Lambda::Function").items()
    (log_group_id,) = of_type(template, "AWS::Logs::LogGroup")
    props = function["Properties"]
    assert props["Runtime"] == "python3.14" and props["Handler"] == "index.handler"
    assert props["Code"] == {"ZipFile": handler_code()}
    assert props["LoggingConfig"] == {"LogGroup": {"Ref": log_group_id}}
    assert props["Timeout"] == 60
    assert of_type(template, "AWS::Logs::LogGroup")[log_group_id]["Properties"] == {"RetentionInDays": 30}


def test_runtime_is_the_newest_python_cdk_knows() -> None:
    """cdk-nag AwsSolutions-L1 accepts only the newest runtime of a family in aws-cdk-lib's Runtime.ALL."""
    def key(runtime: lambda_.Runtime) -> tuple[int, ...]:
        return tuple(int(part) for part in runtime.name.removeprefix("python").split("."))

    pythons = [r for r in lambda_.Runtime.ALL if r.name.startswith("python")]
    assert version_guard.RUNTIME.name == max(pythons, key=key).name


def test_role_may_only_write_its_own_log_group(template) -> None:
    ((_, role),) = of_type(template, "AWS::IAM::Role").items()
    (log_group_id,) = of_type(template, "AWS::Logs::LogGroup")
    props = role["Properties"]
    assert "ManagedPolicyArns" not in props and not of_type(template, "AWS::IAM::Policy")
    assert props["AssumeRolePolicyDocument"]["Statement"] == [{
        "Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}]
    (policy,) = props["Policies"]
    # The log group's Arn attribute ends in ":*" (AWS::Logs::LogGroup return values), covering its streams.
    assert policy["PolicyDocument"]["Statement"] == [{
        "Sid": "WriteOwnLogGroup", "Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
        "Resource": {"Fn::GetAtt": [log_group_id, "Arn"]}}]


def test_cdk_nag_is_clean_without_acknowledgements(tmp_path) -> None:
    build(tmp_path / "cdk.out")  # raises on any unacknowledged finding
    assert nag_report.findings(tmp_path / "cdk.out") == []


def test_cdk_nag_is_live_here(tmp_path, monkeypatch) -> None:
    """Negative control: the same construct on an older Python fails synth with AwsSolutions-L1."""
    monkeypatch.setattr(version_guard, "RUNTIME", lambda_.Runtime.PYTHON_3_12)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        build(tmp_path / "cdk.out")
    assert {f.rule for f in nag_report.findings(tmp_path / "cdk.out") if f.reason is None} == {"AwsSolutions-L1"}


def test_cfn_lint_finds_no_error_or_warning(template) -> None:
    found = lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"]))
    assert [f"{m.rule.id} {m.path}: {m.message}" for m in found] == []
    suppressed = {k: v["Metadata"]["cfn-lint"] for k, v in template["Resources"].items()
                  if "cfn-lint" in v.get("Metadata", {})}
    ((function_id, function),) = of_type(template, "AWS::Lambda::Function").items()
    assert suppressed == {function_id: {"config": {"ignore_checks": ["W3005"]}}}
    (role_id,) = of_type(template, "AWS::IAM::Role")
    assert function["DependsOn"] == [role_id]  # the one redundancy W3005 is silenced for


def depends_on(template: dict[str, Any], logical_id: str) -> set[str]:
    """What CloudFormation waits for before touching ``logical_id``: DependsOn, Ref and GetAtt targets."""
    found: set[str] = set()
    resource = template["Resources"][logical_id]
    declared = resource.get("DependsOn", [])
    found.update([declared] if isinstance(declared, str) else declared)

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "Ref" in node and node["Ref"] in template["Resources"]:
                found.add(node["Ref"])
            if "Fn::GetAtt" in node:
                found.add(node["Fn::GetAtt"][0])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(resource.get("Properties", {}))
    return found


def before(template: dict[str, Any], logical_id: str) -> set[str]:
    """Every resource CloudFormation orders before ``logical_id`` (transitively)."""
    seen: set[str] = set()
    todo: list[str] = [logical_id]
    while todo:
        for dep in depends_on(template, todo.pop()) - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


def test_provider_stack_depends_on_the_guard(template) -> None:
    (guard_id,) = of_type(template, RESOURCE_TYPE)
    (provider_id,) = of_type(template, "AWS::CloudFormation::Stack")
    assert guard_id in template["Resources"][provider_id]["DependsOn"]


def test_guard_comes_before_the_provider_and_the_cluster(template) -> None:
    (guard_id,) = of_type(template, RESOURCE_TYPE)
    (provider_id,) = of_type(template, "AWS::CloudFormation::Stack")
    (cluster_id,) = of_type(template, CLUSTER_TYPE)
    assert guard_id in before(template, provider_id)
    assert {guard_id, provider_id} <= before(template, cluster_id)
    assert provider_id not in before(template, guard_id)  # no cycle: the guard never waits for the provider


def test_without_the_wiring_nothing_orders_the_guard_first(tmp_path) -> None:
    """The old behaviour (the provider is free to update in parallel with, or before, the guard)."""
    template = build(tmp_path / "cdk.out", wire=False)
    (guard_id,) = of_type(template, RESOURCE_TYPE)
    (provider_id,) = of_type(template, "AWS::CloudFormation::Stack")
    (cluster_id,) = of_type(template, CLUSTER_TYPE)
    assert guard_id not in before(template, provider_id) | before(template, cluster_id)
