"""The effective spec: every default and derived value of a cluster spec, resolved in this one place.

A ``ClusterSpec`` is what a human wrote; an ``EffectiveSpec`` is what ClusterKit will build from it:
defaults filled in (the image store under the mount point, the FSx per-unit throughput, the new VPC when
neither mode is given), choices made (EFA where the type supports it, placement groups, one job per GPU
node, ParallelCluster's capacity names), catalog facts looked up (GPUs, local NVMe, architecture), and
what the nodes, IAM and the TTL teardown need (node settings, the node health plan, ECR registries and
repositories, the expiry).
``clusterkit expand NAME`` prints it, like Cluster Toolkit's expanded blueprint.

Everything downstream reads it and re-derives nothing: render (the ParallelCluster config), the CDK
stacks (which neither validate nor read files), cost, advice and the node settings. It is built by
``expand`` from a spec the loader accepted, plus what one deploy adds (``clusterkit.pipeline.deploy_context``:
``-c ttl_hours`` already checked, ``-c deploy_time``). Pure: no file I/O, no CDK, no rules.

The resolver functions below are total on any parsed spec (they never raise), because two callers expand
specs that were not validated: the rules' check of the node settings and ``clusterkit diff``'s cost of a
committed base. On such a spec, values of the fields the rules refuse are unspecified.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any, Protocol

from clusterkit.catalog import lookup as catalog
from clusterkit.effective import gpu_check_place, node_health, node_settings
from clusterkit.effective.node_settings import NodeSettings
from clusterkit.images.ref import ImageRefError, parse_image_ref
from clusterkit.paths import NODE_PROFILES
from clusterkit.spec.model import (
    CapacityType,
    ClusterSpec,
    ComputeResource,
    Enroot,
    ExistingVpc,
    FsxDeploymentType,
    FsxLustre,
    Image,
    LoginPool,
    Monitoring,
    Network,
    NewFsx,
    NewVpc,
    PlatformSpec,
    Pyxis,
    Queue,
    Scheduling,
    SecurityGroups,
    StoreGc,
)
from clusterkit.spec.naming import alerts_stack_name, artifact_prefix, bundle_parameter_name, stack_names
from clusterkit_node.contract import profiles
from clusterkit_node.contract.health_plan import HealthPlan

DEFAULT_STORE_DIR = "containers"  # the image store's directory under mount_dir when image_store is unset
# ParallelCluster's names for the spec's capacity types (SlurmQueues[].CapacityType).
PC_CAPACITY_TYPE = {"ondemand": "ONDEMAND", "spot": "SPOT", "capacity_block": "CAPACITY_BLOCK"}
SPOT_ALLOCATION_STRATEGY = "price-capacity-optimized"  # spot queues: fewest interruptions at a low price
PLATFORMS = {"x86_64": "linux/amd64", "arm64": "linux/arm64"}  # catalog arch -> image platform

DEFAULT_THROUGHPUT = {"PERSISTENT_2": 250, "PERSISTENT_1": 200}  # MB/s/TiB; SCRATCH_2 has no setting


# --- the effective spec ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class EffectiveNetwork:
    new: NewVpc | None  # the VPC to create: the spec's, else the defaults when no existing VPC is given
    existing: ExistingVpc | None
    head_node_public: bool
    # existing groups per role (each replaces the group ClusterKit would create for it): spec.network.security_groups
    security_groups: SecurityGroups = SecurityGroups()


@dataclass(frozen=True)
class EffectiveHeadNode:
    instance_type: str
    root_volume_gib: int
    has_nvme: bool  # instance-store NVMe (catalog): image imports unpack there instead of the root volume


@dataclass(frozen=True)
class EffectiveNewFsx:
    """The file system ClusterKit creates."""

    capacity_gib: int
    deployment_type: FsxDeploymentType
    throughput_mb_per_tib: int | None  # the spec's, else the deployment type's default; None for SCRATCH_2
    compression: str
    kms_key_arn: str | None
    image_store_bucket: bool
    retain_on_delete: bool


@dataclass(frozen=True)
class EffectiveStorage:
    mount_dir: str
    image_store: str  # absolute directory of the .sqsh store on every node
    image_store_fs_path: str  # the same directory inside the file system (the S3 link's FileSystemPath)
    new: EffectiveNewFsx | None  # None: an existing file system
    existing_file_system_id: str | None


@dataclass(frozen=True)
class EffectiveComputeResource:
    name: str
    instance_type: str
    min: int
    max: int
    efa: bool  # the spec's, else on where the instance type supports EFA
    capacity_reservation_id: str | None
    reservation_instance_count: int | None


@dataclass(frozen=True)
class EffectiveQueue:
    name: str
    capacity_type: CapacityType
    pc_capacity_type: str  # ParallelCluster's name: ONDEMAND, SPOT, CAPACITY_BLOCK
    allocation_strategy: str | None  # spot only
    efa: bool  # any compute resource with EFA (ParallelCluster wants such queues to state their placement group)
    placement_group: bool  # the spec's, else on for on-demand EFA queues; never for capacity blocks
    has_gpu: bool  # any instance type with GPUs (catalog): GPU health checks
    has_nvme: bool  # every instance type has instance-store NVMe (catalog): enroot's dirs go there
    job_exclusive: bool  # the spec's, else on for GPU queues
    root_volume_gib: int | None  # None: the AMI's size
    compute_resources: tuple[EffectiveComputeResource, ...]
    # where DCGM's deep check runs (gpu_check_place.py): boot, prolog (PC's HealthChecks.Gpu) or none; None: no GPU
    gpu_check: str | None = None
    node_args: tuple[str, ...] = ()  # Args of this queue's CustomActions after the cluster's (CK_GPU, the boot check's)


@dataclass(frozen=True)
class EcrRepository:
    """A private ECR repository a locked image comes from (the node policies may pull from it)."""

    account: str
    region: str
    repository: str


@dataclass(frozen=True)
class EffectiveContainers:
    enroot: Enroot
    pyxis: Pyxis
    images: tuple[Image, ...]
    platform: str  # image platform of the compute fleet, e.g. linux/amd64 (the lock pins digests for it)
    ecr_registries: tuple[str, ...]  # private ECR registry hosts of the images, sorted
    ecr_repositories: tuple[EcrRepository, ...]  # sorted
    store_gc: StoreGc = StoreGc()  # the head node's image gc (node settings CK_STORE_GC_*)
    # what GPU nodes install: a libnvidia-container version, or "off" (node setting CK_NVIDIA_CLI; docs/gpu.md)
    nvidia_container_cli: str = "off"


@dataclass(frozen=True)
class EffectiveLifecycle:
    ttl_hours: float | None  # the spec's, or this deploy's -c ttl_hours
    notify_email: str | None
    deploy_time: datetime | None  # this deploy's start (UTC, to the minute); None outside a deploy
    expires_at: datetime | None  # deploy_time + ttl_hours to the minute; None without both


@dataclass(frozen=True)
class Tag:
    key: str
    value: str


@dataclass(frozen=True)
class Names:
    """Names ClusterKit gives this cluster's AWS things (clusterkit.spec.naming)."""

    network_stack: str
    storage_stack: str
    cluster_stack: str
    alerts_stack: str  # the stack holding the alert topic: the storage stack, or <Name>-Alerts on a platform
    artifact_prefix: str  # S3 key prefix of the node artifacts
    bundle_parameter: str  # SSM parameter naming the current bootstrap bundle


@dataclass(frozen=True)
class PlatformRef:
    """The platform a cluster runs on: its name and the stacks whose exports the cluster imports."""

    name: str
    network_stack: str
    storage_stack: str


@dataclass(frozen=True)
class EffectivePlatform:
    """What a platform's own stacks build: the network and storage of a cluster, without the cluster."""

    name: str
    region: str
    availability_zone: str
    account: str | None
    network: EffectiveNetwork
    storage: EffectiveStorage
    tags: tuple[Tag, ...]  # clusterkit:platform and the file's, sorted by key
    network_stack: str
    storage_stack: str

    def tag_dict(self) -> dict[str, str]:
        return {t.key: t.value for t in self.tags}


@dataclass(frozen=True)
class EffectiveSpec:
    name: str
    region: str
    availability_zone: str
    account: str | None  # None: the CLI credentials' account
    parallelcluster_version: str
    os: str
    network: EffectiveNetwork
    head_node: EffectiveHeadNode
    storage: EffectiveStorage
    queues: tuple[EffectiveQueue, ...]
    scheduling: Scheduling
    containers: EffectiveContainers
    monitoring: Monitoring
    lifecycle: EffectiveLifecycle
    tags: tuple[Tag, ...]  # on every resource: clusterkit:cluster and the spec's, sorted by key
    names: Names
    node: NodeSettings
    platform: PlatformRef | None  # None: the cluster's own network and storage stacks
    health: HealthPlan  # the nodes' health checks (effective/node_health.py), shipped in the bundle, never in Args
    # LoginNodes pools as written (no derived value: subnet, security group and role are the compute nodes')
    login_nodes: tuple[LoginPool, ...] = ()

    def tag_dict(self) -> dict[str, str]:
        return {t.key: t.value for t in self.tags}


# --- resolvers: each default or derived value, defined once ------------------------------------------------

def new_vpc(network: Network) -> NewVpc | None:
    """The VPC to create: the spec's, or the defaults when the spec gives neither mode."""
    if network.existing is not None:
        return None
    return network.new or NewVpc()


def created_fsx(fsx: FsxLustre) -> NewFsx | None:
    """The file system to create: the spec's, or the defaults when the spec gives neither mode."""
    if fsx.existing is not None:
        return None
    return fsx.new or NewFsx()


def fsx_throughput(new: NewFsx) -> int | None:
    """The per-unit throughput in effect: the spec's, else the deployment type's default; None for a type
    without the setting (SCRATCH_2)."""
    if new.deployment_type not in DEFAULT_THROUGHPUT:
        return None
    if new.throughput_mb_per_tib is not None:
        return new.throughput_mb_per_tib
    return DEFAULT_THROUGHPUT[new.deployment_type]


def image_store(fsx: FsxLustre) -> str:
    """The image store directory in effect: the spec's, else ``<mount_dir>/containers``."""
    return fsx.image_store or f"{fsx.mount_dir.rstrip('/')}/{DEFAULT_STORE_DIR}"


def image_store_fs_path(mount_dir: str, store: str) -> str:
    """The store as a path inside the file system: ``/fsx/containers`` under ``/fsx`` -> ``/containers``."""
    try:
        return f"/{PurePosixPath(store).relative_to(PurePosixPath(mount_dir))}"
    except ValueError:  # not inside mount_dir: the rules refuse that spec
        return store


def efa_enabled(resource: ComputeResource) -> bool:
    """What the spec asks for; unset means on where the type supports it (rules reject the impossible)."""
    if resource.efa is not None:
        return resource.efa
    facts = catalog.instance_type(resource.instance_type)
    return bool(facts and facts.efa_supported)


def placement_group(queue: Queue, efa: bool) -> bool:
    """On for on-demand EFA queues (lowest latency); never for capacity blocks (they fix placement)."""
    if queue.capacity_type == "capacity_block":
        return False
    if queue.placement_group is not None:
        return queue.placement_group
    return queue.capacity_type == "ondemand" and efa


def has_gpu(instance_types: list[str]) -> bool:
    return any(_facts(t).gpus > 0 for t in instance_types)


def has_nvme(instance_types: list[str]) -> bool:
    """Every type has instance-store NVMe (ParallelCluster mounts it at EphemeralVolume.MountDir)."""
    return all(_facts(t).nvme_gib > 0 for t in instance_types)


def job_exclusive(queue: Queue, gpu: bool) -> bool:
    return gpu if queue.job_exclusive is None else queue.job_exclusive


def image_platform(spec: ClusterSpec) -> str:
    """The image platform of the compute fleet: the first compute type the catalog knows (rules reject
    mixed architectures), linux/amd64 when it knows none."""
    for queue in spec.queues:
        for cr in queue.compute_resources:
            facts = catalog.instance_type(cr.instance_type)
            if facts is not None:
                return PLATFORMS.get(facts.arch, "linux/amd64")
    return "linux/amd64"


def ecr_registries(images: tuple[Image, ...]) -> tuple[str, ...]:
    """The private ECR registry hosts the images come from, sorted, once each (malformed references,
    which the rules refuse, are skipped)."""
    hosts = set()
    for image in images:
        try:
            host = parse_image_ref(image.uri).registry
        except ImageRefError:
            continue
        if ".dkr.ecr." in host:
            hosts.add(host)
    return tuple(sorted(hosts))


def ecr_repositories(images: tuple[Image, ...]) -> tuple[EcrRepository, ...]:
    found = set()
    for image in images:
        try:
            ref = parse_image_ref(image.uri)
        except ImageRefError:
            continue
        if ref.ecr_account_region is not None:
            account, region = ref.ecr_account_region
            found.add(EcrRepository(account, region, ref.repository))
    # the order of their IAM ARNs (arn:<partition>:ecr:<region>:<account>:repository/<name>)
    return tuple(sorted(found, key=lambda r: f"{r.region}:{r.account}:repository/{r.repository}"))


def expiry(deploy_time: datetime, ttl_hours: float) -> datetime:
    """When the teardown fires: ``deploy_time + ttl_hours``, down to the minute, UTC."""
    return (deploy_time.astimezone(UTC) + timedelta(hours=ttl_hours)).replace(second=0, microsecond=0)


def iso_z(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lifecycle(ttl_hours: float | None, notify_email: str | None, deploy_time: datetime | None) -> EffectiveLifecycle:
    deploy_time = None if deploy_time is None else deploy_time.astimezone(UTC)
    expires = None if ttl_hours is None or deploy_time is None else expiry(deploy_time, ttl_hours)
    return EffectiveLifecycle(ttl_hours, notify_email, deploy_time, expires)


class _NoFacts:
    gpus = 0
    nvme_gib = 0


_NO_FACTS = _NoFacts()


def _facts(instance_type: str) -> Any:
    return catalog.instance_type(instance_type) or _NO_FACTS


# --- expand ------------------------------------------------------------------------------------------------

class _Loaded(Protocol):
    """``clusterkit.pipeline.loader.Loaded`` (not imported: the loader imports this module)."""

    @property
    def spec(self) -> ClusterSpec: ...


def expand(loaded: _Loaded, *, deploy_time: datetime | None = None) -> EffectiveSpec:
    """The effective spec of a loaded (validated) spec; ``deploy_time`` starts the TTL clock of a deploy."""
    return expand_spec(loaded.spec, deploy_time=deploy_time)


def expand_spec(spec: ClusterSpec, *, deploy_time: datetime | None = None) -> EffectiveSpec:
    """``expand`` for a bare spec (the loader's advice runs before a ``Loaded`` exists). Never raises."""
    fsx = spec.storage.fsx_lustre
    store = image_store(fsx)
    names = stack_names(spec.name)
    platform = None
    if spec.platform is not None:
        on = stack_names(spec.platform)
        platform = PlatformRef(spec.platform, network_stack=on["network"], storage_stack=on["storage"])
    tags = {"clusterkit:cluster": spec.name, **({"clusterkit:platform": spec.platform} if spec.platform else {}),
            **spec.tags}
    containers = EffectiveContainers(
        enroot=spec.containers.enroot, pyxis=spec.containers.pyxis, images=tuple(spec.containers.images),
        platform=image_platform(spec), ecr_registries=ecr_registries(spec.containers.images),
        ecr_repositories=ecr_repositories(spec.containers.images), store_gc=spec.containers.store_gc,
        nvidia_container_cli=nvidia_container_cli(spec))
    queues = tuple(_queue(q) for q in spec.queues)
    return EffectiveSpec(
        name=spec.name,
        region=spec.region,
        availability_zone=spec.availability_zone,
        account=spec.account,
        parallelcluster_version=spec.parallelcluster_version,
        os=spec.os,
        network=_network(spec.network),
        head_node=EffectiveHeadNode(spec.head_node.instance_type, spec.head_node.root_volume_gib,
                                    _facts(spec.head_node.instance_type).nvme_gib > 0),
        storage=_storage(fsx),
        queues=queues,
        scheduling=spec.scheduling,
        containers=containers,
        monitoring=spec.monitoring,
        lifecycle=lifecycle(spec.lifecycle.ttl_hours, spec.lifecycle.notify_email, deploy_time),
        tags=tuple(Tag(k, v) for k, v in sorted(tags.items())),
        names=Names(network_stack=platform.network_stack if platform else names["network"],
                    storage_stack=platform.storage_stack if platform else names["storage"],
                    cluster_stack=names["cluster"],
                    alerts_stack=alerts_stack_name(spec.name) if platform else names["storage"],
                    artifact_prefix=artifact_prefix(spec.name), bundle_parameter=bundle_parameter_name(spec.name)),
        node=node_settings.resolve({"name": spec.name, "os": spec.os, "region": spec.region,
                                    "storage.fsx_lustre.image_store": store,
                                    "containers.images": containers.ecr_registries,
                                    "containers.nvidia_container_cli": containers.nvidia_container_cli,
                                    "security.compute_imds": spec.security.compute_imds}, containers),
        platform=platform,
        health=node_health.plan(spec, gpu={q.name: q.has_gpu for q in queues},
                           efa={q.name: {cr.name: cr.efa for cr in q.compute_resources} for q in queues}),
        login_nodes=tuple(spec.login_nodes),
    )


@functools.cache
def node_profiles() -> profiles.Profiles:
    return profiles.load(str(NODE_PROFILES))


def nvidia_container_cli(spec: ClusterSpec) -> str:
    """The libnvidia-container version GPU nodes install (the spec's, else the pin in node_profiles.json), or off:
    also without GPU queues, so the head node fetches nothing for a cluster that would never install it."""
    cli = spec.containers.nvidia_container_cli
    gpu_queues = [q for q in spec.queues if has_gpu([cr.instance_type for cr in q.compute_resources])]
    if not cli.install or not gpu_queues:
        return "off"
    return cli.version or str(node_profiles().container_cli.version.value)


def _network(network: Network) -> EffectiveNetwork:
    return EffectiveNetwork(new_vpc(network), network.existing, network.head_node_public, network.security_groups)


def _storage(fsx: FsxLustre) -> EffectiveStorage:
    store = image_store(fsx)
    new = created_fsx(fsx)
    return EffectiveStorage(
        mount_dir=fsx.mount_dir,
        image_store=store,
        image_store_fs_path=image_store_fs_path(fsx.mount_dir, store),
        new=None if new is None else EffectiveNewFsx(
            capacity_gib=new.capacity_gib, deployment_type=new.deployment_type,
            throughput_mb_per_tib=fsx_throughput(new), compression=new.compression,
            kms_key_arn=new.kms_key_arn, image_store_bucket=new.image_store_bucket,
            retain_on_delete=new.retain_on_delete),
        existing_file_system_id=fsx.existing.file_system_id if fsx.existing else None)


def expand_platform(platform: PlatformSpec) -> EffectivePlatform:
    """The effective platform: the same network and storage resolution a cluster's own get."""
    names = stack_names(platform.name)
    tags = {"clusterkit:platform": platform.name, **platform.tags}
    return EffectivePlatform(
        name=platform.name, region=platform.region, availability_zone=platform.availability_zone,
        account=platform.account, network=_network(platform.network), storage=_storage(platform.storage.fsx_lustre),
        tags=tuple(Tag(k, v) for k, v in sorted(tags.items())),
        network_stack=names["network"], storage_stack=names["storage"])


def _queue(queue: Queue) -> EffectiveQueue:
    resources = tuple(EffectiveComputeResource(
        name=cr.name, instance_type=cr.instance_type, min=cr.min, max=cr.max, efa=efa_enabled(cr),
        capacity_reservation_id=cr.capacity_reservation_id, reservation_instance_count=cr.reservation_instance_count)
        for cr in queue.compute_resources)
    types = [cr.instance_type for cr in queue.compute_resources]
    efa = any(cr.efa for cr in resources)
    gpu = has_gpu(types)
    check = (queue.health_checks.gpu or gpu_check_place.default(types)) if gpu else None
    return EffectiveQueue(
        name=queue.name,
        capacity_type=queue.capacity_type,
        pc_capacity_type=PC_CAPACITY_TYPE[queue.capacity_type],
        allocation_strategy=SPOT_ALLOCATION_STRATEGY if queue.capacity_type == "spot" else None,
        efa=efa,
        placement_group=placement_group(queue, efa),
        has_gpu=gpu,
        has_nvme=has_nvme(types),
        job_exclusive=job_exclusive(queue, gpu),
        root_volume_gib=queue.root_volume_gib,
        compute_resources=resources,
        gpu_check=check,
        # GPU queues' nodes install nvidia-container-cli and self-test as CUDA images start (CK_GPU=1)
        node_args=(*(("CK_GPU=1",) if gpu else ()), *gpu_check_place.node_args(check or "none")),
    )


# --- printing ----------------------------------------------------------------------------------------------

def as_data(effective: EffectiveSpec) -> dict[str, Any]:
    """Plain dicts, lists and scalars (YAML- and JSON-ready) in field order; times as ISO 8601 UTC."""
    data: dict[str, Any] = _data(effective)
    return data


def _data(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_data(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _data(value[k]) for k in sorted(value)}
    if isinstance(value, datetime):
        return iso_z(value)
    return value
