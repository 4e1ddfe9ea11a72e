"""The AWS resources a rendered config refers to, created inside ``moto.mock_aws`` for ``validate()``.

ParallelCluster's validators call AWS (describe subnets, head the CustomActions scripts in S3,
describe the FSx file system, dry-run RunInstances...). Under moto those calls succeed only for
resources that exist, so this module creates exactly what the config names:

- one VPC (10.0.0.0/16, DNS support + hostnames on, as PC requires) for ``${Network.VpcId}`` and any
  literal ``vpc-`` id;
- one subnet per distinct subnet token, all in the region's first AZ (the real AZs are unknown here);
- one security group per distinct ``sg-`` token, allowing all traffic to and from itself, inbound and
  outbound, plus moto's default all-outbound rule: the rules EfaSecurityGroupValidator demands and
  ClusterKit's network stack must therefore create (the CDK tests check the stack, not this file). A spec's
  existing groups (``network.security_groups``) are made the same way, so the simulation cannot tell whether
  the real ones have these rules: ``simulation`` says so, and ``validate --aws`` reads them;
- the FSx for Lustre file systems: moto ids have 8 hex digits but PC's schema wants 17, so each one is
  re-keyed to the literal id in the config (or a stand-in for ``${Storage.FileSystemId}``). moto's
  DescribeFileSystems omits VpcId, NetworkInterfaceIds and Lifecycle; they are filled in from a real
  moto ENI in the file system's subnet, so ExistingFsxNetworkingValidator checks the node security
  groups against the FSx ENI's group for real. Fixture assumption: the file system has its own
  security group admitting Lustre ports from the config's node security groups, as
  stacks/network.py's FsxSecurityGroup does (an existing file system is assumed set up the same way);
- the S3 buckets and every ``s3://bucket/key`` object the config references;
- a customer-managed IAM policy for each ``${...PolicyArn}`` placeholder (the stacks create those);
- the head node key pair, if ``HeadNode.Ssh.KeyName`` is set (ed25519, so the ubuntu RSA rule passes);
- a ParallelCluster-like "official" AMI for the head node architecture (moto's default AMI catalog is
  switched off: loading its 1,300 images costs ~2 s per config);
- the AWS managed IAM policies the config attaches, taken from moto's snapshot of the real list;
- the capacity reservations the config names (see ``capacity_reservations``: moto lacks the API).

Literal subnet / security group / VPC ids are substituted by the moto ids (moto cannot create a
resource with a chosen id); messages are mapped back to the literal so the user reads their own id.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from clusterkit.pcluster import capacity_reservations
from clusterkit.pcluster.tokens import TokenUse, pseudo_value, s3_objects, substitute

ASSETS_BUCKET_STANDIN = "clusterkit-assets-fixture"
VPC_CIDR = "10.0.0.0/16"
FSX_PORTS_NOTE = "FSx Lustre needs TCP 988 and 1018-1023"
LUSTRE_PORTS = ((988, 988), (1018, 1023))
MANAGED_POLICY_ARN_RE = re.compile(r"arn:aws[a-z-]*:iam::aws:policy/[\w+=,.@/-]+")


@dataclass
class World:
    """Token -> moto id, plus the bits validate() needs after the config is loaded."""

    region: str
    ids: dict[str, str] = field(default_factory=dict)
    vpc_id: str = ""
    account_id: str = ""
    # (kind, id as the config writes it) of every resource that exists only because this module created it:
    # what validate() "found" is this simulation, not an account (``clusterkit validate --pcluster`` says so).
    simulated: list[tuple[str, str]] = field(default_factory=list)


# The token kinds that name an AWS resource (not a region or partition): each one is created here.
RESOURCE_KINDS = ("vpc", "subnet", "sg", "fsx", "iam-policy", "bucket")


def _fsx_standin(token: str) -> str:
    """A 17-character FSx id derived from the placeholder, stable across runs."""
    return "fs-" + hashlib.sha256(token.encode()).hexdigest()[:17]


def build(region: str, text: str, data: dict[str, Any], tokens: list[TokenUse]) -> World:
    """Create the fixtures inside an active ``mock_aws`` and return the token mapping."""
    import boto3
    import yaml
    from moto.core import DEFAULT_ACCOUNT_ID

    world = World(region=region, account_id=DEFAULT_ACCOUNT_ID)
    ec2 = boto3.client("ec2", region_name=region)
    az = f"{region}a"

    vpc = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsSupport={"Value": True})
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    world.vpc_id = vpc

    by_kind: dict[str, list[str]] = {}
    for use in tokens:
        by_kind.setdefault(use.kind, []).append(use.token)
    for token in by_kind.get("vpc", []):
        world.ids[token] = vpc
    for index, token in enumerate(by_kind.get("subnet", [])):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{index}.0/24", AvailabilityZone=az)
        world.ids[token] = subnet["Subnet"]["SubnetId"]
    for index, token in enumerate(by_kind.get("sg", [])):
        group = ec2.create_security_group(
            GroupName=f"clusterkit-fixture-{index}", Description="clusterkit validate fixture", VpcId=vpc
        )["GroupId"]
        to_itself = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}]
        ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=to_itself)
        ec2.authorize_security_group_egress(GroupId=group, IpPermissions=to_itself)
        world.ids[token] = group

    for token in by_kind.get("region", []):
        world.ids[token] = region
    for token in by_kind.get("aws-pseudo", []):
        world.ids[token] = pseudo_value(token, region)
    for index, token in enumerate(by_kind.get("bucket", [])):
        world.ids[token] = ASSETS_BUCKET_STANDIN if index == 0 else f"{ASSETS_BUCKET_STANDIN}-{index}"
    _create_policies(world, by_kind.get("iam-policy", []))
    substituted = substitute(text, world.ids)
    loaded = yaml.safe_load(substituted)
    _create_s3(region, substituted, loaded if isinstance(loaded, dict) else {})
    _create_fsx(world, by_kind.get("fsx", []), data)
    _create_key_pair(ec2, data)
    _add_aws_managed_policies(world, substitute(text, world.ids))
    capacity_reservations.install()
    reservations = capacity_reservations.register(world.account_id, world.region, data)
    world.simulated = [(use.kind, use.token) for use in tokens if use.kind in RESOURCE_KINDS]
    world.simulated += [("capacity-reservation", r) for r in reservations]
    key_name = ((data.get("HeadNode") or {}).get("Ssh") or {}).get("KeyName")
    if isinstance(key_name, str) and key_name:
        world.simulated.append(("key-pair", key_name))
    return world


@functools.lru_cache(maxsize=1)
def _aws_managed_policy_catalog() -> dict[str, Any]:
    """moto's snapshot of AWS managed IAM policies, parsed once per process (4.7 MB of JSON)."""
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    catalog: dict[str, Any] = json.loads(aws_managed_policies_data)
    return catalog


def _add_aws_managed_policies(world: World, text: str) -> None:
    """Make the AWS managed policies the config attaches exist, if AWS really has them.

    moto can load all ~1,400 managed policies into every IAM backend it creates, but that costs ~2 s
    per config; adding just the referenced ones keeps AdditionalIamPolicyValidator real (an ARN that
    is not an AWS managed policy still fails) at no cost.
    """
    from moto.iam.models import AWSManagedPolicy, iam_backends
    from moto.utilities.utils import get_partition

    partition = get_partition(world.region)
    backend = iam_backends[world.account_id][partition]
    catalog = _aws_managed_policy_catalog()
    for arn in sorted(set(MANAGED_POLICY_ARN_RE.findall(text))):
        name = arn.rsplit("/", 1)[1]
        data = catalog.get(name)
        if data is None:
            continue
        policy = AWSManagedPolicy.from_data(name, world.account_id, world.region, data)
        if policy.arn == arn:
            backend.managed_policies[arn] = policy


def _create_policies(world: World, tokens: list[str]) -> None:
    """Customer-managed policies the stacks create (``${Cluster.HeadNodePolicyArn}``...) exist in moto."""
    import boto3

    iam = boto3.client("iam", region_name=world.region)
    statement = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}
    document = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
    for index, token in enumerate(tokens):
        created = iam.create_policy(PolicyName=f"clusterkit-fixture-{index}", PolicyDocument=document)
        world.ids[token] = created["Policy"]["Arn"]


def _create_s3(region: str, text: str, data: dict[str, Any]) -> None:
    import boto3

    s3 = boto3.client("s3", region_name=region)
    buckets = {bucket for bucket, _ in s3_objects(text)}
    buckets |= {name for name in _s3_access_buckets(data) if "*" not in name}
    for bucket in sorted(buckets):
        if region == "us-east-1":
            s3.create_bucket(Bucket=bucket)
        else:
            s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    for bucket, key in s3_objects(text):
        s3.put_object(Bucket=bucket, Key=key, Body=b"#!/usr/bin/env bash\n# clusterkit validate fixture\n")


def _s3_access_buckets(data: dict[str, Any]) -> list[str]:
    names: list[str] = []
    iams = [(data.get("HeadNode") or {}).get("Iam") or {}]
    for queue in (data.get("Scheduling") or {}).get("SlurmQueues") or []:
        iams.append((queue or {}).get("Iam") or {})
    for iam in iams:
        for access in iam.get("S3Access") or []:
            if isinstance(access, dict) and isinstance(access.get("BucketName"), str):
                names.append(access["BucketName"])
    return names


def _first_compute_subnet(world: World, data: dict[str, Any]) -> str:
    for queue in (data.get("Scheduling") or {}).get("SlurmQueues") or []:
        for subnet in ((queue or {}).get("Networking") or {}).get("SubnetIds") or []:
            if subnet in world.ids:
                return world.ids[subnet]
    head = ((data.get("HeadNode") or {}).get("Networking") or {}).get("SubnetId")
    if head in world.ids:
        return world.ids[head]
    import boto3

    ec2 = boto3.client("ec2", region_name=world.region)
    subnet = ec2.create_subnet(VpcId=world.vpc_id, CidrBlock="10.0.250.0/24", AvailabilityZone=f"{world.region}a")
    subnet_id: str = subnet["Subnet"]["SubnetId"]
    return subnet_id


def _fsx_security_groups(world: World) -> list[str]:
    """The file system's own security group, shaped like stacks/network.py's FsxSecurityGroup.

    Lustre ports in and out, to itself and to every security group the config gives the nodes; with no
    such group (PC-managed groups only), to the VPC CIDR.
    """
    import boto3

    ec2 = boto3.client("ec2", region_name=world.region)
    group = ec2.create_security_group(
        GroupName="clusterkit-fixture-fsx", Description=FSX_PORTS_NOTE, VpcId=world.vpc_id
    )["GroupId"]
    peers = sorted({moto_id for moto_id in world.ids.values() if moto_id.startswith("sg-")}) + [group]
    if len(peers) > 1:
        sources: dict[str, Any] = {"UserIdGroupPairs": [{"GroupId": peer} for peer in peers]}
    else:
        sources = {"IpRanges": [{"CidrIp": VPC_CIDR}], "UserIdGroupPairs": [{"GroupId": group}]}
    rules = [{"IpProtocol": "tcp", "FromPort": low, "ToPort": high, **sources} for low, high in LUSTRE_PORTS]
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=rules)
    ec2.revoke_security_group_egress(
        GroupId=group, IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    )
    ec2.authorize_security_group_egress(GroupId=group, IpPermissions=rules)
    return [group]


def _create_fsx(world: World, fsx_tokens: list[str], data: dict[str, Any]) -> None:
    if not fsx_tokens:
        return
    import boto3
    from moto.fsx.models import fsx_backends

    fsx = boto3.client("fsx", region_name=world.region)
    ec2 = boto3.client("ec2", region_name=world.region)
    subnet = _first_compute_subnet(world, data)
    groups = _fsx_security_groups(world)
    backend = fsx_backends[world.account_id][world.region]
    for token in fsx_tokens:
        target = token if token.startswith("fs-") else _fsx_standin(token)
        created = fsx.create_file_system(
            FileSystemType="LUSTRE",
            StorageCapacity=1200,
            StorageType="SSD",
            SubnetIds=[subnet],
            SecurityGroupIds=groups,
            LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
        )["FileSystem"]
        eni = ec2.create_network_interface(SubnetId=subnet, Groups=groups, Description=f"fsx {target}")
        eni_id = eni["NetworkInterface"]["NetworkInterfaceId"]
        _rekey_file_system(backend, created["FileSystemId"], target, world, eni_id)
        world.ids[token] = target


def _rekey_file_system(backend: Any, old_id: str, new_id: str, world: World, eni_id: str) -> None:
    """Give a moto file system the 17-character id PC expects and the fields moto leaves out."""
    file_system = backend.file_systems.pop(old_id)
    file_system.file_system_id = new_id
    file_system.dns_name = f"{new_id}.fsx.{world.region}.amazonaws.com"
    file_system.resource_arn = f"arn:aws:fsx:{world.region}:{world.account_id}:file-system/{new_id}"
    moto_to_dict = file_system.to_dict
    vpc_id = world.vpc_id

    def to_dict() -> dict[str, Any]:
        described: dict[str, Any] = moto_to_dict()
        described.setdefault("VpcId", vpc_id)
        described.setdefault("NetworkInterfaceIds", [eni_id])
        described.setdefault("Lifecycle", "AVAILABLE")
        lustre = dict(described.get("LustreConfiguration") or {})
        lustre.setdefault("MountName", "fixture")
        described["LustreConfiguration"] = lustre
        return described

    file_system.to_dict = to_dict
    backend.file_systems[new_id] = file_system


def _create_key_pair(ec2: Any, data: dict[str, Any]) -> None:
    key_name = (((data.get("HeadNode") or {}).get("Ssh") or {}).get("KeyName"))
    if isinstance(key_name, str) and key_name:
        ec2.create_key_pair(KeyName=key_name, KeyType="ed25519")


def create_official_ami(region: str, os_name: str, architecture: str) -> str:
    """Register an image shaped like a ParallelCluster official AMI and return its id.

    moto's RegisterImage takes only a name, so the image is built with moto's own model class to give
    it an architecture, an owner alias and a root device. Its root volume is moto's fixed 15 GiB.
    Name and ``parallelcluster:version`` tag carry the installed ParallelCluster's version, the value PC
    itself matches them against (``pcluster.utils.get_installed_version`` in ``Ec2Client.
    _get_official_image_name_prefix`` and ``CustomAmiTagValidator``); tests/pcluster/test_pc_version.py
    pins that version to ``clusterkit.DEFAULT_PC_VERSION``.
    """
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami
    from moto.ec2.utils import random_ami_id
    from pcluster.utils import get_installed_version

    version = get_installed_version()

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    ami_id = random_ami_id()
    backend.amis[ami_id] = Ami(
        backend,
        ami_id,
        name=f"aws-parallelcluster-{version}-{os_name}-hvm-{architecture}-clusterkit-fixture",
        owner_alias="amazon",
        public=True,
        virtualization_type="hvm",
        architecture=architecture,
        root_device_type="ebs",
        root_device_name="/dev/xvda",
        region_name=f"{region}a",
        tags={"parallelcluster:os": os_name, "parallelcluster:version": version},
    )
    return ami_id
