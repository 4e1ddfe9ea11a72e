"""`clusterkit export`: concrete ids from deployed stack outputs, artifacts uploaded, PC accepts it.

Stand-in: moto serves CloudFormation (stacks with the outputs our Network/Storage stacks declare) and
S3. Real: the export code's boto3 calls, the render function, and ParallelCluster's own schema check.
"""
from __future__ import annotations

import json

import boto3
import pytest
import yaml
from moto import mock_aws

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.cli.main import main
from clusterkit.deployed.export import export, stable_bundle_key
from clusterkit.pcluster.runner import pcluster_python, run_check
from clusterkit.pipeline.loader import load
from clusterkit.spec.errors import ClusterKitError

IDS = {"HeadNodeSubnetId": "subnet-0aaaaaaaaaaaaaaa1", "ComputeSubnetId": "subnet-0bbbbbbbbbbbbbbb2",
       "ClusterSecurityGroupId": "sg-0ccccccccccccccc3", "FileSystemId": "fs-0ddddddddddddddd4"}


def _stack(cfn, name, outputs):
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},  # any resource moto can create
                "Outputs": {k: {"Value": v} for k, v in outputs.items()}}
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))


@pytest.fixture
def deployed():
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1")
        cfn = session.client("cloudformation")
        _stack(cfn, "Demo-Network",
               {k: IDS[k] for k in ("HeadNodeSubnetId", "ComputeSubnetId", "ClusterSecurityGroupId")})
        _stack(cfn, "Demo-Storage", {"FileSystemId": IDS["FileSystemId"]})
        session.client("s3").create_bucket(Bucket="team-artifacts")
        yield session


def test_export_resolves_ids_and_uploads(deployed):
    loaded = load("demo")
    result = export(loaded, bucket="team-artifacts", do_upload=True, session=deployed)
    config = yaml.safe_load(result.text)
    head = config["HeadNode"]
    assert head["Networking"] == {"SubnetId": IDS["HeadNodeSubnetId"],
                                  "SecurityGroups": [IDS["ClusterSecurityGroupId"]]}
    assert config["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": IDS["FileSystemId"]}
    assert "${" not in result.text.split("\n", 2)[2], "no placeholder may survive an export"
    assert head["CustomActions"]["OnNodeConfigured"]["Args"] == [
        "CK_REGION=us-east-1", f"CK_BUNDLE_URI=s3://team-artifacts/{stable_bundle_key('demo')}"]
    assert head["Iam"]["S3Access"] == [{"BucketName": "team-artifacts", "KeyName": "clusterkit/demo/*",
                                        "EnableWriteAccess": False}]
    s3 = deployed.client("s3")
    artifacts = node_artifacts(loaded)
    for artifact in artifacts.all():
        body = s3.get_object(Bucket="team-artifacts", Key=f"clusterkit/demo/{artifact.key}")["Body"].read()
        assert body == artifact.data
    assert s3.get_object(Bucket="team-artifacts", Key=stable_bundle_key("demo"))["Body"].read() == artifacts.bundle.data
    script = head["CustomActions"]["OnNodeConfigured"]["Script"]
    assert script == f"s3://team-artifacts/clusterkit/demo/{artifacts.stage0.key}"


@pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`")
def test_exported_config_passes_parallelcluster_schema(deployed):
    result = export(load("demo"), bucket="team-artifacts", do_upload=False, session=deployed)
    (checked,) = run_check([("demo", "demo.pcluster.yaml", result.text, "us-east-1")], "schema")
    assert checked["ok"], checked["errors"]


def test_missing_stack_is_a_one_line_error(deployed):
    deployed.client("cloudformation").delete_stack(StackName="Demo-Storage")
    with pytest.raises(ClusterKitError, match=r"^stack Demo-Storage: .*\(deploy it first: make deploy\)$"):
        export(load("demo"), bucket="team-artifacts", do_upload=False, session=deployed)


def test_no_credentials_is_a_one_line_error(monkeypatch):
    """Real botocore credential resolution with nothing to find (no moto): an error line, no traceback."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(ClusterKitError,
                       match=r"^stack Demo-Network: Unable to locate credentials.*\(check AWS credentials"):
        export(load("demo"), bucket="b", do_upload=False)


def test_missing_bucket_is_a_one_line_error(deployed):
    with pytest.raises(ClusterKitError, match=r"^s3://no-such-bucket/clusterkit/demo/.*upload failed"):
        export(load("demo"), bucket="no-such-bucket", do_upload=True, session=deployed)


def test_existing_fsx_needs_no_storage_stack():
    with mock_aws():
        session = boto3.session.Session(region_name="us-west-2")
        _stack(session.client("cloudformation"), "P4d-Existing-Network",
               {k: IDS[k] for k in ("HeadNodeSubnetId", "ComputeSubnetId", "ClusterSecurityGroupId")})
        config = yaml.safe_load(export(load("p4d-existing"), bucket="b", do_upload=False, session=session).text)
    assert config["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": "fs-0123456789abcdef0"}


def test_cli_writes_file(deployed, tmp_path, monkeypatch, capsys):
    import boto3 as real_boto3

    monkeypatch.setattr(real_boto3.session, "Session", lambda region_name=None: deployed)
    out = tmp_path / "demo.pcluster.yaml"
    assert main(["export", "demo", "--bucket", "team-artifacts", "-o", str(out)]) == 0
    assert "NOT uploaded" in out.read_text() and f"wrote {out}" in capsys.readouterr().err


def test_a_cluster_on_a_platform_is_refused_by_the_pcluster_path(deployed):
    """Its node group comes from its own cluster stack (stacks/platform_link.py): one line, no AWS call needed."""
    with pytest.raises(ClusterKitError, match=r"^train-a is on platform research-east: its node security group .*"
                                              r"\(deploy it with `make deploy CLUSTER=train-a`, or export a "
                                              r"standalone spec\)$"):
        export(load("train-a"), bucket="team-artifacts", do_upload=False, session=deployed)


def test_export_gives_compute_and_login_roles_the_job_user_guard(deployed):
    """The exported config names the guard policy on every compute queue (and no head node), and --upload creates
    it with the same document the Cluster stack deploys; a second export finds it unchanged, a changed document
    becomes a new default version."""
    from clusterkit.render import job_user_guard

    loaded = load("demo")
    account = deployed.client("sts").get_caller_identity()["Account"]
    arn = f"arn:aws:iam::{account}:policy/parallelcluster/ClusterKit-demo-us-east-1-job-guard"
    before = export(loaded, bucket="team-artifacts", do_upload=False, session=deployed)
    assert before.guard == "" and "NOT created: rerun with --upload" in before.text
    config = yaml.safe_load(before.text)
    for queue in config["Scheduling"]["SlurmQueues"]:
        assert {"Policy": arn} in queue["Iam"]["AdditionalIamPolicies"], queue["Name"]
    assert all(arn not in json.dumps(p) for p in config["HeadNode"]["Iam"].get("AdditionalIamPolicies", []))
    iam = deployed.client("iam")
    first = export(loaded, bucket="team-artifacts", do_upload=True, session=deployed)
    assert first.guard == f"created {arn}"
    version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
    document = iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]["Document"]
    assert document == job_user_guard.document("demo", partition="aws", region="us-east-1", account=account)
    assert export(loaded, bucket="team-artifacts", do_upload=True, session=deployed).guard == f"unchanged {arn}"
    iam.create_policy_version(PolicyArn=arn, PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Action": "s3:*", "Resource": "*"}]}), SetAsDefault=True)
    assert export(loaded, bucket="team-artifacts", do_upload=True, session=deployed).guard == f"updated {arn}"
    version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
    assert iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]["Document"] == document
