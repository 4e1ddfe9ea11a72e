"""The ``<Name>-Network`` stack: the VPC (new or imported) and the two security groups every node and FSx use.

New VPC: one AZ (EFA and capacity reservations are AZ-bound), a private compute subnet with a NAT
gateway in a small public subnet, S3 and DynamoDB gateway endpoints, optional interface endpoints,
and VPC flow logs. Existing VPC: imported by id without lookups (synth never calls AWS); only the
security groups are created, the VPC's endpoints and flow logs belong to its owner.

Existing security groups (``network.security_groups``, locked-down accounts): no group is created; the spec's
are imported by id and never changed.

Nothing is reachable from the internet: no security group rule admits 0.0.0.0/0 or ::/0; people
reach the head node through SSM Session Manager. The stack outlives clusters and never refers to them.

It reads the effective spec and checks nothing: the loader's rules already refused a compute subnet too
small for max nodes x EFA interfaces (``network.new.compute_subnet_mask``, ``compute_subnet_cidr``).
"""
from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from clusterkit.effective.expand import EffectivePlatform, EffectiveSpec
from clusterkit.spec.model import NewVpc
from clusterkit.spec.naming import export_name
from stacks import scanner_acks
from stacks.security_groups import fsx_group, node_group

# What nodes reach without the NAT gateway when interface_endpoints is on: image pulls from ECR,
# SSM sessions and agent, CloudWatch logs, STS, and ParallelCluster's own CloudFormation/EC2 calls.
INTERFACE_ENDPOINTS = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Ssm": ec2.InterfaceVpcEndpointAwsService.SSM,
    "SsmMessages": ec2.InterfaceVpcEndpointAwsService.SSM_MESSAGES,
    "Ec2Messages": ec2.InterfaceVpcEndpointAwsService.EC2_MESSAGES,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "CloudFormation": ec2.InterfaceVpcEndpointAwsService.CLOUDFORMATION,
    "Ec2": ec2.InterfaceVpcEndpointAwsService.EC2,
}


class NetworkStack(cdk.Stack):
    """VPC, subnets and the node + FSx security groups of one (effective) cluster spec, or of a platform: then
    no node group (each cluster stack on the platform makes its own) and every output is exported for them."""

    vpc: ec2.IVpc
    vpc_id: str
    head_node_subnet_id: str
    compute_subnet_id: str
    cluster_security_group: ec2.ISecurityGroup | None  # None on a platform
    fsx_security_group: ec2.ISecurityGroup
    groups_are_ours: bool  # False where the spec gives existing groups (network.security_groups)

    def __init__(self, scope: Construct, construct_id: str, *, effective: EffectiveSpec | EffectivePlatform,
                 **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.effective = effective
        self.platform = isinstance(effective, EffectivePlatform)
        new = effective.network.new
        if new is not None:
            self._new_vpc(new)
        else:
            self._existing_vpc()
        self.vpc_id = self.vpc.vpc_id
        given = effective.network.security_groups
        self.groups_are_ours = not (given.head_node or given.compute or given.fsx)
        if self.groups_are_ours:
            self.cluster_security_group, self.fsx_security_group = self._security_groups()
        else:
            self.cluster_security_group, self.fsx_security_group = self._existing_security_groups()
        if new is not None and new.interface_endpoints:
            self._interface_endpoints()
        fsx_new = effective.storage.new
        if fsx_new is not None and fsx_new.retain_on_delete and self.groups_are_ours:
            self._retain_what_the_file_system_holds(vpc_is_ours=new is not None)
        self._outputs()

    # --- VPC -------------------------------------------------------------------------------------------

    def _new_vpc(self, cfg: NewVpc) -> None:
        # The compute subnet comes first so it starts at the VPC's base address, where
        # clusterkit.rules.network sized it; the public subnet takes the next aligned block.
        vpc = ec2.Vpc(
            self, "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cfg.cidr),
            availability_zones=[self.effective.availability_zone],  # explicit: no AZ lookup at synth
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Compute", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                                        cidr_mask=cfg.compute_subnet_mask),
                ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC,
                                        cidr_mask=cfg.public_subnet_mask,
                                        map_public_ip_on_launch=self.effective.network.head_node_public),
            ],
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3),
                "DynamoDb": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.DYNAMODB),
            },
            # Nothing uses the default security group; restricting it needs a Lambda custom resource.
            restrict_default_security_group=False,
        )
        for subnet in (*vpc.private_subnets, *vpc.public_subnets):
            # The AZ is the spec's on purpose (EFA, reservations and the FSx subnet are AZ-bound):
            # tell cfn-lint that this literal AZ (W3010) is intended, on these two resources only.
            subnet.node.default_child.add_metadata(  # type: ignore[union-attr]
                "cfn-lint", {"config": {"ignore_checks": ["W3010"]}})
        self.vpc = vpc
        self._compute_subnet = vpc.private_subnets[0]
        self.compute_subnet_id = self._compute_subnet.subnet_id
        public = vpc.public_subnets[0]
        self.head_node_subnet_id = (public.subnet_id if self.effective.network.head_node_public
                                    else self.compute_subnet_id)
        self._flow_logs(vpc, cfg.flow_logs_retention_days)

    def _flow_logs(self, vpc: ec2.Vpc, retention_days: int) -> None:
        """All accepted and rejected traffic to CloudWatch Logs (service-side encryption at rest).

        The group is kept when the stack is deleted (audit records); its retention bounds the cost.
        """
        group = logs.LogGroup(self, "FlowLogs", removal_policy=cdk.RemovalPolicy.RETAIN)
        # RetentionDays is a named enum in Python; the spec holds a validated CloudWatch day count.
        group.node.default_child.retention_in_days = retention_days  # type: ignore[union-attr]
        scanner_acks.acknowledge(
            group, "CKV_AWS_158",
            "VPC flow records (addresses, ports, accept or reject) are encrypted at rest by CloudWatch Logs' service "
            "key. The group is retained after the stack as an audit record; a customer key would have to be kept "
            "and enabled as long as the group or the records become unreadable. Accepted until a policy names a key.")
        ec2.FlowLog(self, "FlowLog", resource_type=ec2.FlowLogResourceType.from_vpc(vpc),
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(group),
                    traffic_type=ec2.FlowLogTrafficType.ALL)

    def _existing_vpc(self) -> None:
        """Import the VPC and subnets by id only: no lookups, no endpoints or flow logs (the owner's)."""
        ex = self.effective.network.existing
        assert ex is not None
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self, "Vpc", vpc_id=ex.vpc_id, availability_zones=[self.effective.availability_zone],
            private_subnet_ids=[ex.compute_subnet_id])
        self._compute_subnet = self.vpc.private_subnets[0]
        # The subnet is imported by id alone; nothing here reads its route table (no endpoints, no routes).
        cdk.Annotations.of(self._compute_subnet).acknowledge_warning(
            "@aws-cdk/aws-ec2:noSubnetRouteTableId",
            "an existing VPC's subnet is imported by id only; ClusterKit adds no routes or endpoints to it")
        self.compute_subnet_id = ex.compute_subnet_id
        self.head_node_subnet_id = ex.head_node_subnet_id

    # --- security groups -------------------------------------------------------------------------------

    def _security_groups(self) -> tuple[ec2.SecurityGroup | None, ec2.SecurityGroup]:
        """The node group (every node's only group) and the FSx group (stacks/security_groups.py says which rules
        and why). A platform has no node group: each cluster stack on it makes its own."""
        name = self.effective.name
        nodes = None if self.platform else node_group(self, "ClusterSecurityGroup", vpc=self.vpc, cluster_name=name)
        return nodes, fsx_group(self, "FsxSecurityGroup", vpc=self.vpc, owner=name, nodes=nodes)

    def _existing_security_groups(self) -> tuple[ec2.ISecurityGroup, ec2.ISecurityGroup]:
        """The spec's own groups (locked-down accounts): imported by id, never changed (``mutable=False``: no rule
        is added to them). The loader's rules let them through only all three roles at once and with an existing
        VPC; their rules are the owner's, checked by ``clusterkit validate NAME --aws``
        (clusterkit/rules/security_groups.py). Render and the Storage stack read every id from the effective
        spec; these stand for the first one of each role.
        """
        given = self.effective.network.security_groups
        cluster = ec2.SecurityGroup.from_security_group_id(self, "ClusterSecurityGroup", given.compute[0],
                                                            mutable=False)
        fsx = ec2.SecurityGroup.from_security_group_id(self, "FsxSecurityGroup", given.fsx[0], mutable=False)
        if self.effective.network.existing is not None:
            # Existing VPC and groups leave this stack nothing to create, and CloudFormation refuses a template
            # without resources ("Resources section must exist and be non-empty"): a no-op handle keeps the stack,
            # whose outputs publish the ids export and the other stacks read.
            cdk.CfnWaitConditionHandle(self, "NothingToCreate")
        return cluster, fsx

    def _interface_endpoints(self) -> None:
        """Interface endpoints in the compute subnet; their group admits HTTPS from cluster nodes only (on a
        platform, whose clusters' groups come later: from the VPC's own addresses)."""
        group = ec2.SecurityGroup(self, "EndpointSecurityGroup", vpc=self.vpc, allow_all_outbound=False,
                                  description=f"ClusterKit {self.effective.name} interface endpoints: HTTPS from nodes")
        if self.cluster_security_group is None:
            group.add_ingress_rule(ec2.Peer.ipv4(self.vpc.vpc_cidr_block), ec2.Port.tcp(443), "HTTPS from the VPC")
        else:
            group.add_ingress_rule(self.cluster_security_group, ec2.Port.tcp(443), "HTTPS from cluster nodes")
        for name, service in INTERFACE_ENDPOINTS.items():
            ec2.InterfaceVpcEndpoint(
                self, f"{name}Endpoint", vpc=self.vpc, service=service, private_dns_enabled=True, open=False,
                subnets=ec2.SubnetSelection(subnets=[self._compute_subnet]), security_groups=[group])

    # --- deletion ---------------------------------------------------------------------------------------

    def _retain_what_the_file_system_holds(self, *, vpc_is_ours: bool) -> None:
        """Keep, on stack deletion, what a RETAINed file system's network interfaces still hold.

        The Storage stack retains its new file system by default (``retain_on_delete``); its interfaces stay in
        the compute subnet with the FSx group, and EC2 refuses to delete a security group, subnet or VPC
        something still uses (DependencyViolation), which left this stack DELETE_FAILED after ``make
        destroy-all``. So these are retained too: the FSx group with its rules among the file servers (Lustre
        needs them), and in a VPC of ours the compute subnet and the VPC. The FSx group's rules naming the
        cluster group go: kept, they would hold the cluster group in turn. What stays, and the manual step:
        docs/operations.md "What destroy-all leaves behind"; tests/app/test_cdk_rehearsal.py replays it.
        """
        keep = cdk.RemovalPolicy.RETAIN
        group = self.fsx_security_group
        group.apply_removal_policy(keep)
        for child in group.node.children:
            if isinstance(child, ec2.CfnSecurityGroupIngress):
                peer = child.source_security_group_id
            elif isinstance(child, ec2.CfnSecurityGroupEgress):
                peer = child.destination_security_group_id
            else:
                continue
            if peer == group.security_group_id:
                child.apply_removal_policy(keep)
        if vpc_is_ours:
            self.vpc.apply_removal_policy(keep)
            subnet = self._compute_subnet.node.default_child
            assert isinstance(subnet, ec2.CfnSubnet)
            subnet.apply_removal_policy(keep)

    # --- outputs ---------------------------------------------------------------------------------------

    def _outputs(self) -> None:
        """Every output is exported (``<stack>-<key>``, clusterkit.spec.naming.export_name): on a platform, how its
        clusters' stacks read the ids. An export in use cannot change or go (docs/operations.md)."""
        given = self.effective.network.security_groups
        values = {
            "VpcId": (self.vpc_id, "VPC of the cluster"),
            "HeadNodeSubnetId": (self.head_node_subnet_id, "subnet of the head node"),
            "ComputeSubnetId": (self.compute_subnet_id, "subnet of every compute queue (one AZ, EFA)"),
        }
        if not self.groups_are_ours:
            values["ClusterSecurityGroupId"] = (",".join(given.compute), "the compute nodes' existing security "
                                                f"groups (head node: {','.join(given.head_node)})")
            values["FsxSecurityGroupId"] = (",".join(given.fsx), "the FSx file system's existing security groups")
        else:
            if self.cluster_security_group is not None:  # a platform has none: its clusters make their own
                values["ClusterSecurityGroupId"] = (self.cluster_security_group.security_group_id,
                                                    "the only security group of head and compute nodes")
            values["FsxSecurityGroupId"] = (self.fsx_security_group.security_group_id,
                                            "security group of the FSx for Lustre file system")
        for key, (value, description) in values.items():
            cdk.CfnOutput(self, key, value=value, description=description,
                          export_name=export_name(self.stack_name, key))
