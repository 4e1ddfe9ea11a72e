"""The node and FSx security groups' rules, in one place for a cluster's own network stack and for a cluster
stack on a platform (which makes its own node group and opens the platform's FSx group to it).

EFA needs all traffic to and from the group itself, in BOTH directions as explicit self-references:
ParallelCluster's EfaSecurityGroupValidator does not count 0.0.0.0/0 egress. The L2 drops any egress rule when
allow_all_outbound is on and refuses an all-traffic rule when it is off, so the self egress is an L1 rule next
to the L2's 0.0.0.0/0 one. Lustre clients must also accept 988/1018-1023 from the file servers (FSx user guide,
client rules). Descriptions stay constant: a changed group description replaces the group, and FSx's
SecurityGroupIds cannot change without replacing the file system.
"""
from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

# Lustre: LNet on 988, and the 1018-1023 range FSx file servers and clients connect from/to.
LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))


def node_group(scope: Construct, construct_id: str, *, vpc: ec2.IVpc, cluster_name: str) -> ec2.SecurityGroup:
    """The one group of a cluster's head and compute nodes: all traffic within it (EFA, Slurm), egress anywhere."""
    group = ec2.SecurityGroup(
        scope, construct_id, vpc=vpc, allow_all_outbound=True,
        description=f"ClusterKit {cluster_name} nodes: all traffic within the group (EFA), egress to anywhere")
    group.add_ingress_rule(group, ec2.Port.all_traffic(), "EFA and Slurm between cluster nodes")
    ec2.CfnSecurityGroupEgress(group, "SelfEgress", group_id=group.security_group_id, ip_protocol="-1",
                               destination_security_group_id=group.security_group_id,
                               description="EFA between cluster nodes")
    return group


def fsx_group(scope: Construct, construct_id: str, *, vpc: ec2.IVpc, owner: str,
              nodes: ec2.ISecurityGroup | None) -> ec2.SecurityGroup:
    """The file system's group: Lustre among its own file servers, and with ``nodes`` when given (a platform's
    file system gets no node group here: each cluster stack on it opens its own, ``open_lustre``)."""
    group = ec2.SecurityGroup(
        scope, construct_id, vpc=vpc, allow_all_outbound=False,
        description=f"ClusterKit {owner} FSx for Lustre: Lustre ports from cluster nodes and file servers")
    for port in LUSTRE_PORTS:
        group.add_ingress_rule(group, port, "Lustre between FSx file servers")
        if nodes is not None:
            group.add_ingress_rule(nodes, port, "Lustre from cluster nodes")
        group.add_egress_rule(group, port, "Lustre between FSx file servers")
        if nodes is not None:
            group.add_egress_rule(nodes, port, "Lustre to cluster nodes")
            nodes.add_ingress_rule(group, port, "Lustre from FSx file servers")
    return group


def open_lustre(*, nodes: ec2.ISecurityGroup, fsx: ec2.ISecurityGroup) -> None:
    """Lustre both ways between a cluster's nodes and a platform's file system (rules on both groups; those on
    the platform's group live in the cluster stack and go with it)."""
    for port in LUSTRE_PORTS:
        fsx.add_ingress_rule(nodes, port, "Lustre from cluster nodes")
        fsx.add_egress_rule(nodes, port, "Lustre to cluster nodes")
        nodes.add_ingress_rule(fsx, port, "Lustre from FSx file servers")
