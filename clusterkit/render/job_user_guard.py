"""What a job user must not do with the compute role: one IAM policy of explicit Denies over ParallelCluster's
own grants, attached to compute queues and login pools (``Iam.AdditionalIamPolicies``) by both ways a cluster is
created: the Cluster stack (stacks/cluster.py) and ``clusterkit export`` (clusterkit/deployed/export.py).

Every job user on a compute node holds the compute role (IMDS is open there unless ``security.compute_imds:
root_only`` locks it: clusterkit_node/node/imds_lock.py), and ParallelCluster writes the grants its own agents need
wide. Each Deny narrows one to what PC's nodes do (sources: docs/security.md "What ParallelCluster's grants let a
job do", ../shared/reference/domain.md):

- SSM parameters: none (CloudWatchAgentServerPolicy's ``parameter/AmazonCloudWatch-*`` read is unused: PC starts
  the agent with ``-c file:``).
- CloudWatch Logs: writes only to this cluster's log group ``/aws/parallelcluster/<name>-<YYYYMMDDHHMM>`` (PC's
  cluster_stack.py; the agent's only target, write_cloudwatch_agent_json.py), no retention changes anywhere (PC
  sets retention in CloudFormation; the agent calls PutRetentionPolicy only with retention_in_days, which PC's
  agent config never sets).
- DynamoDB ``parallelcluster-<name>``: compute and login nodes write only ``CLUSTER_CONFIG.<instance id>`` items
  with PutItem (cookbook slurm/libraries/dynamo.rb); ``COMPUTE_FLEET`` (which stops the fleet) is the head node's
  and the CLI's. UpdateItem is granted but unused.
- ``ec2:DescribeInstanceAttribute`` (granted on ``*``; no PC caller since 3.9): only on this cluster's compute and
  login nodes, whose user data a job on one of them reads from IMDS anyway; never the head node's, never another
  cluster's or instance's. The tags it keys on are PC's, and the role cannot tag.
IAM cannot tell one node's item from another's, nor this cluster's streams written by its agent from ones a job
forges: IMDS for root only closes those.
"""
from __future__ import annotations

from typing import Any

# PC's log group: CW_LOG_GROUP_NAME_PREFIX + cluster name + "-" + strftime('%Y%m%d%H%M'), 12 digits. Twelve `?`,
# not `*`: cluster "demo" must not match "demo-ecr"'s group /aws/parallelcluster/demo-ecr-202612061200.
LOG_GROUP_SUFFIX = "-" + "?" * 12
# ParallelCluster's own names (pcluster/constants.py): its tables and the tags on every instance it launches.
FLEET_TABLE_PREFIX = "parallelcluster-"
CLUSTER_NAME_TAG = "parallelcluster:cluster-name"
NODE_TYPE_TAG = "parallelcluster:node-type"
NODE_ITEM_PATTERN = "CLUSTER_CONFIG.i-*"  # the only item ids compute and login nodes write
SSM_PARAMETER_READS = "ssm:GetParameter*"  # GetParameter, GetParameters, GetParametersByPath, GetParameterHistory
LOG_WRITES = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"]
LOG_RETENTION = ["logs:PutRetentionPolicy", "logs:DeleteRetentionPolicy"]
# ParallelCluster's provider attaches only customer policies under this path (cloudformation/policies/
# parallelcluster-policies.yaml, Sid IamPolicy).
POLICY_PATH = "/parallelcluster/"


def policy_name(cluster: str, region: str) -> str:
    return f"ClusterKit-{cluster}-{region}-job-guard"


def log_group_arns(cluster: str, *, partition: str, region: str, account: str) -> list[str]:
    """The cluster's own log group, as a group and with its streams (``...:log-stream:<name>``)."""
    group = f"arn:{partition}:logs:{region}:{account}:log-group:/aws/parallelcluster/{cluster}{LOG_GROUP_SUFFIX}"
    return [group, f"{group}:*"]


def document(cluster: str, *, partition: str, region: str, account: str) -> dict[str, Any]:
    """The policy document; partition, region and account may be CloudFormation tokens (the stack's)."""
    table = f"arn:{partition}:dynamodb:{region}:{account}:table/{FLEET_TABLE_PREFIX}{cluster}"

    def deny(sid: str, actions: list[str], resource: str | None = None, **extra: Any) -> dict[str, Any]:
        statement: dict[str, Any] = {"Sid": sid, "Effect": "Deny", "Action": actions}
        if resource is not None:
            statement["Resource"] = resource
        return statement | extra

    return {"Version": "2012-10-17", "Statement": [
        deny("NoParameterReads", [SSM_PARAMETER_READS], "*"),
        deny("NoLogRetentionChanges", LOG_RETENTION, "*"),
        deny("LogWritesOnlyToThisCluster", LOG_WRITES,
             NotResource=log_group_arns(cluster, partition=partition, region=region, account=account)),
        deny("NodeItemsOnly", ["dynamodb:PutItem"], table,
             Condition={"ForAnyValue:StringNotLike": {"dynamodb:LeadingKeys": [NODE_ITEM_PATTERN]}}),
        deny("NodeItemsOnlyKeyed", ["dynamodb:PutItem"], table,
             Condition={"Null": {"dynamodb:LeadingKeys": "true"}}),
        deny("NoItemUpdates", ["dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"], table),
        deny("InstanceAttributesOfThisClusterOnly", ["ec2:DescribeInstanceAttribute"], "*",
             Condition={"StringNotEquals": {f"aws:ResourceTag/{CLUSTER_NAME_TAG}": cluster}}),
        deny("NoHeadNodeInstanceAttributes", ["ec2:DescribeInstanceAttribute"], "*",
             Condition={"StringEquals": {f"aws:ResourceTag/{NODE_TYPE_TAG}": "HeadNode"}}),
    ]}
