"""``clusterkit status``: stack states, TTL expiry and teardown state, head node and SSM command.

Real: boto3's CloudFormation and CloudWatch clients, botocore's paginator and Stubber, the status code.
Stand-in: moto holds three stacks named as app.py names them, made from a one-parameter template whose
Outputs carry the values the real cluster stack exports (ExpiresAt, HeadNodeInstanceId, SsmSession), and the
two TTL alarms by the names clusterkit.spec.naming gives them; no real cluster exists. moto never fails a
deletion and has no busy states, so those stack states and their events are written into moto's backend
(``_fail_deletion``) with the field names and order of CloudFormation's DescribeStackEvents (StackEvents
newest first; a deletion starts with the stack's own DELETE_IN_PROGRESS "User Initiated" event).
"""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from moto.cloudformation.models import Event, cloudformation_backends
from moto.core import DEFAULT_ACCOUNT_ID

from clusterkit.cli.main import main
from clusterkit.deployed.status_report import first_delete_failure, status_lines, time_left
from clusterkit.pipeline.loader import load
from clusterkit.spec.naming import stack_names, teardown_alarm_names

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
LATER = datetime(2026, 12, 4, 9, 25, tzinfo=UTC)  # 1h 25m after the demo expiry
HEAD = "i-0123456789abcdef0"
REGION = "us-east-1"
ALARMS = teardown_alarm_names("demo")
REASON = ("Failed to delete cluster demo: Cluster deletion timed out waiting for compute fleet instances "
          "i-0aaa, i-0bbb to terminate")


def _create(cfn, name: str, outputs: dict[str, str]) -> None:
    template = {"Resources": {"Marker": {"Type": "AWS::SSM::Parameter", "Properties": {
        "Name": f"/status-test/{name}", "Type": "String", "Value": name}}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()}}
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))


@pytest.fixture
def aws():
    with mock_aws():
        yield (boto3.client("cloudformation", region_name=REGION), boto3.client("cloudwatch", region_name=REGION))


def _deploy(cfn, cluster_outputs: dict[str, str] | None) -> None:
    names = stack_names("demo")
    _create(cfn, names["network"], {})
    _create(cfn, names["storage"], {})
    if cluster_outputs is not None:
        _create(cfn, names["cluster"], cluster_outputs)


def _alarms(cloudwatch, **states: str) -> None:
    """The TTL alarms as stacks/ttl.py creates them, in the given states (``refused="OK"``...)."""
    for kind, state in states.items():
        cloudwatch.put_metric_alarm(
            AlarmName=ALARMS[kind], Namespace="AWS/Scheduler", MetricName="TargetErrorCount", Statistic="Sum",
            Dimensions=[{"Name": "ScheduleGroup", "Value": "clusterkit-demo"}], Period=900, EvaluationPeriods=3,
            DatapointsToAlarm=2, Threshold=1, ComparisonOperator="GreaterThanOrEqualToThreshold")
        cloudwatch.set_alarm_state(AlarmName=ALARMS[kind], StateValue=state, StateReason="test")


def _moto_stack(name: str):
    backend = cloudformation_backends[DEFAULT_ACCOUNT_ID][REGION]
    return next(s for s in backend.stacks.values() if s.name == name)


def _resource_event(stack, logical_id: str, resource_type: str, status: str, reason: str | None = None) -> None:
    stack.events.append(Event(stack_id=stack.stack_id, stack_name=stack.name, logical_resource_id=logical_id,
                              physical_resource_id=f"{logical_id}-id", resource_type=resource_type,
                              resource_status=status, resource_status_reason=reason, resource_properties=None))


def _fail_deletion(name: str, *, earlier_attempt: bool = False) -> None:
    """A deletion that failed on the ParallelCluster resource, as CloudFormation records it."""
    stack = _moto_stack(name)
    if earlier_attempt:  # an older attempt that failed for another reason must not be reported
        stack._add_stack_event("DELETE_IN_PROGRESS", resource_status_reason="User Initiated")
        _resource_event(stack, "BootstrapBundle", "AWS::SSM::Parameter", "DELETE_FAILED", "an older failure")
        stack._add_stack_event("DELETE_FAILED", resource_status_reason="older")
    stack._add_stack_event("DELETE_IN_PROGRESS", resource_status_reason="User Initiated")
    _resource_event(stack, "ParallelCluster", "Custom::PclusterCluster", "DELETE_IN_PROGRESS")
    _resource_event(stack, "ParallelCluster", "Custom::PclusterCluster", "DELETE_FAILED", REASON)
    _resource_event(stack, "ParallelClusterProvider", "AWS::CloudFormation::Stack", "DELETE_SKIPPED",
                    "a dependent resource failed to delete")
    stack._add_stack_event("DELETE_FAILED", resource_status_reason=(
        "The following resource(s) failed to delete: [ParallelCluster]. "))
    stack.status = "DELETE_FAILED"


CLUSTER_OUTPUTS = {"ExpiresAt": "2026-12-04T08:00:00Z", "HeadNodeInstanceId": HEAD,
                   "SsmSession": f"aws ssm start-session --region us-east-1 --target {HEAD}"}


def test_deployed_cluster_with_ttl(aws):
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    _alarms(cloudwatch, refused="OK", overdue="OK")
    assert status_lines(load("demo").spec, cfn, now=NOW, cloudwatch=cloudwatch) == [
        "demo (us-east-1)",
        "  Demo-Network                       CREATE_COMPLETE",
        "  Demo-Storage                       CREATE_COMPLETE",
        "  Demo-Cluster                       CREATE_COMPLETE",
        "  expires                            2026-12-04T08:00:00Z, in 3d; extend: make deploy CLUSTER=demo "
        "TTL=<hours from now>",
        "  alarm teardown-refused             OK (ClusterKit-demo-teardown-refused)",
        "  alarm teardown-overdue             OK (ClusterKit-demo-teardown-overdue)",
        f"  head node                          {HEAD}",
        f"  shell                              aws ssm start-session --region us-east-1 --target {HEAD}",
    ]


def test_expired_cluster_that_still_exists_is_overdue(aws):
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    _alarms(cloudwatch, refused="OK", overdue="ALARM")
    lines = status_lines(load("demo").spec, cfn, now=LATER, cloudwatch=cloudwatch)
    assert lines[4:8] == [
        "  expires                            2026-12-04T08:00:00Z, expired 1h 25m ago",
        "  overdue                            yes, by 1h 25m: the stack still exists; the TTL schedule retries "
        "DeleteStack every 15 minutes",
        "  alarm teardown-refused             OK (ClusterKit-demo-teardown-refused)",
        "  alarm teardown-overdue             ALARM (ClusterKit-demo-teardown-overdue)",
    ]


def test_failed_teardown_shows_the_first_failure_of_the_latest_attempt_and_the_retry(aws):
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    _alarms(cloudwatch, refused="OK", overdue="ALARM")
    _fail_deletion("Demo-Cluster", earlier_attempt=True)
    lines = status_lines(load("demo").spec, cfn, now=LATER, cloudwatch=cloudwatch)
    assert lines[3] == "  Demo-Cluster                       DELETE_FAILED"
    assert lines[5:8] == [
        "  overdue                            yes, by 1h 25m: the stack still exists; the TTL schedule retries "
        "DeleteStack every 15 minutes",
        f"  deletion failed                    ParallelCluster: {REASON}",
        "  retry                              aws cloudformation delete-stack --region us-east-1 "
        "--stack-name Demo-Cluster",
    ]
    assert all("\n" not in line for line in lines)


def test_failed_deletion_without_ttl_still_reports_the_failure(aws):
    cfn, _ = aws
    _deploy(cfn, {"HeadNodeInstanceId": HEAD})
    _fail_deletion("Demo-Cluster")
    lines = status_lines(load("demo").spec, cfn, now=NOW, cloudwatch=boto3.client("cloudwatch", region_name=REGION))
    assert lines[4:7] == [
        "  expires                            never (no lifecycle.ttl_hours)",
        f"  deletion failed                    ParallelCluster: {REASON}",
        "  retry                              aws cloudformation delete-stack --region us-east-1 "
        "--stack-name Demo-Cluster",
    ]


def test_first_failure_falls_back_to_the_stacks_own_reason(aws):
    cfn, _ = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    stack = _moto_stack("Demo-Cluster")
    stack._add_stack_event("DELETE_IN_PROGRESS", resource_status_reason="User Initiated")
    stack._add_stack_event("DELETE_FAILED", resource_status_reason="Role arn:aws:iam::1:role/x is invalid")
    failure = first_delete_failure(cfn, "Demo-Cluster")
    assert (failure.logical_id, failure.reason) == ("Demo-Cluster", "Role arn:aws:iam::1:role/x is invalid")


def test_deletion_under_way_is_not_overdue(aws):
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    _moto_stack("Demo-Cluster").status = "DELETE_IN_PROGRESS"
    lines = status_lines(load("demo").spec, cfn, now=LATER, cloudwatch=cloudwatch)
    assert lines[5] == "  deletion                           under way (DELETE_IN_PROGRESS)"
    assert not any(line.lstrip().startswith("overdue") for line in lines)


def test_busy_stack_after_expiry_says_why_the_teardown_is_refused(aws):
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    _moto_stack("Demo-Cluster").status = "UPDATE_IN_PROGRESS"
    lines = status_lines(load("demo").spec, cfn, now=LATER, cloudwatch=cloudwatch)
    assert lines[5].endswith("every 15 minutes; CloudFormation refuses it while UPDATE_IN_PROGRESS")


def test_ttl_cluster_without_its_alarms(aws):
    """Deployed before the alarms existed (or someone deleted them): say so instead of staying silent."""
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    lines = status_lines(load("demo").spec, cfn, now=NOW, cloudwatch=cloudwatch)
    assert lines[5] == ("  alarm teardown-refused             missing (ClusterKit-demo-teardown-refused; a deploy "
                        "with lifecycle.ttl_hours creates it)")


def test_cluster_without_ttl(aws):
    cfn, cloudwatch = aws
    _deploy(cfn, {"HeadNodeInstanceId": HEAD})
    lines = status_lines(load("demo").spec, cfn, now=NOW, cloudwatch=cloudwatch)
    assert lines[4] == "  expires                            never (no lifecycle.ttl_hours)"
    assert lines[5] == f"  head node                          {HEAD}" and len(lines) == 6


def test_torn_down_cluster_keeps_network_and_storage(aws):
    cfn, cloudwatch = aws
    _deploy(cfn, None)
    assert status_lines(load("demo").spec, cfn, now=NOW, cloudwatch=cloudwatch)[1:] == [
        "  Demo-Network                       CREATE_COMPLETE",
        "  Demo-Storage                       CREATE_COMPLETE",
        "  Demo-Cluster                       not deployed",
        "  no cluster: `make deploy CLUSTER=demo` creates it (network and storage are reused)",
    ]


def test_unreadable_alarms_are_one_line_not_a_traceback(aws):
    """Real botocore error handling (Stubber): AccessDenied on DescribeAlarms becomes the alarms line."""
    cfn, _ = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    with Stubber(cloudwatch) as stub:
        stub.add_client_error("describe_alarms", service_error_code="AccessDenied",
                               service_message="User: arn:aws:iam::123456789012:user/x is not authorized")
        lines = status_lines(load("demo").spec, cfn, now=NOW, cloudwatch=cloudwatch)
    assert lines[5] == ("  alarms                             cannot read (AccessDenied: User: "
                        "arn:aws:iam::123456789012:user/x is not authorized)")


def test_unreadable_events_are_one_line_not_a_traceback(aws):
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    _fail_deletion("Demo-Cluster")
    real = cfn

    class EventsDenied:  # DescribeStacks from moto, DescribeStackEvents refused by a stubbed real client
        def __init__(self):
            self.stubbed = boto3.client("cloudformation", region_name=REGION)
            self.stub = Stubber(self.stubbed)
            self.stub.add_client_error("describe_stack_events", service_error_code="AccessDenied",
                                       service_message="not authorized to perform DescribeStackEvents")
            self.stub.activate()

        def describe_stacks(self, **kwargs):
            return real.describe_stacks(**kwargs)

        def get_paginator(self, name):
            return self.stubbed.get_paginator(name)

    lines = status_lines(load("demo").spec, EventsDenied(), now=LATER, cloudwatch=cloudwatch)
    assert lines[6] == ("  deletion failed                    cannot read the stack's events (AccessDenied: "
                        "not authorized to perform DescribeStackEvents)")


def test_cli(aws, capsys, monkeypatch):
    """The CLI reads the time through clusterkit.clock: set to NOW, the expiry is 3 days ahead on any date."""
    monkeypatch.setattr("clusterkit.clock.utc_now", lambda: NOW)
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    _alarms(cloudwatch, refused="OK", overdue="OK")
    assert main(["status", "demo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "demo (us-east-1)" and out[3].split() == ["Demo-Cluster", "CREATE_COMPLETE"]
    assert out[4] == ("  expires                            2026-12-04T08:00:00Z, in 3d; "
                      "extend: make deploy CLUSTER=demo TTL=<hours from now>")
    assert out[5].split()[:3] == ["alarm", "teardown-refused", "OK"]  # the CLI's own CloudWatch client


def test_cli_json_shape(aws, capsys):
    """clusterkit.status/v1 (docs/cli-output.md): a failed, overdue teardown as data."""
    cfn, cloudwatch = aws
    _deploy(cfn, CLUSTER_OUTPUTS)
    _alarms(cloudwatch, refused="ALARM", overdue="OK")
    _fail_deletion("Demo-Cluster")
    assert main(["status", "--format", "json", "demo"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"schema", "cluster", "region", "stacks", "deployed", "expires_at", "teardown", "alarms",
                         "alarms_unread", "head_node", "shell"}
    assert data["schema"] == "clusterkit.status/v1" and data["deployed"] is True
    assert data["stacks"][2] == {"name": "Demo-Cluster", "status": "DELETE_FAILED"}
    assert data["expires_at"] == "2026-12-04T08:00:00Z" and data["head_node"] == HEAD
    teardown = data["teardown"]
    assert teardown["failed"] == {"logical_id": "ParallelCluster", "reason": REASON}
    assert teardown["retry"] == "aws cloudformation delete-stack --region us-east-1 --stack-name Demo-Cluster"
    assert teardown["deleting"] is False and teardown["failed_unread"] is None
    assert {a["kind"]: a["state"] for a in data["alarms"]} == {"refused": "ALARM", "overdue": "OK"}


def test_cli_json_for_a_cluster_that_is_not_deployed(aws, capsys):
    assert main(["status", "--format", "json", "demo"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["deployed"] is False and data["teardown"]["retry"] is None and data["alarms"] == []
    assert [s["status"] for s in data["stacks"]] == [None, None, None]


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
    assert time_left(NOW + timedelta(minutes=minutes), NOW) == text


def test_a_cluster_on_a_platform_reports_the_platform_s_stacks_and_its_own(aws):
    """Was: Train-A-Network and Train-A-Storage, which no app makes, reported as not deployed; now the platform's
    two stacks, then the cluster's alerts and cluster stacks (clusterkit.spec.naming.cluster_stacks)."""
    cfn, cloudwatch = aws
    for name in ("Research-East-Network", "Research-East-Storage", "Train-A-Alerts"):
        _create(cfn, name, {})
    _create(cfn, "Train-A-Cluster", CLUSTER_OUTPUTS)
    lines = status_lines(load("train-a").spec, cfn, now=NOW, cloudwatch=cloudwatch)
    assert lines[:5] == ["train-a (us-east-1)",
                         "  Research-East-Network              CREATE_COMPLETE",
                         "  Research-East-Storage              CREATE_COMPLETE",
                         "  Train-A-Alerts                     CREATE_COMPLETE",
                         "  Train-A-Cluster                    CREATE_COMPLETE"]
