"""The numbers and patterns ParallelCluster, EC2, FSx and SNS impose on a spec, each named once.

The rules check against them and the spec's JSON Schema (clusterkit.render.spec_schema) publishes them,
so an editor and ``validate`` refuse the same values.
"""
from __future__ import annotations

import re

from clusterkit import DEFAULT_PC_VERSION
from clusterkit_node.contract.health_plan import LIMITS as HEALTH_PLAN_LIMITS
from clusterkit_node.image.versions import version_key
from clusterkit_node.node.pyxis_conf import OPTION_SINCE

MIN_PC_VERSION = (3, 11, 1)  # first version whose official AMIs ship Enroot + Pyxis (disabled)
# newest version whose schema ClusterKit renders and tests against
MAX_PC_VERSION = tuple(int(part) for part in DEFAULT_PC_VERSION.split("."))
MAX_QUEUES = 50
MAX_COMPUTE_RESOURCES = 50
AWS_RESERVED_IPS_PER_SUBNET = 5
# The largest subnet (and VPC) AWS allows is a /16 (Amazon VPC User Guide, "VPC CIDR blocks": block sizes between
# /16 and /28). Every compute node of a ClusterKit cluster takes its addresses in the one compute subnet, so no
# compute resource can have more nodes than a /16 holds addresses.
LARGEST_SUBNET_PREFIX = 16
MAX_SUBNET_ADDRESSES = 2 ** (32 - LARGEST_SUBNET_PREFIX) - AWS_RESERVED_IPS_PER_SUBNET
# AWS API integers are 32-bit ("Type: Integer" in every API reference; the SDKs read them as int32, e.g. the Rust
# SDK's CreateFileSystemInput.storage_capacity: Option<i32>, CreateCapacityReservation.instance_count:
# Option<i32>): no count or size a spec gives AWS can be larger. Fields without a tighter rule are checked
# against it (rules/check.py).
AWS_INTEGER_MAX = 2 ** 31 - 1
# EC2 CreateCapacityReservation InstanceCount: "Valid range: 1 - 1000" when created; ModifyCapacityReservation grows
# it (by at most 1000 per request), so only the minimum bounds a reservation's size.
MIN_RESERVATION_INSTANCES = 1
# LoginNodes pools, ParallelCluster 3.16.1: at most MAX_NUMBER_OF_LOGIN_NODE_POOLS = 10 (pcluster/constants.py,
# checked by MaxCountValidator in config/cluster_config.py _register_login_node_validators); Count >= 0 and
# GracetimePeriod 3 to 120 (schemas/cluster_schema.py LoginNodesPoolSchema); pool names as queue names (NameValidator).
MAX_LOGIN_POOLS = 10
MIN_LOGIN_COUNT = 0
LOGIN_GRACETIME_MINUTES = (3, 120)
# The node health plan's ranges are the nodes' own (clusterkit_node/contract/health_plan.py LIMITS, which the nodes
# check the plan against): spec field -> (lowest, highest).
HEALTH_LIMITS: dict[str, tuple[int, int]] = {
    "scheduling.health_check_interval_s": HEALTH_PLAN_LIMITS["interval_s"],
    "queues[].health_checks.quick_budget_s": HEALTH_PLAN_LIMITS["quick_budget_s"],
    **{f"queues[].health_checks.deep.{key}": HEALTH_PLAN_LIMITS[key]
       for key in ("every_hours", "budget_s", "dcgm_level", "nccl_min_busbw_gbps")},
}
MIN_HEAD_ROOT_GIB = 40  # the official AMIs' root snapshots are 35 GiB and up
MAX_EBS_GIB = 16384  # ParallelCluster 3.16.1's root-volume limit (validators/ebs_validators.py; EBS allows more)
# lifecycle.ttl_hours: the teardown is created first and counts from the deploy, and creating the cluster
# can take up to an hour (custom resource timeout), so a shorter TTL could delete a cluster still being made.
TTL_MIN_HOURS = 2.0
TTL_MAX_HOURS = 24.0 * 90
PC_LOG_RETENTION_DAYS = {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653}
LOG_RETENTION_DAYS = {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192,
                      2557, 2922, 3288, 3653}
FSX_THROUGHPUT = {"PERSISTENT_2": (125, 250, 500, 1000), "PERSISTENT_1": (50, 100, 200), "SCRATCH_2": ()}
# Versions become AWS values, file names and comparisons: ASCII digits only ([0-9], never \d, which also matches
# Arabic-Indic and other Unicode digits that int() reads as numbers).
PC_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
EXPECT_VERSION = re.compile(r"[0-9]+(\.[0-9]+){0,3}")
CLUSTER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,59}")
QUEUE_NAME = re.compile(r"[a-z][a-z0-9-]{0,24}")
LOGIN_POOL_NAME = QUEUE_NAME  # LoginNodesPool._register_validators runs the same NameValidator
RESOURCE_NAME = QUEUE_NAME  # ParallelCluster's NameValidator applies the same rule to both
RESERVED_NAMES = {"default"}
IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# lifecycle.notify_email becomes an SNS email subscription endpoint: one plain address (RFC 5321 dot-atom local
# part, DNS host names), so nothing else (spaces, commas, quotes, control characters) can reach the template.
NOTIFY_EMAIL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
                          r"@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}")
EMAIL_MAX = 254  # RFC 5321 path limit
EMAIL_LOCAL_MAX = 64
# acknowledge[].reason: some visible text (searched, not matched whole); control characters are the catch-all's
ACK_REASON = re.compile(r"\S")
IDS = {
    "vpc": re.compile(r"vpc-[0-9a-f]{8}([0-9a-f]{9})?"),
    "subnet": re.compile(r"subnet-[0-9a-f]{8}([0-9a-f]{9})?"),
    "fs": re.compile(r"fs-[0-9a-f]{17}"),
    "cr": re.compile(r"cr-[0-9a-f]{17}"),
    "account": re.compile(r"[0-9]{12}"),
    # ParallelCluster 3.16.1's own pattern (pcluster/schemas/common_schema.py ALLOWED_VALUES["security_group_id"]:
    # ^sg-[0-9a-z]{8}$|^sg-[0-9a-z]{17}$), which HeadNode/SlurmQueues Networking.SecurityGroups items must match
    "sg": re.compile(r"sg-[0-9a-z]{8}([0-9a-z]{9})?"),
}
# Security groups one node takes. ParallelCluster 3.16.1's schema sets no length on Networking.SecurityGroups
# (pcluster/schemas/cluster_schema.py BaseNetworkingSchema: fields.List without validate), so the limit is EC2's:
# "Security groups per network interface: 5" (Amazon VPC User Guide, "Amazon VPC quotas", Security groups; adjustable
# to 16 by a quota request, which a spec cannot see). Every EFA interface of a node carries the same groups.
MAX_SECURITY_GROUPS_PER_INTERFACE = 5
# Pyxis on ParallelCluster's official AMIs, where verified in aws-parallelcluster-cookbook
# (default['cluster']['pyxis']['version']: tags v3.11.0 and v3.11.1 pin 0.20.0; later attribute files pin
# 0.24.0, but no release could be tied to them). Any other supported release is assumed to ship the
# oldest, so an option is accepted only where every AMI of the release knows it. The release that added
# each option is the nodes' own table (clusterkit_node/node/pyxis_conf.py OPTION_SINCE, which filters the
# plugstack line): validate reads the same one.
PC_PYXIS: dict[tuple[int, ...], tuple[int, ...]] = {(3, 11, 0): (0, 20, 0), (3, 11, 1): (0, 20, 0)}
OLDEST_PC_PYXIS = (0, 20, 0)
PYXIS_OPTION_SINCE = {option: version_key(release) for option, release in OPTION_SINCE.items()}

# storage.fsx_lustre.mount_dir becomes the cluster's SharedStorage MountDir (clusterkit/render/pcluster_config.py).
# ParallelCluster 3.16.1 refuses these directories themselves (pcluster/validators/cluster_validators.py
# SharedStorageMountDirValidator, reserved_directories; a directory below them is allowed), and its file_path
# pattern (pcluster/schemas/common_schema.py ALLOWED_VALUES) refuses "." and ".." parts, empty parts and a trailing "/".
PC_RESERVED_MOUNT_DIRS = frozenset((
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/media", "/mnt", "/opt", "/opt/parallelcluster",
    "/opt/parallelcluster/shared", "/opt/parallelcluster/shared_login_nodes", "/opt/slurm", "/opt/intel", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
))
# Directories no mount may sit in or below on a ClusterKit node, and what the mount would hide or fail on.
MOUNT_DIR_TREES = {
    "/opt/slurm": "Slurm's installation and configuration",
    "/opt/parallelcluster": "ParallelCluster's own files on every node",
    # the instance-store NVMe of every node that has one (pcluster_config.py EPHEMERAL_MOUNT); ParallelCluster's
    # OverlappingMountDirValidator refuses a shared directory inside an ephemeral one
    "/scratch": "where ParallelCluster mounts the nodes' instance-store NVMe",
    "/proc": "a kernel file system, where no directory can be made",
    "/sys": "a kernel file system, where no directory can be made",
    "/dev": "the device file system",
}
MOUNT_DIR_EXACT = {
    "/": "the root of the file system",
    "/home": "the home directories the head node shares with every node",
    "/lib32": "a system library directory", "/libx32": "a system library directory",
}
