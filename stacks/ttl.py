"""TTL teardown: a one-time EventBridge Scheduler schedule that deletes the cluster stack it lives in.

``lifecycle.ttl_hours`` makes the ``<Name>-Cluster`` stack delete itself: the schedule calls
CloudFormation ``DeleteStack`` on this stack through Scheduler's universal target (no Lambda).
Network and storage are separate stacks and are never named, so the VPC, the file system and the
image store survive every teardown.

The clock: the expiry is ``deploy time + ttl_hours`` (to the minute), computed at synth. app.py takes
the deploy time from the ``deploy_time`` context (``make deploy`` passes the UTC time it starts) and
otherwise uses "now". So every deploy moves the expiry: the TTL counts from the latest deploy, which
is exactly how a cluster is kept longer (``make deploy CLUSTER=x TTL=48``). Tests pin the context,
which keeps their synth deterministic.

Permissions — why the schedule's role may do one thing only. A DeleteStack caller needs rights to
delete every resource in the stack *unless the stack has a CloudFormation service role*: then
"CloudFormation uses the role that was previously associated with the stack" for the deletion (API
reference, DeleteStack ``RoleARN``), and "CloudFormation uses this role, even if the user doesn't
have permission to pass it" (same page). ``cdk deploy`` with the default synthesizer creates and
updates every stack with the bootstrap's ``cdk-<qualifier>-cfn-exec-role``, so this stack has one.
The alternative — granting the scheduler role what deleting this stack takes — is not scopable: the
ParallelCluster provider is a nested stack whose resources have generated names (Lambda functions and
layer, IAM roles and managed policies incl. an admin policy, an S3 bucket, a further nested policies
stack, the custom resource's ``lambda:InvokeFunction``), so it would need ``iam:*``/``lambda:*``-style
wildcards, and the role would delete its own policy halfway through the teardown. Hence: the role may
call ``cloudformation:DeleteStack`` on exactly this stack's id (no wildcard) and trusts
``scheduler.amazonaws.com`` for this account's default schedule group only (Scheduler presents the
*group's* ARN as ``aws:SourceArn``, not the schedule's, as aws-cdk's own scheduler targets do); another
schedule could use the role only if its creator may ``iam:PassRole`` it. Synth refuses a synthesizer
without an execution role rather than build a teardown that would end in DELETE_FAILED.

After firing, the schedule stays (Scheduler's ``ActionAfterCompletion`` default, NONE) and is deleted
with the stack. ``AWS::Scheduler::Schedule`` has no ``ActionAfterCompletion`` property (cfn-lint's
resource schema lists none), and DELETE would be wrong here anyway: if the teardown were refused (say,
during an update) CloudFormation would still think the schedule exists and the next TTL change would
fail to update it. The schedule is created after the cluster custom resource, so a short TTL never
fires into a stack that is still creating the cluster.
"""
from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from clusterkit import rules
from clusterkit.errors import ClusterKitError
from clusterkit.loader import Loaded
from clusterkit.naming import ttl_schedule_name
from clusterkit.spec import Lifecycle
from clusterkit.typed_yaml import Marks

DELETE_STACK_TARGET = "arn:{partition}:scheduler:::aws-sdk:cloudformation:deleteStack"
OFF_WORDS = ("none", "off", "never", "")


class TtlError(ClusterKitError):
    """A ``deploy_time`` or ``ttl_hours`` context value that cannot be used (one line, exit 2)."""


def now_to_the_minute() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


def parse_deploy_time(value: str | None) -> datetime:
    """The ``deploy_time`` context (ISO 8601, UTC) or, without one, the current minute."""
    if value is None or str(value).strip() == "":
        return now_to_the_minute()
    text = str(value).strip()
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise TtlError(f"-c deploy_time={text}: not an ISO 8601 time (like 2026-12-01T08:00:00Z)") from None
    if when.tzinfo is None:
        raise TtlError(f"-c deploy_time={text}: give a UTC time ending in Z or +00:00")
    return when.astimezone(UTC)


def parse_ttl_override(value: object, spec_ttl: float | None) -> float | None:
    """``-c ttl_hours=...`` (``make deploy TTL=...``) replaces ``lifecycle.ttl_hours`` for one deploy.

    ``none``/``off`` removes the teardown; a number goes through the same rule as the spec's value.
    Without the context the spec's value stands.
    """
    if value is None:
        return spec_ttl
    text = str(value).strip()
    if text.lower() in OFF_WORDS:
        return None
    try:
        hours = float(text)
    except ValueError:
        raise TtlError(f"-c ttl_hours={text}: not a number of hours (or 'none' to keep the cluster)") from None
    if not math.isfinite(hours):
        raise TtlError(f"-c ttl_hours={text}: not a number of hours (or 'none' to keep the cluster)")
    return hours


def with_ttl_override(loaded: Loaded, value: object) -> Loaded:
    """``loaded`` with ``-c ttl_hours`` applied, checked by the same rule as the spec's own value."""
    hours = parse_ttl_override(value, loaded.spec.lifecycle.ttl_hours)
    if hours == loaded.spec.lifecycle.ttl_hours:
        return loaded
    spec = dataclasses.replace(loaded.spec, lifecycle=Lifecycle(ttl_hours=hours))
    for problem in rules.check(spec, Marks(file="-c ttl_hours")):
        if problem.path == "lifecycle.ttl_hours":
            hint = f" ({problem.hint})" if problem.hint else ""
            raise TtlError(f"-c ttl_hours={value}: {problem.message}{hint}")
    return dataclasses.replace(loaded, spec=spec)


def expiry(deploy_time: datetime, ttl_hours: float) -> datetime:
    """When the teardown fires: ``deploy_time + ttl_hours``, down to the minute, UTC."""
    return (deploy_time.astimezone(UTC) + timedelta(hours=ttl_hours)).replace(second=0, microsecond=0)


def iso_z(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TtlTeardown(Construct):
    """Delete the enclosing stack at ``expires_at`` (a one-time schedule and the role it runs as)."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str, hours: float,
                 deploy_time: datetime) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        _require_execution_role(stack)
        self.expires_at = expiry(deploy_time, hours)
        schedule_name = ttl_schedule_name(cluster_name)
        group_arn = cdk.Arn.format(cdk.ArnComponents(
            service="scheduler", resource="schedule-group", resource_name="default"), stack)

        self.role = iam.Role(
            self, "Role",
            description=f"ClusterKit {cluster_name}: lets the TTL schedule delete stack {stack.stack_name} only",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com", conditions={
                "StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID},
                "ArnEquals": {"aws:SourceArn": group_arn},
            }),
            inline_policies={"DeleteThisStack": iam.PolicyDocument(statements=[iam.PolicyStatement(
                sid="DeleteThisStackOnly", actions=["cloudformation:DeleteStack"],
                resources=[cdk.Aws.STACK_ID])])})

        self.schedule = scheduler.CfnSchedule(
            self, "Schedule",
            name=schedule_name,
            description=(f"ClusterKit {cluster_name}: delete stack {stack.stack_name} at {iso_z(self.expires_at)} "
                         f"(lifecycle.ttl_hours {hours:g} from the deploy at {iso_z(deploy_time)})"),
            schedule_expression=f"at({self.expires_at.strftime('%Y-%m-%dT%H:%M:%S')})",
            schedule_expression_timezone="UTC",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=DELETE_STACK_TARGET.format(partition=cdk.Aws.PARTITION),
                role_arn=self.role.role_arn,
                input=stack.to_json_string({"StackName": cdk.Aws.STACK_ID})))
        # RoleArn is a GetAtt of the role, whose inline policy is part of it: CloudFormation creates the
        # role with its policy before the schedule and deletes it only after the schedule.


def _require_execution_role(stack: cdk.Stack) -> None:
    """Refuse a synthesizer that would deploy this stack without a CloudFormation service role."""
    synth = stack.synthesizer
    role = getattr(synth, "cloud_formation_execution_role_arn", None) if isinstance(
        synth, cdk.DefaultStackSynthesizer) else None
    if not role:
        raise ValueError(
            f"{stack.stack_name}: lifecycle.ttl_hours needs the stack deployed with a CloudFormation service "
            f"role (the default synthesizer's cfn-exec-role); {type(synth).__name__} has none, so the "
            f"teardown would run with the schedule role's rights and fail. Unset ttl_hours or use "
            f"DefaultStackSynthesizer.")
