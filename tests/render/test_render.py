"""The rendered ParallelCluster configs: committed, deterministic, and what a careful engineer sets.

ParallelCluster's own schema and validators check these files in tests/pcluster/; here we check our
intent (placement groups, EFA, health checks, stable head-node actions) and staleness.
"""
from __future__ import annotations

import dataclasses
import io
import zipfile

import pytest
import yaml

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.effective.expand import expand
from clusterkit.paths import ROOT, SPEC_REFERENCE
from clusterkit.pipeline.loader import load
from clusterkit.render.pcluster_config import placeholder_refs, render_config
from clusterkit.render.rendered_files import render_all, rendered_path, spec_reference_text
from tests import shipped
from tests.spec_text import with_images

SPECS = sorted(shipped.SPECS)


@pytest.fixture(scope="module")
def rendered():
    return {name: yaml.safe_load(rendered_path(load(name)).read_text()) for name in SPECS}


def test_committed_rendered_files_are_current():
    stale = render_all(list(shipped.SPECS), check=True)
    assert not stale, f"stale rendered configs {stale}: run `make render`"


def test_spec_reference_is_current_and_the_readme_is_not_generated():
    """docs/spec-reference.md is the spec reference `make render` writes; the README is hand-written only."""
    assert SPEC_REFERENCE.read_text(encoding="utf-8") == spec_reference_text(), (
        "docs/spec-reference.md is stale: run `make render`")
    assert "spec-reference:start" not in (ROOT / "README.md").read_text(encoding="utf-8")


def _queue(config, name):
    return next(q for q in config["Scheduling"]["SlurmQueues"] if q["Name"] == name)


def test_demo_gpu_queue(rendered):
    gpu = _queue(rendered["demo"], "gpu")
    assert gpu["CapacityType"] == "ONDEMAND"
    assert gpu["Networking"]["PlacementGroup"] == {"Enabled": True}
    assert gpu["Networking"]["SubnetIds"] == ["${Network.ComputeSubnetId}"]
    # p5: DCGM's deep check runs at boot, not in PC's prolog (tests/render/test_gpu_check_render.py)
    assert gpu["JobExclusiveAllocation"] is True and gpu["HealthChecks"] == {"Gpu": {"Enabled": False}}
    assert gpu["ComputeSettings"]["LocalStorage"]["EphemeralVolume"] == {"MountDir": "/scratch"}
    (p5,) = gpu["ComputeResources"]
    assert p5 == {"Name": "p5", "InstanceType": "p5.48xlarge", "MinCount": 0, "MaxCount": 4, "Efa": {"Enabled": True}}
    cpu = _queue(rendered["demo"], "cpu")
    assert "PlacementGroup" not in cpu["Networking"] and "HealthChecks" not in cpu
    assert cpu["JobExclusiveAllocation"] is False and "Efa" not in cpu["ComputeResources"][0]


def test_capacity_block_queue(rendered):
    block = _queue(rendered["p5-capacity-block"], "block")
    assert block["CapacityType"] == "CAPACITY_BLOCK" and "AllocationStrategy" not in block
    assert block["Networking"]["PlacementGroup"] == {"Enabled": False}
    (cr,) = block["ComputeResources"]
    assert cr["MinCount"] == cr["MaxCount"] == 16 and cr["InstanceType"] == "p5.48xlarge"
    assert cr["CapacityReservationTarget"] == {"CapacityReservationId": "cr-0fedcba9876543210"}
    spot = _queue(rendered["p5-capacity-block"], "debug")
    assert spot["CapacityType"] == "SPOT" and spot["AllocationStrategy"] == "price-capacity-optimized"


def test_existing_resources_are_literal(rendered):
    config = rendered["p4d-existing"]
    assert config["HeadNode"]["Networking"]["SubnetId"] == "subnet-0a1b2c3d4e5f60719"
    assert config["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": "fs-0123456789abcdef0"}


@pytest.mark.parametrize("name", SPECS)
def test_security_defaults(rendered, name):
    config = rendered[name]
    head = config["HeadNode"]
    assert config["Imds"] == {"ImdsSupport": "v2.0"} and head["Imds"] == {"Secured": True}
    assert "Ssh" not in head, "no key pair: access is SSM Session Manager"
    # not PC's port-22 SG: a locked-down account's own (p4d-existing), or ClusterKit's; on a platform the cluster
    # stack makes it (stacks/platform_link.py)
    own = "Cluster" if name in ("train-a", "train-b") else "Network"
    given = list(load(name).spec.network.security_groups.head_node)
    assert head["Networking"]["SecurityGroups"] == (given or [f"${{{own}.ClusterSecurityGroupId}}"])
    assert head["LocalStorage"]["RootVolume"]["Encrypted"] is True
    policies = [p["Policy"] for p in head["Iam"]["AdditionalIamPolicies"]]
    assert policies == ["arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore",
                        "${Cluster.HeadNodePolicyArn}"]


@pytest.mark.parametrize("name", SPECS)
def test_compute_queues_get_only_their_own_policy(rendered, name):
    """No Session Manager on compute nodes: AmazonSSMManagedInstanceCore allows ssm:GetParameter(s) on every
    parameter, and every job user holds the compute role (docs/security.md); the job-user guard on each."""
    for queue in rendered[name]["Scheduling"]["SlurmQueues"]:
        assert queue["Iam"] == {"AdditionalIamPolicies": [{"Policy": "${Cluster.ComputeNodePolicyArn}"},
                                                            {"Policy": "${Cluster.JobGuardPolicyArn}"}]}


def test_scripts_are_content_addressed(rendered):
    artifacts = node_artifacts(load("demo"))
    head = rendered["demo"]["HeadNode"]["CustomActions"]
    assert head["OnNodeConfigured"]["Script"] == f"s3://${{Assets.Bucket}}/clusterkit/demo/{artifacts.stage0.key}"
    assert head["OnNodeUpdated"]["Script"] == f"s3://${{Assets.Bucket}}/clusterkit/demo/{artifacts.launcher.key}"
    gpu = _queue(rendered["demo"], "gpu")["CustomActions"]
    assert gpu["OnNodeStart"]["Script"].endswith(f"/{artifacts.compute_start.key}")
    assert gpu["OnNodeConfigured"]["Script"].endswith(f"/{artifacts.compute_configured.key}")
    assert head["OnNodeUpdated"]["Args"][-1] == f"CK_BUNDLE_SHA256={artifacts.bundle.sha256}"


def test_lock_change_leaves_head_node_configured_untouched():
    """PC cannot update HeadNode OnNodeConfigured: an image change may alter only OnNodeUpdated."""
    loaded = load("demo")
    before = node_artifacts(loaded)
    after = dataclasses.replace(before, bundle=dataclasses.replace(before.bundle, data=before.bundle.data + b"x"))
    effective = expand(loaded)
    refs = placeholder_refs(effective)
    old, new = render_config(effective, refs, before), render_config(effective, refs, after)
    assert old["HeadNode"]["CustomActions"]["OnNodeConfigured"] == new["HeadNode"]["CustomActions"]["OnNodeConfigured"]
    assert old["HeadNode"]["CustomActions"]["OnNodeUpdated"] != new["HeadNode"]["CustomActions"]["OnNodeUpdated"]
    assert old["Scheduling"] == new["Scheduling"], "an image change must not replace the compute fleet"


def test_bundle_contents():
    loaded = load("demo")
    with zipfile.ZipFile(io.BytesIO(node_artifacts(loaded).bundle.data)) as zf:
        names = sorted(zf.namelist())
        args = zf.read("node.args").decode().splitlines()
        compute = zf.read("compute.args").decode().splitlines()
        lock = zf.read("images.lock")
    # login nodes run the compute scripts with compute.args: the head-only settings (image gc) are not in it
    assert [a for a in args if a.startswith("CK_STORE_GC_")] and not [a for a in compute if a.startswith("CK_STORE_GC")]
    assert names == ["clusterkit_node.pyz", "compat_rules.json", "compute.args", "compute_node_configured.sh",
                     "compute_node_start.sh",
                     "enroot.sh", "head_node.sh", "head_node_launcher.sh", "health_plan.json", "image_sync.py",
                     "images.lock",
                     "login_node.sh", "node.args", "node_profiles.json", "pyxis_importer.py"]
    assert ("CK_CLUSTER=demo" in args
            and "ENROOT_SQUASH_OPTIONS=-comp zstd -Xcompression-level 3 -b 128K -no-fragments" in args)
    assert lock == loaded.lock_path.read_bytes()


def test_compute_nodes_get_the_ecr_registries_of_private_images(tmp_path):
    """A compute node pulls a private ECR image when a job names it: its enroot needs the credentials
    line, which compute_node_configured.sh writes from CK_ECR_REGISTRIES (tests/real_runtime runs it)."""
    from clusterkit.pipeline.loader import load

    ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
    spec = (tmp_path / "t.yaml")
    spec.write_text(with_images(("app", f"{ecr}/team/app@sha256:{'a' * 64}")))
    effective = expand(load(str(spec), check_lock=False))
    assert f"CK_ECR_REGISTRIES={ecr}" in effective.node.compute
    assert f"CK_ECR_REGISTRIES={ecr}" in effective.node.head
    assert effective.containers.ecr_registries == (ecr,)
    demo = expand(load("demo", check_lock=False))
    assert not [a for a in demo.node.compute if a.startswith("CK_ECR_REGISTRIES")]
    assert "CK_ECR_REGISTRIES=" in demo.node.head
