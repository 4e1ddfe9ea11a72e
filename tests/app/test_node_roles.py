"""Least privilege of the compute role, measured against a hostile job user (docs/security.md "Node roles").

Every job user on a compute node holds the compute role: ParallelCluster limits IMDS to some users only
on head and login nodes (aws-parallelcluster-cookbook, aws-parallelcluster-environment/recipes/config/
imds.rb: ``if %w(HeadNode LoginNode).include? node['cluster']['node_type']``). So for every shipped spec
(and one with a private ECR image) this evaluates what the synthesized Cluster template gives each
compute queue, plus what ParallelCluster adds itself (tests/app/node_roles.py), and fails when the role can
read any SSM parameter, any S3 object outside the cluster's artifact prefix and the image store, or pull
from any ECR repository not in the lock.

Real: the synthesized template and ParallelCluster's code as transcribed (checked against its source by
tests/pcluster/test_pcluster_compute_role.py). Not real: IAM itself (tests/iam_eval.py), and the AWS
managed policies are copies (tests/app/iam_policies/, each with its source).
"""
from __future__ import annotations

import copy
import dataclasses

import aws_cdk as cdk
import pytest
import yaml

from clusterkit.pipeline.loader import CONFIG_DIR, load
from tests import shipped
from tests.app.node_roles import (
    cluster_configuration,
    compute_role,
    parent_stack_arn,
    queues_stack_arn,
    template_refs,
    vendored,
)
from tests.iam_eval import Decision, Request, Statement, decide, glob, parse, reachable_outside

SPECS = sorted(shipped.SPECS)
ACCOUNT = "123456789012"
PRIVATE_ECR = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/team/app@sha256:{'a' * 64}"
SSM_READS = ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath", "ssm:GetParameterHistory")
S3_READS = ("s3:GetObject", "s3:GetObjectVersion")
ECR_PULLS = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
IMAGE_STORE = "arn:aws:s3:::image-store-bucket/*"  # the compute role reads it through FSx, never S3
# The one S3 read outside the cluster that the compute role keeps, by name: ParallelCluster's own inline
# policy (Sid S3GetObj) lets compute nodes read AWS's public ParallelCluster bucket of the region (cookbook
# and tooling, the same for every customer). Not ours to remove; it holds no data of this account.
PC_PUBLIC_BUCKET = "arn:aws:s3:::{region}-aws-parallelcluster/*"
PROBES = ("arn:aws:ssm:us-east-1:123456789012:parameter/prod/db-password",
          "arn:aws:s3:::another-teams-bucket/secret", "arn:aws:ecr:us-east-1:123456789012:repository/other")


class Cluster:
    """One synthesized Cluster template and what the compute role may reach in it."""

    def __init__(self, template: dict, name: str, region: str, account: str | None, stack: str,
                 ecr: list[str]) -> None:
        self.template, self.name, self.region = template, name, region
        self.account = account or ACCOUNT
        self.refs = template_refs(template, account=self.account, region=region, stack=stack)
        self.ecr = ecr
        self.artifacts = f"arn:aws:s3:::cdk-hnb659fds-assets-{self.account}-{region}/clusterkit/{name}/*"

    def queues(self) -> list[dict]:
        return cluster_configuration(self.template)["Scheduling"]["SlurmQueues"]

    def role(self, queue: dict, customer: dict | None = None) -> list[Statement]:
        return compute_role(self.template, queue, self.refs, cluster_stack=self.name, customer=customer)

    def s3_inside(self, resource: str) -> bool:
        allowed = (self.artifacts, IMAGE_STORE, PC_PUBLIC_BUCKET.format(region=self.region))
        return any(glob(a, resource) for a in allowed)

    def ecr_inside(self, resource: str) -> bool:
        return resource in self.ecr


def _cluster(stacks, assembly, loaded) -> Cluster:
    from clusterkit.effective.expand import expand

    effective = expand(loaded)
    stack = stacks["cluster"]
    template = assembly.get_stack_artifact(stack.artifact_id).template
    ecr = [f"arn:aws:ecr:{r.region}:{r.account}:repository/{r.repository}"
           for r in effective.containers.ecr_repositories]
    return Cluster(template, effective.name, effective.region, effective.account, stack.stack_name, ecr)


@pytest.fixture(scope="module")
def clusters(synthesized, tmp_path_factory) -> dict[str, Cluster]:
    """Every shipped spec, plus ``demo-ecr``: the demo with a private ECR image, so pulls are checked too."""
    import app as cdk_app

    out = {name: _cluster(stacks, assembly, load(name)) for name, (stacks, assembly) in synthesized.items()}
    doc = yaml.safe_load((CONFIG_DIR / "demo.yaml").read_text(encoding="utf-8"))
    doc["containers"]["images"].append({"name": "app", "uri": PRIVATE_ECR})
    spec = tmp_path_factory.mktemp("ecr") / "demo.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    loaded = load(str(spec), check_lock=False)
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk-demo-ecr")))
    stacks = cdk_app.build(app, loaded)
    out["demo-ecr"] = _cluster(stacks, app.synth(), loaded)
    return out


ALL = [*SPECS, "demo-ecr"]


def _leaks(cluster: Cluster, statements: list[Statement]) -> list:
    return (reachable_outside(statements, SSM_READS, lambda r: False, PROBES)
            + reachable_outside(statements, S3_READS, cluster.s3_inside, PROBES)
            + reachable_outside(statements, ECR_PULLS, cluster.ecr_inside, PROBES))


@pytest.mark.parametrize("name", ALL)
def test_compute_role_reaches_nothing_beyond_its_cluster(clusters, name):
    cluster = clusters[name]
    assert cluster.queues()
    for queue in cluster.queues():
        assert _leaks(cluster, cluster.role(queue)) == [], queue["Name"]


@pytest.mark.parametrize("name", ALL)
def test_compute_role_still_does_its_job(clusters, name):
    """The evaluator is not vacuous: the reads the nodes need are allowed."""
    cluster = clusters[name]
    role = cluster.role(cluster.queues()[0])
    artifact = cluster.artifacts.replace("*", "sha256-abc/compute_node_start.sh")
    assert decide(role, Request("s3:GetObject", artifact)) is Decision.ALLOW
    for repository in cluster.ecr:
        assert decide(role, Request("ecr:BatchGetImage", repository)) is Decision.ALLOW
    assert (name == "demo-ecr") == bool(cluster.ecr)


def test_cloudwatch_agent_parameter_read_is_denied_not_excepted(clusters):
    """PC's CloudWatchAgentServerPolicy allows ssm:GetParameter on parameter/AmazonCloudWatch-*; the compute
    policy's explicit Deny removes it (PC's agent reads its config from a file). Without the Deny it leaks."""
    cluster = clusters["demo"]
    role = cluster.role(cluster.queues()[0])
    parameter = "arn:aws:ssm:us-east-1:123456789012:parameter/AmazonCloudWatch-linux"
    assert decide(role, Request("ssm:GetParameter", parameter)) is Decision.EXPLICIT_DENY
    without_deny = [s for s in role if s.effect == "Allow"]
    assert decide(without_deny, Request("ssm:GetParameter", parameter)) is Decision.ALLOW
    assert [leak.granted_by for leak in _leaks(cluster, without_deny)] == [
        "CloudWatchAgentServerPolicy/CWASSMServerPermissions"] * 2


@pytest.mark.parametrize("policy, action", [
    ({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}, "s3:GetObject"),
    ({"Effect": "Allow", "Action": "ecr:*", "Resource": "*"}, "ecr:BatchGetImage"),
    ({"Effect": "Allow", "Action": "ssm:Get*", "Resource": "arn:aws:ssm:*:*:parameter/*"}, "ssm:GetParameter"),
])
def test_a_resource_wildcard_policy_is_caught(clusters, policy, action):
    """The check can fail: one broad statement added to the compute role is reported as a leak."""
    cluster = clusters["demo-ecr"]
    role = cluster.role(cluster.queues()[0])
    added = parse({"Statement": [policy]}, "added", cluster.refs)
    if action.startswith("ssm:"):
        # the compute policy's Deny holds against this one; show it is the Deny that does
        assert _leaks(cluster, role + added) == []
        role = [s for s in role if s.effect == "Allow"]
    leaks = _leaks(cluster, role + added)
    assert action in {leak.action for leak in leaks if leak.granted_by == "added/?"}, leaks


def test_session_manager_on_a_compute_queue_would_be_caught(clusters):
    """Re-adding AmazonSSMManagedInstanceCore to a queue, as before #26, is caught once the Deny is gone,
    and the Deny alone already stops its parameter reads."""
    cluster = clusters["demo"]
    queue = copy.deepcopy(cluster.queues()[0])
    queue["Iam"]["AdditionalIamPolicies"].append(
        {"Policy": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"})
    role = cluster.role(queue)
    assert _leaks(cluster, role) == []
    leaks = _leaks(cluster, [s for s in role if s.effect == "Allow"])
    assert {(leak.action, leak.granted_by) for leak in leaks} >= {
        ("ssm:GetParameter", "AmazonSSMManagedInstanceCore/?"), ("ssm:GetParameters", "AmazonSSMManagedInstanceCore/?")}


def test_an_unknown_aws_managed_policy_is_an_error(clusters):
    cluster = clusters["demo"]
    queue = copy.deepcopy(cluster.queues()[0])
    queue["Iam"]["AdditionalIamPolicies"].append({"Policy": "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"})
    with pytest.raises(LookupError, match="not vendored"):
        cluster.role(queue)


def test_export_style_s3_access_is_evaluated_as_pc_writes_it(clusters):
    """``clusterkit export`` gives nodes Iam.S3Access instead of our policy: PC turns it into s3:Get* on the
    prefix, which stays inside; a whole-bucket entry would not. (S3 only here; the exported job-user guard is
    evaluated below.)"""
    cluster = clusters["demo"]
    bucket = f"cdk-hnb659fds-assets-{cluster.account}-{cluster.region}"
    prefix = {"Iam": {"S3Access": [{"BucketName": bucket, "KeyName": "clusterkit/demo/*", "EnableWriteAccess": False}]}}
    whole = {"Iam": {"S3Access": [{"BucketName": bucket}]}}
    assert reachable_outside(cluster.role(prefix), S3_READS, cluster.s3_inside, PROBES) == []
    leaks = reachable_outside(cluster.role(whole), S3_READS, cluster.s3_inside, PROBES)
    assert {leak.resource for leak in leaks if leak.granted_by == "S3Access"} == {
        f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/ck-probe", f"arn:aws:s3:::{bucket}/ck-probe/ck-probe"}


def test_vendored_policies_name_their_source():
    for name in ("AmazonSSMManagedInstanceCore", "CloudWatchAgentServerPolicy", "pcluster_compute_inline"):
        assert vendored(name)["_source"].startswith(("AWS Managed Policy Reference", "ParallelCluster 3.16.1"))


# --- what ParallelCluster's own grants let a job do (docs/security.md "What ParallelCluster's grants let a job do")
# Each case: the request a hostile job user would make, what the role answers now, and what it answered without
# ClusterKit's Denies (the role as PC writes it: the negative control that shows the case failed before).

def _log_group(cluster: Cluster, name: str, stream: str | None = None) -> str:
    group = f"arn:aws:logs:{cluster.region}:{cluster.account}:log-group:{name}"
    return group if stream is None else f"{group}:log-stream:{stream}"


def _without_denies(role: list[Statement]) -> list[Statement]:
    return [s for s in role if s.effect == "Allow"]


def _cases(cluster: Cluster) -> list[tuple[str, Request, Decision, Decision]]:
    """(what, request, decision now, decision without ClusterKit's Denies)."""
    own = _log_group(cluster, f"/aws/parallelcluster/{cluster.name}-202612061200")
    table = f"arn:aws:dynamodb:{cluster.region}:{cluster.account}:table/parallelcluster-{cluster.name}"
    instance = f"arn:aws:ec2:{cluster.region}:{cluster.account}:instance/i-0123456789abcdef0"
    tag, node_type = "aws:ResourceTag/parallelcluster:cluster-name", "aws:ResourceTag/parallelcluster:node-type"
    allow, deny, implicit = Decision.ALLOW, Decision.EXPLICIT_DENY, Decision.IMPLICIT_DENY
    return [
        # 1. CloudWatch Logs
        ("shorten the platform's flow-log retention", Request(
            "logs:PutRetentionPolicy", _log_group(cluster, "/clusterkit/research-east/vpc-flow-logs")), deny, allow),
        ("shorten this cluster's own log retention", Request("logs:PutRetentionPolicy", own), deny, allow),
        ("forge events in a CloudTrail group", Request(
            "logs:PutLogEvents", _log_group(cluster, "aws-cloudtrail-logs-org", "i-1_CloudTrail")), deny, allow),
        ("forge events in another cluster's group", Request("logs:PutLogEvents", _log_group(
            cluster, f"/aws/parallelcluster/{cluster.name}-ecr-202612061200", "ip-10-0-0-1.i-1.slurmd")),
         deny, allow),
        ("create a log group elsewhere", Request(
            "logs:CreateLogGroup", _log_group(cluster, "/tmp/exfil")), deny, allow),
        ("PC's agent: a stream in this cluster's group", Request(
            "logs:CreateLogStream", own), allow, allow),
        ("PC's agent: events in this cluster's group", Request(
            "logs:PutLogEvents", f"{own}:log-stream:ip-10-0-0-1.i-1.slurmd"), allow, allow),
        # 2. DynamoDB: the fleet status item
        ("stop the whole fleet (COMPUTE_FLEET)", Request(
            "dynamodb:PutItem", table, context={"dynamodb:LeadingKeys": ("COMPUTE_FLEET",)}), deny, allow),
        ("stop the whole fleet by UpdateItem", Request(
            "dynamodb:UpdateItem", table, context={"dynamodb:LeadingKeys": ("COMPUTE_FLEET",)}), deny, allow),
        ("PC's node: its CLUSTER_CONFIG item", Request(
            "dynamodb:PutItem", table, context={"dynamodb:LeadingKeys": ("CLUSTER_CONFIG.i-0123456789abcdef0",)}),
         allow, allow),
        # 3. CloudFormation: the head node's WaitCondition URL lives in PC's parent stack
        ("read the head node's WaitCondition URL", Request(
            "cloudformation:DescribeStackResource", parent_stack_arn(cluster.refs, cluster.name)), implicit, implicit),
        ("PC's node: its own queues stack", Request(
            "cloudformation:DescribeStackResource", queues_stack_arn(cluster.refs, cluster.name)), allow, allow),
        # 4. EC2 user data
        ("read another instance's userData", Request(
            "ec2:DescribeInstanceAttribute", instance, context={}), deny, allow),
        ("read another cluster's userData", Request(
            "ec2:DescribeInstanceAttribute", instance, context={tag: "other", node_type: "Compute"}), deny, allow),
        ("read this cluster's head node userData", Request(
            "ec2:DescribeInstanceAttribute", instance, context={tag: cluster.name, node_type: "HeadNode"}),
         deny, allow),
        ("a compute node of this cluster", Request(
            "ec2:DescribeInstanceAttribute", instance, context={tag: cluster.name, node_type: "Compute"}),
         allow, allow),
    ]


@pytest.mark.parametrize("name", ALL)
def test_parallelclusters_grants_reach_only_what_its_nodes_do(clusters, name):
    """Paths 1-4 of the compute-role audit, for every queue of every spec: each hostile request is denied now and
    was allowed by the role as ParallelCluster writes it; each request PC's own agents make is still allowed."""
    cluster = clusters[name]
    for queue in cluster.queues():
        role = cluster.role(queue)
        for what, request, now, before in _cases(cluster):
            assert decide(role, request) is now, (queue["Name"], what)
            assert decide(_without_denies(role), request) is before, (queue["Name"], what, "without the Denies")


def test_the_wait_condition_url_would_be_reachable_from_the_parent_stack(clusters):
    """The CloudFormation case can fail: PC's compute grant names the nested queues stack; had it named the
    parent (as its login-node role does: stack/<cluster>/*), a job could read the WaitCondition URL."""
    cluster = clusters["demo"]
    role = cluster.role(cluster.queues()[0])
    parent = parent_stack_arn(cluster.refs, cluster.name)
    widened = role + parse({"Statement": [{"Effect": "Allow", "Action": "cloudformation:DescribeStackResource",
                                           "Resource": f"arn:aws:cloudformation:*:*:stack/{cluster.name}/*"}]},
                           "login-style", cluster.refs)
    assert decide(widened, Request("cloudformation:DescribeStackResource", parent)) is Decision.ALLOW


def test_the_log_group_pattern_fits_pcs_name_and_no_other_cluster(clusters):
    """PC names the group /aws/parallelcluster/<name>-<%Y%m%d%H%M> (pcluster/templates/cluster_stack.py): the
    pattern takes that, not a group of a cluster whose name extends this one's."""
    from clusterkit.render.job_user_guard import LOG_GROUP_SUFFIX

    assert len(LOG_GROUP_SUFFIX) == 1 + len("202612061200")
    cluster = clusters["demo"]
    role = cluster.role(cluster.queues()[0])
    for group, decision in (("demo-202612061200", Decision.ALLOW), ("demo-x-202612061200", Decision.EXPLICIT_DENY),
                            ("demo-2026120612", Decision.EXPLICIT_DENY), ("demo", Decision.EXPLICIT_DENY)):
        request = Request("logs:PutLogEvents", _log_group(cluster, f"/aws/parallelcluster/{group}", "s"))
        assert decide(role, request) is decision, group


# clusters on a platform are not exported (their node group comes from their own stack: export refuses them)
EXPORTABLE = [name for name in SPECS if load(name, check_lock=False).spec.platform is None]


@pytest.mark.parametrize("name", EXPORTABLE)
def test_an_exported_config_holds_every_job_user_the_same(clusters, name):
    """``clusterkit export``'s compute roles (S3Access on the prefix + the guard policy by ARN, its document as
    --upload creates it) answer every case as the Cluster stack's do; without the guard they answer as PC's."""
    from clusterkit.deployed.export import guard_document, guard_policy_arn, resolve_refs
    from clusterkit.effective.expand import expand
    from clusterkit.render.pcluster_config import render_config

    cluster = clusters[name]
    effective = expand(load(name))

    class Outputs:
        def describe_stacks(self, StackName):  # noqa: N803 (boto3's parameter name)
            ids = {"HeadNodeSubnetId": "subnet-1", "ComputeSubnetId": "subnet-2", "ClusterSecurityGroupId": "sg-1",
                   "FileSystemId": "fs-0123456789abcdef0"}
            return {"Stacks": [{"Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in ids.items()]}]}

    bucket = f"cdk-hnb659fds-assets-{cluster.account}-{cluster.region}"  # the prefix Cluster.s3_inside allows
    refs = dataclasses.replace(resolve_refs(effective, Outputs(), bucket),
                        job_guard_policy_arn=guard_policy_arn(effective, cluster.account))
    from clusterkit.artifacts.bundle import node_artifacts

    config = render_config(effective, refs, node_artifacts(load(name)))
    guard = {refs.job_guard_policy_arn: guard_document(effective, cluster.account)}
    for queue in config["Scheduling"]["SlurmQueues"]:
        role = cluster.role(queue, customer=guard)
        assert _leaks(cluster, role) == [], queue["Name"]
        for what, request, now, before in _cases(cluster):
            assert decide(role, request) is now, (queue["Name"], what)
            assert decide(_without_denies(role), request) is before, (queue["Name"], what)
