"""Inside a cluster stack on a platform: the platform's ids, imported from its exports, and the cluster's own
node security group, opened to the platform's file system.

Why exports (``Fn::ImportValue``), not SSM parameters: CloudFormation then knows which cluster stacks use the
platform, and refuses to delete the platform, or to change an id a cluster runs on, while one does; an SSM
parameter would let the platform go from under running clusters. The price, and the way through it:
docs/operations.md "Platform and cluster lifecycles".

Why a node group per cluster, not one on the platform: clusters of different teams share the platform, and the
EFA rule admits all traffic within a group; one group would open every cluster's nodes to every other's. The
Lustre rules this cluster adds to the platform's FSx group live in this stack and go with it.
"""
from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from clusterkit.effective.expand import PlatformRef
from clusterkit.spec.naming import export_name
from stacks.security_groups import node_group, open_lustre

NETWORK_EXPORTS = ("VpcId", "HeadNodeSubnetId", "ComputeSubnetId", "FsxSecurityGroupId")
STORAGE_EXPORTS = ("FileSystemId",)


class PlatformLink(Construct):
    """The platform's VPC, subnets and file system as this stack sees them, and the cluster's node group."""

    def __init__(self, scope: Construct, construct_id: str, *, platform: PlatformRef, cluster_name: str,
                 availability_zone: str) -> None:
        super().__init__(scope, construct_id)
        imports = {key: cdk.Fn.import_value(export_name(platform.network_stack, key)) for key in NETWORK_EXPORTS}
        imports |= {key: cdk.Fn.import_value(export_name(platform.storage_stack, key)) for key in STORAGE_EXPORTS}
        self.head_node_subnet_id = imports["HeadNodeSubnetId"]
        self.compute_subnet_id = imports["ComputeSubnetId"]
        self.file_system_id = imports["FileSystemId"]
        vpc = ec2.Vpc.from_vpc_attributes(self, "Vpc", vpc_id=imports["VpcId"],
                                          availability_zones=[availability_zone])
        fsx = ec2.SecurityGroup.from_security_group_id(self, "FsxSecurityGroup", imports["FsxSecurityGroupId"],
                                                       allow_all_outbound=False, mutable=True)
        self.security_group = node_group(self, "ClusterSecurityGroup", vpc=vpc, cluster_name=cluster_name)
        open_lustre(nodes=self.security_group, fsx=fsx)

    def lustre_rules(self) -> list[cdk.CfnResource]:
        """The rule resources between the node group and the platform's FSx group, for the cluster to depend on."""
        return [c for c in self.node.find_all()
                if isinstance(c, (ec2.CfnSecurityGroupIngress, ec2.CfnSecurityGroupEgress))]
