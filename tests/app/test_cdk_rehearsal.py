"""Deploy rehearsal with the real CDK CLI (node_modules/.bin/cdk), no AWS credentials at all.

What runs for real: ``cdk synth`` of every shipped spec, and ``cdk diff --template`` comparing the Cluster
stack of the working tree with the one synthesized from an earlier version of the spec (the template a
deployed stack would have), which is what a reviewer runs before ``make deploy``. The working tree's demo is
synthesized once per module (``synthesized``) and its cloud assembly is what both diffs read (``cdk diff --app
<assembly>``, the CLI's own way to diff a synthesized app): ``cdk diff`` would otherwise synthesize the same
unchanged app again for each diff (about 10 s each). What only a real
account adds is listed in docs/operations.md ("what a real deploy still adds"): the provider's own template,
ParallelCluster's AWS-side validators, the custom resource's create/update, and node bootstrap.

Teardown rehearsal: ``make destroy-all`` replayed on the same assemblies (no second synth).

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
p4d-existing (no stack-owned VPC) and retain_on_delete: false are rehearsed on the in-process synth
(tests/stacks/test_network.py, test_storage.py), by the same model.
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from test_provider_contract import SPECS

from clusterkit.pipeline.loader import load
from clusterkit.spec.naming import cluster_stacks, stack_names
from tests.cfn_teardown import destroy_all, imports, load_assembly

REPO = Path(__file__).resolve().parents[2]
CDK = REPO / "node_modules/.bin/cdk"
KEPT_OFF = ("@aws-cdk/core:enablePartitionLiterals", "@aws-cdk/aws-iam:minimizePolicies")
DEPLOY_TIME = "2026-12-01T00:00:00Z"  # the TTL clock, pinned so two synths differ only by the edit


def _cdk(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", HOME=str(tmp_path))
    result = subprocess.run([str(CDK), *args, "-c", f"deploy_time={DEPLOY_TIME}"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def _synth(tmp_path: Path, cluster: str, out: Path) -> Path:
    _cdk(tmp_path, "synth", "--quiet", "-c", f"cluster={cluster}", "-o", str(out))
    return out


class Synth(NamedTuple):
    """One ``cdk synth`` of a shipped spec: what the CLI said, and the cloud assembly it wrote."""

    said: subprocess.CompletedProcess[str]
    out: Path


def own_stacks(name: str) -> dict[str, str]:
    """The stacks ``cdk synth -c cluster=<name>`` builds, in deployment order: a cluster's own three, or on a
    platform its alerts and cluster stacks (the platform's are its own app, ``-c platform=<name>``)."""
    spec = load(name).spec
    stacks = cluster_stacks(spec.name, spec.platform)
    return {k: v for k, v in stacks.items() if spec.platform is None or k in ("alerts", "cluster")}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Synth]:
    """Shipped spec name -> its ``cdk synth`` by the real CLI, run at most once in this module (the tests
    only read the assembly: the synth test checks it, the diff tests diff the demo's Cluster stack in it)."""
    done: dict[str, Synth] = {}

    def synth(name: str) -> Synth:
        """``name`` is a shipped spec, or ``platform:<name>`` for a shipped platform (``-c platform=<name>``)."""
        if name not in done:
            kind, _, what = name.rpartition(":")
            home = tmp_path_factory.mktemp(f"synth-{what}")
            out = home / "out"
            done[name] = Synth(_cdk(home, "synth", "--quiet", "-c", f"{kind or 'cluster'}={what}", "-o", str(out)),
                               out)
        return done[name]

    return synth


@pytest.mark.parametrize("name", [s for s in SPECS if s != "p4d-existing"])  # test_app.py runs that one
def test_cdk_cli_synthesizes_every_spec(synthesized: Callable[[str], Synth], name: str) -> None:
    said, out = synthesized(name)
    names = own_stacks(name)
    assert sorted(p.name for p in out.glob("*.template.json")) == sorted(f"{s}.template.json" for s in names.values())
    # cdk.json sets every feature flag of the pinned aws-cdk-lib (docs/operations.md "CDK feature flags"); a
    # newer aws-cdk-lib adds flags, and the CLI counts the unset ones (`cdk flags --unstable=flags` names them).
    assert "feature flags are not configured" not in said.stdout + said.stderr


def test_the_flags_kept_off_are_the_documented_ones() -> None:
    """Each recommended value cdk.json does not take is named, with its reason, in docs/operations.md."""
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    docs = (REPO / "docs" / "operations.md").read_text()
    for flag in KEPT_OFF:  # `cdk flags --set --recommended` would turn these on
        assert context[flag] is False and f"`{flag}` | false |" in docs, flag


def _earlier(tmp_path: Path, old: str, new: str) -> Path:
    """The Cluster template of the demo spec before a pull request that replaced ``old`` by ``new``."""
    demo = load("demo")
    text = demo.source.path.read_text(encoding="utf-8")
    assert text.count(new) == 1, new
    spec = tmp_path / "before" / "demo.yaml"
    spec.parent.mkdir()
    spec.write_text(text.replace(new, old), encoding="utf-8")
    (spec.parent / "demo.images.lock").write_bytes(demo.lock_path.read_bytes())
    out = _synth(tmp_path, str(spec), tmp_path / "before-out")
    return out / f"{stack_names('demo')['cluster']}.template.json"


def _diff(tmp_path: Path, after: Synth, template: Path) -> str:
    """``cdk diff`` of the working tree's demo Cluster stack (its synthesized assembly) against template."""
    result = _cdk(tmp_path, "diff", "--exclusively", "--app", str(after.out),
                  "--template", str(template), stack_names("demo")["cluster"])
    return result.stdout + result.stderr


def test_cdk_diff_of_a_queue_resize_updates_only_the_cluster_in_place(
        tmp_path: Path, synthesized: Callable[[str], Synth]) -> None:
    text = _diff(tmp_path, synthesized("demo"), _earlier(tmp_path, "        max: 2\n", "        max: 4\n"))
    assert "[~] Custom::PclusterCluster ParallelCluster" in text
    assert '[-] "MaxCount": 2,' in text and '[+] "MaxCount": 4,' in text
    assert "requires replacement" not in text and "may be replaced" not in text
    assert "AWS::IAM" not in text and "Number of stacks with differences: 1" in text


def test_cdk_diff_of_a_version_change_goes_through_the_guard_first(
        tmp_path: Path, synthesized: Callable[[str], Synth]) -> None:
    """A ParallelCluster upgrade changes no ClusterConfiguration: only the provider template and the version
    guard, which the provider depends on, so CloudFormation meets the guard's refusal first."""
    text = _diff(tmp_path, synthesized("demo"),
                 _earlier(tmp_path, "parallelcluster_version: 3.15.0\n", "parallelcluster_version: 3.16.1\n"))
    assert "[~] Custom::ClusterKitVersionGuard VersionGuard" in text
    assert "[~] AWS::CloudFormation::Stack ParallelClusterProvider" in text and "3.16.1/templates" in text
    assert "Custom::PclusterCluster" not in text


# --- teardown: make destroy-all on the same assemblies ------------------------------------------------------

CLI_SYNTHESIZED = [s for s in SPECS if s != "p4d-existing"]
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


@pytest.mark.parametrize("name", CLI_SYNTHESIZED)
def test_destroy_all_leaves_no_stack_delete_failed(synthesized: Callable[[str], Synth], name: str) -> None:
    """Every stack ends DELETE_COMPLETE with the file system retained (the default); retain_on_delete: false
    (buckets emptied first, the documented manual step) is rehearsed in-process by tests/stacks."""
    order, templates = load_assembly(synthesized(name).out)
    assert order == list(own_stacks(name).values())
    result = destroy_all(order, templates, buckets_emptied=True)
    assert result.failed() == {}, result.failures
    assert set(result.status) == set(order)


def test_the_default_keeps_the_file_system_and_what_its_interfaces_hold(synthesized: Callable[[str], Synth]) -> None:
    """demo keeps FSx, its link and buckets (retain_on_delete), and the FSx group with its rules among the file
    servers, the compute subnet and the VPC (its network interfaces hold them); the docs list each."""
    order, templates = load_assembly(synthesized("demo").out)
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


def test_without_retained_network_resources_the_network_stack_fails(synthesized: Callable[[str], Synth]) -> None:
    """The rehearsal sees the bug it guards against: with the Network stack's resources deleted as before
    (only the file system retained), the FSx group and the compute subnet fail, in use by the file system."""
    order, templates = load_assembly(synthesized("demo").out)
    before = copy.deepcopy(templates)
    for res in before["Demo-Network"]["Resources"].values():
        if res["Type"] != "AWS::Logs::LogGroup":
            res.pop("DeletionPolicy", None)
    result = destroy_all(order, before, buckets_emptied=True)
    assert result.failed() == {"Demo-Network": "DELETE_FAILED"}
    failed = sorted(re.sub(r"[0-9A-F]{8}\b", "", f.split(" ", 1)[0]) for f in result.failures)
    assert failed == ["Demo-Network/FsxSecurityGroup", "Demo-Network/VpcComputeSubnet1Subnet"]
    assert all("in use by retained Demo-Storage/FileSystem" in f for f in result.failures)


# --- a platform and its clusters: the real CLI's assemblies of research-east, train-a and train-b --------------

PLATFORM, ON_IT = "research-east", ("train-a", "train-b")


def _platform_world(synthesized: Callable[[str], Synth]) -> tuple[list[str], dict[str, dict], dict[str, list[str]]]:
    """Every stack of the platform and of its two clusters: (platform stacks in order, stack -> template,
    cluster -> its stacks in order), as the real CLI synthesized them, one app each."""
    platform_order, templates = load_assembly(synthesized(f"platform:{PLATFORM}").out)
    clusters = {}
    for name in ON_IT:
        order, more = load_assembly(synthesized(name).out)
        clusters[name] = order
        templates |= more
    return platform_order, templates, clusters


def test_platform_and_clusters_are_separate_apps(synthesized: Callable[[str], Synth]) -> None:
    """The platform's app builds its two stacks; each cluster's app its alerts and cluster stacks, never a
    platform stack: `make destroy-all CLUSTER=train-a` (cdk destroy --all) cannot reach the platform."""
    platform_order, templates, clusters = _platform_world(synthesized)
    assert platform_order == [stack_names(PLATFORM)["network"], stack_names(PLATFORM)["storage"]]
    for name, order in clusters.items():
        assert order == list(own_stacks(name).values())
        assert not set(order) & set(platform_order)


def test_every_import_of_a_cluster_is_an_export_of_its_platform(synthesized: Callable[[str], Synth]) -> None:
    """The names agree across the three apps (a typo would fail only at deploy: "No export named ...")."""
    platform_order, templates, clusters = _platform_world(synthesized)
    exported = {o["Export"]["Name"] for s in platform_order for o in templates[s].get("Outputs", {}).values()
                if "Export" in o}
    for name, order in clusters.items():
        alerts_exports = {o["Export"]["Name"] for o in templates[order[0]].get("Outputs", {}).values()
                          if "Export" in o}
        wanted = {i for i in imports(templates[order[-1]])} - alerts_exports
        assert wanted and wanted <= exported, (name, sorted(wanted - exported))
        assert {w.split("-")[-1] for w in wanted} >= {"VpcId", "HeadNodeSubnetId", "ComputeSubnetId",
                                                      "FsxSecurityGroupId", "FileSystemId"}


def test_destroying_the_platform_is_refused_while_clusters_use_it(synthesized: Callable[[str], Synth]) -> None:
    """CloudFormation refuses to delete a stack whose export another stack imports: `make destroy-platform`
    with both clusters deployed deletes nothing of the platform (clusterkit platform-users says so first)."""
    platform_order, templates, clusters = _platform_world(synthesized)
    result = destroy_all(platform_order, templates, buckets_emptied=True)
    assert result.status == {s: "REFUSED" for s in platform_order}
    refusals = " ".join(result.failures)
    assert "Train-A-Cluster" in refusals and "Train-B-Cluster" in refusals


def test_clusters_come_and_go_and_the_platform_goes_last_cleanly(synthesized: Callable[[str], Synth]) -> None:
    """train-a destroyed (destroy-all: its two stacks) while train-b stays: both DELETE_COMPLETE, the Lustre
    rules it added to the platform's FSx group go with it; then train-b; then the platform: no DELETE_FAILED,
    and what it keeps is the file system and what its interfaces hold, as for a standalone cluster."""
    platform_order, templates, clusters = _platform_world(synthesized)
    standing = {s: t for s, t in templates.items() if s not in clusters["train-a"]}
    first = destroy_all(clusters["train-a"], templates, buckets_emptied=True)
    assert first.failed() == {}, first.failures
    assert set(first.status) == set(clusters["train-a"])
    # the platform still refuses: train-b imports its exports
    assert destroy_all(platform_order, standing, buckets_emptied=True).failed() == {
        s: "REFUSED" for s in platform_order}
    second = destroy_all(clusters["train-b"], standing, buckets_emptied=True)
    assert second.failed() == {}, second.failures
    platform_only = {s: templates[s] for s in platform_order}
    last = destroy_all(platform_order, platform_only, buckets_emptied=True)
    assert last.failed() == {}, last.failures
    assert set(last.kept.values()) == set(KEPT_BY_DEFAULT)


LUSTRE_RULES = ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")


def _lustre_rules_on_the_platform(template: dict) -> list[str]:
    """The Lustre rules between a cluster's node group and the platform's FSx group (they name the imported
    group): in on both groups, out on the FSx group, for each Lustre port range."""
    return [lid for lid, res in template["Resources"].items() if res["Type"] in LUSTRE_RULES
            and "FsxSecurityGroupId" in json.dumps(res["Properties"])]


@pytest.mark.parametrize("name", ON_IT)
def test_the_cluster_goes_before_its_lustre_rules_and_comes_after_them(
        synthesized: Callable[[str], Synth], name: str) -> None:
    """The Lustre rules a cluster adds to the platform's FSx group are deleted only after the cluster (its nodes
    mount /fsx until PC's delete ends), and created before it (PC's FSx networking validator checks them at
    create). Without the dependency both went in the same wave: the rules could go while nodes still mount."""
    _, templates, clusters = _platform_world(synthesized)
    stack = clusters[name][-1]
    resources = templates[stack]["Resources"]
    (cluster,) = [lid for lid, res in resources.items() if res["Type"] == "Custom::PclusterCluster"]
    rules = _lustre_rules_on_the_platform(templates[stack])
    assert len(rules) == 6, rules
    assert set(rules) <= set(resources[cluster].get("DependsOn", []))
    wave = destroy_all(clusters[name], templates, buckets_emptied=True).wave
    assert all(wave[(stack, cluster)] < wave[(stack, rule)] for rule in rules), (
        {r: wave[(stack, r)] for r in rules}, wave[(stack, cluster)])
