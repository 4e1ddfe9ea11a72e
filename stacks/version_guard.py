"""A custom resource that refuses a ParallelCluster version change before anything in the cluster stack moves.

Why: ParallelCluster's ``update_cluster`` refuses a cluster created by another PC version (aws-parallelcluster
``api/controllers/cluster_operations_controller.py``: "the update can be performed only with the same
ParallelCluster version ... used to create the cluster"). Bumping ``parallelcluster_version`` changes only
the provider nested stack's TemplateURL, so without a guard the deploy first upgrades the provider and then
fails deep inside ``Custom::PclusterCluster`` with a cryptic rollback.

How (facts from the AWS CloudFormation User Guide):

- Order. "CloudFormation creates, updates, and deletes resources in parallel to the extent possible ...
  You can use DependsOn to explicitly specify dependencies, which overrides the default parallelism and
  directs CloudFormation to operate on those resources in a specified order" (aws-attribute-dependson.html).
  The caller makes the provider nested stack depend on ``guard.resource`` (``guard_depends``); the cluster
  resource already depends on the provider through its ServiceToken, so the guard is updated first.
- Rollback. "If a resource update fails, AWS CloudFormation rolls back any resources that it has updated
  during the upgrade to their configurations before the update" (using-cfn-updating-stacks-monitor-stack.html).
  The rollback also sends the failed custom resource an Update with the old properties (the same page's
  example shows the failed resource updated again; aws/aws-cdk#17040 and #29581 describe it for custom
  resources), so the handler accepts a return to the version recorded in its PhysicalResourceId; refusing
  it would leave the stack in UPDATE_ROLLBACK_FAILED.
- Requests, responses and the presigned-URL PUT: see ``stacks/version_guard_handler.py``.
- ServiceTimeout: "the maximum time, in seconds, that can elapse before a custom resource operation times
  out ... between 1 and 3600. Default: 3600" (crpg-ref.html, Template setup). Five minutes here: the handler
  answers in seconds, and a lost answer should not hold the deploy for an hour.

The handler's source (``stacks/version_guard_handler.py``) ships inline; the caller passes its text
(``clusterkit.artifacts.stack_inputs.version_guard_code``), as stacks read no files.

Not covered: a stack deployed before the guard existed gets it through a Create, which always succeeds,
so a version bump in that same deploy is not caught (deploy once without the bump first).
"""
from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks import scanner_acks

RESOURCE_TYPE = "Custom::ClusterKitVersionGuard"
# The newest Python runtime aws-cdk-lib 2.275 knows; cdk-nag's AwsSolutions-L1 accepts only the newest
# of a family in Runtime.ALL (tests/stacks/test_version_guard.py checks both).
RUNTIME = lambda_.Runtime.PYTHON_3_14
SERVICE_TIMEOUT = cdk.Duration.minutes(5)
# Several times the handler's 10 s PUT timeout, which applies to each socket operation (connect, send, each
# read): a dead ResponseURL is still logged before Lambda stops the function.
FUNCTION_TIMEOUT = cdk.Duration.seconds(60)
LOG_RETENTION = logs.RetentionDays.ONE_MONTH


class ParallelClusterVersionGuard(Construct):
    """Fails a stack update that changes ParallelCluster's version of ``cluster_name``, before the PC provider
    and the cluster are touched, with a one-line reason that names the destroy-then-deploy way out."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str, version: str,
                 handler_code: str) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION,
                                       removal_policy=cdk.RemovalPolicy.DESTROY)
        # Least privilege: the function only writes its own log group (no AWS managed policy, no other API).
        # The group's Arn attribute ends in ":*" (AWS::Logs::LogGroup return values), so it covers its streams.
        self.role = iam.Role(
            self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"ClusterKit {cluster_name}: version guard Lambda, writes its own logs only",
            inline_policies={"WriteOwnLogs": iam.PolicyDocument(statements=[iam.PolicyStatement(
                sid="WriteOwnLogGroup", actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn])])})
        self.function = lambda_.Function(
            self, "Function", runtime=RUNTIME, handler="index.handler",
            code=lambda_.Code.from_inline(handler_code), role=self.role, log_group=self.log_group,
            timeout=FUNCTION_TIMEOUT, memory_size=128,
            description=f"ClusterKit {cluster_name}: refuses a ParallelCluster version change (recreate instead)")
        # aws-cdk-lib adds DependsOn on the role, which the GetAtt of its Arn already implies (its only policy is
        # inline): tell cfn-lint that this redundancy (W3005) is CDK's, on this resource only.
        self.function.node.default_child.add_metadata(  # type: ignore[union-attr]
            "cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
        _acknowledge_scanner_findings(self)
        self.resource = cdk.CustomResource(
            self, "Resource", resource_type=RESOURCE_TYPE, service_token=self.function.function_arn,
            service_timeout=SERVICE_TIMEOUT, removal_policy=cdk.RemovalPolicy.DESTROY,
            properties={"ClusterName": cluster_name, "ParallelClusterVersion": version})


def _acknowledge_scanner_findings(guard: ParallelClusterVersionGuard) -> None:
    """Checkov's Lambda and log checks that do not fit a custom-resource handler run once per stack operation."""
    scanner_acks.acknowledge(
        guard.log_group, "CKV_AWS_158",
        "The version guard logs only the request type, its logical id, the old and new ParallelCluster version "
        "and whether CloudFormation took the answer (no secrets, no user data); CloudWatch Logs encrypts them at "
        "rest with its service key, and a customer key per cluster stack would protect public version numbers.")
    scanner_acks.acknowledge(
        guard.function, "CKV_AWS_115",
        "Only CloudFormation invokes it, once per create, update or delete of this stack, so it cannot run away; "
        "a reserved concurrency is taken from the account's unreserved pool, and Lambda refuses one that leaves "
        "less than the minimum unreserved (accounts with the default low quota), which would fail the deploy.")
    scanner_acks.acknowledge(
        guard.function, "CKV_AWS_116",
        "CloudFormation invokes this custom-resource handler asynchronously and waits for its answer on a "
        "presigned ResponseURL; an invocation that fails or is lost already fails the stack operation after the "
        "5-minute service timeout, and a dead-letter queue would keep only an event whose URL has expired.")
    scanner_acks.acknowledge(
        guard.function, "CKV_AWS_117",
        "The function reads no data and calls no AWS API: it compares two version strings and PUTs the answer to "
        "CloudFormation's presigned S3 URL. In the cluster VPC it would need the NAT gateway or an S3 endpoint to "
        "answer, and its network interfaces would delay deleting the subnets and security groups.")


def guard_depends(provider: cdk.CfnStack, guard: ParallelClusterVersionGuard) -> None:
    """Make CloudFormation update the guard before the PC provider stack (and so before the cluster)."""
    provider.node.add_dependency(guard.resource)
