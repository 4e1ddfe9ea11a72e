"""The rules existing security groups (``network.security_groups``) must already have: EFA and Lustre.

A pure check over DescribeSecurityGroups-shaped data (``SecurityGroups[]`` items: ``GroupId``, ``IpPermissions``,
``IpPermissionsEgress``). Ids in a spec cannot be read offline, so ``clusterkit validate NAME --aws`` reads them
with the user's credentials (``clusterkit.pipeline.account_check``) and hands them here; a test hands moto's.

What each role needs, and from where:

- **EFA** (any EFA compute resource): one of the compute groups allows all traffic (``IpProtocol -1``) IN from
  and OUT to the group itself, named as a group pair. Exactly ParallelCluster 3.16.1's EfaSecurityGroupValidator
  (pcluster/validators/cluster_validators.py ``_all_traffic_allowed``): 0.0.0.0/0 egress does not count, nor does
  a group pair with a port range.
- **Lustre** (TCP 988 and 1018-1023, FSx for Lustre User Guide, "File system access control with Amazon VPC"):
  the file system's groups admit them in and out from every node's groups (ParallelCluster's
  ExistingFsxNetworkingValidator checks port 988 this way: ``_is_access_allowed``, a group pair with one of each
  node's groups, a prefix list, or CIDRs whose union covers the nodes' subnets); the file servers reach each
  other (the file system's groups admit themselves); and the nodes' groups admit them in and out from the file
  system's groups (client rules; stacks/network.py ``_security_groups`` makes the same ones).

Every missing rule is one Problem at the spec item of the group that should get it, with the exact
``aws ec2 authorize-security-group-...`` command that adds it.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusterkit.effective.expand import efa_enabled
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks

LUSTRE_PORTS = ((988, 988), (1018, 1023))
BASE = "network.security_groups"
EFA_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security"


@dataclass(frozen=True)
class Described:
    """What the account said: each group found, by id; each id it does not know, with AWS's message."""

    groups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)
    subnet_cidrs: tuple[str, ...] = ()  # the head and compute subnets' CIDRs, where read


@dataclass(frozen=True)
class _Side:
    """One role's groups as the checks need them: the spec path, the ids that exist, who they are."""

    role: str
    ids: tuple[str, ...]
    label: str

    def item(self, group_id: str, all_ids: Sequence[str]) -> str:
        return f"{BASE}.{self.role}[{list(all_ids).index(group_id)}]"


def ids_of(spec: ClusterSpec) -> list[str]:
    """Every group id the spec names, once, in spec order: what ``--aws`` describes."""
    groups = spec.network.security_groups
    return list(dict.fromkeys([*groups.head_node, *groups.compute, *groups.fsx]))


def check(spec: ClusterSpec, m: Marks, described: Described) -> list[Problem]:
    """One Problem per group that does not exist and per rule a group lacks."""
    groups = spec.network.security_groups
    problems: list[Problem] = []
    for role in ("head_node", "compute", "fsx"):
        for i, group_id in enumerate(getattr(groups, role)):
            if group_id in described.missing:
                why = described.missing[group_id]
                problems.append(m.problem(
                    f"{BASE}.{role}[{i}]", f"{group_id} does not exist in {spec.region} ({why})",
                    f"check the id and the region: aws ec2 describe-security-groups --region {spec.region} "
                    f"--group-ids {group_id}"))

    def side(role: str, label: str) -> _Side:
        return _Side(role, tuple(g for g in getattr(groups, role) if g in described.groups), label)

    head, compute, fsx = side("head_node", "head node"), side("compute", "compute node"), side("fsx", "file system")
    problems += _efa(spec, m, described, compute)
    if fsx.ids and head.ids and compute.ids:
        problems += _lustre(spec, m, described, head=head, compute=compute, fsx=fsx)
    return problems


def _efa(spec: ClusterSpec, m: Marks, described: Described, compute: _Side) -> list[Problem]:
    efa = [f"{q.name}/{cr.name}" for q in spec.queues for cr in q.compute_resources if efa_enabled(cr)]
    if not efa or not compute.ids:
        return []
    for group_id in compute.ids:
        group = described.groups[group_id]
        if _all_traffic_to_itself(group_id, group, "IpPermissions") and \
                _all_traffic_to_itself(group_id, group, "IpPermissionsEgress"):
            return []
    group_id = compute.ids[0]
    group = described.groups[group_id]
    all_ids = spec.network.security_groups.compute
    out = []
    for key, direction, verb in (("IpPermissions", "IN from", "ingress"), ("IpPermissionsEgress", "OUT to", "egress")):
        if not _all_traffic_to_itself(group_id, group, key):
            out.append(m.problem(
                compute.item(group_id, all_ids),
                f"{group_id}: EFA ({', '.join(efa)}) needs all traffic {direction} the group itself, and no compute "
                f"group allows it both ways (0.0.0.0/0 does not count: ParallelCluster's EfaSecurityGroupValidator; "
                f"{EFA_DOC})",
                _command(spec.region, verb, group_id, "-1", None, group_id)))
    return out


def _all_traffic_to_itself(group_id: str, group: Mapping[str, Any], key: str) -> bool:
    """ParallelCluster's ``_all_traffic_allowed``: an all-protocols rule naming the group itself as a pair."""
    for rule in group.get(key) or []:
        if rule.get("IpProtocol") == "-1" and rule.get("UserIdGroupPairs"):
            if any(pair.get("GroupId") == group_id for pair in rule["UserIdGroupPairs"]):
                return True
    return False


def _lustre(spec: ClusterSpec, m: Marks, described: Described, *, head: _Side, compute: _Side,
            fsx: _Side) -> Iterator[Problem]:
    groups = spec.network.security_groups
    # head and compute with the same groups are one side: one line per missing rule, not two alike
    nodes = [_Side("head_node", head.ids, "node")] if head.ids == compute.ids else [head, compute]
    # (whose rules, which direction, from/to whom): the file system's side, the file servers' own, the clients'
    needs = [(fsx, key, peer) for key in ("IpPermissions", "IpPermissionsEgress") for peer in (*nodes, fsx)]
    needs += [(node, key, fsx) for node in nodes for key in ("IpPermissions", "IpPermissionsEgress")]
    for owner, key, peer in needs:
        rules = [rule for g in owner.ids for rule in described.groups[g].get(key) or []]
        for low, high in LUSTRE_PORTS:
            missing = [port for port in range(low, high + 1)
                       if not _port_allowed(rules, port, set(peer.ids), described.subnet_cidrs)]
            for first, last in _ranges(missing):
                target = owner.ids[0]
                ingress = key == "IpPermissions"
                whom = "itself" if peer is owner else f"the {peer.label} groups ({', '.join(peer.ids)})"
                ports = f"{first}" if first == last else f"{first}-{last}"
                yield m.problem(
                    owner.item(target, getattr(groups, owner.role)),
                    f"{target}: Lustre needs TCP {ports} {'IN from' if ingress else 'OUT to'} {whom}, and no "
                    f"{owner.label} group allows it (FSx for Lustre User Guide, file system access control with "
                    "Amazon VPC)",
                    _command(spec.region, "ingress" if ingress else "egress", target, "tcp", (first, last),
                             peer.ids[0]))


def _port_allowed(rules: Iterable[Mapping[str, Any]], port: int, peers: set[str], subnets: Sequence[str]) -> bool:
    """ParallelCluster's ``_is_access_allowed`` for one direction and port: a matching rule with a prefix list, or a
    group pair naming a peer, or matching rules whose CIDRs together cover every subnet (when the subnets were read;
    otherwise only 0.0.0.0/0 covers them)."""
    cidrs: list[ipaddress.IPv4Network] = []
    for rule in rules:
        protocol = str(rule.get("IpProtocol"))
        if protocol != "-1" and not (protocol in ("tcp", "6")
                                     and int(rule.get("FromPort", -2)) <= port <= int(rule.get("ToPort", -2))):
            continue
        if rule.get("PrefixListIds"):
            return True
        if any(pair.get("GroupId") in peers for pair in rule.get("UserIdGroupPairs") or []):
            return True
        for ip_range in rule.get("IpRanges") or []:
            try:
                cidrs.append(ipaddress.IPv4Network(ip_range.get("CidrIp", ""), strict=False))
            except ValueError:
                continue
    if not cidrs:
        return False
    merged = list(ipaddress.collapse_addresses(cidrs))
    targets = [ipaddress.IPv4Network(c, strict=False) for c in subnets] or [ipaddress.IPv4Network("0.0.0.0/0")]
    return all(any(net.supernet_of(t) for net in merged) for t in targets)


def _ranges(ports: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for port in ports:
        if out and out[-1][1] == port - 1:
            out[-1] = (out[-1][0], port)
        else:
            out.append((port, port))
    return out


def _command(region: str, verb: str, group_id: str, protocol: str, ports: tuple[int, int] | None, peer: str) -> str:
    """The one AWS CLI call that adds the missing rule (shorthand ``--ip-permissions``)."""
    span = f",FromPort={ports[0]},ToPort={ports[1]}" if ports else ""
    return (f"aws ec2 authorize-security-group-{verb} --region {region} --group-id {group_id} "
            f"--ip-permissions 'IpProtocol={protocol}{span},UserIdGroupPairs=[{{GroupId={peer}}}]'")
