"""The ``<Name>-Network`` stack as CloudFormation would receive it (synth only, see conftest).

Security-group rules are compared as exact sets, so an extra rule fails as surely as a missing one.
"""
from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from aws_cdk.assertions import Match

from clusterkit.pipeline.loader import load
from clusterkit.rules import check as rules
from clusterkit.spec.yaml_reader import Marks
from stacks.network import INTERFACE_ENDPOINTS

ALL = "-1"
LUSTRE = {("tcp", 988, 988), ("tcp", 1018, 1023)}
NEW_VPC = ("demo", "p5-capacity-block")


def _ports(rule: dict) -> tuple[str, int | None, int | None]:
    protocol = str(rule["IpProtocol"])
    if protocol == ALL:
        return ALL, None, None
    return protocol, rule.get("FromPort"), rule.get("ToPort")


def ingress_rules(template: dict) -> set[tuple]:
    """(group, protocol, from, to, source) for every ingress rule, inline or standalone."""
    rules: set[tuple] = set()
    for logical_id, res in template["Resources"].items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::EC2::SecurityGroup":
            for rule in props.get("SecurityGroupIngress", []):
                source = rule.get("CidrIp") or rule.get("CidrIpv6") or repr(rule.get("SourceSecurityGroupId"))
                rules.add((repr({"Fn::GetAtt": [logical_id, "GroupId"]}), *_ports(rule), source))
        elif res["Type"] == "AWS::EC2::SecurityGroupIngress":
            source = props.get("CidrIp") or props.get("CidrIpv6") or repr(props.get("SourceSecurityGroupId"))
            rules.add((repr(props["GroupId"]), *_ports(props), source))
    return rules


def egress_rules(template: dict) -> set[tuple]:
    rules: set[tuple] = set()
    for logical_id, res in template["Resources"].items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::EC2::SecurityGroup":
            for rule in props.get("SecurityGroupEgress", []):
                dest = rule.get("CidrIp") or rule.get("CidrIpv6") or repr(rule.get("DestinationSecurityGroupId"))
                rules.add((repr({"Fn::GetAtt": [logical_id, "GroupId"]}), *_ports(rule), dest))
        elif res["Type"] == "AWS::EC2::SecurityGroupEgress":
            dest = props.get("CidrIp") or props.get("CidrIpv6") or repr(props.get("DestinationSecurityGroupId"))
            rules.add((repr(props["GroupId"]), *_ports(props), dest))
    return rules


def groups(synth) -> tuple[str, str]:
    net = synth.network
    return (repr(synth.ref("network", net.cluster_security_group.security_group_id)),
            repr(synth.ref("network", net.fsx_security_group.security_group_id)))


# --- security groups -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["demo", "p4d-existing-own-groups", "demo-endpoints"])
def test_security_group_rules_are_exactly_efa_and_lustre(synths, name):
    synth = synths(name)
    cluster, fsx = groups(synth)
    ingress = {r for r in ingress_rules(synth.templates["network"]) if r[0] in (cluster, fsx)}
    assert ingress == {
        (cluster, ALL, None, None, cluster),  # EFA: all traffic from the group itself
        *((cluster, *p, fsx) for p in LUSTRE),  # Lustre servers connect back to clients
        *((fsx, *p, fsx) for p in LUSTRE),  # file server to file server
        *((fsx, *p, cluster) for p in LUSTRE),  # clients to file servers
    }
    egress = {r for r in egress_rules(synth.templates["network"]) if r[0] in (cluster, fsx)}
    assert egress == {
        (cluster, ALL, None, None, cluster),  # EFA: explicit self egress (PC's validator wants it)
        (cluster, ALL, None, None, "0.0.0.0/0"),  # registries and AWS APIs via NAT or endpoints
        *((fsx, *p, fsx) for p in LUSTRE),
        *((fsx, *p, cluster) for p in LUSTRE),
    }


@pytest.mark.parametrize("name", ["demo", "p4d-existing", "p5-capacity-block", "demo-endpoints",
                                  "demo-head-public", "existing-vpc-new-fsx", "existing-groups-new-fsx"])
def test_nothing_admits_the_internet(synths, name):
    synth = synths(name)
    for kind in ("network", "storage"):
        open_rules = [r for r in ingress_rules(synth.templates[kind]) if r[4] in ("0.0.0.0/0", "::/0")]
        assert open_rules == [], f"{kind} stack admits the internet: {open_rules}"
    assert synth.resources("network", "AWS::EC2::NetworkAcl") == {}


def test_security_group_descriptions_do_not_depend_on_settings(synths):
    """A changed description replaces the group, and the FSx SecurityGroupIds change then replaces the file system."""
    base = synths("demo").template("network").find_resources("AWS::EC2::SecurityGroup")
    other = synths("demo-endpoints").template("network").find_resources("AWS::EC2::SecurityGroup")
    for logical_id, res in base.items():
        assert other[logical_id]["Properties"]["GroupDescription"] == res["Properties"]["GroupDescription"]


# --- VPC, subnets, endpoints, flow logs ------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW_VPC)
def test_new_vpc_has_one_az_a_public_and_a_compute_subnet(synths, name):
    synth = synths(name)
    vpc_cfg = synth.effective.network.new
    template = synth.template("network")
    template.resource_count_is("AWS::EC2::VPC", 1)
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": vpc_cfg.cidr, "EnableDnsSupport": True,
                                                       "EnableDnsHostnames": True})
    subnets = synth.resources("network", "AWS::EC2::Subnet")
    assert len(subnets) == 2
    assert {s["Properties"]["AvailabilityZone"] for s in subnets.values()} == {synth.effective.availability_zone}
    compute = synth.templates["network"]["Resources"][synth.ref("network", synth.network.compute_subnet_id)["Ref"]]
    public = next(s for s in subnets.values() if s is not compute)
    vpc_net = ipaddress.ip_network(vpc_cfg.cidr)
    compute_net = ipaddress.ip_network(compute["Properties"]["CidrBlock"])
    public_net = ipaddress.ip_network(public["Properties"]["CidrBlock"])
    assert compute_net.prefixlen == vpc_cfg.compute_subnet_mask and public_net.prefixlen == vpc_cfg.public_subnet_mask
    assert compute_net.network_address == vpc_net.network_address  # where clusterkit.rules.check sized it
    assert compute_net.subnet_of(vpc_net) and public_net.subnet_of(vpc_net) and not compute_net.overlaps(public_net)
    assert (compute["Properties"]["MapPublicIpOnLaunch"] is False
            and public["Properties"]["MapPublicIpOnLaunch"] is False)
    template.resource_count_is("AWS::EC2::NatGateway", 1)
    template.has_resource_properties("AWS::EC2::Route", {
        "DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": Match.any_value(),
        "RouteTableId": {"Ref": Match.string_like_regexp("ComputeSubnet")}})
    assert synth.network.head_node_subnet_id == synth.network.compute_subnet_id


def test_public_head_node_uses_the_public_subnet(synths):
    synth = synths("demo-head-public")
    head = synth.ref("network", synth.network.head_node_subnet_id)
    assert head != synth.ref("network", synth.network.compute_subnet_id)
    props = synth.templates["network"]["Resources"][head["Ref"]]["Properties"]
    assert props["MapPublicIpOnLaunch"] is True  # reaches SSM through the internet gateway; still no inbound rule
    assert {"Key": "aws-cdk:subnet-type", "Value": "Public"} in props["Tags"]


@pytest.mark.parametrize("name", NEW_VPC)
def test_gateway_endpoints_for_s3_and_dynamodb(synths, name):
    endpoints = synths(name).resources("network", "AWS::EC2::VPCEndpoint")
    gateways = {repr(e["Properties"]["ServiceName"]) for e in endpoints.values()
                if e["Properties"].get("VpcEndpointType", "Gateway") == "Gateway"}
    assert gateways == {repr({"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, f".{service}"]]})
                        for service in ("s3", "dynamodb")}
    for endpoint in endpoints.values():
        assert len(endpoint["Properties"]["RouteTableIds"]) == 2  # compute and public route tables


def test_interface_endpoints_off_by_default(synths):
    endpoints = synths("demo").resources("network", "AWS::EC2::VPCEndpoint")
    assert [e for e in endpoints.values() if e["Properties"].get("VpcEndpointType") == "Interface"] == []
    assert len(synths("demo").resources("network", "AWS::EC2::SecurityGroup")) == 2


def test_interface_endpoints_in_compute_subnet_with_https_from_nodes_only(synths):
    synth = synths("demo-endpoints")
    endpoints = [e["Properties"] for e in synth.resources("network", "AWS::EC2::VPCEndpoint").values()
                 if e["Properties"].get("VpcEndpointType") == "Interface"]
    assert len(endpoints) == len(INTERFACE_ENDPOINTS) == 9
    assert {e["ServiceName"] for e in endpoints} == {
        f"com.amazonaws.{synth.effective.region}.{service}" for service in
        ("ecr.api", "ecr.dkr", "ssm", "ssmmessages", "ec2messages", "logs", "sts", "cloudformation", "ec2")}
    compute = synth.ref("network", synth.network.compute_subnet_id)
    endpoint_groups = {repr(g) for e in endpoints for g in e["SecurityGroupIds"]}
    assert len(endpoint_groups) == 1
    for endpoint in endpoints:
        assert endpoint["PrivateDnsEnabled"] is True and endpoint["SubnetIds"] == [compute]
    (endpoint_group,) = endpoint_groups
    cluster, _ = groups(synth)
    assert {r for r in ingress_rules(synth.templates["network"]) if r[0] == endpoint_group} == {
        (endpoint_group, "tcp", 443, 443, cluster)}


@pytest.mark.parametrize("name", NEW_VPC)
def test_flow_logs_capture_all_traffic_into_a_retained_log_group(synths, name):
    synth = synths(name)
    template = synth.template("network")
    groups_ = template.find_resources("AWS::Logs::LogGroup")
    assert len(groups_) == 1
    (group_id, group), = groups_.items()
    assert group["Properties"]["RetentionInDays"] == synth.effective.network.new.flow_logs_retention_days
    assert group["DeletionPolicy"] == "Retain"
    template.has_resource_properties("AWS::EC2::FlowLog", {
        "ResourceType": "VPC", "TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs",
        "LogGroupName": {"Ref": group_id}, "ResourceId": synth.ref("network", synth.network.vpc_id)})


# --- deletion ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "kept"), [
    ("demo", {"AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::SecurityGroup", "AWS::EC2::SecurityGroupIngress",
              "AWS::EC2::SecurityGroupEgress", "AWS::Logs::LogGroup"}),
    ("demo-endpoints", {"AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::SecurityGroup",
                        "AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress", "AWS::Logs::LogGroup"}),
    ("existing-vpc-new-fsx", {"AWS::EC2::SecurityGroup", "AWS::EC2::SecurityGroupIngress",
                              "AWS::EC2::SecurityGroupEgress"}),
    ("demo-destroy", {"AWS::Logs::LogGroup"}),
    ("demo-no-bucket", {"AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::SecurityGroup",
                        "AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress", "AWS::Logs::LogGroup"}),
    ("p4d-existing", set()),  # (its no-op WaitConditionHandle is deleted)
    ("existing-groups-new-fsx", set()),  # the spec's own groups: nothing of ours for the file system to hold
])
def test_deleting_storage_then_network_fails_nothing(synths, name, kept):
    """Storage, then Network, deleted by CloudFormation's rules (tests/cfn_teardown.py): a retained file system
    keeps exactly its security group (with the 4 rules among file servers), subnet and VPC, so nothing it uses
    is deleted under it; retain_on_delete: false keeps none of them (app-level rehearsal: tests/app/
    test_cdk_rehearsal.py)."""
    from tests.cfn_teardown import destroy_all

    synth = synths(name)
    order = [synth.network.stack_name, synth.storage.stack_name]
    templates = dict(zip(order, (synth.templates["network"], synth.templates["storage"]), strict=True))
    result = destroy_all(order, templates, buckets_emptied=True)
    assert result.failed() == {}, result.failures
    kept_network = {lid: t for (stack, lid), t in result.kept.items() if stack == order[0]}
    assert set(kept_network.values()) == kept
    rule_types = ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
    rules = [t for t in kept_network.values() if t in rule_types]
    assert len(rules) == (4 if "AWS::EC2::SecurityGroupIngress" in kept else 0)


# --- existing VPC ------------------------------------------------------------------------------------------

def test_existing_vpc_is_imported_not_created(synths):
    synth = synths("p4d-existing-own-groups")
    existing = synth.effective.network.existing
    resources = synth.templates["network"]["Resources"]
    assert {r["Type"] for r in resources.values()} == {
        "AWS::EC2::SecurityGroup", "AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"}
    for group in synth.resources("network", "AWS::EC2::SecurityGroup").values():
        assert group["Properties"]["VpcId"] == existing.vpc_id
    assert (synth.network.vpc_id, synth.network.compute_subnet_id, synth.network.head_node_subnet_id) == (
        existing.vpc_id, existing.compute_subnet_id, existing.head_node_subnet_id)


@pytest.mark.parametrize("name", ["p4d-existing", "existing-groups-new-fsx"])
def test_existing_security_groups_are_used_and_none_is_created(synths, name):
    """Locked-down accounts (network.security_groups): the Network stack creates nothing, changes no group (no rule
    resource names them), and says which groups the nodes and the file system use."""
    synth = synths(name)
    given = synth.effective.network.security_groups
    resources = synth.templates["network"]["Resources"]
    assert {r["Type"] for r in resources.values()} == {"AWS::CloudFormation::WaitConditionHandle"}  # a no-op
    outputs = synth.templates["network"]["Outputs"]
    assert outputs["ClusterSecurityGroupId"]["Value"] == ",".join(given.compute)
    assert outputs["FsxSecurityGroupId"]["Value"] == ",".join(given.fsx)
    assert synth.network.cluster_security_group.security_group_id == given.compute[0]


# --- outputs and attributes --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["demo", "p4d-existing-own-groups"])
def test_outputs_are_exported_under_the_stack_name(synths, name):
    synth = synths(name)
    outputs = synth.templates["network"]["Outputs"]
    net = synth.network
    expected = {
        "VpcId": net.vpc_id, "HeadNodeSubnetId": net.head_node_subnet_id, "ComputeSubnetId": net.compute_subnet_id,
        "ClusterSecurityGroupId": net.cluster_security_group.security_group_id,
        "FsxSecurityGroupId": net.fsx_security_group.security_group_id,
    }
    assert set(expected) <= set(outputs)
    for key, token in expected.items():
        assert outputs[key]["Value"] == synth.ref("network", token)
        assert outputs[key]["Export"] == {"Name": f"{net.stack_name}-{key}"}


def test_stack_names_and_exports_follow_app_naming(synths):
    synth = synths("p5-capacity-block")
    assert synth.network.stack_name == "P5-Capacity-Block-Network"
    assert synth.templates["network"]["Outputs"]["VpcId"]["Export"]["Name"] == "P5-Capacity-Block-Network-VpcId"


def test_env_agnostic_account_synthesizes_the_same_network(synths):
    assert synths("demo-no-account").templates["network"] == synths("demo").templates["network"]


def test_one_network_field_changes_only_its_resource(synths):
    """flow_logs_retention_days touches the log group and nothing else, in either stack."""
    base, changed = synths("demo"), synths("demo-flow-logs-30")
    assert changed.templates["storage"] == base.templates["storage"]
    a, b = base.templates["network"], changed.templates["network"]
    assert {k for k in a if a[k] != b[k]} == {"Resources"}
    differing = {k for k in a["Resources"].keys() | b["Resources"].keys()
                 if a["Resources"].get(k) != b["Resources"].get(k)}
    assert differing == set(base.resources("network", "AWS::Logs::LogGroup"))
    (log_group,) = differing
    assert b["Resources"][log_group]["Properties"] == {"RetentionInDays": 30}


# --- validation: the loader's, not the stack's -------------------------------------------------------------

def _with_network(spec, **changes):
    network = spec.network
    if "new" in changes:
        network = dataclasses.replace(network, new=changes["new"])
    if "existing" in changes:
        network = dataclasses.replace(network, existing=changes["existing"])
    return dataclasses.replace(spec, network=network)


def _subnet_problems(spec) -> list[str]:
    return [f"{p.path}: {p.message}" for p in rules.check(spec, Marks(file="t.yaml"))
            if "usable addresses" in p.message]


def test_too_small_compute_subnet_is_refused_with_the_numbers():
    """4 x p5.48xlarge x 32 EFA interfaces + 8 CPU nodes + the head node = 137 addresses; a /25 has 123.
    The rules refuse it before synth; the stack, given only accepted specs, checks nothing."""
    spec = load("demo", check_lock=False).spec
    small = _with_network(spec, new=dataclasses.replace(spec.network.new, compute_subnet_mask=25))
    assert _subnet_problems(small) == [
        "network.new.compute_subnet_mask: compute subnet has 123 usable addresses but max nodes need 137"]


def test_too_small_existing_compute_subnet_is_refused():
    spec = load("p4d-existing", check_lock=False).spec
    small = _with_network(spec, existing=dataclasses.replace(spec.network.existing, compute_subnet_cidr="10.20.0.0/28"))
    (problem,) = _subnet_problems(small)
    assert problem.startswith("network.existing.compute_subnet_cidr: compute subnet has 11 usable addresses")
