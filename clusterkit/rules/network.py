"""Network rules: the VPC and subnets a spec creates or names, and whether the compute subnet has an address
for every node's every EFA interface.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from clusterkit.catalog import lookup as catalog
from clusterkit.effective.expand import efa_enabled, new_vpc
from clusterkit.rules.common import nearest
from clusterkit.rules.limits import (
    AWS_RESERVED_IPS_PER_SUBNET,
    IDS,
    LARGEST_SUBNET_PREFIX,
    LOG_RETENTION_DAYS,
    MAX_SECURITY_GROUPS_PER_INTERFACE,
    MAX_SUBNET_ADDRESSES,
)
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec, ComputeResource
from clusterkit.spec.yaml_reader import Marks


def interfaces_per_node(resource: ComputeResource) -> int:
    """IP addresses one node takes in the compute subnet: one per EFA interface, else one."""
    facts = catalog.instance_type(resource.instance_type)
    if facts is None:
        return 1
    return max(1, facts.max_efa_interfaces) if efa_enabled(resource) else 1


def compute_ips_needed(spec: ClusterSpec) -> int:
    head = 0 if spec.network.head_node_public else 1
    # Login pools are rendered into the compute subnet: one address per login node and one for each pool's internal
    # load balancer (one subnet, so one load balancer node).
    login = sum(pool.count + 1 for pool in spec.login_nodes)
    return head + login + sum(cr.max * interfaces_per_node(cr) for q in spec.queues for cr in q.compute_resources)


def _subnet_room(spec: ClusterSpec, m: Marks, path: str, cidr: str) -> Iterator[Problem]:
    try:
        net = ipaddress.ip_network(cidr)
    except ValueError:
        return
    if _beyond_any_subnet(spec, m):
        return  # no subnet could hold them: the max is reported, not this subnet
    usable = net.num_addresses - AWS_RESERVED_IPS_PER_SUBNET
    needed = compute_ips_needed(spec)
    if needed > usable:
        bits = max(16, 32 - (needed + AWS_RESERVED_IPS_PER_SUBNET - 1).bit_length())
        yield m.problem(path, f"compute subnet has {usable} usable addresses but max nodes need {needed}",
                        f"EFA takes one address per interface; use a /{bits} or fewer max nodes")


def _beyond_any_subnet(spec: ClusterSpec, m: Marks) -> list[Problem]:
    """Compute resources whose max nodes need more addresses than the largest subnet AWS allows (a /16): no
    compute subnet, new or existing, could hold them, so the max itself is wrong."""
    problems = []
    for i, queue in enumerate(spec.queues):
        for j, cr in enumerate(queue.compute_resources):
            per_node = interfaces_per_node(cr)
            if cr.max * per_node > MAX_SUBNET_ADDRESSES:
                each = f"each {cr.instance_type} node takes {per_node} (one per EFA interface)" if per_node > 1 \
                    else "each node takes one"
                problems.append(m.problem(
                    f"queues[{i}].compute_resources[{j}].max",
                    f"{cr.max} nodes need more addresses than any subnet has: {each}, and the largest subnet AWS "
                    f"allows (/{LARGEST_SUBNET_PREFIX}) has {MAX_SUBNET_ADDRESSES}",
                    f"at most {MAX_SUBNET_ADDRESSES // per_node}"))
    return problems


SECURITY_GROUP_ROLES = ("head_node", "compute", "fsx")


def _security_groups(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """Existing security groups: ids ParallelCluster takes, no more than a network interface holds, and only
    where they can be right before deploy (their rules: clusterkit/rules/security_groups.py, validate --aws)."""
    groups = spec.network.security_groups
    base = "network.security_groups"
    given = {role: getattr(groups, role) for role in SECURITY_GROUP_ROLES if getattr(groups, role)}
    if not given:
        return
    if spec.network.existing is None:
        yield m.problem(base, "existing security groups need network.existing: a group belongs to one VPC, and the "
                        "VPC ClusterKit creates has none before deploy",
                        "give network.existing with the groups' VPC, or remove network.security_groups", on_key=True)
        return
    for role, ids in given.items():
        if len(ids) > MAX_SECURITY_GROUPS_PER_INTERFACE:
            yield m.problem(f"{base}.{role}", f"{len(ids)} groups, but a network interface takes at most "
                            f"{MAX_SECURITY_GROUPS_PER_INTERFACE} (EC2 quota 'Security groups per network interface')",
                            f"at most {MAX_SECURITY_GROUPS_PER_INTERFACE}")
        seen: set[str] = set()
        for i, value in enumerate(ids):
            if not IDS["sg"].fullmatch(value):
                yield m.problem(f"{base}.{role}[{i}]", f"'{value}' is not a security group id",
                                "like sg-0123456789abcdef0")
            elif value in seen:
                yield m.problem(f"{base}.{role}[{i}]", f"{value} is listed twice", "list each group once")
            seen.add(value)
    missing = [role for role in SECURITY_GROUP_ROLES if role not in given]
    if missing:
        have = next(iter(given))
        yield m.problem(f"{base}.{have}", f"{', '.join(given)} groups are given but {' and '.join(missing)} groups "
                        "are not: each role's groups must admit the others' (head and compute: Slurm and NFS; all "
                        "of them: Lustre), which no existing rule can do for a group ClusterKit creates at deploy",
                        f"give {' and '.join(f'{base}.{r}' for r in missing)} too (the same ids may serve several)")


def network(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    yield from _beyond_any_subnet(spec, m)
    yield from _security_groups(spec, m)
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
                        nearest(vpc.flow_logs_retention_days, LOG_RETENTION_DAYS))


def _bad_cidr(text: str) -> bool:
    try:
        return ipaddress.ip_network(text).version != 4
    except ValueError:
        return True
