"""Render the ParallelCluster 3 cluster configuration from an effective spec.

One pure function serves two callers: the committed ``cluster_configs/rendered/<name>.yaml`` (given
readable placeholders such as ``${Network.ComputeSubnetId}``) and the Cluster stack's
``Custom::PclusterCluster`` (given CDK tokens). Keys come out in a fixed order so diffs stay small.

It maps resolved values to ParallelCluster's format and decides nothing: defaults and derived values (EFA,
placement groups, exclusive GPU nodes, local NVMe, capacity names, node settings) come from
``clusterkit.effective.expand``. It imports neither the rules nor CDK.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from clusterkit.effective.expand import EffectiveComputeResource, EffectiveQueue, EffectiveSpec
from clusterkit_node.contract import health_plan

EPHEMERAL_MOUNT = "/scratch"  # bootstrap scripts put enroot's local dirs here when it is a mount point
# Session Manager on the head node only (docs/security.md "Node roles"): this AWS managed policy also allows
# ssm:GetParameter(s) on every parameter, and every job user on a compute node holds the compute role.
SSM_CORE = "arn:{partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"


class _Keyed(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def sha256(self) -> str: ...


class NodeArtifactKeys(Protocol):
    """What render needs of the node artifacts: their S3 keys and the bundle's hash. ``bundle.NodeArtifacts``
    (the committed file, ``export``) and ``stack_inputs.StagedArtifacts`` (the Cluster stack) both fit;
    neither module is imported here."""

    @property
    def stage0(self) -> _Keyed: ...

    @property
    def launcher(self) -> _Keyed: ...

    @property
    def compute_start(self) -> _Keyed: ...

    @property
    def compute_configured(self) -> _Keyed: ...

    @property
    def bundle(self) -> _Keyed: ...

    @property
    def login_stage0(self) -> _Keyed | None: ...


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
    # the job-user guard (clusterkit/render/job_user_guard.py), on compute queues and login pools in both ways
    job_guard_policy_arn: str | None = None
    assets_prefix: str = ""
    partition: str = "aws"


def placeholder_refs(eff: EffectiveSpec) -> Refs:
    """Readable stand-ins for the committed file; literal ids where the spec names existing resources. On a
    platform, the exporting stack's name: ``${Research-East-Network.ComputeSubnetId}``."""
    net, fs_id = eff.network.existing, eff.storage.existing_file_system_id
    network, storage = ("Network", "Storage") if eff.platform is None else (eff.names.network_stack,
                                                                             eff.names.storage_stack)
    return Refs(
        head_node_subnet_id=net.head_node_subnet_id if net else f"${{{network}.HeadNodeSubnetId}}",
        compute_subnet_id=net.compute_subnet_id if net else f"${{{network}.ComputeSubnetId}}",
        security_group_id="${Network.ClusterSecurityGroupId}" if eff.platform is None
        else "${Cluster.ClusterSecurityGroupId}",
        file_system_id=fs_id if fs_id else f"${{{storage}.FileSystemId}}",
        assets_bucket="${Assets.Bucket}",
        bundle_arg=bundle_arg(eff),
        head_node_policy_arn="${Cluster.HeadNodePolicyArn}",
        compute_node_policy_arn="${Cluster.ComputeNodePolicyArn}",
        job_guard_policy_arn="${Cluster.JobGuardPolicyArn}",
        assets_prefix=eff.names.artifact_prefix,
        partition="${AWS::Partition}",
    )


def bundle_arg(eff: EffectiveSpec) -> str:
    """The launcher's stable Arg when an SSM parameter names the current bundle (the Cluster stack's way)."""
    return f"CK_BUNDLE_PARAMETER={eff.names.bundle_parameter}"


# slurm.conf lines every ClusterKit cluster needs (ParallelCluster writes CustomSlurmSettings into slurm.conf;
# PrologFlags is not on its deny list, pcluster/validators/slurm_settings_validator.py). Alloc: the prolog that makes
# each job user's enroot dirs as root (clusterkit_node/node/user_dirs.py, installed in PC's prolog.d) runs on EVERY
# node of an allocation when it is granted, not only where a step starts. pyxis' job epilog runs `enroot list` as the
# job's user on every allocated node, and enroot makes those dirs at every start (enroot.in: mkdir -p of the data,
# cache and runtime paths); under root's parents that fails where the prolog did not run, and a failed epilog drains
# the node.
CUSTOM_SLURM_SETTINGS: tuple[dict[str, str], ...] = ({"PrologFlags": "Alloc"},)


def custom_slurm_settings(spec: EffectiveSpec) -> list[dict[str, str]]:
    """ClusterKit's slurm.conf lines, then the node health check's (HealthCheckProgram on idle nodes every
    scheduling.health_check_interval_s: clusterkit_node/contract/health_plan.py, which the head node's installer
    shares; CustomSlurmSettings' update policy is SUPPORTED, so a new interval updates a running cluster)."""
    return [dict(setting) for setting in (*CUSTOM_SLURM_SETTINGS, *health_plan.custom_slurm_settings(spec.health))]


def render_config(spec: EffectiveSpec, refs: Refs, artifacts: NodeArtifactKeys) -> dict[str, Any]:
    """The ParallelCluster configuration as plain dicts and lists (YAML- and JSON-ready)."""
    config: dict[str, Any] = {
        "Region": spec.region,
        "Image": {"Os": spec.os},
        "Imds": {"ImdsSupport": "v2.0"},
        "HeadNode": _head_node(spec, refs, artifacts),
        **_login_nodes(spec, refs, artifacts),
        "Scheduling": {
            "Scheduler": "slurm",
            "SlurmSettings": {
                "QueueUpdateStrategy": spec.scheduling.queue_update_strategy,
                "ScaledownIdletime": spec.scheduling.scaledown_idletime_minutes,
                "CustomSlurmSettings": custom_slurm_settings(spec),
            },
            "SlurmQueues": [_queue(spec, q, refs, artifacts) for q in spec.queues],
        },
        "SharedStorage": [{
            "Name": "fsx",
            "StorageType": "FsxLustre",
            "MountDir": spec.storage.mount_dir,
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


def _iam(refs: Refs, policy_arn: str | None, session_manager: bool) -> dict[str, Any]:
    """Read access to this role's bootstrap objects only; Session Manager (instead of SSH) where asked; on the
    roles every user holds (no Session Manager), the job-user guard.

    Compute nodes get no Session Manager: their role is every job user's (PC restricts IMDS on head and
    login nodes only), and AmazonSSMManagedInstanceCore would let each job read every SSM parameter.
    """
    policies = [{"Policy": SSM_CORE.format(partition=refs.partition)}] if session_manager else []
    if policy_arn is not None:
        policies.append({"Policy": policy_arn})
    if not session_manager and refs.job_guard_policy_arn is not None:
        policies.append({"Policy": refs.job_guard_policy_arn})
    iam: dict[str, Any] = {"AdditionalIamPolicies": policies} if policies else {}
    if policy_arn is None:
        iam["S3Access"] = [{"BucketName": refs.assets_bucket, "KeyName": f"{refs.assets_prefix}*",
                            "EnableWriteAccess": False}]
    return iam


def _security_groups(given: tuple[str, ...], refs: Refs) -> list[str]:
    """A role's existing groups where the spec gives them, else ClusterKit's node group: always ``SecurityGroups``
    (they replace ParallelCluster's managed groups; AdditionalSecurityGroups would keep those, which a locked-down
    account may not create)."""
    return list(given) if given else [refs.security_group_id]


def _head_node(spec: EffectiveSpec, refs: Refs, artifacts: NodeArtifactKeys) -> dict[str, Any]:
    stable_args = [f"CK_REGION={spec.region}", refs.bundle_arg]
    return {
        "InstanceType": spec.head_node.instance_type,
        "Networking": {"SubnetId": refs.head_node_subnet_id,
                       "SecurityGroups": _security_groups(spec.network.security_groups.head_node, refs)},
        "LocalStorage": {"RootVolume": {"Size": spec.head_node.root_volume_gib, "Encrypted": True,
                                        "VolumeType": "gp3"}},
        "Imds": {"Secured": True},
        "Iam": _iam(refs, refs.head_node_policy_arn, session_manager=True),
        "CustomActions": {
            # OnNodeConfigured cannot change once the cluster exists (PC update policy UNSUPPORTED), so
            # it names the frozen stage 0, which runs the launcher of the bundle it finds at a stable place.
            "OnNodeConfigured": {"Script": _s3(refs, artifacts.stage0.key), "Args": stable_args},
            # OnNodeUpdated may change: the bundle hash makes every bundle change re-run it (re-sync). It names
            # this deploy's bundle by content, not the stable place: when a CloudFormation rollback makes PC
            # re-run it with the previous config's Args, the SSM parameter (or export's stable key) may still
            # name the new bundle, and the launcher must install exactly the bundle those Args name.
            "OnNodeUpdated": {"Script": _s3(refs, artifacts.launcher.key),
                              "Args": _updated_args(spec, refs, artifacts)},
        },
    }


def _updated_args(spec: EffectiveSpec, refs: Refs, artifacts: NodeArtifactKeys) -> list[str]:
    """HeadNode OnNodeUpdated Args: the bundle's content-addressed key (both deployments upload it there and
    keep every previous one: CDK assets are never overwritten, ``export --upload`` writes content keys first) and
    its sha256, which the launcher checks. The sha256 stays last (tests and docs read it there)."""
    return [f"CK_REGION={spec.region}", f"CK_BUNDLE_URI={_s3(refs, artifacts.bundle.key)}",
            f"CK_BUNDLE_SHA256={artifacts.bundle.sha256}"]


def _queue(spec: EffectiveSpec, queue: EffectiveQueue, refs: Refs,
           artifacts: NodeArtifactKeys) -> dict[str, Any]:
    networking: dict[str, Any] = {"SubnetIds": [refs.compute_subnet_id],
                                  "SecurityGroups": _security_groups(spec.network.security_groups.compute, refs)}
    if queue.placement_group:
        networking["PlacementGroup"] = {"Enabled": True}
    elif queue.efa:
        networking["PlacementGroup"] = {"Enabled": False}  # PC wants EFA queues to say so explicitly
    local: dict[str, Any] = {"RootVolume": {"Encrypted": True}}
    if queue.root_volume_gib is not None:
        local["RootVolume"] = {"Size": queue.root_volume_gib, "Encrypted": True}
    if queue.has_nvme:
        local["EphemeralVolume"] = {"MountDir": EPHEMERAL_MOUNT}
    # no bundle hash: an image change must not replace the compute fleet; the queue's own last (CK_GPU, the boot
    # GPU check's)
    args = [*spec.node.compute, *queue.node_args]
    out: dict[str, Any] = {"Name": queue.name, "CapacityType": queue.pc_capacity_type}
    if queue.allocation_strategy is not None:
        out["AllocationStrategy"] = queue.allocation_strategy
    out["Networking"] = networking
    out["ComputeSettings"] = {"LocalStorage": local}
    out["JobExclusiveAllocation"] = queue.job_exclusive
    if queue.gpu_check is not None:  # PC's check runs in the prolog at every job start: only where chosen
        out["HealthChecks"] = {"Gpu": {"Enabled": queue.gpu_check == "prolog"}}
    out["Iam"] = _iam(refs, refs.compute_node_policy_arn, session_manager=False)
    out["CustomActions"] = {
        "OnNodeStart": {"Script": _s3(refs, artifacts.compute_start.key), "Args": args},
        "OnNodeConfigured": {"Script": _s3(refs, artifacts.compute_configured.key), "Args": args},
    }
    out["ComputeResources"] = [_compute_resource(cr) for cr in queue.compute_resources]
    return out


def _login_nodes(spec: EffectiveSpec, refs: Refs, artifacts: NodeArtifactKeys) -> dict[str, Any]:
    """``LoginNodes`` (absent without pools): each pool in the compute subnet and the cluster security group, so
    the NLB ParallelCluster puts in front of it is internal and reachable only from cluster nodes (the head node
    forwards to it: docs/operations.md "Login nodes"), with the compute nodes' role (every user on a login node is
    treated as holding it, as on compute nodes: no Session Manager, an explicit Deny of SSM parameter reads).

    Both CustomActions name the frozen login stage 0 with constant Args (the event): PC 3.16.1 never updates a
    pool's OnNodeStart/OnNodeConfigured (UNSUPPORTED), so everything that changes comes from the shared bundle."""
    if not spec.login_nodes:
        return {}
    stage0 = artifacts.login_stage0
    if stage0 is None:
        raise ValueError(f"{spec.name} has login_nodes but its node artifacts lack the login stage 0")
    script = _s3(refs, stage0.key)
    pools = [{
        "Name": pool.name,
        "InstanceType": pool.instance_type,
        "Count": pool.count,
        "GracetimePeriod": pool.gracetime_minutes,
        "Networking": {"SubnetIds": [refs.compute_subnet_id], "SecurityGroups": [refs.security_group_id]},
        "Iam": _iam(refs, refs.compute_node_policy_arn, session_manager=False),
        "CustomActions": {"OnNodeStart": {"Script": script, "Args": ["start"]},
                          "OnNodeConfigured": {"Script": script, "Args": ["configured"]}},
    } for pool in spec.login_nodes]
    return {"LoginNodes": {"Pools": pools}}


def _compute_resource(cr: EffectiveComputeResource) -> dict[str, Any]:
    out: dict[str, Any] = {"Name": cr.name, "InstanceType": cr.instance_type, "MinCount": cr.min, "MaxCount": cr.max}
    if cr.efa:
        out["Efa"] = {"Enabled": True}
    if cr.capacity_reservation_id:
        out["CapacityReservationTarget"] = {"CapacityReservationId": cr.capacity_reservation_id}
    return out


def _tags(spec: EffectiveSpec) -> list[dict[str, str]]:
    return [{"Key": t.key, "Value": t.value} for t in spec.tags]
