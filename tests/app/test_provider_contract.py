"""Contract with ParallelCluster's provider: every IAM policy a rendered ClusterConfiguration names must be one
the provider's Lambda may attach to the node roles it creates, or the cluster stack fails with AccessDenied
on iam:AttachRolePolicy and rolls back on the first deploy.

The provider's rule, as PC's own template writes it (aws/aws-parallelcluster
cloudformation/policies/parallelcluster-policies.yaml, Sid IamPolicy, on the role the custom resource's
Lambda runs as when no CustomLambdaRole is given; read at commit 003dc38, the newest stored: no v3.16.1
snapshot is reachable here): iam:AttachRolePolicy on role/parallelcluster/* with an ArnLike condition on
iam:PolicyARN. The list below is that condition, verbatim but for the ${...} placeholders. What this test
resolves is the real synthesized template (intrinsics evaluated for one account and partition).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template

from clusterkit.pipeline.loader import load
from tests import shipped

ACCOUNT = "123456789012"
PARTITION = "aws"
PROVIDER_ATTACHABLE = [
    f"arn:{PARTITION}:iam::{ACCOUNT}:policy/parallelcluster*",
    f"arn:{PARTITION}:iam::{ACCOUNT}:policy/parallelcluster/*",
    *(f"arn:{PARTITION}:iam::aws:policy/{name}" for name in (
        "CloudWatchAgentServerPolicy", "AmazonSSMManagedInstanceCore", "AWSBatchFullAccess", "AmazonS3ReadOnlyAccess",
        "service-role/AWSBatchServiceRole", "service-role/AmazonEC2ContainerServiceforEC2Role",
        "service-role/AmazonECSTaskExecutionRolePolicy", "service-role/AmazonEC2SpotFleetTaggingRole",
        "EC2InstanceProfileForImageBuilder", "service-role/AWSLambdaBasicExecutionRole")),
]
REPO = Path(__file__).resolve().parents[2]
SPECS = sorted(shipped.SPECS)


def arn_like(pattern: str, arn: str) -> bool:
    """IAM's ArnLike: case-sensitive, '*' any run of characters (slashes included), '?' one character."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, arn) is not None


def resolve(value: Any, resources: dict[str, dict]) -> str:
    """A CloudFormation value as a string for ACCOUNT/PARTITION: literals, Ref (pseudo parameters and
    managed policies, whose Ref is their ARN), Fn::Join and Fn::Sub without variables maps."""
    if isinstance(value, str):
        return value
    (fn, arg), = value.items()
    if fn == "Ref":
        pseudo = {"AWS::Partition": PARTITION, "AWS::AccountId": ACCOUNT, "AWS::Region": "us-east-1",
                  "AWS::URLSuffix": "amazonaws.com"}
        if arg in pseudo:
            return pseudo[arg]
        resource = resources[arg]
        assert resource["Type"] == "AWS::IAM::ManagedPolicy", resource["Type"]
        props = resource["Properties"]
        return (f"arn:{PARTITION}:iam::{ACCOUNT}:policy{resolve(props.get('Path', '/'), resources)}"
                f"{resolve(props['ManagedPolicyName'], resources)}")
    if fn == "Fn::Join":
        sep, parts = arg
        return sep.join(resolve(p, resources) for p in parts)
    if fn == "Fn::Sub" and isinstance(arg, str):
        return re.sub(r"\$\{([^}]+)\}", lambda m: resolve({"Ref": m.group(1)}, resources), arg)
    raise AssertionError(f"cannot resolve {value!r}")


def attached_policies(template: Template) -> list[tuple[str, str]]:
    """(where, resolved ARN) for every AdditionalIamPolicies entry of the ClusterConfiguration."""
    resources = template.to_json()["Resources"]
    (cluster,) = template.find_resources("Custom::PclusterCluster").values()
    config = cluster["Properties"]["ClusterConfiguration"]
    places = [("HeadNode", config["HeadNode"])] + [
        (f"SlurmQueues[{q['Name']}]", q) for q in config["Scheduling"]["SlurmQueues"]]
    return [(where, resolve(p["Policy"], resources))
            for where, node in places for p in node.get("Iam", {}).get("AdditionalIamPolicies", [])]


def unattachable(template: Template) -> list[str]:
    return [f"{where}: {arn}" for where, arn in attached_policies(template)
            if not any(arn_like(pattern, arn) for pattern in PROVIDER_ATTACHABLE)]


def test_arn_like_is_iams() -> None:
    assert arn_like("arn:aws:iam::1:policy/parallelcluster*", "arn:aws:iam::1:policy/parallelcluster/x/y")
    assert not arn_like("arn:aws:iam::1:policy/parallelcluster*", "arn:aws:iam::1:policy/ClusterKit-x")
    assert not arn_like("arn:aws:iam::1:policy/parallelcluster*", "arn:aws:iam::1:policy/ParallelCluster-x")
    assert arn_like("arn:aws:iam::aws:policy/Amazon?SMManagedInstanceCore",
                    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore")


@pytest.mark.parametrize("name", SPECS)
def test_every_node_policy_is_attachable_by_the_provider(synthesized, name) -> None:
    stacks, _ = synthesized[name]
    template = Template.from_stack(stacks["cluster"])
    policies = attached_policies(template)
    (cluster,) = template.find_resources("Custom::PclusterCluster").values()
    queues = len(cluster["Properties"]["ClusterConfiguration"]["Scheduling"]["SlurmQueues"])
    # head node: Session Manager + its policy; each queue: its policy and the job-user guard (docs/security.md)
    assert {where for where, _ in policies} >= {"HeadNode"} and len(policies) == 2 + 2 * queues
    assert unattachable(template) == []


def test_the_old_policy_path_is_what_the_provider_refuses(synthesized) -> None:
    """The defect this guards: managed policies at path / named ClusterKit-* (AccessDenied, rollback)."""
    stacks, _ = synthesized["demo"]
    doc = Template.from_stack(stacks["cluster"]).to_json()
    for resource in doc["Resources"].values():
        if resource["Type"] == "AWS::IAM::ManagedPolicy":
            resource["Properties"]["Path"] = "/"
    refused = unattachable(Template.from_json(doc))
    assert len(refused) == 1 + 2 * len(load("demo").spec.queues), refused


@pytest.fixture(scope="module")
def ecr_cluster(tmp_path_factory) -> Template:
    """The demo with a private ECR image added (locked offline, as `clusterkit lock --offline` does)."""
    import aws_cdk as cdk

    import app as cdk_app
    from clusterkit.cli.main import main as clusterkit_main

    work = tmp_path_factory.mktemp("ecr-spec")
    text = (REPO / "cluster_configs" / "demo.yaml").read_text().replace("name: demo", "name: ecrdemo", 1)
    text = text.replace("  images:\n", "  images:\n    - name: private\n      uri: 123456789012.dkr.ecr."
                        f"us-west-2.amazonaws.com/team/train:v1@sha256:{'ab' * 32}\n", 1)
    spec = work / "ecrdemo.yaml"
    spec.write_text(text)
    assert clusterkit_main(["lock", str(spec), "--offline"]) == 0
    shutil.copy(REPO / "cdk.json", work / "cdk.json")
    app = cdk.App(outdir=str(work / "cdk.out"))
    stacks = cdk_app.build(app, load(str(spec)))
    app.synth()
    return Template.from_stack(stacks["cluster"])


def test_locked_private_ecr_images_can_be_pulled_by_both_node_roles(ecr_cluster: Template) -> None:
    assert unattachable(ecr_cluster) == []
    policies = {lid: p for lid, p in ecr_cluster.find_resources("AWS::IAM::ManagedPolicy").items()
                if not lid.startswith("JobUserGuard")}  # the guard holds only Denies
    assert len(policies) == 2
    for policy in policies.values():
        statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
        assert statements["EcrLogin"]["Action"] == "ecr:GetAuthorizationToken"
        assert statements["EcrLogin"]["Resource"] == "*"
        pull = statements["PullLockedEcrImages"]
        assert pull["Action"] == ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
        assert resolve(pull["Resource"], {}) == "arn:aws:ecr:us-west-2:123456789012:repository/team/train"


def test_no_ecr_permission_without_a_private_ecr_image(synthesized) -> None:
    stacks, _ = synthesized["demo"]  # public.ecr.aws and nvcr.io only
    for policy in Template.from_stack(stacks["cluster"]).find_resources("AWS::IAM::ManagedPolicy").values():
        assert "ecr:" not in str(policy["Properties"]["PolicyDocument"])
