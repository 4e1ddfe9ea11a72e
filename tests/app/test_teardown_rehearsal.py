"""Teardown rehearsal: ``make destroy-all`` replayed on the real ``cdk`` CLI's templates, no AWS at all.

Each shipped spec (and demo with ``retain_on_delete: false``) is synthesized by node_modules/.bin/cdk, as the
update rehearsal (test_cdk_rehearsal.py) does, and tests/cfn_teardown.py deletes its three stacks the way
``cdk destroy --all`` and CloudFormation would, by the rules its docstring cites from the AWS documentation:
stacks in reverse dependency order, refused while another stack imports an export; resources in reverse
dependency order; ``DeletionPolicy: Retain`` keeps a resource and the stack still ends DELETE_COMPLETE; a
security group, subnet, route table association or VPC that a kept resource still references (directly or
through an imported export) fails to delete (EC2 DependencyViolation), which ends the stack DELETE_FAILED.
Sources: CloudFormation Template Reference "DeletionPolicy attribute" (Retain; the stack is still
DELETE_COMPLETE), CloudFormation User Guide "Troubleshooting CloudFormation" > "Delete stack fails" (resources in
use, non-empty buckets) and "Get exported outputs" (no deleting a stack whose export is imported), EC2 API
Reference DeleteSecurityGroup / DeleteSubnet / DeleteVpc (DependencyViolation while in use).

What a rehearsal cannot show: network interfaces no template names (made by hand in the VPC), and the real
waits (FSx takes minutes to delete). docs/operations.md "What destroy-all leaves behind" is the manual side.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from test_cdk_rehearsal import _cdk

from clusterkit.pipeline.loader import all_spec_paths, load
from clusterkit.spec.naming import stack_names
from tests.cfn_teardown import destroy_all, load_assembly

REPO = Path(__file__).resolve().parents[2]
SHIPPED = [p.stem for p in all_spec_paths()]
NOT_RETAINED = "demo-retain-off"  # demo with storage.fsx_lustre.new.retain_on_delete: false
RETAIN_OFF_AT = "      capacity_gib: 1200\n"
# What destroy-all keeps of demo (new VPC, new FSx, retained by default), and how the docs' section names each.
KEPT_BY_DEFAULT = {
    "AWS::FSx::FileSystem": "file system",
    "AWS::FSx::DataRepositoryAssociation": "data repository association",
    "AWS::S3::Bucket": "bucket",
    "AWS::EC2::SecurityGroup": "FSx security group",
    "AWS::EC2::SecurityGroupIngress": "rules among the file servers",
    "AWS::EC2::SecurityGroupEgress": "rules among the file servers",
    "AWS::EC2::Subnet": "compute subnet",
    "AWS::EC2::VPC": "VPC",
    "AWS::Logs::LogGroup": "flow log group",
}
DOC_SECTION = "## What destroy-all leaves behind"


@pytest.fixture(scope="module")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Spec name (a shipped one or NOT_RETAINED) -> its cloud assembly from ``cdk synth``, made once."""
    done: dict[str, Path] = {}

    def synth(name: str) -> Path:
        if name not in done:
            home = tmp_path_factory.mktemp(f"teardown-{name}")
            spec = name
            if name == NOT_RETAINED:
                demo = load("demo")
                text = demo.source.path.read_text(encoding="utf-8")
                assert text.count(RETAIN_OFF_AT) == 1
                path = home / "spec" / "demo.yaml"
                path.parent.mkdir()
                path.write_text(text.replace(RETAIN_OFF_AT, RETAIN_OFF_AT + "      retain_on_delete: false\n"),
                                encoding="utf-8")
                (path.parent / "demo.images.lock").write_bytes(demo.lock_path.read_bytes())
                spec = str(path)
            _cdk(home, "synth", "--quiet", "-c", f"cluster={spec}", "-o", str(home / "out"))
            done[name] = home / "out"
        return done[name]

    return synth


@pytest.mark.parametrize("name", [*SHIPPED, NOT_RETAINED])
def test_destroy_all_leaves_no_stack_delete_failed(assembly: Callable[[str], Path], name: str) -> None:
    """Every stack ends DELETE_COMPLETE, with the file system retained (default) and not (buckets emptied
    first, the documented manual step)."""
    order, templates = load_assembly(assembly(name))
    spec_name = "demo" if name == NOT_RETAINED else load(name).spec.name
    assert order == [stack_names(spec_name)[k] for k in ("network", "storage", "cluster")]
    result = destroy_all(order, templates, buckets_emptied=True)
    assert result.failed() == {}, result.failures
    assert set(result.status) == set(order)


def test_the_default_keeps_the_file_system_and_what_its_interfaces_hold(assembly: Callable[[str], Path]) -> None:
    """demo keeps FSx, its link and buckets (retain_on_delete), and the FSx group with its rules among the file
    servers, the compute subnet and the VPC (its network interfaces hold them); the docs list each."""
    order, templates = load_assembly(assembly("demo"))
    kept = destroy_all(order, templates, buckets_emptied=False).kept
    assert set(kept.values()) == set(KEPT_BY_DEFAULT)
    network = templates["Demo-Network"]["Resources"]
    kept_network = {lid for (stack, lid) in kept if stack == "Demo-Network"}
    # The cluster group and every rule naming it go: a kept rule naming it would hold it in turn.
    assert not any(lid.startswith("ClusterSecurityGroup") for lid in kept_network)
    for lid in kept_network:
        assert "ClusterSecurityGroup" not in str(network[lid].get("Properties")), lid
    subnets = {lid for lid in kept_network if network[lid]["Type"] == "AWS::EC2::Subnet"}
    assert subnets == {lid for lid, res in network.items()
                       if res["Type"] == "AWS::EC2::Subnet" and lid.startswith("VpcComputeSubnet")}
    docs = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    assert DOC_SECTION in docs
    section = docs.split(DOC_SECTION, 1)[1].split("\n## ", 1)[0]
    for phrase in KEPT_BY_DEFAULT.values():
        assert phrase in section, phrase


def test_without_retained_network_resources_the_network_stack_fails(assembly: Callable[[str], Path]) -> None:
    """The rehearsal sees the bug it guards against: with the Network stack's resources deleted as before
    (only the file system retained), the FSx group and the compute subnet fail, in use by the file system."""
    order, templates = load_assembly(assembly("demo"))
    before = copy.deepcopy(templates)
    for res in before["Demo-Network"]["Resources"].values():
        if res["Type"] != "AWS::Logs::LogGroup":
            res.pop("DeletionPolicy", None)
    result = destroy_all(order, before, buckets_emptied=True)
    assert result.failed() == {"Demo-Network": "DELETE_FAILED"}
    failed = sorted(re.sub(r"[0-9A-F]{8}\b", "", f.split(" ", 1)[0]) for f in result.failures)
    assert failed == ["Demo-Network/FsxSecurityGroup", "Demo-Network/VpcComputeSubnet1Subnet"]
    assert all("in use by retained Demo-Storage/FileSystem" in f for f in result.failures)


def test_a_full_bucket_fails_the_storage_stack_and_refuses_the_network_one(assembly: Callable[[str], Path]) -> None:
    """retain_on_delete: false without emptying the buckets first: CloudFormation cannot delete them, Storage
    ends DELETE_FAILED and Network's exports stay imported (the manual step docs/operations.md names)."""
    order, templates = load_assembly(assembly(NOT_RETAINED))
    result = destroy_all(order, templates, buckets_emptied=False)
    assert result.failed() == {"Demo-Storage": "DELETE_FAILED", "Demo-Network": "REFUSED"}
    assert {f.split(" ", 1)[1] for f in result.failures if f.startswith("Demo-Storage/")} == {
        "(AWS::S3::Bucket): the bucket still holds objects"}
