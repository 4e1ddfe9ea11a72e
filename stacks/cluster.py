"""The ``<Name>-Cluster`` stack: ParallelCluster itself, created through PC's CloudFormation custom resource.

It holds everything whose lifetime is the cluster's: the PC provider (a nested stack from the pinned
version's public template), the node artifacts as content-hashed S3 assets, least-privilege node
policies, the SSM parameter naming the current bootstrap bundle, and ``Custom::PclusterCluster`` whose
ClusterConfiguration is ``clusterkit.render.pcluster_config.render_config`` given CDK tokens. Destroying this stack
never touches the network or storage stacks. With ``lifecycle.ttl_hours`` it also holds the schedule
that deletes it (``stacks/ttl.py``) and says when in the ``ExpiresAt`` output.

It receives everything: the effective spec of this deploy (``clusterkit.pipeline.deploy_context``), the node
artifacts already staged as files (``clusterkit.artifacts.stack_inputs.stage``) and the version guard's handler
source. It validates no spec value and reads or writes no file.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from clusterkit.effective.expand import EffectiveSpec, iso_z
from clusterkit.render import job_user_guard
from clusterkit.render.pcluster_config import Refs, bundle_arg, render_config
from stacks import nag
from stacks.platform_link import PlatformLink
from stacks.ttl import TtlTeardown
from stacks.version_guard import ParallelClusterVersionGuard, guard_depends

if TYPE_CHECKING:
    from clusterkit.artifacts.stack_inputs import StagedArtifact, StagedArtifacts

# ParallelCluster's provider Lambda attaches AdditionalIamPolicies to the node roles it creates, and may
# attach only customer policies whose ARN is policy/parallelcluster* or policy/parallelcluster/*
# (aws-parallelcluster cloudformation/policies/parallelcluster-policies.yaml, Sid IamPolicy): the node
# policies live under this IAM path.
NODE_POLICY_PATH = job_user_guard.POLICY_PATH
# Pulling a locked private ECR image (enroot's registry client): the token, then manifests and layers.
ECR_PULL_ACTIONS = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


PROVIDER_TEMPLATE = ("https://{region}-aws-parallelcluster.s3.{region}.{suffix}/parallelcluster/{version}"
                     "/templates/custom_resource/cluster.yaml")


def provider_template_url(version: str) -> str:
    return PROVIDER_TEMPLATE.format(region=cdk.Aws.REGION, suffix=cdk.Aws.URL_SUFFIX, version=version)


class ClusterStack(cdk.Stack):
    """ParallelCluster cluster named ``effective.name`` (the stack itself is ``<Name>-Cluster``)."""

    def __init__(self, scope: Construct, construct_id: str, *, effective: EffectiveSpec, artifacts: StagedArtifacts,
                 version_guard_code: str, head_node_subnet_id: str = "", compute_subnet_id: str = "",
                 security_group_id: str = "", file_system_id: str = "", alert_topic: sns.ITopic | None = None,
                 **kwargs) -> None:
        """The network and storage ids come from the cluster's own stacks, or, on a platform
        (``effective.platform``), from the platform's exports (``stacks/platform_link.py``)."""
        # Node artifacts go under the cluster's own key prefix, which the node policies may read whole.
        self.assets_prefix = effective.names.artifact_prefix
        synthesizer = kwargs.setdefault("synthesizer", cdk.DefaultStackSynthesizer(bucket_prefix=self.assets_prefix))
        super().__init__(scope, construct_id, **kwargs)
        spec = effective
        self.cluster_name = spec.name
        link: PlatformLink | None = None
        if spec.platform is not None:
            link = PlatformLink(self, "Platform", platform=spec.platform, cluster_name=spec.name,
                                availability_zone=spec.availability_zone)
            head_node_subnet_id, compute_subnet_id = link.head_node_subnet_id, link.compute_subnet_id
            security_group_id, file_system_id = link.security_group.security_group_id, link.file_system_id
            self._output("ClusterSecurityGroupId", security_group_id,
                         f"the only security group of head and compute nodes (platform {spec.platform.name})")
        assets = {a.name: self._asset(a) for a in artifacts.all()}
        bucket = assets[artifacts.bundle.name].s3_bucket_name

        parameter = ssm.StringParameter(
            self, "BootstrapBundle", parameter_name=spec.names.bundle_parameter,
            string_value=assets[artifacts.bundle.name].s3_object_url,
            description=f"Current ClusterKit bootstrap bundle of cluster {spec.name} (read by the head node launcher)")

        # Both node kinds pull locked private ECR images: the head node syncs them, compute nodes pull when
        # pyxis imports (pyxis < 0.24, or unlocked_images: import).
        ecr = self._ecr_repositories(spec)
        head_policy = self._node_policy("HeadNodePolicy", f"{spec.name}-{spec.region}-head-node", bucket,
                                        parameter, ecr)
        compute_policy = self._node_policy("ComputeNodePolicy", f"{spec.name}-{spec.region}-compute-node", bucket,
                                           None, ecr)
        job_guard = self._job_user_guard(spec.name, spec.region)

        provider = cdk.CfnStack(self, "ParallelClusterProvider",
                                template_url=provider_template_url(spec.parallelcluster_version))
        # ParallelCluster updates only clusters created by the same version: refuse a version change first,
        # with the way out, before the provider or the cluster is touched.
        guard = ParallelClusterVersionGuard(self, "VersionGuard", cluster_name=spec.name,
                                            version=spec.parallelcluster_version, handler_code=version_guard_code)
        guard_depends(provider, guard)
        refs = Refs(
            head_node_subnet_id=head_node_subnet_id, compute_subnet_id=compute_subnet_id,
            security_group_id=security_group_id, file_system_id=file_system_id, assets_bucket=bucket,
            head_node_policy_arn=head_policy.managed_policy_arn,
            compute_node_policy_arn=compute_policy.managed_policy_arn,
            job_guard_policy_arn=job_guard.managed_policy_arn,
            bundle_arg=bundle_arg(spec), assets_prefix=self.assets_prefix,
            partition=cdk.Aws.PARTITION)
        config = render_config(spec, refs, artifacts)
        cluster = cdk.CustomResource(
            self, "ParallelCluster", resource_type="Custom::PclusterCluster",
            service_token=provider.get_att("Outputs.ServiceToken").to_string(),
            removal_policy=cdk.RemovalPolicy.DESTROY,
            properties={"ClusterName": spec.name, "ClusterConfiguration": config, "DeletionPolicy": "Delete"})
        # The head node reads the parameter at boot (by name, a literal), so it must be written first.
        cluster.node.add_dependency(parameter)
        if link is not None:
            # Nodes mount the platform's /fsx through these rules: they exist before PC's create (its FSx
            # networking validator checks them) and are deleted only after PC's delete has ended every node.
            for rule in link.lustre_rules():
                cluster.node.add_dependency(rule)
        self.head_node_instance_id = cluster.get_att_string("headNode.instanceId")

        self._output("ClusterName", spec.name, "ParallelCluster cluster name (not this stack's name)")
        self._output("HeadNodeInstanceId", self.head_node_instance_id, "EC2 instance id of the head node")
        self._output("SsmSession", cdk.Fn.join("", ["aws ssm start-session --region ", spec.region, " --target ",
                                                    self.head_node_instance_id]),
                     "shell on the head node (no SSH is open)")
        self._output("ValidationMessages", cluster.get_att_string("validationMessages"),
                     "ParallelCluster validation warnings at the last create or update")
        self._output("BootstrapBundleUrl", assets[artifacts.bundle.name].s3_object_url,
                     "bootstrap bundle of this deploy")
        if spec.lifecycle.ttl_hours is not None:
            ttl = TtlTeardown(self, "TtlTeardown", cluster_name=spec.name, lifecycle=spec.lifecycle,
                              alert_topic=alert_topic, synthesizer=synthesizer)
            self._output("ExpiresAt", iso_z(ttl.expires_at),
                         "UTC time the TTL schedule deletes this stack (a redeploy moves it; network and storage stay)")
            ttl.delete_last()  # created before, deleted after every other resource (stacks/ttl.py); keep last

    def _asset(self, artifact: StagedArtifact) -> s3_assets.Asset:
        """An S3 asset keyed by our own sha256, so the rendered config can name the key without CDK."""
        asset = s3_assets.Asset(self, f"Asset-{artifact.name}", path=str(artifact.path),
                                asset_hash=artifact.sha256, asset_hash_type=cdk.AssetHashType.CUSTOM)
        if asset.s3_object_key != self.assets_prefix + artifact.key:
            raise ValueError(f"{self.stack_name}: asset {artifact.name} lands at {asset.s3_object_key}, not under "
                             f"{self.assets_prefix} where the config and the node policies expect it; use "
                             f"DefaultStackSynthesizer(bucket_prefix='{self.assets_prefix}')")
        return asset

    def _ecr_repositories(self, spec: EffectiveSpec) -> list[str]:
        """ARNs of the private ECR repositories the spec's images come from (sorted, once each)."""
        return [f"arn:{cdk.Aws.PARTITION}:ecr:{r.region}:{r.account}:repository/{r.repository}"
                for r in spec.containers.ecr_repositories]

    def _node_policy(self, construct_id: str, name: str, bucket: str, parameter: ssm.IStringParameter | None,
                     ecr_repositories: list[str]) -> iam.ManagedPolicy:
        artifacts_arn = cdk.Arn.format(cdk.ArnComponents(service="s3", region="", account="", resource=bucket,
                                                         resource_name=f"{self.assets_prefix}*"), self)
        statements = [iam.PolicyStatement(sid="ReadBootstrapObjects", actions=["s3:GetObject"],
                                          resources=[artifacts_arn])]
        if parameter is not None:
            statements.append(iam.PolicyStatement(sid="ReadBundleParameter", actions=["ssm:GetParameter"],
                                                  resources=[parameter.parameter_arn]))
        if ecr_repositories:
            statements.append(iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"],
                                                  resources=["*"]))
            statements.append(iam.PolicyStatement(sid="PullLockedEcrImages", actions=ECR_PULL_ACTIONS,
                                                  resources=ecr_repositories))
        policy = iam.ManagedPolicy(self, construct_id, managed_policy_name=f"ClusterKit-{name}", path=NODE_POLICY_PATH,
                                   statements=statements,
                                   description=f"ClusterKit {name}: read its bootstrap artifacts "
                                               "and pull its locked images")
        nag.acknowledge(policy, "AwsSolutions-IAM5", "read-only on this cluster's own node-artifact prefix: keys are "
                        "content hashes, and nodes launched from the previous launch template while ParallelCluster "
                        "replaces the fleet must still read the previous deploy's scripts",
                        applies_to=[f"Resource::{nag.finding_text(self, artifacts_arn)}"])
        if ecr_repositories:
            nag.acknowledge(policy, "AwsSolutions-IAM5", "ecr:GetAuthorizationToken has no resource-level "
                            "permissions (ECR User Guide, 'Private registry authentication'); pulls are limited to "
                            "the locked repositories", applies_to=["Resource::*"])
        return policy

    def _job_user_guard(self, cluster: str, region: str) -> iam.ManagedPolicy:
        """The Denies every user of a compute or login node is held to (clusterkit/render/job_user_guard.py)."""
        document = job_user_guard.document(cluster, partition=cdk.Aws.PARTITION, region=cdk.Aws.REGION,
                                           account=cdk.Aws.ACCOUNT_ID)
        return iam.ManagedPolicy(self, "JobUserGuardPolicy", managed_policy_name=job_user_guard.policy_name(
                                     cluster, region), path=NODE_POLICY_PATH,
                                 document=iam.PolicyDocument.from_json(document),
                                 description=f"ClusterKit {cluster}: what a job user must not do with the compute "
                                             "role (explicit Denies over ParallelCluster's grants)")

    def _output(self, name: str, value: str, description: str) -> None:
        cdk.CfnOutput(self, name, value=value, description=description)
