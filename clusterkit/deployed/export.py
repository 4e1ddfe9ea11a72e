"""``clusterkit export NAME``: a concrete ParallelCluster YAML for teams that run ``pcluster create-cluster``.

Ids come from the deployed ``<Name>-Network`` and ``<Name>-Storage`` stacks' outputs (boto3). The
node artifacts go to a bucket the team names, under ``clusterkit/<name>/``; the bundle also goes to a
stable key that the head-node launcher reads (so OnNodeConfigured never changes), and nodes get read
access through ParallelCluster's own ``Iam.S3Access`` on that prefix. Compute queues and login pools get the
job-user guard as the Cluster stack gives it (clusterkit/render/job_user_guard.py): ``--upload`` creates or updates
that IAM policy (under /parallelcluster/, where PC may attach it), and the YAML names it either way, so
``pcluster create-cluster`` refuses a config whose guard was never created (PC checks AdditionalIamPolicies exist).
Nothing here needs the Cluster stack: that stack and ``export`` are two alternative ways to create the cluster.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import yaml

from clusterkit.artifacts.bundle import NodeArtifacts, node_artifacts
from clusterkit.effective.expand import EffectiveSpec, expand
from clusterkit.pipeline.loader import Loaded
from clusterkit.render import job_user_guard
from clusterkit.render.pcluster_config import Refs, render_config
from clusterkit.render.rendered_files import NoAliasDumper
from clusterkit.spec.errors import ClusterKitError
from clusterkit.spec.naming import artifact_prefix

NETWORK_OUTPUTS = ("HeadNodeSubnetId", "ComputeSubnetId", "ClusterSecurityGroupId")
STORAGE_OUTPUTS = ("FileSystemId",)


@dataclass(frozen=True)
class Exported:
    text: str
    uploaded: list[str]  # s3:// URIs written (empty without --upload)
    guard: str = ""  # what --upload did to the job-user guard policy ("created|updated|unchanged <arn>")


def stable_bundle_key(name: str) -> str:
    return f"{artifact_prefix(name)}bundle.zip"


def stack_outputs(cfn: Any, stack_name: str, wanted: tuple[str, ...]) -> dict[str, str]:
    """The named outputs of one deployed stack; a clear error naming what is missing."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stacks = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        raise ClusterKitError(f"stack {stack_name}: {exc.response['Error'].get('Message', exc)} "
                              f"(deploy it first: make deploy)") from None
    except BotoCoreError as exc:  # no credentials, no network, bad region
        raise ClusterKitError(f"stack {stack_name}: {exc} (check AWS credentials and region)") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    missing = [k for k in wanted if k not in outputs]
    if missing:
        raise ClusterKitError(f"stack {stack_name} has no output {', '.join(missing)} (redeploy it with this version)")
    return outputs


def partition_of(region: str) -> str:
    return "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"


def account_of(effective: EffectiveSpec, sts: Any) -> str:
    """The spec's account, else the credentials' (the guard policy's ARN names it)."""
    if effective.account:
        return effective.account
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return str(sts.get_caller_identity()["Account"])
    except (BotoCoreError, ClientError) as exc:
        raise ClusterKitError(f"cannot tell the AWS account: {exc} (check AWS credentials, or set account: in "
                              f"{effective.name}.yaml)") from None


def guard_policy_arn(effective: EffectiveSpec, account: str) -> str:
    return (f"arn:{partition_of(effective.region)}:iam::{account}:policy{job_user_guard.POLICY_PATH}"
            f"{job_user_guard.policy_name(effective.name, effective.region)}")


def guard_document(effective: EffectiveSpec, account: str) -> dict[str, Any]:
    return job_user_guard.document(effective.name, partition=partition_of(effective.region),
                                   region=effective.region, account=account)


def put_guard_policy(iam: Any, effective: EffectiveSpec, account: str) -> str:
    """Create the guard policy, or make this document its default version (the oldest non-default version goes
    first when IAM's five are used); returns what was done, for the caller to say."""
    import json

    from botocore.exceptions import BotoCoreError, ClientError

    arn = guard_policy_arn(effective, account)
    text = json.dumps(guard_document(effective, account), sort_keys=True)
    try:
        try:
            current = iam.get_policy(PolicyArn=arn)["Policy"]
        except ClientError as exc:
            if exc.response["Error"].get("Code") != "NoSuchEntity":
                raise
            iam.create_policy(PolicyName=job_user_guard.policy_name(effective.name, effective.region),
                              Path=job_user_guard.POLICY_PATH, PolicyDocument=text,
                              Description=f"ClusterKit {effective.name}: what a job user must not do with the "
                                          "compute role")
            return f"created {arn}"
        live = iam.get_policy_version(PolicyArn=arn, VersionId=current["DefaultVersionId"])["PolicyVersion"]
        document = live["Document"]
        if isinstance(document, str):  # IAM answers URL-encoded JSON text; boto3 usually decodes it
            from urllib.parse import unquote

            document = json.loads(unquote(document))
        if json.dumps(document, sort_keys=True) == text:
            return f"unchanged {arn}"
        versions = iam.list_policy_versions(PolicyArn=arn)["Versions"]
        if len(versions) >= 5:
            oldest = min((v for v in versions if not v["IsDefaultVersion"]), key=lambda v: v["CreateDate"])
            iam.delete_policy_version(PolicyArn=arn, VersionId=oldest["VersionId"])
        iam.create_policy_version(PolicyArn=arn, PolicyDocument=text, SetAsDefault=True)
        return f"updated {arn}"
    except (BotoCoreError, ClientError) as exc:
        raise ClusterKitError(f"{arn}: {exc} (the job-user guard policy; rerun export --upload with iam:CreatePolicy "
                              "and iam:CreatePolicyVersion)") from None


def resolve_refs(effective: EffectiveSpec, cfn: Any, bucket: str) -> Refs:
    if effective.platform is not None:  # its node group and Lustre rules are made by its own cluster stack
        raise ClusterKitError(
            f"{effective.name} is on platform {effective.platform.name}: its node security group and its Lustre "
            f"rules on the platform's file system come from its own cluster stack, which the pcluster path does not "
            f"deploy (deploy it with `make deploy CLUSTER={effective.name}`, or export a standalone spec)")
    names = effective.names
    net = stack_outputs(cfn, names.network_stack, NETWORK_OUTPUTS)
    fs_id = (effective.storage.existing_file_system_id
             or stack_outputs(cfn, names.storage_stack, STORAGE_OUTPUTS)["FileSystemId"])
    return Refs(
        head_node_subnet_id=net["HeadNodeSubnetId"], compute_subnet_id=net["ComputeSubnetId"],
        security_group_id=net["ClusterSecurityGroupId"], file_system_id=fs_id, assets_bucket=bucket,
        bundle_arg=f"CK_BUNDLE_URI=s3://{bucket}/{stable_bundle_key(effective.name)}",
        assets_prefix=names.artifact_prefix,
        partition=partition_of(effective.region),
    )


def upload(s3: Any, bucket: str, name: str, artifacts: NodeArtifacts) -> list[str]:
    """Content-addressed objects first, the stable bundle key last, so a node never sees a bundle
    whose scripts are not there yet."""
    from botocore.exceptions import BotoCoreError, ClientError

    objects = [(artifact_prefix(name) + a.key, a.data) for a in artifacts.all()]
    objects.append((stable_bundle_key(name), artifacts.bundle.data))
    written: list[str] = []
    for key, data in objects:
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=data, ServerSideEncryption="AES256")
        except (BotoCoreError, ClientError) as exc:
            done = f"; uploaded before the failure: {', '.join(written)}" if written else ""
            raise ClusterKitError(f"s3://{bucket}/{key}: upload failed: {exc}{done} (rerun export --upload)") from None
        written.append(f"s3://{bucket}/{key}")
    return written


def export(loaded: Loaded, *, bucket: str, do_upload: bool, session: Any = None) -> Exported:
    import boto3

    effective = expand(loaded)
    session = session or boto3.session.Session(region_name=effective.region)
    refs = resolve_refs(effective, session.client("cloudformation"), bucket)  # the stacks' errors come first
    account = account_of(effective, session.client("sts"))
    refs = dataclasses.replace(refs, job_guard_policy_arn=guard_policy_arn(effective, account))
    artifacts = node_artifacts(loaded)
    uploaded = upload(session.client("s3"), bucket, effective.name, artifacts) if do_upload else []
    guard = put_guard_policy(session.client("iam"), effective, account) if do_upload else ""
    config = render_config(effective, refs, artifacts)
    header = (f"# Exported by `python -m clusterkit export {effective.name}` for `pcluster create-cluster`.\n"
              f"# Node artifacts: s3://{bucket}/{effective.names.artifact_prefix} "
              f"({'uploaded' if do_upload else 'NOT uploaded: rerun with --upload'}).\n"
              f"# Job-user guard: {refs.job_guard_policy_arn} "
              f"({'created or current' if do_upload else 'NOT created: rerun with --upload'}).\n")
    return Exported(header + yaml.dump(config, Dumper=NoAliasDumper, sort_keys=False, width=120), uploaded, guard)
