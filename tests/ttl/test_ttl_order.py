"""The teardown's creation/deletion order and its alarm actions, in a small app of two stacks.

Real: aws-cdk-lib synth with cdk-nag AwsSolutions, the real ``TtlTeardown`` and ``ClusterAlerts``, CDK's
cross-stack reference for the topic, cfn-lint over both templates. Stand-in: the cluster stack's own
resources are an SSM parameter and a nested stack (the shapes of the bundle parameter and the
ParallelCluster provider), so the order can be read without building ParallelCluster's stack; this does not
depend on the wiring in stacks/cluster.py and app.py (tests/ttl/test_ttl_stack.py covers the real app).
Not real: CloudFormation honouring DependsOn in reverse on deletion is its documented behaviour, not run.
"""
from __future__ import annotations

import json
from datetime import UTC, datetime

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ssm as ssm

from clusterkit.artifacts.nag_report import findings
from clusterkit.effective.expand import lifecycle
from stacks import nag
from stacks.alerts import ClusterAlerts
from stacks.ttl import TtlTeardown

ENV = cdk.Environment(account="123456789012", region="us-east-1")
DEPLOY = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TTL_TYPES = {"AWS::Scheduler::ScheduleGroup", "AWS::Scheduler::Schedule", "AWS::IAM::Role", "AWS::CloudWatch::Alarm"}


def _synth(outdir, *, with_topic: bool = True, delete_last: bool = True) -> dict[str, dict]:
    app = cdk.App(outdir=str(outdir))
    nag.add_checks(app)
    storage = cdk.Stack(app, "Small-Storage", env=ENV)
    alerts = ClusterAlerts(storage, "Alerts", cluster_name="small")
    cluster = cdk.Stack(app, "Small-Cluster", env=ENV)
    ssm.StringParameter(cluster, "Bundle", string_value="s3://bucket/key")
    cdk.CfnStack(cluster, "Provider", template_url="https://example.com/provider.yaml")
    ttl = TtlTeardown(cluster, "TtlTeardown", cluster_name="small", lifecycle=lifecycle(1, None, DEPLOY),
                      alert_topic=alerts.topic if with_topic else None)
    if delete_last:
        ttl.delete_last()
    assembly = app.synth()
    return {s.stack_name: s.template for s in assembly.stacks}


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    return _synth(tmp_path_factory.mktemp("ttl-order"))


def test_every_other_resource_waits_for_the_teardown(templates):
    """Created first (its StartDate cannot lie in the past), deleted last (still there after DELETE_FAILED)."""
    resources = templates["Small-Cluster"]["Resources"]
    ttl = {k for k, r in resources.items() if r["Type"] in TTL_TYPES}
    others = {k for k, r in resources.items() if r["Type"] not in TTL_TYPES and r["Type"] != "AWS::CDK::Metadata"}
    assert len(ttl) == 5
    assert {resources[k]["Type"] for k in others} == {"AWS::SSM::Parameter", "AWS::CloudFormation::Stack"}
    for logical_id in others:
        assert ttl <= set(resources[logical_id]["DependsOn"]), logical_id
    for logical_id in ttl:
        assert not set(resources[logical_id].get("DependsOn", [])) & others, logical_id


def test_alarms_publish_to_the_topic_of_the_outliving_stack(templates):
    resources = templates["Small-Cluster"]["Resources"]
    alarms = [r for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert len(alarms) == 2
    for alarm in alarms:
        (action,) = alarm["Properties"]["AlarmActions"]
        assert "Small-Storage" in json.dumps(action["Fn::ImportValue"])
        assert "OKActions" not in alarm["Properties"]
    # the topic and its key let CloudWatch publish for exactly these alarm names (ClusterKit-small-*)
    names = {a["Properties"]["AlarmName"] for a in alarms}
    assert names == {"ClusterKit-small-teardown-refused", "ClusterKit-small-teardown-overdue"}


def test_without_a_topic_the_alarms_exist_but_notify_no_one(tmp_path):
    resources = _synth(tmp_path, with_topic=False)["Small-Cluster"]["Resources"]
    alarms = [r for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert len(alarms) == 2 and all("AlarmActions" not in a["Properties"] for a in alarms)


def test_no_finding_and_cfn_lint_clean(tmp_path):
    from cfnlint.api import ManualArgs, lint

    templates = _synth(tmp_path)
    assert [f for f in findings(tmp_path) if f.reason is None] == []
    assert [f for f in findings(tmp_path) if "TtlTeardown" in f.path or "Alerts" in f.path] == []
    for name, template in templates.items():
        problems = [str(m) for m in lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"]))
                    if m.rule.id[0] in "EW"]
        assert problems == [], name
