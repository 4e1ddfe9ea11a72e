"""The TTL teardown in the synthesized cluster stack: what CloudFormation would be asked to create.

Real: aws-cdk-lib synth of the whole app with cdk-nag AwsSolutions (a finding fails synth), the
template JSON, cfn-lint over the cluster template. Not real: nothing is deployed, so EventBridge
Scheduler never fires and CloudFormation never deletes anything; the permission design (DeleteStack
runs with the stack's CDK execution role) rests on the CloudFormation API documentation cited in
stacks/ttl.py, not on a test.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from stacks.nag import findings


def _resources(stacks, kind):
    return Template.from_stack(stacks["cluster"]).find_resources(kind)


def _one(stacks, kind):
    found = _resources(stacks, kind)
    assert len(found) == 1, found
    return next(iter(found.items()))


def test_schedule_deletes_this_stack_at_deploy_time_plus_ttl(synth_ttl):
    stacks, _ = synth_ttl("demo")  # lifecycle.ttl_hours: 72
    _, schedule = _one(stacks, "AWS::Scheduler::Schedule")
    props = schedule["Properties"]
    assert props["ScheduleExpression"] == "at(2026-12-04T08:00:00)"
    assert props["ScheduleExpressionTimezone"] == "UTC"
    assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert props["State"] == "ENABLED"
    assert props["Name"] == "ClusterKit-demo-ttl"
    assert props["Target"]["Arn"] == {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                                        ":scheduler:::aws-sdk:cloudformation:deleteStack"]]}
    assert props["Target"]["Input"] == {"Fn::Join": ["", ['{"StackName":"', {"Ref": "AWS::StackId"}, '"}']]}
    role_id, _ = _one(stacks, "AWS::IAM::Role")
    assert props["Target"]["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert "ActionAfterCompletion" not in props  # not a CloudFormation property; Scheduler's default NONE applies


def test_schedule_waits_for_the_cluster(synth_ttl):
    stacks, _ = synth_ttl("demo")
    custom = _resources(stacks, "Custom::PclusterCluster")
    _, schedule = _one(stacks, "AWS::Scheduler::Schedule")
    assert set(custom) <= set(schedule["DependsOn"])


def test_expires_at_output(synth_ttl):
    stacks, _ = synth_ttl("p5-capacity-block")  # ttl_hours: 96
    outputs = Template.from_stack(stacks["cluster"]).find_outputs("ExpiresAt")
    assert outputs["ExpiresAt"]["Value"] == "2026-12-05T08:00:00Z"


def test_role_may_only_delete_this_stack(synth_ttl):
    stacks, _ = synth_ttl("demo")
    role_id, role = _one(stacks, "AWS::IAM::Role")
    props = role["Properties"]
    (trust,) = props["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"} and trust["Action"] == "sts:AssumeRole"
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    source_arn = json.dumps(trust["Condition"]["ArnEquals"]["aws:SourceArn"])
    # Scheduler presents its schedule group's ARN (aws-cdk's scheduler targets trust the same), not the schedule's
    assert source_arn.endswith(':scheduler:us-east-1:", {"Ref": "AWS::AccountId"}, ":schedule-group/default"]]}')
    (policy,) = props["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [{
        "Action": "cloudformation:DeleteStack", "Effect": "Allow", "Resource": {"Ref": "AWS::StackId"},
        "Sid": "DeleteThisStackOnly"}]
    assert "ManagedPolicyArns" not in props
    template = Template.from_stack(stacks["cluster"]).to_json()
    others = [k for k, r in template["Resources"].items()
              if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy") and role_id in json.dumps(r)]
    assert others == []


def test_no_ttl_means_no_schedule_and_no_expiry(synth_ttl):
    stacks, _ = synth_ttl("p4d-existing")
    assert _resources(stacks, "AWS::Scheduler::Schedule") == {}
    assert Template.from_stack(stacks["cluster"]).find_outputs("ExpiresAt") == {}


def test_cdk_nag_needs_no_acknowledgement_for_the_teardown(synth_ttl):
    _, outdir = synth_ttl("demo")
    assert [f for f in findings(outdir) if "TtlTeardown" in f.path] == []


def test_cluster_template_is_cfn_lint_clean(synth_ttl):
    from cfnlint.api import ManualArgs, lint

    stacks, outdir = synth_ttl("demo")
    text = Path(outdir, f"{stacks['cluster'].stack_name}.template.json").read_text()
    assert [str(m) for m in lint(text, config=ManualArgs(regions=["us-east-1"])) if m.rule.id[0] in "EW"] == []


def test_same_clock_same_template_and_a_redeploy_moves_only_the_expiry(synth_ttl):
    first = Template.from_stack(synth_ttl("demo")[0]["cluster"]).to_json()
    again = Template.from_stack(synth_ttl("demo", unrelated="a second synth")[0]["cluster"]).to_json()
    assert first == again
    later = Template.from_stack(synth_ttl("demo", deploy_time="2026-12-02T10:30:00Z")[0]["cluster"]).to_json()
    changed = {k for k in first["Resources"] if first["Resources"][k] != later["Resources"].get(k)}
    assert changed == {k for k, r in first["Resources"].items() if r["Type"] == "AWS::Scheduler::Schedule"}
    assert later["Outputs"]["ExpiresAt"]["Value"] == "2026-12-05T10:30:00Z"


@pytest.mark.parametrize("override,expected", [("1.5", "at(2026-12-01T09:30:00)"), ("0.25", "at(2026-12-01T08:15:00)"),
                                               (48, "at(2026-12-03T08:00:00)")])
def test_ttl_override_context(synth_ttl, override, expected):
    stacks, _ = synth_ttl("demo", ttl_hours=override)
    _, schedule = _one(stacks, "AWS::Scheduler::Schedule")
    assert schedule["Properties"]["ScheduleExpression"] == expected


def test_ttl_none_keeps_the_cluster(synth_ttl):
    stacks, _ = synth_ttl("demo", ttl_hours="none")
    assert _resources(stacks, "AWS::Scheduler::Schedule") == {}
    assert _resources(stacks, "AWS::IAM::Role") == {}


def test_ttl_on_a_spec_without_one(synth_ttl):
    stacks, _ = synth_ttl("p4d-existing", ttl_hours="12")
    _, schedule = _one(stacks, "AWS::Scheduler::Schedule")
    assert schedule["Properties"]["ScheduleExpression"] == "at(2026-12-01T20:00:00)"
    assert schedule["Properties"]["Name"] == "ClusterKit-p4d-existing-ttl"
