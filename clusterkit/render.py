"""Render the ParallelCluster 3 cluster configuration from a validated spec.

One pure function serves two callers: the committed ``cluster_configs/rendered/<name>.yaml`` (given
readable placeholders such as ``${Network.ComputeSubnetId}``) and the Cluster stack's
``Custom::PclusterCluster`` (given CDK tokens). Keys come out in a fixed order so diffs stay small.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import catalog
from .bundle import NodeArtifacts, artifact_prefix
from .node_settings import compute_settings
from .rules import efa_enabled
from .spec import ClusterSpec, Queue

EPHEMERAL_MOUNT = "/scratch"  # bootstrap scripts put enroot's local dirs here when it is a mount point
SSM_CORE = "arn:{partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
CAPACITY = {"ondemand": "ONDEMAND", "spot": "SPOT", "capacity_block": "CAPACITY_BLOCK"}


@dataclass(frozen=True)
class Refs:
    """Ids that exist only after deploy, and how nodes reach their bootstrap artifacts.

    Two deployments use this: the Cluster stack (CDK tokens, managed node policies, the bundle named by
    an SSM parameter) and ``clusterkit export`` (concrete ids, PC's own ``S3Access`` on an artifact
    prefix, the bundle at a stable S3 key). ``bundle_arg`` is the launcher's stable Arg for either.
    """

    head_node_subnet_id: str
    compute_subnet_id: str
    security_group_id: str
    file_system_id: str
    assets_bucket: str
    bundle_arg: str  # CK_BUNDLE_PARAMETER=<ssm name> or CK_BUNDLE_URI=s3://<stable key>
    head_node_policy_arn: str | None = None  # None: read access through Iam.S3Access on assets_prefix
    compute_node_policy_arn: str | None = None
    assets_prefix: str = ""
    partition: str = "aws"


def placeholder_refs(spec: ClusterSpec) -> Refs:
    """Readable stand-ins for the committed file; literal ids where the spec names existing resources."""
    net, fsx = spec.network.existing, spec.storage.fsx_lustre.existing
    return Refs(
        head_node_subnet_id=net.head_node_subnet_id if net else "${Network.HeadNodeSubnetId}",
        compute_subnet_id=net.compute_subnet_id if net else "${Network.ComputeSubnetId}",
        security_group_id="${Network.ClusterSecurityGroupId}",
        file_system_id=fsx.file_system_id if fsx else "${Storage.FileSystemId}",
        assets_bucket="${Assets.Bucket}",
        bundle_arg=f"CK_BUNDLE_PARAMETER={bundle_parameter_name(spec)}",
        head_node_policy_arn="${Cluster.HeadNodePolicyArn}",
        compute_node_policy_arn="${Cluster.ComputeNodePolicyArn}",
        assets_prefix=artifact_prefix(spec.name),
        partition="${AWS::Partition}",
    )


def bundle_parameter_name(spec: ClusterSpec) -> str:
    return f"/clusterkit/{spec.name}/bootstrap-bundle"


def render_config(spec: ClusterSpec, refs: Refs, artifacts: NodeArtifacts) -> dict[str, Any]:
    """The ParallelCluster configuration as plain dicts and lists (YAML- and JSON-ready)."""
    config: dict[str, Any] = {
        "Region": spec.region,
        "Image": {"Os": spec.os},
        "Imds": {"ImdsSupport": "v2.0"},
        "HeadNode": _head_node(spec, refs, artifacts),
        "Scheduling": {
            "Scheduler": "slurm",
            "SlurmSettings": {
                "QueueUpdateStrategy": spec.scheduling.queue_update_strategy,
                "ScaledownIdletime": spec.scheduling.scaledown_idletime_minutes,
            },
            "SlurmQueues": [_queue(spec, q, refs, artifacts) for q in spec.queues],
        },
        "SharedStorage": [{
            "Name": "fsx",
            "StorageType": "FsxLustre",
            "MountDir": spec.storage.fsx_lustre.mount_dir,
            "FsxLustreSettings": {"FileSystemId": refs.file_system_id},
        }],
        "Monitoring": {
            "DetailedMonitoring": spec.monitoring.detailed_monitoring,
            "Logs": {"CloudWatch": {"Enabled": True, "RetentionInDays": spec.monitoring.log_retention_days,
                                    "DeletionPolicy": "Retain"}},
        },
        "Tags": _tags(spec),
    }
    return config


def _s3(refs: Refs, key: str) -> str:
    return f"s3://{refs.assets_bucket}/{refs.assets_prefix}{key}"


def _iam(refs: Refs, policy_arn: str | None) -> dict[str, Any]:
    """SSM Session Manager instead of SSH, plus read access to this role's bootstrap objects only."""
    iam: dict[str, Any] = {"AdditionalIamPolicies": [{"Policy": SSM_CORE.format(partition=refs.partition)}]}
    if policy_arn is not None:
        iam["AdditionalIamPolicies"].append({"Policy": policy_arn})
    else:
        iam["S3Access"] = [{"BucketName": refs.assets_bucket, "KeyName": f"{refs.assets_prefix}*",
                            "EnableWriteAccess": False}]
    return iam


def _head_node(spec: ClusterSpec, refs: Refs, artifacts: NodeArtifacts) -> dict[str, Any]:
    stable_args = [f"CK_REGION={spec.region}", refs.bundle_arg]
    return {
        "InstanceType": spec.head_node.instance_type,
        "Networking": {"SubnetId": refs.head_node_subnet_id, "SecurityGroups": [refs.security_group_id]},
        "LocalStorage": {"RootVolume": {"Size": spec.head_node.root_volume_gib, "Encrypted": True,
                                        "VolumeType": "gp3"}},
        "Imds": {"Secured": True},
        "Iam": _iam(refs, refs.head_node_policy_arn),
        "CustomActions": {
            # OnNodeConfigured cannot change once the cluster exists (PC update policy UNSUPPORTED), so
            # it names the frozen stage 0, which runs the launcher of the bundle it finds at a stable place.
            "OnNodeConfigured": {"Script": _s3(refs, artifacts.stage0.key), "Args": stable_args},
            # OnNodeUpdated may change: the bundle hash makes every bundle change re-run it (re-sync).
            "OnNodeUpdated": {"Script": _s3(refs, artifacts.launcher.key),
                              "Args": stable_args + [f"CK_BUNDLE_SHA256={artifacts.bundle.sha256}"]},
        },
    }


def _has_gpu(queue: Queue) -> bool:
    return any((catalog.instance_type(cr.instance_type) or _NO_FACTS).gpus > 0 for cr in queue.compute_resources)


def _has_nvme(queue: Queue) -> bool:
    return all((catalog.instance_type(cr.instance_type) or _NO_FACTS).nvme_gib > 0 for cr in queue.compute_resources)


class _NoFacts:
    gpus = 0
    nvme_gib = 0


_NO_FACTS = _NoFacts()


def placement_group(queue: Queue) -> bool:
    """On for on-demand EFA queues (lowest latency); never for capacity blocks (they fix placement)."""
    if queue.capacity_type == "capacity_block":
        return False
    if queue.placement_group is not None:
        return queue.placement_group
    return queue.capacity_type == "ondemand" and any(efa_enabled(cr) for cr in queue.compute_resources)


def _queue(spec: ClusterSpec, queue: Queue, refs: Refs, artifacts: NodeArtifacts) -> dict[str, Any]:
    gpu = _has_gpu(queue)
    networking: dict[str, Any] = {"SubnetIds": [refs.compute_subnet_id], "SecurityGroups": [refs.security_group_id]}
    if placement_group(queue):
        networking["PlacementGroup"] = {"Enabled": True}
    elif any(efa_enabled(cr) for cr in queue.compute_resources):
        networking["PlacementGroup"] = {"Enabled": False}  # PC wants EFA queues to say so explicitly
    local: dict[str, Any] = {"RootVolume": {"Encrypted": True}}
    if queue.root_volume_gib is not None:
        local["RootVolume"] = {"Size": queue.root_volume_gib, "Encrypted": True}
    if _has_nvme(queue):
        local["EphemeralVolume"] = {"MountDir": EPHEMERAL_MOUNT}
    args = compute_settings(spec)  # no bundle hash: an image change must not replace the compute fleet
    out: dict[str, Any] = {"Name": queue.name, "CapacityType": CAPACITY[queue.capacity_type]}
    if queue.capacity_type == "spot":
        out["AllocationStrategy"] = "price-capacity-optimized"
    out["Networking"] = networking
    out["ComputeSettings"] = {"LocalStorage": local}
    exclusive = gpu if queue.job_exclusive is None else queue.job_exclusive
    out["JobExclusiveAllocation"] = exclusive
    if gpu:
        out["HealthChecks"] = {"Gpu": {"Enabled": True}}
    out["Iam"] = _iam(refs, refs.compute_node_policy_arn)
    out["CustomActions"] = {
        "OnNodeStart": {"Script": _s3(refs, artifacts.compute_start.key), "Args": args},
        "OnNodeConfigured": {"Script": _s3(refs, artifacts.compute_configured.key), "Args": args},
    }
    out["ComputeResources"] = [_compute_resource(cr) for cr in queue.compute_resources]
    return out


def _compute_resource(cr) -> dict[str, Any]:
    out: dict[str, Any] = {"Name": cr.name, "InstanceType": cr.instance_type, "MinCount": cr.min, "MaxCount": cr.max}
    if efa_enabled(cr):
        out["Efa"] = {"Enabled": True}
    if cr.capacity_reservation_id:
        out["CapacityReservationTarget"] = {"CapacityReservationId": cr.capacity_reservation_id}
    return out


def _tags(spec: ClusterSpec) -> list[dict[str, str]]:
    tags = {"clusterkit:cluster": spec.name, **spec.tags}
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
