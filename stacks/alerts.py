"""Cluster alerts: the SNS topic that tells a person when a cluster's teardown fails, and the rule that feeds it.

Lives in the ``<Name>-Storage`` stack because what it reports happens after the ``<Name>-Cluster`` stack has
been (partly) deleted: a topic or rule inside the cluster stack could be gone by the time its deletion fails.
The storage stack outlives clusters (stacks/storage.py) and never refers to the cluster stack; the cluster
stack receives the topic and points its TTL alarms at it (stacks/ttl.py).

What reaches the topic:

- **DELETE_FAILED of the cluster stack**, from CloudFormation's own EventBridge events on the default bus:
  ``source`` ``aws.cloudformation``, ``detail-type`` ``CloudFormation Stack Status Change``, ``detail`` with
  ``stack-id`` and ``status-details.status``/``status-reason`` (CloudFormation User Guide, "Stack Status
  Change event detail", event-detail-stack-status-change.html). The rule matches the stack id's prefix
  ``arn:...:stack/<Name>-Cluster/`` (the trailing slash keeps nested provider stacks out) and mails the
  status reason. Every failed attempt is one message: while the TTL schedule retries every 15 minutes, a
  stuck deletion repeats it, on purpose (the cluster may still be billing).
- **The TTL alarms** of the cluster stack (teardown refused, teardown overdue), published by CloudWatch.
- ``lifecycle.notify_email`` subscribes one address (SNS mails a confirmation link first); anyone else
  subscribes to the ``ClusterKit-<name>-alerts`` topic (output ``AlertTopicArn``).

Encryption: cdk-nag's SNS2 wants server-side encryption and SNS3 TLS-only publishing (``enforce_ssl``).
AWS services that publish to an encrypted topic need "a customer managed key" whose key policy gives the
service principal ``kms:GenerateDataKey*`` and ``kms:Decrypt`` — ``cloudwatch.amazonaws.com`` for alarms,
``events.amazonaws.com`` for EventBridge — and "Adding the aws:SourceAccount, aws:SourceArn, and
aws:SourceOrgID to a AWS KMS policy is not supported for EventBridge-to-encrypted topics" (SNS Developer
Guide, "Enable compatibility between event sources from AWS services and encrypted topics",
sns-key-management.html#compatibility-with-aws-services). So the key is this topic's own (rotated), the
CloudWatch grant is scoped to this account's ``ClusterKit-<name>-*`` alarms, and the EventBridge grant
carries no condition; both services may *publish* only through the topic policy, which pins the alarm
name pattern (AWS Knowledge Center, cloudwatch-receive-sns-for-alarm-trigger) and this rule's ARN
(EventBridge User Guide, eb-use-resource-based.html: an SNS target is authorized by the topic's resource
policy when the target has no role, and a role "may fail" delivery to KMS-encrypted topics).
"""
from __future__ import annotations

import aws_cdk as cdk
import jsii
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from clusterkit.spec.naming import TTL_RETRY_MINUTES, alarm_prefix, alert_topic_name, stack_names

STACK_STATUS_EVENT = {"source": "aws.cloudformation", "detail-type": "CloudFormation Stack Status Change"}
PUBLISH_KEY_ACTIONS = ["kms:GenerateDataKey*", "kms:Decrypt"]
KEY_PENDING_DAYS = 7  # the shortest KMS allows; the key protects nothing but alert messages in flight


class ClusterAlerts(Construct):
    """The encrypted alert topic of cluster ``cluster_name``, its optional email subscription, and the
    DELETE_FAILED rule for the cluster stack. ``topic`` is what the cluster stack's alarms publish to."""

    topic: sns.Topic

    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str,
                 notify_email: str | None = None) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        cluster_stack = stack_names(cluster_name)["cluster"]
        alarms_arn = cdk.Arn.format(cdk.ArnComponents(
            service="cloudwatch", resource="alarm", resource_name=f"{alarm_prefix(cluster_name)}*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME), stack)

        self.key = kms.Key(
            self, "Key", enable_key_rotation=True, removal_policy=cdk.RemovalPolicy.DESTROY,
            pending_window=cdk.Duration.days(KEY_PENDING_DAYS),
            description=f"ClusterKit {cluster_name}: encrypts the alert topic {alert_topic_name(cluster_name)}")
        self.key.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsOfThisCluster", actions=PUBLISH_KEY_ACTIONS, resources=["*"],
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            conditions={"StringEquals": {"aws:SourceAccount": stack.account},
                        "ArnLike": {"aws:SourceArn": alarms_arn}}))
        self.key.add_to_resource_policy(iam.PolicyStatement(
            sid="EventBridgeUnconditioned", actions=PUBLISH_KEY_ACTIONS, resources=["*"],
            principals=[iam.ServicePrincipal("events.amazonaws.com")]))

        self.topic = sns.Topic(
            self, "Topic", topic_name=alert_topic_name(cluster_name), master_key=self.key, enforce_ssl=True,
            display_name=f"ClusterKit {cluster_name}")
        if notify_email is not None:
            self.topic.add_subscription(subscriptions.EmailSubscription(notify_email))
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsOfThisCluster", actions=["sns:Publish"], resources=[self.topic.topic_arn],
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            conditions={"StringEquals": {"aws:SourceAccount": stack.account},
                        "ArnLike": {"aws:SourceArn": alarms_arn}}))

        self.delete_failed = events.Rule(
            self, "ClusterDeleteFailed",
            description=f"ClusterKit {cluster_name}: stack {cluster_stack} could not be deleted -> alert topic",
            event_pattern=events.EventPattern(
                source=[STACK_STATUS_EVENT["source"]], detail_type=[STACK_STATUS_EVENT["detail-type"]],
                detail={"stack-id": events.Match.prefix(cdk.Arn.format(cdk.ArnComponents(
                            service="cloudformation", resource="stack", resource_name=f"{cluster_stack}/"), stack)),
                        "status-details": {"status": ["DELETE_FAILED"]}}))
        self.delete_failed.add_target(_PublishTo(self.topic, events.RuleTargetInput.from_text(
            f"ClusterKit {cluster_name}: stack {cluster_stack} is DELETE_FAILED: "
            f"{events.EventField.from_path('$.detail.status-details.status-reason')} "
            f"The cluster may still be running and billing. With lifecycle.ttl_hours the teardown is retried "
            f"every {TTL_RETRY_MINUTES} minutes (this message then repeats). "
            f"`python -m clusterkit status {cluster_name}` shows the failed resource; "
            f"`aws cloudformation delete-stack --region {stack.region} --stack-name {cluster_stack}` "
            f"retries by hand.")))
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            sid="DeleteFailedRuleOfThisCluster", actions=["sns:Publish"], resources=[self.topic.topic_arn],
            principals=[iam.ServicePrincipal("events.amazonaws.com")],
            conditions={"ArnEquals": {"aws:SourceArn": self.delete_failed.rule_arn}}))


@jsii.implements(events.IRuleTarget)
class _PublishTo:
    """An SNS rule target without the unconditioned ``events.amazonaws.com`` publish grant that
    ``aws_events_targets.SnsTopic`` adds; ClusterAlerts grants publishing for its own rule's ARN only."""

    def __init__(self, topic: sns.ITopic, message: events.RuleTargetInput) -> None:
        self._topic = topic
        self._message = message

    def bind(self, _rule: events.IRule, _id: str | None = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(arn=self._topic.topic_arn, input=self._message)


class AlertsStack(cdk.Stack):
    """``<Name>-Alerts``: the alert topic of a cluster on a platform. A standalone cluster's topic lives in its
    storage stack, which outlives the cluster stack; a cluster on a platform owns no storage stack, so its topic
    gets a stack of its own, deployed with the cluster and kept by ``make destroy-cluster`` like the storage
    stack: it must outlive the cluster stack to tell of a teardown that failed."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str, notify_email: str | None,
                 **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        alerts = ClusterAlerts(self, "Alerts", cluster_name=cluster_name, notify_email=notify_email)
        self.alert_topic: sns.ITopic = alerts.topic
        cdk.CfnOutput(self, "AlertTopicArn", value=alerts.topic.topic_arn,
                      description="SNS topic of this cluster's alerts (failed or overdue teardowns); subscribe "
                                  "to be told")
