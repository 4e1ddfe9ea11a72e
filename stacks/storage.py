"""The ``<Name>-Storage`` stack: the FSx for Lustre file system holding the image store, and its S3 twin.

The file system lives in the compute subnet with the network stack's FSx security group. When
``image_store_bucket`` is on, an S3 bucket is linked to the image store directory by a data
repository association (DRA) that only EXPORTS, so the ``.sqsh`` files survive the file system: a later
file system linked to the same bucket lists them at once (metadata imported on creation, contents loaded
from S3 on first read). Nothing flows from S3 into a running file system (no auto-import events), and
the bucket policy denies object writes and deletes to every principal but this file system's FSx
service-linked role: whoever may write S3 cannot change what nodes serve (docs/security.md "The image
store bucket"). Export covers everything under the linked directory,
so image_sync keeps only published content there (``<name>/<hex>.sqsh``, the ``<name>.sqsh`` symlinks,
``manifest.json``); its lock, import temp files and node fingerprints live in the unlinked sibling
``.<store name>.clusterkit/`` (``/fsx/.containers.clusterkit``) and never reach S3.

Existing FSx: no storage is created; the file system id comes from the spec. Everything is read from the
effective spec (``clusterkit.effective.expand``: throughput default, store path inside the file system); the
loader's rules already refused what FSx would (e.g. a customer-managed key on SCRATCH_2), so this checks
nothing. The stack outlives clusters
and never refers to the cluster stack, which is why it also holds the cluster's alert topic and the rule
that reports a failed cluster-stack deletion (``ClusterAlerts``, stacks/alerts.py): those must still exist
when the cluster stack is half deleted. The cluster stack receives ``alert_topic`` for its TTL alarms.

Deleting the stack with ``retain_on_delete: false``: CloudFormation cannot delete a bucket that
still holds objects, and this stack deliberately has no auto-delete Lambda, so empty the image
store bucket (all versions) and its access-log bucket by hand first; the image store's bucket policy
denies that deletion to everyone but FSx, so remove the policy first (docs/operations.md).
"""
from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from clusterkit.effective.expand import EffectiveNewFsx, EffectivePlatform, EffectiveSpec
from clusterkit.spec.naming import export_name
from stacks import scanner_acks
from stacks.alerts import ClusterAlerts

LUSTRE_VERSION = "2.15"  # newest; required for PERSISTENT_2 metadata configuration, supports DRAs everywhere
MAINTENANCE_WINDOW = "7:05:00"  # d:HH:MM UTC, Sunday 05:00: weekly patching outside working hours
BACKUP_WINDOW = "03:00"  # daily automatic backups (unlinked persistent file systems only)
BACKUP_RETENTION_DAYS = 7
EXPORT_EVENTS = ["NEW", "CHANGED", "DELETED"]  # the store's files, renames and deletions reach S3
# Object writes that change what a later file system (or a lazy load) would read from the bucket. Not
# listed: tagging (no content), RestoreObject (a temporary copy of an archived object; nothing archives).
STORE_WRITES = ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectAcl",
                "s3:PutObjectVersionAcl", "s3:ReplicateObject", "s3:ReplicateDelete"]
# FSx for Lustre reaches a linked bucket through one service-linked role per file system
# (FSx for Lustre User Guide, "Using service-linked roles for Amazon FSx"); its path is the one AWS's
# FSxDeleteServiceLinkedRoleAccess managed policy names (role/aws-service-role/<this path>/...).
FSX_S3_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_{fs_id}"
NONCURRENT_VERSION_DAYS = 30  # a replaced or deleted .sqsh stays restorable this long
ACCESS_LOG_DAYS = 365
S3_LOGS_BY_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"


class StorageStack(cdk.Stack):
    """FSx for Lustre (new or existing), the image store bucket and the alert topic of one cluster spec."""

    file_system_id: str
    image_store_bucket: s3.IBucket | None
    alert_topic: sns.ITopic | None  # None on a platform

    def __init__(self, scope: Construct, construct_id: str, *, effective: EffectiveSpec | EffectivePlatform,
                 vpc: ec2.IVpc, subnet_id: str, security_group: ec2.ISecurityGroup, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # Grant S3 log delivery through the log bucket's policy (not the legacy ACL, which
        # BucketOwnerEnforced forbids), whatever feature flags the app's cdk.json sets.
        self.node.set_context(S3_LOGS_BY_POLICY, True)
        self.effective = effective
        self.vpc = vpc  # the file system's VPC; subnet_id and security_group belong to it
        storage = effective.storage
        new = storage.new
        self.image_store_bucket = None
        self.alert_topic = None  # a platform's clusters keep their alerts in stacks of their own (stacks/alerts.py)
        if isinstance(effective, EffectiveSpec):
            alerts = ClusterAlerts(self, "Alerts", cluster_name=effective.name,
                                   notify_email=effective.lifecycle.notify_email)
            self.alert_topic = alerts.topic
            self._output("AlertTopicArn", alerts.topic.topic_arn,
                         "SNS topic of this cluster's alerts (failed or overdue teardowns); subscribe to be told")
        if new is None:
            assert storage.existing_file_system_id is not None
            self.file_system_id = storage.existing_file_system_id
            self._output("FileSystemId", self.file_system_id, "existing FSx for Lustre file system (not managed here)")
            return

        policy = cdk.RemovalPolicy.RETAIN if new.retain_on_delete else cdk.RemovalPolicy.DESTROY
        if new.image_store_bucket:
            self.image_store_bucket = self._image_store_bucket(policy)
        file_system = self._file_system(new, subnet_id, security_group, linked=self.image_store_bucket is not None)
        file_system.apply_removal_policy(policy)
        self.file_system_id = file_system.ref
        self._output("FileSystemId", self.file_system_id, "FSx for Lustre file system holding the image store")
        self._output("MountName", file_system.attr_lustre_mount_name, "Lustre mount name (mount DNS@tcp:/MountName)")
        if self.image_store_bucket is not None:
            self._writes_only_by_fsx(self.image_store_bucket, file_system)
            link = self._link(file_system, self.image_store_bucket, storage.image_store_fs_path)
            link.apply_removal_policy(policy)
            self._output("ImageStoreBucketName", self.image_store_bucket.bucket_name,
                         "S3 copy of the image store (survives the file system)")

    # --- file system -----------------------------------------------------------------------------------

    def _file_system(self, new: EffectiveNewFsx, subnet_id: str, security_group: ec2.ISecurityGroup,
                     linked: bool) -> fsx.CfnFileSystem:
        """L1 file system: the L2 LustreFileSystem (2.275) has no MetadataConfiguration.

        FSx does not back up file systems linked to S3 (the bucket is the durable copy), so linked
        persistent ones set retention 0 explicitly; unlinked ones keep a week of daily backups.
        Scratch has neither backups nor customer keys.
        """
        persistent = new.deployment_type.startswith("PERSISTENT")
        config = fsx.CfnFileSystem.LustreConfigurationProperty(
            deployment_type=new.deployment_type,
            per_unit_storage_throughput=new.throughput_mb_per_tib,  # None for SCRATCH_2
            data_compression_type=new.compression,
            weekly_maintenance_start_time=MAINTENANCE_WINDOW,
            # AUTOMATIC scales metadata IOPS with capacity and allows raising them later in place.
            metadata_configuration=fsx.CfnFileSystem.MetadataConfigurationProperty(mode="AUTOMATIC")
            if new.deployment_type == "PERSISTENT_2" else None,
            automatic_backup_retention_days=(0 if linked else BACKUP_RETENTION_DAYS) if persistent else None,
            daily_automatic_backup_start_time=BACKUP_WINDOW if persistent and not linked else None,
            copy_tags_to_backups=True if persistent and not linked else None,
        )
        file_system = fsx.CfnFileSystem(
            self, "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=LUSTRE_VERSION,
            storage_capacity=new.capacity_gib,
            storage_type="SSD",
            subnet_ids=[subnet_id],
            # the spec's existing groups (network.security_groups.fsx) where given, else the Network stack's FSx group
            security_group_ids=list(self.effective.network.security_groups.fsx) or [security_group.security_group_id],
            kms_key_id=new.kms_key_arn,  # None: the AWS managed aws/fsx key (persistent) or FSx-owned (scratch)
            lustre_configuration=config,
        )
        cdk.Tags.of(file_system).add("Name", f"{self.effective.name}-image-store")
        return file_system

    # --- image store bucket ----------------------------------------------------------------------------

    def _image_store_bucket(self, policy: cdk.RemovalPolicy) -> s3.Bucket:
        """Versioned, private, TLS-only, SSE-S3 bucket with server access logs in a sibling bucket.

        The log bucket has no access log of its own: cdk-nag's S1 accepts a bucket that is another
        bucket's log target, and logging it would need a third bucket.

        SSE-S3 rather than the spec's KMS key: FSx's per-file-system service-linked role would need a
        grant in that key's policy, which is not ours to edit; the images are public registry content.
        """
        log_bucket = s3.Bucket(
            self, "AccessLogBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,  # S3 log delivery supports only SSE-S3
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=cdk.Duration.days(ACCESS_LOG_DAYS))],
            removal_policy=policy,
        )
        scanner_acks.acknowledge(
            log_bucket, "CKV_AWS_18",
            "This bucket is the image store bucket's access-log target: logging it too would need a third bucket, "
            "whose own logs would need a fourth (cdk-nag's S1 accepts a log target for the same reason).")
        scanner_acks.acknowledge(
            log_bucket, "CKV_AWS_21",
            "S3 log delivery writes each log object once under a new key and nothing overwrites it, so versioning "
            "would keep no earlier content; it would only keep expired logs past the 365-day rule. Deletion of logs "
            "by a principal of this account allowed s3:DeleteObject is the accepted risk.")
        return s3.Bucket(
            self, "ImageStoreBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=True,
            server_access_logs_bucket=log_bucket,
            server_access_logs_prefix="image-store/",
            lifecycle_rules=[s3.LifecycleRule(
                id="expire-replaced-images", noncurrent_version_expiration=cdk.Duration.days(NONCURRENT_VERSION_DAYS),
                abort_incomplete_multipart_upload_after=cdk.Duration.days(7))],
            removal_policy=policy,
        )

    def _writes_only_by_fsx(self, bucket: s3.Bucket, file_system: fsx.CfnFileSystem) -> None:
        """Deny object writes to every principal but this file system's FSx S3 role.

        Node and admin roles alike: the head node writes the store through FSx, never through S3. The
        bucket owner's account root can still replace the bucket policy (break glass, docs/security.md).
        """
        fsx_role = cdk.Fn.join("", [f"arn:{cdk.Aws.PARTITION}:iam::{self.account}:",
                                    FSX_S3_ROLE.format(fs_id=file_system.ref)])
        bucket.add_to_resource_policy(iam.PolicyStatement(
            sid="StoreWritesOnlyThroughFsx", effect=iam.Effect.DENY, principals=[iam.AnyPrincipal()],
            actions=STORE_WRITES, resources=[bucket.arn_for_objects("*")],
            conditions={"ArnNotLike": {"aws:PrincipalArn": fsx_role}}))

    def _link(self, file_system: fsx.CfnFileSystem, bucket: s3.IBucket, path: str) -> fsx.CfnDataRepositoryAssociation:
        """Export-only link of the image store directory to ``s3://bucket/<dir>/`` (new, changed, deleted).

        No auto-import: an object written to S3 never reaches a running file system. Metadata is still
        imported once, on creation, so a new file system linked to a populated bucket lists the store.
        """
        prefix = path.strip("/")
        return fsx.CfnDataRepositoryAssociation(
            self, "ImageStoreLink",
            file_system_id=file_system.ref,
            file_system_path=path,
            data_repository_path=f"s3://{bucket.bucket_name}/{prefix}/",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=EXPORT_EVENTS)),
        )

    def _output(self, key: str, value: str, description: str) -> None:
        cdk.CfnOutput(self, key, value=value, description=description, export_name=export_name(self.stack_name, key))
