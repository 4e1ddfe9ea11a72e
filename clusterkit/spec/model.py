"""The cluster spec: what a human writes in ``cluster_configs/<name>.yaml``, as typed frozen dataclasses.

These classes are the single description of the spec: the loader reads YAML by their type hints, the
``doc`` strings become hints in error messages and the spec reference (docs/spec-reference.md, ``python -m
clusterkit reference``). Everything downstream reads these objects, never the raw YAML: the rules validate them,
``clusterkit.effective.expand`` expands them (every default and derived value), and render, the stacks, cost,
advice and the node settings read that expansion.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from clusterkit import DEFAULT_PC_VERSION
from clusterkit.spec.errors import Problem
from clusterkit.spec.yaml_reader import Marks, Reader, doc
from clusterkit_node.contract import settings as node

OsName = Literal["alinux2023", "ubuntu2204", "ubuntu2404", "rhel9"]
# Operating systems ParallelCluster 3.16.1 accepts (pcluster/constants.py SUPPORTED_OSES) that ClusterKit's nodes
# cannot run on, and why: the reader refuses them with the reason and the spec reference lists them, from here.
REFUSED_OS = {
    # the cookbook installs the distro python3 on rhel8, which is 3.6; the node tools need 3.9+
    "rhel8": "its python3 is 3.6 and ClusterKit's node tools need Python 3.9 or later",
}
CapacityType = Literal["ondemand", "spot", "capacity_block"]
FsxDeploymentType = Literal["PERSISTENT_2", "PERSISTENT_1", "SCRATCH_2"]

DEFAULT_SQUASH_OPTIONS = node.DEFAULT_SQUASH_OPTIONS  # the nodes' own default (clusterkit_node/contract/settings.py)
# Defaults that depend on other fields are resolved once, by clusterkit/effective/expand.py.


@dataclass(frozen=True)
class NewVpc:
    cidr: str = doc("IPv4 CIDR of the new VPC", "10.0.0.0/16")
    public_subnet_mask: int = doc("prefix length of the public subnet (NAT gateway)", 24)
    compute_subnet_mask: int = doc("prefix length of the private compute subnet; EFA uses one IP per interface", 20)
    interface_endpoints: bool = doc("add ECR, SSM, logs, STS, CloudFormation and EC2 interface endpoints", False)
    flow_logs_retention_days: int = doc("retention of the VPC flow logs", 90)


@dataclass(frozen=True)
class ExistingVpc:
    vpc_id: str = doc("id of the existing VPC (vpc-...)")
    head_node_subnet_id: str = doc("subnet of the head node (subnet-...)")
    compute_subnet_id: str = doc("subnet of every compute queue, in availability_zone (subnet-...)")
    compute_subnet_cidr: str | None = doc("CIDR of the compute subnet, to check it has room for max nodes", None)


@dataclass(frozen=True)
class SecurityGroups:
    # Locked-down accounts (docs/operations.md): each list REPLACES the group ClusterKit would create for that role
    # (ParallelCluster's SecurityGroups, not AdditionalSecurityGroups), so nothing is created where groups are given.
    head_node: tuple[str, ...] = doc(
        "existing security groups of the head node (sg-...), instead of ClusterKit's; all three roles or none", ())
    compute: tuple[str, ...] = doc(
        "existing security groups of every compute queue (sg-...), instead of ClusterKit's; EFA needs one that "
        "allows all traffic in and out to itself", ())
    fsx: tuple[str, ...] = doc(
        "security groups of the FSx file system (sg-...): a new one is created with them instead of ClusterKit's; "
        "with storage.fsx_lustre.existing, the groups that file system already has (for validate --aws)", ())


@dataclass(frozen=True)
class Network:
    new: NewVpc | None = doc("create a VPC (the default when neither new nor existing is given)", None)
    existing: ExistingVpc | None = doc("use an existing VPC; no lookups at synth time", None)
    head_node_public: bool = doc("put the head node in the public subnet (still no inbound rule; SSM only)", False)
    security_groups: SecurityGroups = doc(
        "existing security groups (network.existing only), for accounts where ClusterKit may not create them",
        SecurityGroups())


@dataclass(frozen=True)
class HeadNode:
    instance_type: str = doc("EC2 instance type of the head node", "c6i.2xlarge")
    root_volume_gib: int = doc("root EBS volume; image imports unpack here before squashing", 200)


@dataclass(frozen=True)
class NewFsx:
    capacity_gib: int = doc("storage capacity: 1200, or a multiple of 2400", 1200)
    deployment_type: FsxDeploymentType = doc(
        "PERSISTENT_2 (default) or SCRATCH_2 for cheap ephemeral use", "PERSISTENT_2")
    throughput_mb_per_tib: int | None = doc(
        "per-unit storage throughput: PERSISTENT_2 125, 250, 500, 1000 (default 250); PERSISTENT_1 50, 100, 200 "
        "(default 200); none for SCRATCH_2", None)
    compression: Literal["LZ4", "NONE"] = doc("data compression on the file system", "LZ4")
    kms_key_arn: str | None = doc("customer-managed KMS key; AWS-managed encryption when unset", None)
    image_store_bucket: bool = doc("create an S3 bucket linked to the image store (data repository association)", True)
    retain_on_delete: bool = doc("keep the file system and bucket when the storage stack is deleted", True)


@dataclass(frozen=True)
class ExistingFsx:
    file_system_id: str = doc("id of an existing FSx for Lustre file system (fs- and 17 characters)")


@dataclass(frozen=True)
class FsxLustre:
    new: NewFsx | None = doc("create a file system (the default when neither new nor existing is given)", None)
    existing: ExistingFsx | None = doc("mount an existing file system", None)
    mount_dir: str = doc("where every node mounts the file system", "/fsx")
    image_store: str | None = doc(
        "directory of the .sqsh image store, inside mount_dir (default <mount_dir>/containers)", None)


@dataclass(frozen=True)
class Storage:
    fsx_lustre: FsxLustre = doc("the shared FSx for Lustre file system holding the image store", FsxLustre())


@dataclass(frozen=True)
class ComputeResource:
    name: str = doc("compute resource name (lowercase letters, digits, hyphens)")
    instance_type: str = doc("EC2 instance type")
    max: int = doc("maximum number of nodes")
    min: int = doc("nodes kept running (static)", 0)
    efa: bool | None = doc("enable EFA; default: on when the instance type supports it", None)
    capacity_reservation_id: str | None = doc("capacity reservation or capacity block (cr-...)", None)
    reservation_instance_count: int | None = doc(
        "instances in that reservation, when known (validate warns when a capacity block's max differs)", None)


GpuCheck = Literal["boot", "prolog", "none"]


@dataclass(frozen=True)
class DeepHealth:
    every_hours: int | None = doc(
        "hours between deep checks of each idle node (0 = off, at most 8760); default: 24 on GPU queues, else 0", None)
    budget_s: int = doc(
        "the deep check job's Slurm time limit in seconds (30 to 7200), so a user job waits at most this long "
        "behind it", 900)
    dcgm_level: int | None = doc(
        "dcgmi diag -r LEVEL on each node (0 = none, 1 to 4); default: 2 on GPU queues, else 0", None)
    nccl_min_busbw_gbps: float | None = doc(
        "the least all_reduce_perf bus bandwidth in GB/s between two nodes of the queue (0 = no NCCL test); default: "
        "the instance type's cited figure in clusterkit/effective/node_health.py (none is listed yet, so 0: set your "
        "measured baseline), and 0 where the queue has no EFA or its max nodes add up to less than 2", None)


@dataclass(frozen=True)
class HealthChecks:
    gpu: GpuCheck | None = doc(
        "where DCGM's deep GPU check (dcgmi diag -r 2) runs: boot (once per node, before slurmd starts; a failure "
        "drains the node with a reason and ParallelCluster replaces it), prolog (ParallelCluster's HealthChecks.Gpu, "
        "at every job start) or none (no deep check; YAML reads a bare off as false); default: boot where the "
        "check outlasts a job start (p4d, p4de, p5, p5e, p5en, p6, p3dn, any type with 4+ GPUs: "
        "docs/troubleshooting.md#gpu-health-checks-and-the-job-start), prolog on other GPU queues", None)
    quick: bool = doc(
        "the quick check, seconds: driver answers, GPU count and model as the instance type says, no new fatal Xid "
        "or uncorrected ECC errors, EFA devices, the image store mounted; runs before every job (prolog) and on "
        "idle nodes every scheduling.health_check_interval_s; a failure drains the node with a reason and "
        "ParallelCluster replaces it", True)
    quick_budget_s: int = doc("seconds the quick check may take before it counts as failed (1 to 120)", 10)
    deep: DeepHealth = doc("the deep check on idle nodes, run as Slurm jobs the head node submits", DeepHealth())


@dataclass(frozen=True)
class Queue:
    name: str = doc("Slurm partition name (lowercase letters, digits, hyphens)")
    compute_resources: tuple[ComputeResource, ...] = doc("instance groups of this queue")
    capacity_type: CapacityType = doc("ondemand, spot or capacity_block", "ondemand")
    placement_group: bool | None = doc(
        "cluster placement group; default: on for ondemand EFA queues, never for capacity blocks", None)
    job_exclusive: bool | None = doc("one job per node; default: on for GPU queues", None)
    root_volume_gib: int | None = doc(
        "compute root volume in GiB; default: the AMI's size. Without instance-store NVMe, containers "
        "unpack onto it (validate warns when the largest image would not fit)", None)
    health_checks: HealthChecks = doc("node health checks of this queue's nodes", HealthChecks())


@dataclass(frozen=True)
class LoginPool:
    """A ParallelCluster LoginNodes pool (PC 3.16.1 pcluster/schemas/cluster_schema.py LoginNodesPoolSchema).

    No root volume field: PC 3.16.1's pool schema has no LocalStorage (ClusterConfig gives every pool an implied,
    encrypted one of the AMI's size, pcluster/config/cluster_config.py SlurmClusterConfig.__init__)."""

    name: str = doc("pool name (lowercase letters, digits, hyphens; at most 25; not 'default')")
    instance_type: str = doc(
        "EC2 instance type of the login nodes (the head node's CPU architecture: they boot its AMI)")
    count: int = doc("login nodes kept running; 0 stops the pool (what PC needs before most pool changes)", 1)
    gracetime_minutes: int = doc(
        "minutes logged-in users get after the termination notice when a node goes (3 to 120)", 10)


@dataclass(frozen=True)
class Scheduling:
    scaledown_idletime_minutes: int = doc("idle minutes before a dynamic node is stopped", 10)
    queue_update_strategy: Literal["DRAIN", "TERMINATE"] = doc("how running nodes take a queue update", "DRAIN")
    health_check_interval_s: int = doc(
        "seconds between quick checks of each idle node (Slurm's HealthCheckInterval; 10 to 86400)", 300)


@dataclass(frozen=True)
class Enroot:
    squash_options: str = doc(
        "mksquashfs options for imported images (see benchmarks/squash_options.py)", DEFAULT_SQUASH_OPTIONS)
    mount_home: bool = doc("mount $HOME into containers", True)
    rootfs_writable: bool = doc("make the container root file system writable", True)
    transfer_retries: int = doc("registry transfer retries (enroot's default is 0)",
                                int(node.default("ENROOT_TRANSFER_RETRIES")))
    connect_timeout_s: int = doc("registry connect timeout", int(node.default("ENROOT_CONNECT_TIMEOUT")))
    transfer_timeout_s: int = doc("registry transfer timeout per layer (0 = no limit)",
                                  int(node.default("ENROOT_TRANSFER_TIMEOUT")))


@dataclass(frozen=True)
class Pyxis:
    container_scope: Literal["job", "global"] = doc("lifetime of named containers", "job")
    sbatch_support: bool = doc("allow --container-image on sbatch/salloc", True)
    execute_entrypoint: bool = doc("run the image entrypoint", False)
    use_enroot_load: bool = doc("load registry images with enroot load instead of import + create (pyxis >= 0.21; "
                                "refused where the release's pyxis is not known to have it)", False)
    use_squashfuse: bool = doc("start images in place with squashfuse instead of extracting them for every job "
                               "(nodes with pyxis >= 0.24 and a multi-threaded squashfuse_ll; others extract)", True)
    single_threaded_in_place: bool = doc(
        "start in place even where the node's squashfuse reads on one thread (parallel reads up to 4.5x slower "
        "than extracted; pays off only for large images that jobs read little of): needs single_threaded_reason",
        False)
    single_threaded_reason: str | None = doc("why single-threaded in-place reads are acceptable here", None)
    unlocked_images: Literal["refuse", "import"] = doc(
        "what `--container-image=<registry name>` gets when the name is not in the image lock, on nodes "
        "with pyxis >= 0.24 (locked names always start from the store): refuse, or import it for the job",
        "refuse")


@dataclass(frozen=True)
class Expect:
    cuda: str | None = doc("CUDA version inside the image, e.g. 12.9", None)
    nccl: str | None = doc("NCCL version, e.g. 2.29.3", None)
    aws_ofi_nccl: str | None = doc("aws-ofi-nccl plugin version", None)
    efa_installer: str | None = doc("EFA installer version", None)

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass(frozen=True)
class Image:
    name: str = doc("store name: jobs use <image_store>/<name>.sqsh")
    uri: str = doc("image reference with an explicit tag or @sha256 digest")
    expect: Expect = doc("versions the image must contain; checked after import", Expect())


@dataclass(frozen=True)
class StoreGc:
    timer: bool = doc("a daily `clusterkit_node.pyz gc --apply` timer on the head node: removes store files no live "
                      "cluster on the store uses (docs/operations.md, Image garbage collection)", False)
    grace_hours: int = doc("keep an unreferenced file this long after gc first saw it unreferenced",
                           int(node.default("CK_STORE_GC_GRACE_HOURS")))
    stale_days: int = doc("a cluster whose record was not refreshed for this long is gone: its images no longer "
                          "pin their names or protect their files", int(node.default("CK_STORE_GC_STALE_DAYS")))


@dataclass(frozen=True)
class NvidiaContainerCli:
    install: bool = doc(
        "install NVIDIA's nvidia-container-cli (libnvidia-container) on GPU nodes whose AMI lacks it: without it no "
        "image that asks for GPUs (NVIDIA_VISIBLE_DEVICES) starts; the head node fetches the packages once into the "
        "store, checked by sha256 (docs/gpu.md)", True)
    version: str | None = doc("the libnvidia-container version to install; unset: the version ClusterKit pins "
                              "(clusterkit/data/node_profiles.json)", None)
    reason: str | None = doc("why install is false, on one line (e.g. a custom AMI that already has it)", None)


@dataclass(frozen=True)
class Containers:
    enroot: Enroot = doc("enroot.conf settings", Enroot())
    pyxis: Pyxis = doc("pyxis plugin options", Pyxis())
    images: tuple[Image, ...] = doc("images synced into the store, pinned in <name>.images.lock", ())
    store_gc: StoreGc = doc("image garbage collection of the (possibly shared) store", StoreGc())
    nvidia_container_cli: NvidiaContainerCli = doc(
        "nvidia-container-cli on GPU nodes (enroot's GPU hook needs it)", NvidiaContainerCli())


@dataclass(frozen=True)
class Monitoring:
    log_retention_days: int = doc("CloudWatch log retention of the cluster logs", 14)
    detailed_monitoring: bool = doc("1-minute EC2 metrics", False)


@dataclass(frozen=True)
class Lifecycle:
    ttl_hours: float | None = doc(
        "delete the cluster stack this many hours after deploy (network and storage stay)", None)
    notify_email: str | None = doc(
        "email address subscribed to the cluster's alert topic: failed or overdue TTL teardowns (SNS asks it to "
        "confirm once)", None)


@dataclass(frozen=True)
class Security:
    compute_imds: Literal["root_only", "all_users"] = doc(
        "who on a compute node may reach the instance metadata service, and with it the compute role's "
        "credentials: root_only (ParallelCluster's agents run as root; jobs get no instance credentials or "
        "metadata) or all_users (ParallelCluster's own default on compute nodes): needs compute_imds_reason",
        node.default("CK_COMPUTE_IMDS"))
    compute_imds_reason: str | None = doc("why jobs need the instance role (all_users), on one line", None)
    trust_domain: str | None = doc(
        "who holds root on this cluster (a team or account name): clusters on one platform share its store, and root "
        "on any of them can rewrite what every other serves, so all clusters of a platform must declare the same "
        "one (docs/security.md \"A platform is one trust domain\")", None)


@dataclass(frozen=True)
class Acknowledgement:
    id: str = doc("id of the warning to accept, as validate prints it: warning[image-fanout-slow] is image-fanout-slow")
    reason: str = doc("why it is accepted, on one line (validate --format json shows it with the warning)")


@dataclass(frozen=True)
class ClusterSpec:
    name: str = doc("cluster name: a letter, then letters, digits, hyphens (at most 60)")
    region: str = doc("AWS region, e.g. us-east-1")
    availability_zone: str = doc("the one AZ of the compute subnet (EFA and reservations are AZ-bound)")
    queues: tuple[Queue, ...] = doc("Slurm queues")
    account: str | None = doc("12-digit AWS account id; taken from the CLI credentials when unset", None)
    platform: str | None = doc(
        "name of the platform (platforms/<name>.yaml next to this spec) whose VPC, FSx file system and image store "
        "this cluster uses; the spec then has no network or storage of its own, and region and "
        "availability_zone must match the platform's", None)
    parallelcluster_version: str = doc("ParallelCluster version (3.11.1 or later: Enroot/Pyxis pre-installed)",
                                       DEFAULT_PC_VERSION)
    os: OsName = doc("operating system of the official ParallelCluster AMI", "alinux2023", refused=REFUSED_OS)
    network: Network = doc("the VPC: new or existing", Network())
    head_node: HeadNode = doc("the head node", HeadNode())
    storage: Storage = doc("shared storage", Storage())
    scheduling: Scheduling = doc("Slurm settings", Scheduling())
    login_nodes: tuple[LoginPool, ...] = doc(
        "ParallelCluster login node pools: users log in and submit there instead of on the head node", ())
    containers: Containers = doc("Enroot, Pyxis and the image list", Containers())
    monitoring: Monitoring = doc("logs and metrics", Monitoring())
    lifecycle: Lifecycle = doc("automatic teardown", Lifecycle())
    security: Security = doc("what job users on compute nodes may reach", Security())
    tags: dict[str, str] = doc("tags on every resource", default_factory=dict)
    acknowledge: tuple[Acknowledgement, ...] = doc(
        "warnings accepted for this cluster, each by id with a reason: validate stops reporting them, so --strict "
        "does not fail on them; an entry that matches no warning is itself a warning (ids: docs/spec.md)", ())


@dataclass(frozen=True)
class PlatformSpec:
    """What outlives clusters: the VPC, the FSx file system and the image store on it (its own stacks,
    ``<Name>-Network`` and ``<Name>-Storage``); cluster specs name it with ``platform:``."""

    name: str = doc("platform name: a letter, then letters, digits, hyphens (at most 60)")
    region: str = doc("AWS region, e.g. us-east-1")
    availability_zone: str = doc("the one AZ of the compute subnet every cluster on the platform uses")
    account: str | None = doc("12-digit AWS account id; taken from the CLI credentials when unset", None)
    network: Network = doc("the VPC: new or existing", Network())
    storage: Storage = doc("the FSx for Lustre file system holding the image store every cluster shares", Storage())
    tags: dict[str, str] = doc("tags on every platform resource", default_factory=dict)


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with where it came from, for messages that point back into the file."""

    spec: ClusterSpec
    path: Path
    marks: Marks

    @property
    def display_path(self) -> str:
        return self.marks.file


def parse_platform(text: str, display_path: str) -> tuple[PlatformSpec | None, Marks, list[Problem]]:
    """Parse a platform file without semantic rules (types, keys, required fields only)."""
    reader = Reader(display_path)
    platform = reader.read_text(text, PlatformSpec)
    return platform, reader.marks, reader.problems


def parse_spec(text: str, display_path: str) -> tuple[ClusterSpec | None, Marks, list[Problem]]:
    """Parse without semantic rules (types, keys, required fields only)."""
    reader = Reader(display_path)
    spec = reader.read_text(text, ClusterSpec)
    return spec, reader.marks, reader.problems
