"""The TTL teardown in the synthesized cluster stack: what CloudFormation would be asked to create.

Real: aws-cdk-lib synth of the whole app with cdk-nag AwsSolutions (a finding fails synth), the
template JSON, cfn-lint over the cluster template; a small two-stack app (storage-like stack with the
real ClusterAlerts, cluster-like stack with stand-in resources) for the creation/deletion order and the
alarm actions. Not real: nothing is deployed, so EventBridge Scheduler never fires, CloudFormation never
deletes anything and no alarm changes state; the permission design (DeleteStack runs with the stack's
CDK execution role), what CloudFormation does with DeleteStack in each stack state and the Scheduler
metric semantics rest on the documentation cited in stacks/ttl.py, not on a test.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from clusterkit.artifacts.nag_report import findings
from clusterkit.spec.naming import teardown_alarm_names

TTL_TYPES = ("AWS::Scheduler::ScheduleGroup", "AWS::Scheduler::Schedule", "AWS::IAM::Role", "AWS::CloudWatch::Alarm")
TTL_PREFIX = "TtlTeardown"  # the construct id stacks/cluster.py gives the teardown; other roles live in the stack too


def _resources(stacks, kind):
    """The teardown's resources of type ``kind`` in the cluster stack."""
    found = Template.from_stack(stacks["cluster"]).find_resources(kind)
    return {k: r for k, r in found.items() if k.startswith(TTL_PREFIX)}


def _one(stacks, kind):
    found = _resources(stacks, kind)
    assert len(found) == 1, found
    return next(iter(found.items()))


def test_schedule_deletes_this_stack_from_deploy_time_plus_ttl_every_15_minutes(synth_ttl):
    stacks, _ = synth_ttl("demo")  # lifecycle.ttl_hours: 72
    _, schedule = _one(stacks, "AWS::Scheduler::Schedule")
    props = schedule["Properties"]
    assert props["ScheduleExpression"] == "rate(15 minutes)"
    assert props["StartDate"] == "2026-12-04T08:00:00Z"  # the expiry, as ExpiresAt says
    assert "EndDate" not in props  # retried until the stack, and with it the schedule, is gone
    assert props["ScheduleExpressionTimezone"] == "UTC"
    assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert props["State"] == "ENABLED"
    assert props["Name"] == "ClusterKit-demo-ttl"
    assert props["Target"]["Arn"] == {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                                        ":scheduler:::aws-sdk:cloudformation:deleteStack"]]}
    assert props["Target"]["Input"] == {"Fn::Join": ["", ['{"StackName":"', {"Ref": "AWS::StackId"}, '"}']]}
    role_id, _ = _one(stacks, "AWS::IAM::Role")
    assert props["Target"]["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    # one firing's retries (throttling, passing errors) end before the next firing starts
    assert props["Target"]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 600, "MaximumRetryAttempts": 5}
    assert "ActionAfterCompletion" not in props  # not a CloudFormation property; irrelevant for recurring schedules


def test_schedule_lives_in_the_clusters_own_group(synth_ttl):
    stacks, _ = synth_ttl("demo")
    group_id, group = _one(stacks, "AWS::Scheduler::ScheduleGroup")
    _, schedule = _one(stacks, "AWS::Scheduler::Schedule")
    assert group["Properties"] == {"Name": "clusterkit-demo"}
    assert group["DeletionPolicy"] == "Delete"  # goes with the stack (and takes its schedules along)
    assert schedule["Properties"]["GroupName"] == "clusterkit-demo"
    assert group_id in schedule["DependsOn"]  # the name is a literal: the order is stated


def test_alarms_watch_the_groups_scheduler_metrics(synth_ttl):
    stacks, _ = synth_ttl("demo")
    found = _resources(stacks, "AWS::CloudWatch::Alarm").values()
    alarms = {a["Properties"]["AlarmName"]: a["Properties"] for a in found}
    names = teardown_alarm_names("demo")
    assert set(alarms) == set(names.values())
    expected = {"refused": ("TargetErrorCount", 2, 3), "overdue": ("InvocationAttemptCount", 5, 6)}
    for kind, (metric, datapoints, periods) in expected.items():
        alarm = alarms[names[kind]]
        assert (alarm["Namespace"], alarm["MetricName"], alarm["Dimensions"]) == (
            "AWS/Scheduler", metric, [{"Name": "ScheduleGroup", "Value": "clusterkit-demo"}])
        assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
            "Sum", 900, 1, "GreaterThanOrEqualToThreshold")
        assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (datapoints, periods)
        assert alarm["TreatMissingData"] == "notBreaching"  # no schedule (no TTL yet, or stack gone): OK
        assert "python -m clusterkit status demo" in alarm["AlarmDescription"]


def test_app_alarms_publish_to_the_storage_stacks_topic(synth_ttl):
    stacks, _ = synth_ttl("demo")
    for alarm in _resources(stacks, "AWS::CloudWatch::Alarm").values():
        (action,) = alarm["Properties"]["AlarmActions"]
        assert "Fn::ImportValue" in action and "Demo-Storage" in json.dumps(action)


def test_app_teardown_is_created_first_and_deleted_last(synth_ttl):
    stacks, _ = synth_ttl("demo")
    template = Template.from_stack(stacks["cluster"]).to_json()["Resources"]
    ttl = {k for k in template if k.startswith(TTL_PREFIX)}
    assert {template[k]["Type"] for k in ttl} == set(TTL_TYPES)
    for logical_id, resource in template.items():
        if logical_id not in ttl and resource["Type"] != "AWS::CDK::Metadata":
            assert ttl <= set(resource.get("DependsOn", [])), logical_id


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
    assert source_arn.endswith(
        ':scheduler:us-east-1:", {"Ref": "AWS::AccountId"}, ":schedule-group/clusterkit-demo"]]}')
    (policy,) = props["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [{
        "Action": "cloudformation:DeleteStack", "Effect": "Allow", "Resource": {"Ref": "AWS::StackId"},
        "Sid": "DeleteThisStackOnly"}]
    assert "ManagedPolicyArns" not in props
    template = Template.from_stack(stacks["cluster"]).to_json()
    others = [k for k, r in template["Resources"].items()  # DependsOn may name the role; Properties may not
              if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
              and role_id in json.dumps(r["Properties"])]
    assert others == []


def test_no_ttl_means_no_schedule_and_no_expiry(synth_ttl):
    stacks, _ = synth_ttl("p4d-existing")
    for kind in TTL_TYPES:
        assert _resources(stacks, kind) == {}, kind
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


@pytest.mark.parametrize("override,expected", [("2.5", "2026-12-01T10:30:00Z"), ("2.25", "2026-12-01T10:15:00Z"),
                                               (48, "2026-12-03T08:00:00Z")])
def test_ttl_override_context(synth_ttl, override, expected):
    stacks, _ = synth_ttl("demo", ttl_hours=override)
    _, schedule = _one(stacks, "AWS::Scheduler::Schedule")
    assert schedule["Properties"]["StartDate"] == expected
    assert Template.from_stack(stacks["cluster"]).find_outputs("ExpiresAt")["ExpiresAt"]["Value"] == expected


def test_ttl_none_keeps_the_cluster(synth_ttl):
    stacks, _ = synth_ttl("demo", ttl_hours="none")
    for kind in TTL_TYPES:
        assert _resources(stacks, kind) == {}, kind


def test_ttl_on_a_spec_without_one(synth_ttl):
    stacks, _ = synth_ttl("p4d-existing", ttl_hours="12")
    _, schedule = _one(stacks, "AWS::Scheduler::Schedule")
    assert schedule["Properties"]["StartDate"] == "2026-12-01T20:00:00Z"
    assert schedule["Properties"]["Name"] == "ClusterKit-p4d-existing-ttl"
    assert schedule["Properties"]["GroupName"] == "clusterkit-p4d-existing"
