"""What a job user must not do with the compute role: explicit Denies over ParallelCluster's own grants.

Every job user on a compute node holds the compute role (IMDS is open there: PC locks it on head and login nodes
only), and ParallelCluster attaches grants its own agents need in a narrow form but writes them wide. An explicit
Deny in ClusterKit's compute policy (the same on login pools, whose IMDS PC locks) narrows each to what PC's nodes
do, from the sources cited in docs/security.md "What ParallelCluster's grants let a job do":

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
What IAM cannot narrow (a node's own item vs another node's, forged events in this cluster's own streams) is
closed by IMDS for root only on compute nodes (``security.compute_imds``).
"""
from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

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


def log_group_arns(cluster_name: str) -> list[str]:
    """The cluster's own log group, as a group and with its streams (``...:log-stream:<name>``)."""
    group = (f"arn:{cdk.Aws.PARTITION}:logs:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:log-group:"
             f"/aws/parallelcluster/{cluster_name}{LOG_GROUP_SUFFIX}")
    return [group, f"{group}:*"]


def fleet_table_arn(cluster_name: str) -> str:
    return (f"arn:{cdk.Aws.PARTITION}:dynamodb:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:table/"
            f"{FLEET_TABLE_PREFIX}{cluster_name}")


def job_user_denies(*, cluster_name: str) -> list[iam.PolicyStatement]:
    """The Deny statements (see the module docstring for each one's source)."""
    deny = iam.Effect.DENY
    table = fleet_table_arn(cluster_name)
    return [
        iam.PolicyStatement(sid="NoParameterReads", effect=deny, actions=[SSM_PARAMETER_READS], resources=["*"]),
        iam.PolicyStatement(sid="NoLogRetentionChanges", effect=deny, actions=LOG_RETENTION, resources=["*"]),
        iam.PolicyStatement(sid="LogWritesOnlyToThisCluster", effect=deny, actions=LOG_WRITES,
                            not_resources=log_group_arns(cluster_name)),
        iam.PolicyStatement(sid="NodeItemsOnly", effect=deny, actions=["dynamodb:PutItem"], resources=[table],
                            conditions={"ForAnyValue:StringNotLike": {"dynamodb:LeadingKeys": [NODE_ITEM_PATTERN]}}),
        iam.PolicyStatement(sid="NodeItemsOnlyKeyed", effect=deny, actions=["dynamodb:PutItem"], resources=[table],
                            conditions={"Null": {"dynamodb:LeadingKeys": "true"}}),
        iam.PolicyStatement(sid="NoItemUpdates", effect=deny,
                            actions=["dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"],
                            resources=[table]),
        iam.PolicyStatement(sid="InstanceAttributesOfThisClusterOnly", effect=deny,
                            actions=["ec2:DescribeInstanceAttribute"], resources=["*"],
                            conditions={"StringNotEquals": {f"aws:ResourceTag/{CLUSTER_NAME_TAG}": cluster_name}}),
        iam.PolicyStatement(sid="NoHeadNodeInstanceAttributes", effect=deny,
                            actions=["ec2:DescribeInstanceAttribute"], resources=["*"],
                            conditions={"StringEquals": {f"aws:ResourceTag/{NODE_TYPE_TAG}": "HeadNode"}}),
    ]
