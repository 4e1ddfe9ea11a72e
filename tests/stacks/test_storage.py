"""The ``<Name>-Storage`` stack as CloudFormation would receive it, plus the checks every template passes.

Real: synth with cdk-nag AwsSolutions (see conftest) and cfn-lint 1.58 over the synthesized templates
with its default rule set (errors and warnings). Not real: no deploy, so FSx's own create-time checks
(e.g. the security group test FSx runs) are not exercised here.
"""
from __future__ import annotations

import dataclasses
import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from cfnlint.api import ManualArgs, lint

from clusterkit.artifacts import nag_report
from clusterkit.effective.expand import expand, expand_spec, image_store_fs_path
from clusterkit.pipeline.loader import load
from clusterkit.rules import check as rules
from clusterkit.spec.yaml_reader import Marks
from stacks import nag
from stacks.storage import StorageStack

NEW_FSX = ("demo", "p5-capacity-block")
SHIPPED = ("demo", "p4d-existing", "p5-capacity-block")
EVERY_VARIANT = (*SHIPPED, "demo-no-account", "demo-endpoints", "demo-head-public", "demo-flow-logs-30",
                 "demo-throughput-500", "demo-destroy", "demo-no-bucket", "demo-kms", "demo-scratch",
                 "existing-vpc-new-fsx", "p4d-existing-own-groups", "existing-groups-new-fsx")
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def file_system(synth) -> dict:
    (fs,) = synth.resources("storage", "AWS::FSx::FileSystem").values()
    return fs


def buckets(synth) -> dict[str, dict]:
    return synth.resources("storage", "AWS::S3::Bucket")


def image_bucket_id(synth) -> str:
    return synth.ref("storage", synth.storage.image_store_bucket.bucket_name)["Ref"]


# --- file system -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW_FSX)
def test_persistent_2_file_system_properties(synths, name):
    synth = synths(name)
    new = synth.effective.storage.new
    fs = file_system(synth)
    props = fs["Properties"]
    assert props["FileSystemType"] == "LUSTRE" and props["FileSystemTypeVersion"] == "2.15"
    assert props["StorageCapacity"] == new.capacity_gib and props["StorageType"] == "SSD"
    assert props["SubnetIds"] == [synth.ref("storage", synth.network.compute_subnet_id)]
    assert props["SecurityGroupIds"] == [synth.ref("storage", synth.network.fsx_security_group.security_group_id)]
    assert "KmsKeyId" not in props  # AWS managed aws/fsx key: encrypted at rest without a key to manage
    assert props["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": new.throughput_mb_per_tib,
        "DataCompressionType": "LZ4",
        "MetadataConfiguration": {"Mode": "AUTOMATIC"},
        "WeeklyMaintenanceStartTime": "7:05:00",
        "AutomaticBackupRetentionDays": 0,  # linked to S3: FSx takes no backups, the bucket is the copy
    }
    assert {"Key": "Name", "Value": f"{synth.effective.name}-image-store"} in props["Tags"]


def test_customer_kms_key_is_used_when_given(synths):
    synth = synths("demo-kms")
    assert file_system(synth)["Properties"]["KmsKeyId"] == synth.effective.storage.new.kms_key_arn


def test_scratch_2_has_no_persistent_only_settings(synths):
    config = file_system(synths("demo-scratch"))["Properties"]["LustreConfiguration"]
    assert config == {"DeploymentType": "SCRATCH_2", "DataCompressionType": "LZ4",
                      "WeeklyMaintenanceStartTime": "7:05:00"}


def test_scratch_2_still_links_the_image_store(synths):
    """FSx supports DRAs on every 2.12+/2.15 file system except SCRATCH_1 (CreateDataRepositoryAssociation docs)."""
    assert len(synths("demo-scratch").resources("storage", "AWS::FSx::DataRepositoryAssociation")) == 1


def test_unlinked_persistent_file_system_keeps_a_week_of_backups(synths):
    synth = synths("demo-no-bucket")
    config = file_system(synth)["Properties"]["LustreConfiguration"]
    assert (config["AutomaticBackupRetentionDays"], config["DailyAutomaticBackupStartTime"],
            config["CopyTagsToBackups"]) == (7, "03:00", True)
    assert buckets(synth) == {} and synth.resources("storage", "AWS::FSx::DataRepositoryAssociation") == {}
    assert synth.storage.image_store_bucket is None
    assert "ImageStoreBucketName" not in synth.templates["storage"]["Outputs"]


def test_kms_key_with_scratch_is_refused_by_the_rules():
    """The loader refuses it before synth; the stack, given only accepted specs, checks nothing."""
    spec = load("demo", check_lock=False).spec
    fsx_cfg = spec.storage.fsx_lustre
    scratch = dataclasses.replace(fsx_cfg.new, deployment_type="SCRATCH_2", throughput_mb_per_tib=None,
                                  kms_key_arn=KMS_KEY)
    spec = dataclasses.replace(spec, storage=dataclasses.replace(
        spec.storage, fsx_lustre=dataclasses.replace(fsx_cfg, new=scratch)))
    found = [p.message for p in rules.check(spec, Marks(file="t.yaml")) if p.path.endswith("kms_key_arn")]
    assert found == ["SCRATCH_2 cannot use a customer-managed KMS key"]


# --- image store bucket and its link ---------------------------------------------------------------------

def test_image_store_path_is_relative_to_the_mount_dir():
    spec = load("demo", check_lock=False).spec
    assert expand_spec(spec).storage.image_store_fs_path == "/containers"
    fsx_cfg = dataclasses.replace(spec.storage.fsx_lustre, mount_dir="/shared/", image_store="/shared/a/sqsh")
    moved = dataclasses.replace(spec, storage=dataclasses.replace(spec.storage, fsx_lustre=fsx_cfg))
    assert expand_spec(moved).storage.image_store_fs_path == "/a/sqsh"
    assert image_store_fs_path("/fsx", "/fsx/containers") == "/containers"


@pytest.mark.parametrize("name", NEW_FSX)
def test_data_repository_association_only_exports(synths, name):
    """No AutoImportPolicy: nothing written to S3 reaches a running file system. The metadata import on
    creation stays, so a new file system linked to a populated bucket lists the store."""
    synth = synths(name)
    (link,) = synth.resources("storage", "AWS::FSx::DataRepositoryAssociation").values()
    assert link["Properties"] == {
        "FileSystemId": {"Ref": "FileSystem"},
        "FileSystemPath": "/containers",
        "DataRepositoryPath": {"Fn::Join": ["", ["s3://", {"Ref": image_bucket_id(synth)}, "/containers/"]]},
        "BatchImportMetaDataOnCreate": True,
        "S3": {"AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
    }
    assert "AutoImportPolicy" not in json.dumps(synth.templates["storage"])


def _tls_deny_statement(policy: dict, bucket_id: str) -> dict | None:
    arn = {"Fn::GetAtt": [bucket_id, "Arn"]}
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        if (statement["Effect"] == "Deny" and statement["Action"] == "s3:*"
                and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
                and statement["Principal"] == {"AWS": "*"}
                and statement["Resource"] == [arn, {"Fn::Join": ["", [arn, "/*"]]}]):
            return statement
    return None


@pytest.mark.parametrize("name", NEW_FSX)
def test_buckets_are_private_tls_only_and_encrypted(synths, name):
    synth = synths(name)
    policies = synth.resources("storage", "AWS::S3::BucketPolicy")
    assert len(buckets(synth)) == 2 and len(policies) == 2
    for bucket_id, bucket in buckets(synth).items():
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
        assert props["BucketEncryption"] == {"ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
        assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
        (policy,) = [p for p in policies.values() if p["Properties"]["Bucket"] == {"Ref": bucket_id}]
        assert _tls_deny_statement(policy, bucket_id) is not None, f"{bucket_id} accepts plain HTTP"


def test_image_store_bucket_is_versioned_logged_and_expires_old_versions(synths):
    synth = synths("demo")
    bucket_id = image_bucket_id(synth)
    props = buckets(synth)[bucket_id]["Properties"]
    (log_bucket_id,) = set(buckets(synth)) - {bucket_id}
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["LoggingConfiguration"] == {"DestinationBucketName": {"Ref": log_bucket_id},
                                             "LogFilePrefix": "image-store/"}
    (rule,) = props["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30} and rule["Status"] == "Enabled"


def test_access_logs_are_delivered_by_bucket_policy_from_this_bucket_only(synths):
    """No ACLs (BucketOwnerEnforced): the log bucket's policy lets S3 logging write for the image bucket only."""
    for name, account in (("demo", {"StringEquals": {"aws:SourceAccount": "123456789012"}}),
                          ("demo-no-account", {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}})):
        synth = synths(name)
        bucket_id = image_bucket_id(synth)
        (log_bucket_id,) = set(buckets(synth)) - {bucket_id}
        (policy,) = [p for p in synth.resources("storage", "AWS::S3::BucketPolicy").values()
                     if p["Properties"]["Bucket"] == {"Ref": log_bucket_id}]
        allows = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
        assert allows == [{
            "Action": "s3:PutObject", "Effect": "Allow", "Principal": {"Service": "logging.s3.amazonaws.com"},
            "Condition": {"ArnLike": {"aws:SourceArn": {"Fn::GetAtt": [bucket_id, "Arn"]}}, **account},
            "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": [log_bucket_id, "Arn"]}, "/image-store/*"]]}}]
        assert "AccessControl" not in buckets(synth)[log_bucket_id]["Properties"]


# --- removal policies ------------------------------------------------------------------------------------

STATEFUL = ("AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::S3::Bucket")


@pytest.mark.parametrize(("name", "policy"), [("demo", "Retain"), ("demo-destroy", "Delete")])
def test_removal_policy_follows_retain_on_delete(synths, name, policy):
    synth = synths(name)
    stateful = {k: v for k, v in synth.templates["storage"]["Resources"].items() if v["Type"] in STATEFUL}
    assert len(stateful) == 4
    for logical_id, res in stateful.items():
        assert (res.get("DeletionPolicy"), res.get("UpdateReplacePolicy")) == (policy, policy), logical_id


def test_no_auto_delete_custom_resource(synths):
    """Deleting a non-empty bucket is left to a human (module docstring), so no Lambda is deployed."""
    for name in ("demo", "demo-destroy"):
        types = {r["Type"] for r in synths(name).templates["storage"]["Resources"].values()}
        assert not any(t.startswith(("AWS::Lambda::", "Custom::", "AWS::IAM::")) for t in types), types


# --- existing file system --------------------------------------------------------------------------------

ALERT_TYPES = {"AWS::KMS::Key", "AWS::SNS::Topic", "AWS::SNS::TopicPolicy", "AWS::Events::Rule"}


def test_existing_file_system_creates_no_storage(synths):
    """Only the alerts: an existing file system is the spec's, not this stack's."""
    synth = synths("p4d-existing")
    fs_id = synth.effective.storage.existing_file_system_id
    template = synth.templates["storage"]
    assert {r["Type"] for r in template["Resources"].values()} == ALERT_TYPES
    assert synth.storage.file_system_id == fs_id and synth.storage.image_store_bucket is None
    assert template["Outputs"]["FileSystemId"] == {
        "Description": "existing FSx for Lustre file system (not managed here)", "Value": fs_id,
        "Export": {"Name": "P4d-Existing-Storage-FileSystemId"}}
    assert set(template["Outputs"]) == {"FileSystemId", "AlertTopicArn"}


def test_new_file_system_in_an_existing_vpc(synths):
    synth = synths("existing-vpc-new-fsx")
    props = file_system(synth)["Properties"]
    assert props["SubnetIds"] == [synth.effective.network.existing.compute_subnet_id]
    assert props["StorageCapacity"] == 2400 and props["LustreConfiguration"]["PerUnitStorageThroughput"] == 125
    assert synth.resources("network", "AWS::EC2::VPC") == {}


def test_new_file_system_takes_the_specs_existing_groups(synths):
    """network.security_groups.fsx: the file system is created with the spec's groups, not a group of ours."""
    synth = synths("existing-groups-new-fsx")
    assert file_system(synth)["Properties"]["SecurityGroupIds"] == list(synth.effective.network.security_groups.fsx)


# --- cluster alerts (stacks/alerts.py) ---------------------------------------------------------------------

def _one(synth, type_name: str) -> tuple[str, dict]:
    (item,) = synth.resources("storage", type_name).items()
    return item


def _account(synth):
    """The account as the storage template has it: the spec's, else the AWS::AccountId pseudo parameter."""
    return synth.ref("storage", synth.storage.account)


def _arn(synth, middle: str, tail: str) -> dict:
    account = _account(synth)
    if isinstance(account, str):
        return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f"{middle}{account}{tail}"]]}
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, middle, account, tail]]}


def _alarms_arn(synth) -> dict:
    return _arn(synth, f":cloudwatch:{synth.effective.region}:", f":alarm:ClusterKit-{synth.effective.name}-*")


@pytest.mark.parametrize("name", ["demo", "p4d-existing", "demo-no-account"])
def test_alert_topic_is_encrypted_with_its_own_rotated_key(synths, name):
    """SNS2/SNS3 (cdk-nag); a customer managed key, because AWS services publishing to an encrypted topic
    need their principal in the key policy (SNS Developer Guide, sns-key-management.html)."""
    synth = synths(name)
    key_id, key = _one(synth, "AWS::KMS::Key")
    _, topic = _one(synth, "AWS::SNS::Topic")
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert topic["Properties"]["TopicName"] == f"ClusterKit-{synth.effective.name}-alerts"
    assert key["Properties"]["EnableKeyRotation"] is True and key["Properties"]["PendingWindowInDays"] == 7
    assert key["DeletionPolicy"] == "Delete"
    statements = {st.get("Sid"): st for st in key["Properties"]["KeyPolicy"]["Statement"]}
    cloudwatch, events = statements["CloudWatchAlarmsOfThisCluster"], statements["EventBridgeUnconditioned"]
    assert cloudwatch["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert cloudwatch["Action"] == events["Action"] == ["kms:GenerateDataKey*", "kms:Decrypt"]
    assert cloudwatch["Condition"] == {"StringEquals": {"aws:SourceAccount": _account(synth)},
                                      "ArnLike": {"aws:SourceArn": _alarms_arn(synth)}}
    # "not supported for EventBridge-to-encrypted topics": a condition here would drop every message
    assert events["Principal"] == {"Service": "events.amazonaws.com"} and "Condition" not in events


def test_alert_topic_policy_lets_only_this_clusters_alarms_and_rule_publish(synths):
    synth = synths("demo")
    topic_id, _ = _one(synth, "AWS::SNS::Topic")
    rule_id, _ = _one(synth, "AWS::Events::Rule")
    _, policy = _one(synth, "AWS::SNS::TopicPolicy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert {"Action": "sns:Publish", "Condition": {"Bool": {"aws:SecureTransport": "false"}}, "Effect": "Deny",
            "Principal": "*", "Resource": {"Ref": topic_id}, "Sid": "AllowPublishThroughSSLOnly"} in statements
    allows = {st["Sid"]: st for st in statements if st["Effect"] == "Allow"}
    assert set(allows) == {"CloudWatchAlarmsOfThisCluster", "DeleteFailedRuleOfThisCluster"}
    assert allows["CloudWatchAlarmsOfThisCluster"]["Condition"] == {
        "StringEquals": {"aws:SourceAccount": _account(synth)}, "ArnLike": {"aws:SourceArn": _alarms_arn(synth)}}
    assert allows["DeleteFailedRuleOfThisCluster"]["Principal"] == {"Service": "events.amazonaws.com"}
    assert allows["DeleteFailedRuleOfThisCluster"]["Condition"] == {
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [rule_id, "Arn"]}}}


def test_delete_failed_of_the_cluster_stack_reaches_the_topic(synths):
    """Field names from CloudFormation's "Stack Status Change event detail" (event-detail-stack-status-change)."""
    synth = synths("p5-capacity-block")
    topic_id, _ = _one(synth, "AWS::SNS::Topic")
    _, rule = _one(synth, "AWS::Events::Rule")
    props = rule["Properties"]
    assert props["EventPattern"] == {
        "source": ["aws.cloudformation"], "detail-type": ["CloudFormation Stack Status Change"],
        "detail": {"stack-id": [{"prefix": _arn(synth, f":cloudformation:{synth.effective.region}:",
                                                 ":stack/P5-Capacity-Block-Cluster/")}],  # slash: no nested stacks
                   "status-details": {"status": ["DELETE_FAILED"]}}}
    (target,) = props["Targets"]
    assert target["Arn"] == {"Ref": topic_id} and "RoleArn" not in target  # SNS: resource policy, no role
    transformer = target["InputTransformer"]
    assert transformer["InputPathsMap"] == {
        "detail-status-details-status-reason": "$.detail.status-details.status-reason"}
    message = json.loads(transformer["InputTemplate"])
    assert message.startswith("ClusterKit p5-capacity-block: stack P5-Capacity-Block-Cluster is DELETE_FAILED: "
                              "<detail-status-details-status-reason> ")
    assert "aws cloudformation delete-stack --region us-east-2 --stack-name P5-Capacity-Block-Cluster" in message


def _storage_with(notify_email: str | None, outdir) -> dict:
    from clusterkit.spec.model import Lifecycle

    loaded = load("demo", check_lock=False)
    spec = dataclasses.replace(loaded.spec, lifecycle=Lifecycle(ttl_hours=loaded.spec.lifecycle.ttl_hours,
                                                                notify_email=notify_email))
    effective = expand(dataclasses.replace(loaded, spec=spec))
    app = cdk.App(outdir=str(outdir))
    nag.add_checks(app)
    env = cdk.Environment(account="123456789012", region=spec.region)
    net = cdk.Stack(app, "Net", env=env)
    vpc = ec2.Vpc.from_vpc_attributes(net, "Vpc", vpc_id="vpc-12345678", availability_zones=["us-east-1a"])
    group = ec2.SecurityGroup.from_security_group_id(net, "Sg", "sg-12345678")
    storage = StorageStack(app, "Demo-Storage", effective=effective, vpc=vpc, subnet_id="subnet-12345678",
                           security_group=group, env=env)
    return app.synth().get_stack_artifact(storage.artifact_id).template


def test_notify_email_subscribes_one_address_and_changes_nothing_else(tmp_path):
    without = _storage_with(None, tmp_path / "without")
    with_email = _storage_with("ops@example.com", tmp_path / "with")
    added = {k: r for k, r in with_email["Resources"].items() if k not in without["Resources"]}
    (subscription,) = added.values()
    topic_id = next(k for k, r in without["Resources"].items() if r["Type"] == "AWS::SNS::Topic")
    assert subscription == {"Type": "AWS::SNS::Subscription", "Properties": {
        "Protocol": "email", "TopicArn": {"Ref": topic_id}, "Endpoint": "ops@example.com"}}
    assert {k: r for k, r in with_email["Resources"].items() if k in without["Resources"]} == without["Resources"]
    assert not any(r["Type"] == "AWS::SNS::Subscription" for r in without["Resources"].values())


# --- outputs, independence, one-field diff -----------------------------------------------------------------

@pytest.mark.parametrize("name", NEW_FSX)
def test_storage_outputs(synths, name):
    synth = synths(name)
    outputs = synth.templates["storage"]["Outputs"]
    prefix = synth.storage.stack_name
    assert {k: v["Export"]["Name"] for k, v in outputs.items()} == {
        key: f"{prefix}-{key}" for key in ("FileSystemId", "MountName", "ImageStoreBucketName", "AlertTopicArn")}
    assert (outputs["FileSystemId"]["Value"] == {"Ref": "FileSystem"}
            == synth.ref("storage", synth.storage.file_system_id))
    assert outputs["MountName"]["Value"] == {"Fn::GetAtt": ["FileSystem", "LustreMountName"]}
    assert outputs["ImageStoreBucketName"]["Value"] == {"Ref": image_bucket_id(synth)}


@pytest.mark.parametrize("name", ["demo", "p5-capacity-block", "existing-vpc-new-fsx"])
def test_storage_refers_only_to_the_network_stack(synths, name):
    """Independent lifecycles: the only cross-stack references are the network stack's subnet and FSx SG."""
    synth = synths(name)
    imports = {kind: [v["Fn::ImportValue"] for v in _walk(synth.templates[kind]) if "Fn::ImportValue" in v]
               for kind in ("network", "storage")}
    assert imports["network"] == []
    assert imports["storage"] and all(i.startswith(f"{synth.network.stack_name}:") for i in imports["storage"])
    cluster_stack = synth.network.stack_name.replace("-Network", "-Cluster")
    assert cluster_stack not in json.dumps(synth.templates["network"])
    # the alert rule names the cluster stack in its event pattern and message, as text; nothing else does
    mentions = {k for k, r in synth.templates["storage"]["Resources"].items() if cluster_stack in json.dumps(r)}
    assert {synth.templates["storage"]["Resources"][k]["Type"] for k in mentions} == {"AWS::Events::Rule"}
    assert cluster_stack not in json.dumps(synth.templates["storage"]["Outputs"])


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_one_storage_field_changes_only_the_file_system(synths):
    """throughput_mb_per_tib 250 -> 500 changes one property of one resource, in one stack."""
    base, changed = synths("demo"), synths("demo-throughput-500")
    assert changed.templates["network"] == base.templates["network"]
    a, b = base.templates["storage"], changed.templates["storage"]
    assert {k for k in a if a[k] != b[k]} == {"Resources"}
    assert {k for k in a["Resources"] if a["Resources"][k] != b["Resources"].get(k)} == {"FileSystem"}
    assert set(a["Resources"]) == set(b["Resources"])
    expected = json.loads(json.dumps(a["Resources"]["FileSystem"]))
    expected["Properties"]["LustreConfiguration"]["PerUnitStorageThroughput"] = 500
    assert b["Resources"]["FileSystem"] == expected


# --- cdk-nag and cfn-lint over every synthesized template --------------------------------------------------

def test_every_variant_is_checked(variant_names):
    assert set(EVERY_VARIANT) == set(variant_names) and set(SHIPPED) <= set(variant_names)


@pytest.mark.parametrize("name", EVERY_VARIANT)
def test_cdk_nag_has_no_unacknowledged_finding(synths, name):
    """The synth itself raises on an unacknowledged finding; this also checks every acknowledgement's reason."""
    findings = synths(name).findings
    assert [f for f in findings if f.reason is None] == []
    for finding in findings:
        assert len(finding.reason) >= nag.MIN_REASON_CHARS, finding


def _lint(synth, kind: str) -> list[str]:
    template = json.dumps(synth.templates[kind])
    return [f"{m.rule.id} {m.path}: {m.message}"
            for m in lint(template, config=ManualArgs(regions=[synth.effective.region]))]


@pytest.mark.parametrize("name", [*SHIPPED, "demo-endpoints", "demo-scratch", "demo-no-bucket",
                                  "demo-no-account", "existing-vpc-new-fsx", "existing-groups-new-fsx"])
def test_cfn_lint_finds_no_error_or_warning(synths, name):
    synth = synths(name)
    for kind in ("network", "storage"):
        assert _lint(synth, kind) == [], f"{name} {kind}"


def test_only_intended_cfn_lint_suppression(synths):
    """The one cfn-lint directive is W3010 (literal AZ) on the new VPC's subnets: the spec pins the AZ."""
    for name in ("demo", "demo-endpoints", "p4d-existing"):
        synth = synths(name)
        for kind in ("network", "storage"):
            for logical_id, res in synth.templates[kind]["Resources"].items():
                directive = res.get("Metadata", {}).get("cfn-lint")
                if directive is not None:
                    assert res["Type"] == "AWS::EC2::Subnet", logical_id
                    assert directive == {"config": {"ignore_checks": ["W3010"]}}


# --- the nag helper ---------------------------------------------------------------------------------------

def test_nag_checks_are_live_and_acknowledgements_need_reasons(tmp_path):
    """Negative control: a bare bucket fails synth; acknowledged findings are reported with their reason."""
    app = cdk.App(outdir=str(tmp_path / "bare"))
    nag.add_checks(app)
    s3.Bucket(cdk.Stack(app, "Bare"), "Bucket")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    assert ({f.rule for f in nag_report.findings(tmp_path / "bare") if f.reason is None}
            >= {"AwsSolutions-S1", "AwsSolutions-S10"})

    app = cdk.App(outdir=str(tmp_path / "acked"))
    nag.add_checks(app)
    bucket = s3.Bucket(cdk.Stack(app, "Acked"), "Bucket", enforce_ssl=True)
    with pytest.raises(ValueError, match="specific reason"):
        nag.acknowledge(bucket, "AwsSolutions-S1", "not needed")
    nag.acknowledge(bucket, "AwsSolutions-S1", "test fixture bucket that never holds data worth auditing")
    app.synth()
    assert [(f.rule, f.reason) for f in nag_report.findings(tmp_path / "acked")
            if f.rule.startswith("AwsSolutions")] == [
        ("AwsSolutions-S1", "test fixture bucket that never holds data worth auditing")]


def test_granular_findings_are_acknowledged_one_by_one(tmp_path):
    """IAM5 reports one finding per wildcard; the bare rule id does not cover it, ``applies_to`` does."""
    def synth(**ack) -> list[nag_report.Finding]:
        outdir = tmp_path / str(len(ack))
        app = cdk.App(outdir=str(outdir))
        nag.add_checks(app)
        policy = iam.ManagedPolicy(cdk.Stack(app, "Iam"), "Policy", statements=[
            iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::bucket/prefix/*"])])
        nag.acknowledge(policy, "AwsSolutions-IAM5", "reads objects under one content-hashed prefix only", **ack)
        try:
            app.synth()
        except RuntimeError:
            pass
        return nag_report.findings(outdir)

    finding = "AwsSolutions-IAM5[Resource::arn:aws:s3:::bucket/prefix/*]"
    assert [(f.rule, f.reason) for f in synth()] == [(finding, None)]
    assert [(f.rule, f.reason) for f in synth(applies_to=["Resource::arn:aws:s3:::bucket/prefix/*"])] == [
        (finding, "reads objects under one content-hashed prefix only")]


# --- who may write the image store (tests/iam_eval.py) -------------------------------------------------------

FS_ID = "fs-0123456789abcdef0"
FSX_ROLE = ("arn:aws:iam::123456789012:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
            f"AWSServiceRoleForFSxS3Access_{FS_ID}")
WRITERS = {
    "head node": "arn:aws:iam::123456789012:role/parallelcluster/demo/demo-RoleHeadNode-ABC",
    "compute node": "arn:aws:iam::123456789012:role/parallelcluster/demo/demo-RoleGpu-DEF",
    "admin": "arn:aws:iam::123456789012:role/Admin",
    "another file system's FSx role": FSX_ROLE.replace(FS_ID, "fs-0fffffffffffffff0"),
}


def _store_policy(synth) -> tuple[list, str]:
    from tests.iam_eval import parse

    bucket_id = image_bucket_id(synth)
    (policy,) = [p for p in synth.resources("storage", "AWS::S3::BucketPolicy").values()
                 if p["Properties"]["Bucket"] == {"Ref": bucket_id}]
    refs = {"AWS::Partition": "aws", "AWS::AccountId": "123456789012", "FileSystem": FS_ID,
            f"{bucket_id}.Arn": "arn:aws:s3:::image-store"}
    return parse(policy["Properties"]["PolicyDocument"], "ImageStoreBucketPolicy", refs), "arn:aws:s3:::image-store"


def _write(principal: str, action: str = "s3:PutObject", key: str = "containers/pytorch/abc.sqsh"):
    from tests.iam_eval import Request

    return Request(action, f"arn:aws:s3:::image-store/{key}", principal=f"AWS:{principal}",
                   context={"aws:PrincipalArn": principal, "aws:SecureTransport": "true", "s3:TlsVersion": "1.3"})


@pytest.mark.parametrize("name", NEW_FSX)
@pytest.mark.parametrize("who", sorted(WRITERS))
def test_only_fsx_may_write_the_store(synths, name, who):
    """Bucket policy alone (identity policies aside, an admin's allows everything): every write-ish action is
    an explicit deny for node and admin roles, so no S3 permission anywhere can change what nodes serve."""
    from stacks.storage import STORE_WRITES
    from tests.iam_eval import Decision, decide

    statements, _ = _store_policy(synths(name))
    for action in STORE_WRITES:
        for key in ("containers/manifest.json", "containers/pytorch/abc.sqsh", "elsewhere"):
            assert decide(statements, _write(WRITERS[who], action, key)) is Decision.EXPLICIT_DENY, (action, key)


@pytest.mark.parametrize("name", NEW_FSX)
def test_the_fsx_role_of_this_file_system_may_export(synths, name):
    """Not denied: FSx's own role policy allows it (the bucket policy grants nothing, denies nothing here)."""
    from stacks.storage import STORE_WRITES
    from tests.iam_eval import Decision, Request, decide

    statements, _ = _store_policy(synths(name))
    for action in STORE_WRITES:
        assert decide(statements, _write(FSX_ROLE, action)) is Decision.IMPLICIT_DENY, action
    # reads are not restricted by this policy (only TLS): nodes never read S3; FSx lazy-loads through it
    read = Request("s3:GetObject", "arn:aws:s3:::image-store/containers/manifest.json", principal=f"AWS:{FSX_ROLE}",
                   context={"aws:PrincipalArn": FSX_ROLE, "aws:SecureTransport": "true", "s3:TlsVersion": "1.3"})
    assert decide(statements, read) is Decision.IMPLICIT_DENY
    plain_http = _write(FSX_ROLE)
    plain_http = Request(plain_http.action, plain_http.resource, plain_http.principal,
                         {**plain_http.context, "aws:SecureTransport": "false"})
    assert decide(statements, plain_http) is Decision.EXPLICIT_DENY


def test_the_write_deny_is_what_stops_the_writers(synths):
    """Negative control: without the StoreWritesOnlyThroughFsx statement the same write is not denied."""
    from tests.iam_eval import Decision, decide

    statements, _ = _store_policy(synths("demo"))
    rest = [s for s in statements if not s.source.endswith("/StoreWritesOnlyThroughFsx")]
    assert len(rest) == len(statements) - 1
    assert decide(rest, _write(WRITERS["head node"])) is Decision.IMPLICIT_DENY


def test_an_unresolvable_exception_keeps_the_deny_conservative():
    """The evaluator: a Deny whose condition it cannot resolve does not apply; an Allow's resource does."""
    from tests.iam_eval import UNRESOLVED, Decision, Request, decide, parse

    deny = parse({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "*",
                                 "Condition": {"ArnNotLike": {"aws:PrincipalArn": {"Fn::ImportValue": "x"}}}}]},
                 "t", {})
    assert deny[0].conditions[0].values == (UNRESOLVED,)
    request = _write(WRITERS["admin"])
    assert decide(deny, request) is Decision.IMPLICIT_DENY
    allow = parse({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject",
                                  "Resource": {"Fn::Join": ["", [{"Fn::ImportValue": "x"}, "/*"]]}}]}, "t", {})
    assert decide(allow, Request("s3:GetObject", "arn:aws:s3:::anything/at/all")) is Decision.ALLOW


def test_a_full_bucket_fails_the_storage_stack_and_refuses_the_network_one(synths):
    """retain_on_delete: false without emptying the buckets first: CloudFormation cannot delete them, Storage
    ends DELETE_FAILED and Network's exports stay imported (the manual step docs/operations.md names)."""
    from tests.cfn_teardown import destroy_all

    synth = synths("demo-destroy")
    order = [synth.network.stack_name, synth.storage.stack_name]
    templates = dict(zip(order, (synth.templates["network"], synth.templates["storage"]), strict=True))
    result = destroy_all(order, templates, buckets_emptied=False)
    assert result.failed() == {"Demo-Storage": "DELETE_FAILED", "Demo-Network": "REFUSED"}
    assert {f.split(" ", 1)[1] for f in result.failures if f.startswith("Demo-Storage/")} == {
        "(AWS::S3::Bucket): the bucket still holds objects"}
