"""TTL teardown: a recurring EventBridge Scheduler schedule that deletes the cluster stack it lives in.

``lifecycle.ttl_hours`` makes the ``<Name>-Cluster`` stack delete itself: from the expiry on, a schedule in
the cluster's own schedule group (``clusterkit-<name>``) calls CloudFormation ``DeleteStack`` on this stack
through Scheduler's universal target (no Lambda) every 15 minutes until the stack, and with it the group
and the schedule, is gone. Network and storage are separate stacks and are never named, so the VPC, the
file system and the image store survive every teardown.

The clock: the expiry is ``deploy time + ttl_hours`` (to the minute), computed before synth by
``clusterkit.effective.expand`` (``EffectiveLifecycle.expires_at``). ``clusterkit.pipeline.deploy_context`` takes the
deploy time from the ``deploy_time`` context (``make deploy`` passes the UTC time it starts), otherwise
"now", and checks a ``ttl_hours`` override with the spec's own rule; this construct only receives the
result. So every deploy moves the expiry: the TTL counts from the latest deploy, which is exactly how a
cluster is kept longer (``make deploy CLUSTER=x TTL=48``). Tests pin the context, which keeps their
synth deterministic. The expiry is the schedule's ``StartDate`` ("the date, in UTC,
after which the schedule can begin invoking its target", Scheduler API reference, CreateSchedule).

Why it repeats. A one-time ``at()`` schedule fires once; if CloudFormation refuses that call the cluster
keeps billing in silence. CloudFormation refuses DeleteStack while the stack is busy ("Stack [...] cannot
be deleted while in status UPDATE_IN_PROGRESS" / ``UPDATE_COMPLETE_CLEANUP_IN_PROGRESS``, as reported in
aws-solutions-library-samples/guidance-for-clickstream-analytics-on-aws#573 and aws-amplify/amplify-backend
#2366; the API reference lists no such states), and a deletion can end in ``DELETE_FAILED``, which another
DeleteStack retries (the API reference's ``RetainResources`` applies "for stacks in the DELETE_FAILED state";
AWS Knowledge Center, cloudformation-stack-delete-failed). ``rate(15 minutes)`` retries both. Deleting the
stack deletes the group, and "if the group is removed also all schedules are removed" (aws-cdk-lib
``ScheduleGroupProps.removalPolicy``), which is what ends the retries. The target's ``RetryPolicy`` (at
most 5 retries within 10 minutes, with exponential backoff: API reference, RetryPolicy) covers throttling
and passing errors within one firing and ends before the next; which errors Scheduler retries is not
documented, so a refused DeleteStack may be retried within the firing too (harmless, bounded).

Order: created first, deleted last (``delete_last()``: every other resource of the stack depends on the
teardown). Deleted last, because CloudFormation deletes dependents first: after a ``DELETE_FAILED`` the
group, schedule, role and alarms still exist and the next firing retries. (The one-time schedule depended
on the cluster resource, so it was deleted before it and a failed deletion left nothing to retry.) Created
first, because a recurring schedule whose ``StartDate`` is more than 5 minutes in the past is refused
("The StartDate you specify cannot be earlier than 5 minutes ago", CreateSchedule's ValidationException as
mirrored by moto, getmoto/moto#8172; not in the API reference): created after the ParallelCluster resource
(20 minutes and more), it would fail every deploy whose ``ttl_hours`` (rules allow 0.25) is shorter than
the cluster's creation; created first, only the network and storage deploys run before it, and if they
outlast ``ttl_hours`` + 5 minutes the cluster stack fails on its first resources, before anything bills.
The price: a deploy that outlasts ``ttl_hours`` gets DeleteStack while ``CREATE_IN_PROGRESS``. The API
reference does not say what happens; the stack status codes speak of "an explicitly canceled stack
creation" and tools see DeleteStack accepted then (cloudtools/stacker#422), so the creation is cancelled
and rolled back, which is what the TTL promises (the cluster lives at most ``ttl_hours`` from the deploy);
if it were refused instead, the next firing deletes the finished stack. An update that fails after the
expiry passed would roll the schedule back to a ``StartDate`` in the past and can end in
``UPDATE_ROLLBACK_FAILED``; the schedule then keeps the new expiry and still deletes the stack.

Signals, because retrying is not telling anyone: two CloudWatch alarms on the group's ``AWS/Scheduler``
metrics (dimension ``ScheduleGroup``; Scheduler User Guide, monitoring-cloudwatch.html; the metric names
are the ones aws-cdk-lib's ``ScheduleGroup.metricTargetErrors``/``metricAttempts`` use) publish to the
cluster's alert topic in the storage stack (stacks/alerts.py, which also reports ``DELETE_FAILED``):
``teardown-refused``, ``TargetErrorCount`` in 2 of 3 quarter-hours (one refusal, e.g. the old schedule
firing while a redeploy is replacing it, is tolerated), and ``teardown-overdue``, ``InvocationAttemptCount``
in 5 of 6 quarter-hours: the teardown has been attempted for about an hour and the schedule, hence the
stack, still exists. Missing data is not breaching. Whether DeleteStack on a stack already
``DELETE_IN_PROGRESS`` is accepted is not documented either; if it were refused, a deletion running longer
than half an hour would raise ``teardown-refused`` while it finishes.

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
``scheduler.amazonaws.com`` for this account's ``clusterkit-<name>`` schedule group only (Scheduler
presents the *group's* ARN as ``aws:SourceArn``, as aws-cdk's own scheduler targets trust); another
schedule could use the role only if its creator may ``iam:PassRole`` it. Synth refuses a synthesizer
without an execution role rather than build a teardown that would end in DELETE_FAILED.

L1 schedule, L2 group: aws-cdk-lib's ``Schedule`` takes its target from ``aws_scheduler_targets``, whose
``Universal`` target always attaches its statements to the role as a separate ``AWS::IAM::Policy``
(``addTargetActionToRole``); the ``CfnSchedule`` keeps the one inline policy, which CloudFormation creates
with the role before the schedule and deletes after it. Its logical id changed with the move out of the
``default`` group, so CloudFormation replaces the old schedule instead of updating it across groups.
"""
from __future__ import annotations

from collections.abc import Callable

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from constructs import Construct

from clusterkit.effective.expand import EffectiveLifecycle, iso_z
from clusterkit.spec.naming import TTL_RETRY_MINUTES, teardown_alarm_names, ttl_schedule_group_name, ttl_schedule_name

DELETE_STACK_TARGET = "arn:{partition}:scheduler:::aws-sdk:cloudformation:deleteStack"
RETRY_EVERY = cdk.Duration.minutes(TTL_RETRY_MINUTES)
TARGET_RETRY_ATTEMPTS = 5
TARGET_RETRY_WINDOW = cdk.Duration.minutes(10)  # shorter than RETRY_EVERY: one firing's retries end before the next
REFUSED_ALARM = (2, 3)  # (datapoints, evaluation periods of RETRY_EVERY) with a DeleteStack refused
OVERDUE_ALARM = (5, 6)  # (datapoints, evaluation periods of RETRY_EVERY) with a teardown attempt: about an hour


class TtlTeardown(Construct):
    """Delete the enclosing stack from ``lifecycle.expires_at`` on, every 15 minutes until it is gone, and
    raise an alarm on ``alert_topic`` when that keeps failing.

    ``lifecycle`` is the effective one of a deploy (``ttl_hours``, ``deploy_time`` and ``expires_at`` set).
    Call ``delete_last()`` once the stack's other resources exist. Without ``alert_topic`` the alarms
    still exist (``clusterkit status`` reads them) but tell no one.
    """

    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str, lifecycle: EffectiveLifecycle,
                 alert_topic: sns.ITopic | None = None, synthesizer: cdk.IStackSynthesizer | None = None) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        hours, deploy_time, expires_at = lifecycle.ttl_hours, lifecycle.deploy_time, lifecycle.expires_at
        if hours is None or deploy_time is None or expires_at is None:
            raise ValueError(f"{stack.stack_name}: a TTL teardown needs the lifecycle of a deploy (ttl_hours, "
                             f"deploy_time, expires_at); got {lifecycle}")
        # ``synthesizer``: the one the stack was given. Reading ``stack.synthesizer`` back from Python makes
        # jsii warn on stderr (the stack binds a clone of a synthesizer passed in).
        _require_execution_role(stack, synthesizer or stack.synthesizer)
        self.expires_at = expires_at
        self.group = scheduler.ScheduleGroup(
            self, "Group", schedule_group_name=ttl_schedule_group_name(cluster_name),
            removal_policy=cdk.RemovalPolicy.DESTROY)  # deleting the group deletes its schedules too
        group_arn = cdk.Arn.format(cdk.ArnComponents(
            service="scheduler", resource="schedule-group", resource_name=ttl_schedule_group_name(cluster_name)),
            stack)

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
            self, "Teardown",
            name=ttl_schedule_name(cluster_name),
            group_name=self.group.schedule_group_name,
            description=(f"ClusterKit {cluster_name}: delete stack {stack.stack_name} from {iso_z(self.expires_at)} "
                         f"on, every {RETRY_EVERY.to_minutes()} minutes until it is gone (lifecycle.ttl_hours "
                         f"{hours:g} from the deploy at {iso_z(deploy_time)})"),
            schedule_expression=f"rate({RETRY_EVERY.to_minutes()} minutes)",
            schedule_expression_timezone="UTC",
            start_date=iso_z(self.expires_at),
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=DELETE_STACK_TARGET.format(partition=cdk.Aws.PARTITION),
                role_arn=self.role.role_arn,
                input=stack.to_json_string({"StackName": cdk.Aws.STACK_ID}),
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_event_age_in_seconds=TARGET_RETRY_WINDOW.to_seconds(),
                    maximum_retry_attempts=TARGET_RETRY_ATTEMPTS)))
        # RoleArn is a GetAtt of the role, whose inline policy is part of it: CloudFormation creates the
        # role with its policy before the schedule and deletes it only after the schedule. The group name
        # is a literal, so the group needs saying: created before its schedule, deleted after it.
        self.schedule.node.add_dependency(self.group)

        names = teardown_alarm_names(cluster_name)
        self.refused_alarm = self._alarm(
            "RefusedAlarm", names["refused"], self.group.metric_target_errors, REFUSED_ALARM, alert_topic,
            f"ClusterKit {cluster_name}: CloudFormation refused DeleteStack on {stack.stack_name} in "
            f"{REFUSED_ALARM[0]} of the last {REFUSED_ALARM[1]} quarter-hours of TTL teardown (stack busy, e.g. an "
            f"update, or the schedule role broken). The cluster keeps running and billing; run "
            f"`python -m clusterkit status {cluster_name}`.")
        self.overdue_alarm = self._alarm(
            "OverdueAlarm", names["overdue"], self.group.metric_attempts, OVERDUE_ALARM, alert_topic,
            f"ClusterKit {cluster_name}: the TTL teardown of {stack.stack_name} has been attempted for about an "
            f"hour and the stack still exists (DELETE_FAILED or refused). The cluster may still be billing; run "
            f"`python -m clusterkit status {cluster_name}`.")

    def _alarm(self, construct_id: str, name: str, metric: Callable[..., cloudwatch.Metric], shape: tuple[int, int],
               topic: sns.ITopic | None, description: str) -> cloudwatch.Alarm:
        """``metric`` (a ScheduleGroup metric method) summed per firing interval, >= 1 in ``shape`` =
        (datapoints, evaluation periods); no data (no schedule firing) is not breaching."""
        datapoints, periods = shape
        alarm = cloudwatch.Alarm(
            self, construct_id, alarm_name=name, alarm_description=description,
            metric=metric(period=RETRY_EVERY, statistic=cloudwatch.Stats.SUM),
            threshold=1, comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=periods, datapoints_to_alarm=datapoints,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
        if topic is not None:
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
        return alarm

    def delete_last(self) -> None:
        """Make every other resource of the stack depend on the teardown: CloudFormation creates it before
        them and deletes it after them, so a failed deletion leaves the schedule in place to retry."""
        for child in cdk.Stack.of(self).node.children:
            if child is not self:
                child.node.add_dependency(self)


def _require_execution_role(stack: cdk.Stack, synth: cdk.IStackSynthesizer) -> None:
    """Refuse a synthesizer that would deploy this stack without a CloudFormation service role."""
    # DefaultStackSynthesizer always names a cfn-exec-role; its subclass BootstraplessSynthesizer need not.
    # (Its role getter cannot be read from Python for a synthesizer passed in: the stack binds a clone.)
    if not isinstance(synth, cdk.DefaultStackSynthesizer) or isinstance(synth, cdk.BootstraplessSynthesizer):
        raise ValueError(
            f"{stack.stack_name}: lifecycle.ttl_hours needs the stack deployed with a CloudFormation service "
            f"role (the default synthesizer's cfn-exec-role); {type(synth).__name__} has none, so the "
            f"teardown would run with the schedule role's rights and fail. Unset ttl_hours or use "
            f"DefaultStackSynthesizer.")
