"""Semantic rules over a parsed spec: what ParallelCluster, EC2 and FSx would reject, found before deploy.

Each rule yields ``Problem``s located through the spec's ``Marks``. Facts about instance types and
regions come from the committed catalog (``clusterkit/data``), so validation is offline.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from clusterkit import DEFAULT_PC_VERSION
from clusterkit.catalog import lookup as catalog
from clusterkit.effective.expand import created_fsx, efa_enabled, expand_spec, fsx_throughput, image_store, new_vpc
from clusterkit.effective.node_settings import setting_field
from clusterkit.images.ref import ImageRefError, parse_image_ref
from clusterkit.rules import aws_limits
from clusterkit.rules import compat_rules as compat
from clusterkit.spec import warning_ids
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec, ComputeResource, Queue
from clusterkit.spec.yaml_reader import Marks, did_you_mean
from clusterkit_node import settings as node
from clusterkit_node.layout import image_name_problem

MIN_PC_VERSION = (3, 11, 1)  # first version whose official AMIs ship Enroot + Pyxis (disabled)
# newest version whose schema ClusterKit renders and tests against
MAX_PC_VERSION = tuple(int(part) for part in DEFAULT_PC_VERSION.split("."))
MAX_QUEUES = 50
MAX_COMPUTE_RESOURCES = 50
AWS_RESERVED_IPS_PER_SUBNET = 5
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

CLUSTER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,59}")
QUEUE_NAME = re.compile(r"[a-z][a-z0-9-]{0,24}")
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
}


def check(spec: ClusterSpec, marks: Marks) -> list[Problem]:
    """Every rule, in spec order; errors and warnings together."""
    problems: list[Problem] = []
    for rule in (_identity, _network, _head_node, _storage, _queues, _containers, _compat, _misc, aws_limits.check,
                 _acknowledge):
        problems.extend(rule(spec, marks))
    # Catch-alls, after the specific rules (whose messages say more): each field once.
    reported = {p.path for p in problems if p.level == "error"}
    for rule in (_node_settings, _control_characters):
        for problem in rule(spec, marks):
            if problem.path not in reported:
                reported.add(problem.path)
                problems.append(problem)
    return problems


def _node_settings(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """Every KEY=VALUE the spec gives the nodes, against the nodes' own contract (clusterkit_node/settings.py):
    a value validate accepts is one no node refuses at boot."""
    for line in expand_spec(spec).node.head:  # malformed image references are the images' own rule
        key, _, value = line.partition("=")
        setting = node.BY_KEY[key]
        problem = setting.problem(value)
        if problem:
            yield m.problem(setting_field(spec, key), problem, setting.hint)


def _control_characters(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """No newline, tab or other control character in any value: values reach files, shells and AWS APIs."""
    for path, value in _strings(spec, ""):
        if any(not c.isprintable() for c in value):
            yield m.problem(path, f"{value!r} contains a control character (newline, tab, ...)",
                            "write it on one line; a YAML block scalar (| or >) keeps its final newline")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}")


def _compat(spec: ClusterSpec, m: Marks) -> list[Problem]:
    """Expected image versions against clusterkit/data/compat_rules.json (warnings; nodes re-check the
    versions recorded at import, with their NVIDIA driver, at boot)."""
    return compat.expect_problems(spec, m)


# OS values ParallelCluster accepts that ClusterKit's nodes cannot run on, and why.
UNSUPPORTED_OS = {
    # the cookbook installs the distro python3 on rhel8, which is 3.6; the node tools need 3.9+
    "rhel8": "its python3 is 3.6 and ClusterKit's node tools need Python 3.9 or later",
}


def parse_version(text: str) -> tuple[int, ...] | None:
    return tuple(int(p) for p in text.split(".")) if re.fullmatch(r"\d+\.\d+\.\d+", text) else None


def _identity(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    if not CLUSTER_NAME.fullmatch(spec.name):
        yield m.problem("name", f"'{spec.name}' is not a valid ParallelCluster cluster name",
                        "start with a letter; letters, digits and hyphens; at most 60 characters")
    azs = catalog.region_azs(spec.region)
    if azs is None:
        yield m.problem("region", f"unknown region '{spec.region}'", did_you_mean(spec.region, catalog.regions()))
    elif spec.availability_zone not in azs:
        yield m.problem("availability_zone", f"'{spec.availability_zone}' is not in {spec.region}",
                        f"one of {', '.join(azs)}")
    if spec.account is not None and not IDS["account"].fullmatch(spec.account):
        yield m.problem("account", f"'{spec.account}' is not a 12-digit account id")
    if spec.os in UNSUPPORTED_OS:
        yield m.problem("os", f"{spec.os} is not supported: {UNSUPPORTED_OS[spec.os]}",
                        "use rhel9, alinux2023, ubuntu2204 or ubuntu2404")
    version = parse_version(spec.parallelcluster_version)
    if version is None:
        yield m.problem("parallelcluster_version",
                        f"'{spec.parallelcluster_version}' is not a version like {DEFAULT_PC_VERSION}")
    elif version < MIN_PC_VERSION:
        yield m.problem("parallelcluster_version", f"{spec.parallelcluster_version} is too old",
                        "ParallelCluster 3.11.1 or later ships Enroot and Pyxis on its official AMIs")
    elif version > MAX_PC_VERSION:
        yield m.problem("parallelcluster_version", f"{spec.parallelcluster_version} is newer than ClusterKit supports",
                        f"supported: {'.'.join(map(str, MIN_PC_VERSION))} to {DEFAULT_PC_VERSION}")


def interfaces_per_node(resource: ComputeResource) -> int:
    """IP addresses one node takes in the compute subnet: one per EFA interface, else one."""
    facts = catalog.instance_type(resource.instance_type)
    if facts is None:
        return 1
    return max(1, facts.max_efa_interfaces) if efa_enabled(resource) else 1


def compute_ips_needed(spec: ClusterSpec) -> int:
    head = 0 if spec.network.head_node_public else 1
    return head + sum(cr.max * interfaces_per_node(cr) for q in spec.queues for cr in q.compute_resources)


def _subnet_room(spec: ClusterSpec, m: Marks, path: str, cidr: str) -> Iterator[Problem]:
    try:
        net = ipaddress.ip_network(cidr)
    except ValueError:
        return
    usable = net.num_addresses - AWS_RESERVED_IPS_PER_SUBNET
    needed = compute_ips_needed(spec)
    if needed > usable:
        bits = max(16, 32 - (needed + AWS_RESERVED_IPS_PER_SUBNET - 1).bit_length())
        yield m.problem(path, f"compute subnet has {usable} usable addresses but max nodes need {needed}",
                        f"EFA takes one address per interface; use a /{bits} or fewer max nodes")


def _network(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    net = spec.network
    if net.new is not None and net.existing is not None:
        yield m.problem("network.existing", "give either network.new or network.existing, not both")
        return
    if net.existing is not None:
        ex = net.existing
        for key, kind in (("vpc_id", "vpc"), ("head_node_subnet_id", "subnet"), ("compute_subnet_id", "subnet")):
            value = getattr(ex, key)
            if not IDS[kind].fullmatch(value):
                yield m.problem(f"network.existing.{key}", f"'{value}' is not a {kind} id",
                                f"like {kind}-0123456789abcdef0")
        if ex.compute_subnet_cidr is not None:
            if _bad_cidr(ex.compute_subnet_cidr):
                yield m.problem("network.existing.compute_subnet_cidr",
                                f"'{ex.compute_subnet_cidr}' is not an IPv4 CIDR")
            else:
                yield from _subnet_room(spec, m, "network.existing.compute_subnet_cidr", ex.compute_subnet_cidr)
        return
    vpc = new_vpc(net)
    assert vpc is not None
    base = "network.new"
    if _bad_cidr(vpc.cidr):
        yield m.problem(f"{base}.cidr", f"'{vpc.cidr}' is not an IPv4 CIDR", "like 10.0.0.0/16")
        return
    vpc_net = ipaddress.ip_network(vpc.cidr)
    if not 16 <= vpc_net.prefixlen <= 24:
        yield m.problem(f"{base}.cidr", f"VPC prefix /{vpc_net.prefixlen} is outside /16../24 (the VPC limit is /16)")
    for key in ("public_subnet_mask", "compute_subnet_mask"):
        mask = getattr(vpc, key)
        if not vpc_net.prefixlen <= mask <= 28:
            yield m.problem(f"{base}.{key}", f"/{mask} does not fit in the VPC {vpc.cidr}",
                            f"between /{vpc_net.prefixlen} and /28")
    if vpc_net.prefixlen <= min(vpc.public_subnet_mask, vpc.compute_subnet_mask) <= 28:
        space = 2 ** (32 - vpc.public_subnet_mask) + 2 ** (32 - vpc.compute_subnet_mask)
        if space > vpc_net.num_addresses:
            yield m.problem(f"{base}.compute_subnet_mask", f"public /{vpc.public_subnet_mask} and compute "
                            f"/{vpc.compute_subnet_mask} subnets do not both fit in {vpc.cidr}")
        else:
            compute = f"{vpc_net.network_address}/{vpc.compute_subnet_mask}"
            yield from _subnet_room(spec, m, f"{base}.compute_subnet_mask", compute)
    if vpc.flow_logs_retention_days not in LOG_RETENTION_DAYS:
        yield m.problem(f"{base}.flow_logs_retention_days",
                        f"{vpc.flow_logs_retention_days} is not a CloudWatch retention",
                        _nearest(vpc.flow_logs_retention_days, LOG_RETENTION_DAYS))


def _bad_cidr(text: str) -> bool:
    try:
        return ipaddress.ip_network(text).version != 4
    except ValueError:
        return True


def _nearest(value: int, allowed: set[int]) -> str:
    return f"nearest allowed: {min(allowed, key=lambda a: abs(a - value))}"


def _instance(m: Marks, path: str, name: str) -> Iterator[Problem]:
    if catalog.instance_type(name) is None:
        yield m.problem(path, f"unknown instance type '{name}'", did_you_mean(name, catalog.instance_type_names()))


def _head_node(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    yield from _instance(m, "head_node.instance_type", spec.head_node.instance_type)
    if spec.head_node.root_volume_gib < MIN_HEAD_ROOT_GIB:
        yield m.problem("head_node.root_volume_gib",
                        f"{spec.head_node.root_volume_gib} GiB is below the AMI's root size",
                        f"at least {MIN_HEAD_ROOT_GIB}")


def _storage(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    fsx = spec.storage.fsx_lustre
    base = "storage.fsx_lustre"
    if fsx.new is not None and fsx.existing is not None:
        yield m.problem(f"{base}.existing", "give either new or existing, not both")
    elif fsx.existing is not None and not IDS["fs"].fullmatch(fsx.existing.file_system_id):
        yield m.problem(f"{base}.existing.file_system_id", f"'{fsx.existing.file_system_id}' is not an FSx id",
                        "fs- followed by 17 lowercase hex characters")
    new = created_fsx(fsx)
    if new is not None and fsx.existing is None:
        nb = f"{base}.new"
        if not (new.capacity_gib == 1200 or (new.capacity_gib > 0 and new.capacity_gib % 2400 == 0)):
            up = max(2400, -(-new.capacity_gib // 2400) * 2400)
            yield m.problem(f"{nb}.capacity_gib", f"{new.capacity_gib} GiB is not a valid Lustre capacity",
                            f"1200 or a multiple of 2400, e.g. {1200 if new.capacity_gib < 1200 else up}")
        allowed = FSX_THROUGHPUT[new.deployment_type]
        if not allowed and new.throughput_mb_per_tib is not None:
            yield m.problem(f"{nb}.throughput_mb_per_tib", f"{new.deployment_type} has no per-unit throughput setting",
                            "set it to null")
        elif allowed and fsx_throughput(new) not in allowed:
            yield m.problem(f"{nb}.throughput_mb_per_tib",
                            f"{fsx_throughput(new)} is not allowed for {new.deployment_type}",
                            f"one of {', '.join(map(str, allowed))}")
        if new.kms_key_arn is not None and aws_limits.kms_key_region(new.kms_key_arn) is None:
            yield m.problem(f"{nb}.kms_key_arn", "not a KMS key ARN", "arn:aws:kms:<region>:<account>:key/<uuid>")
        elif new.kms_key_arn is not None and not new.deployment_type.startswith("PERSISTENT"):
            yield m.problem(f"{nb}.kms_key_arn", f"{new.deployment_type} cannot use a customer-managed KMS key",
                            "scratch file systems are encrypted with an AWS-managed key; use PERSISTENT_2")
    if (not re.fullmatch(r"/[A-Za-z0-9._/-]*", fsx.mount_dir)
            or fsx.mount_dir.rstrip("/") in ("", "/home", "/opt/slurm")):
        yield m.problem(f"{base}.mount_dir", f"'{fsx.mount_dir}' is not a usable mount point",
                        "an absolute path like /fsx")
    elif not image_store(fsx).startswith(fsx.mount_dir.rstrip("/") + "/"):
        yield m.problem(f"{base}.image_store", f"'{image_store(fsx)}' is not inside mount_dir {fsx.mount_dir}",
                        f"e.g. {fsx.mount_dir.rstrip('/')}/containers")


def _queues(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    if not spec.queues:
        yield m.problem("queues", "at least one queue is required")
    if len(spec.queues) > MAX_QUEUES:
        yield m.problem("queues", f"{len(spec.queues)} queues; ParallelCluster allows {MAX_QUEUES}")
    total = sum(len(q.compute_resources) for q in spec.queues)
    if total > MAX_COMPUTE_RESOURCES:
        yield m.problem("queues",
                        f"{total} compute resources; ParallelCluster allows {MAX_COMPUTE_RESOURCES} per cluster")
    yield from _duplicates(m, [(f"queues[{i}].name", q.name) for i, q in enumerate(spec.queues)], "queue")
    arches: dict[str, str] = {}
    for i, queue in enumerate(spec.queues):
        yield from _queue(spec, m, f"queues[{i}]", queue, arches)
    if len(set(arches.values())) > 1:
        path = sorted(arches)[-1]
        shown = ", ".join(f"{p.split('.instance_type')[0]}={a}" for p, a in sorted(arches.items()))
        yield m.problem(path, "compute resources mix CPU architectures", f"one image platform per cluster: {shown}")
    head = catalog.instance_type(spec.head_node.instance_type)
    if head is not None and arches and head.arch not in arches.values():
        compute = sorted(set(arches.values()))[0]
        yield m.problem("head_node.instance_type", f"{spec.head_node.instance_type} is {head.arch}, the compute "
                        f"nodes are {compute}", "ParallelCluster needs one architecture for head and compute nodes")


def _queue(spec: ClusterSpec, m: Marks, qp: str, queue: Queue, arches: dict[str, str]) -> Iterator[Problem]:
    if queue.root_volume_gib is not None and not MIN_HEAD_ROOT_GIB <= queue.root_volume_gib <= MAX_EBS_GIB:
        yield m.problem(f"{qp}.root_volume_gib", f"{queue.root_volume_gib} GiB is not a usable root volume",
                        f"{MIN_HEAD_ROOT_GIB} (the AMI's root snapshot) to {MAX_EBS_GIB} (the EBS gp3 limit)")
    if not QUEUE_NAME.fullmatch(queue.name) or queue.name in RESERVED_NAMES:
        yield m.problem(f"{qp}.name", f"'{queue.name}' is not a valid queue name",
                        "lowercase letter first; lowercase letters, digits, hyphens; at most 25; not 'default'")
    if not queue.compute_resources:
        yield m.problem(f"{qp}.compute_resources", "a queue needs at least one compute resource")
    yield from _duplicates(m, [(f"{qp}.compute_resources[{j}].name", cr.name)
                               for j, cr in enumerate(queue.compute_resources)], "compute resource")
    block = queue.capacity_type == "capacity_block"
    if block and queue.placement_group:
        yield m.problem(f"{qp}.placement_group", "capacity blocks cannot use a placement group",
                        "the reservation already fixes placement; remove placement_group")
    for j, cr in enumerate(queue.compute_resources):
        cp = f"{qp}.compute_resources[{j}]"
        if not RESOURCE_NAME.fullmatch(cr.name) or cr.name in RESERVED_NAMES:
            yield m.problem(f"{cp}.name", f"'{cr.name}' is not a valid compute resource name",
                            "lowercase letter first; lowercase letters, digits, hyphens; at most 25; not 'default'")
        yield from _instance(m, f"{cp}.instance_type", cr.instance_type)
        facts = catalog.instance_type(cr.instance_type)
        if facts is not None:
            arches[f"{cp}.instance_type"] = facts.arch
            if cr.efa and not facts.efa_supported:
                yield m.problem(f"{cp}.efa", f"{cr.instance_type} does not support EFA",
                                "set efa: false or pick an EFA type")
            az_known = spec.availability_zone in (catalog.region_azs(spec.region) or [])
            offered = catalog.offered_azs(spec.region, cr.instance_type) if az_known else None
            if offered is not None and spec.availability_zone not in offered:
                where = ", ".join(offered) if offered else "no AZ"
                yield m.problem(f"{cp}.instance_type", f"{cr.instance_type} is not offered in {spec.availability_zone}",
                                f"catalog lists {where}", level="warning", id="instance-type-not-in-az")
        if cr.min < 0:
            yield m.problem(f"{cp}.min", f"must be >= 0 (got {cr.min})")
        if cr.max < 1:
            yield m.problem(f"{cp}.max", f"must be >= 1 (got {cr.max})")
        elif cr.max < cr.min:
            yield m.problem(f"{cp}.max", f"must be >= min ({cr.max} < {cr.min})")
        if cr.capacity_reservation_id is not None and not IDS["cr"].fullmatch(cr.capacity_reservation_id):
            yield m.problem(f"{cp}.capacity_reservation_id", f"'{cr.capacity_reservation_id}' is not a reservation id",
                            "cr- followed by 17 lowercase hex characters")
        if block:
            if cr.capacity_reservation_id is None:
                yield m.problem(cp, "capacity_block needs capacity_reservation_id",
                                "the cr-... id of the capacity block")
            if cr.min != cr.max or cr.max < 1:
                yield m.problem(f"{cp}.min", f"capacity_block needs min == max > 0 (min {cr.min}, max {cr.max})",
                                "set both to the block's instance count")
        elif queue.capacity_type == "spot" and cr.capacity_reservation_id is not None:
            yield m.problem(f"{cp}.capacity_reservation_id", "spot capacity cannot use a capacity reservation",
                            "use capacity_type: ondemand or capacity_block")


def _duplicates(m: Marks, named: list[tuple[str, str]], what: str) -> Iterator[Problem]:
    counts = Counter(name for _, name in named)
    seen: set[str] = set()
    for path, name in named:
        if counts[name] > 1 and name in seen:
            yield m.problem(path, f"duplicate {what} name '{name}'", "names must be unique")
        seen.add(name)


# Pyxis on ParallelCluster's official AMIs, where verified in aws-parallelcluster-cookbook
# (default['cluster']['pyxis']['version']: tags v3.11.0 and v3.11.1 pin 0.20.0; later attribute files pin
# 0.24.0, but no release could be tied to them). Any other supported release is assumed to ship the
# oldest, so an option is accepted only where every AMI of the release knows it. The release that added
# each option is in bootstrap_scripts/enroot.sh (CK_PYXIS_OPTION_SINCE), which filters the plugstack line.
PC_PYXIS: dict[tuple[int, ...], tuple[int, ...]] = {(3, 11, 0): (0, 20, 0), (3, 11, 1): (0, 20, 0)}
OLDEST_PC_PYXIS = (0, 20, 0)
PYXIS_OPTION_SINCE = {"use_enroot_load": (0, 21, 0), "use_squashfuse": (0, 24, 0), "importer": (0, 24, 0)}


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in version)


def _containers(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    c = spec.containers
    pc = parse_version(spec.parallelcluster_version)
    pyxis = PC_PYXIS.get(pc, OLDEST_PC_PYXIS) if pc else OLDEST_PC_PYXIS
    since = PYXIS_OPTION_SINCE["use_enroot_load"]
    if c.pyxis.use_enroot_load and pyxis < since:
        yield m.problem("containers.pyxis.use_enroot_load",
                        f"needs pyxis >= {_dotted(since)}, and ParallelCluster {spec.parallelcluster_version} "
                        f"AMIs are only known to ship pyxis {_dotted(pyxis)}",
                        "remove it: where the node's pyxis is older the head node leaves it out (an unknown "
                        "option would stop slurmd), so it would not take effect")
    squash = node.squash_options_problem(c.enroot.squash_options)
    if squash:
        yield m.problem("containers.enroot.squash_options", squash, f"e.g. {node.DEFAULT_SQUASH_OPTIONS}")
    for key, setting in (("transfer_retries", "ENROOT_TRANSFER_RETRIES"),
                         ("connect_timeout_s", "ENROOT_CONNECT_TIMEOUT"),
                         ("transfer_timeout_s", "ENROOT_TRANSFER_TIMEOUT")):
        value, high = getattr(c.enroot, key), node.max_digits(setting)
        if not 0 <= value <= high:
            yield m.problem(f"containers.enroot.{key}", f"{value} is outside 0..{high}",
                            f"the nodes accept {node.BY_KEY[setting].hint}, up to {high}")
    images = [(f"containers.images[{i}].name", img.name) for i, img in enumerate(c.images)]
    yield from _duplicates(m, images, "image")
    for i, img in enumerate(c.images):
        ip = f"containers.images[{i}]"
        if img.name.endswith((".sqsh", ".json", ".lock")):
            yield m.problem(f"{ip}.name", f"'{img.name}' collides with the image store's own files",
                            "drop the .sqsh/.json/.lock ending")
        elif not IMAGE_NAME.fullmatch(img.name):
            yield m.problem(f"{ip}.name", f"{node.show(img.name)} is not a valid image name",
                            "lowercase letters, digits, '.', '_', '-'; it becomes <store>/<name>.sqsh")
        elif image_name_problem(img.name) is not None:  # the nodes' own rule (clusterkit_node/layout.py)
            yield m.problem(f"{ip}.name", f"'{img.name}' collides with the image store's own files",
                            "the nodes' lock reader reserves manifest.json and names starting with manifest.json.")
        try:
            parse_image_ref(img.uri)
        except ImageRefError as exc:
            yield m.problem(f"{ip}.uri", f"malformed image reference '{img.uri}': {exc}")
        for key, value in img.expect.as_dict().items():
            if not re.fullmatch(r"\d+(\.\d+){0,3}", value):
                yield m.problem(f"{ip}.expect.{key}", f"'{value}' is not a version like 12.9 or 2.29.3")


def _misc(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    if spec.scheduling.scaledown_idletime_minutes < 1:
        yield m.problem("scheduling.scaledown_idletime_minutes", "must be >= 1")
    if spec.monitoring.log_retention_days not in PC_LOG_RETENTION_DAYS:
        yield m.problem("monitoring.log_retention_days",
                        f"{spec.monitoring.log_retention_days} is not a retention ParallelCluster accepts",
                        _nearest(spec.monitoring.log_retention_days, PC_LOG_RETENTION_DAYS))
    ttl = spec.lifecycle.ttl_hours
    if ttl is not None and not TTL_MIN_HOURS <= ttl <= TTL_MAX_HOURS:
        yield m.problem("lifecycle.ttl_hours", f"{ttl:g} is outside {TTL_MIN_HOURS:g}..{TTL_MAX_HOURS:g} hours",
                        f"at least {TTL_MIN_HOURS:g}: the clock starts at the deploy and creating the cluster may take "
                        f"up to an hour (ParallelCluster's custom resource timeout); unset it to keep the cluster")
    email = spec.lifecycle.notify_email
    if email is not None:
        problem = _email_problem(email)
        if problem:
            yield m.problem("lifecycle.notify_email", problem,
                            "one address like ops@example.com; SNS mails it a confirmation link")


def _acknowledge(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """Each entry names a warning id a spec may accept, once, with a reason (the loader applies them)."""
    seen: set[str] = set()
    allowed = warning_ids.acknowledgeable()
    for i, ack in enumerate(spec.acknowledge):
        path = f"acknowledge[{i}]"
        shown = f"'{ack.id}'" if ack.id.isprintable() else repr(ack.id)
        if ack.id in warning_ids.NOT_ACKNOWLEDGEABLE:
            yield m.problem(f"{path}.id", f"{ack.id} cannot be acknowledged", warning_ids.NOT_ACKNOWLEDGEABLE[ack.id])
        elif ack.id not in warning_ids.WARNINGS:
            yield m.problem(f"{path}.id", f"unknown warning id {shown}",
                            did_you_mean(ack.id, allowed) or f"one of {', '.join(allowed)}")
        elif ack.id in seen:
            yield m.problem(f"{path}.id", f"{ack.id} is acknowledged twice", "one entry per id: remove this one")
        seen.add(ack.id)
        if not ACK_REASON.search(ack.reason):
            yield m.problem(f"{path}.reason", "the reason is empty",
                            "say why the warning is accepted, e.g. who decided and until when")


def _email_problem(value: str) -> str | None:
    """Why ``value`` cannot be an SNS email endpoint, shown safely on one line; None when it can."""
    shown = f"'{value}'" if value.isprintable() else repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if not value.isprintable():
        return f"{shown} contains a control or invisible character"
    if len(value) > EMAIL_MAX or len(value.partition("@")[0]) > EMAIL_LOCAL_MAX:
        return f"{shown} is longer than an email address may be ({EMAIL_LOCAL_MAX} before the @, {EMAIL_MAX} in all)"
    if not NOTIFY_EMAIL.fullmatch(value):
        return f"{shown} is not an email address"
    return None
