"""The effective spec (clusterkit/effective/expand.py): every default and derived value, resolved in one place.

Real: the loader (types, rules, lock check), the committed catalog and the expansion itself. The values
render, the stacks, cost, advice and the node settings used to derive on their own are pinned here
against the spec that implies them; tests/cli/test_expand.py pins the printed form.
"""
from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from clusterkit.effective.expand import EcrRepository, Tag, expand, expand_spec
from clusterkit.pipeline.loader import load
from clusterkit.rules import check as rules
from clusterkit.spec.model import NewVpc, parse_spec
from tests.spec_text import BASE_SPEC

MINIMAL = (BASE_SPEC +
           "  - name: cpu\n    capacity_type: spot\n    compute_resources:\n"
           "      - name: c\n        instance_type: c6i.2xlarge\n        max: 4\n")


def _load(tmp_path, text: str):
    path = tmp_path / "t.yaml"
    path.write_text(text, encoding="utf-8")
    return load(str(path), check_lock=False)


def test_a_minimal_spec_expands_every_default(tmp_path):
    eff = expand(_load(tmp_path, MINIMAL))
    assert eff.network.new == NewVpc() and eff.network.existing is None
    assert (eff.storage.mount_dir, eff.storage.image_store, eff.storage.image_store_fs_path) == (
        "/fsx", "/fsx/containers", "/containers")
    assert eff.storage.new.deployment_type == "PERSISTENT_2" and eff.storage.new.throughput_mb_per_tib == 250
    assert eff.storage.existing_file_system_id is None
    gpu, cpu = eff.queues
    assert (gpu.efa, gpu.placement_group, gpu.has_gpu, gpu.has_nvme, gpu.job_exclusive) == (True,) * 5
    assert (gpu.pc_capacity_type, gpu.allocation_strategy, gpu.compute_resources[0].efa) == ("ONDEMAND", None, True)
    assert (cpu.efa, cpu.placement_group, cpu.has_gpu, cpu.has_nvme, cpu.job_exclusive) == (False,) * 5
    assert (cpu.pc_capacity_type, cpu.allocation_strategy) == ("SPOT", "price-capacity-optimized")
    assert eff.head_node.has_nvme is False  # c6i.2xlarge, the default head node
    assert eff.containers.platform == "linux/amd64" and eff.containers.ecr_registries == ()
    assert eff.tags == (Tag("clusterkit:cluster", "t"),)
    assert (eff.names.cluster_stack, eff.names.artifact_prefix, eff.names.bundle_parameter) == (
        "T-Cluster", "clusterkit/t/", "/clusterkit/t/bootstrap-bundle")
    assert eff.lifecycle.ttl_hours is None and eff.lifecycle.expires_at is None
    assert eff.node.head[:4] == ("CK_CLUSTER=t", "CK_OS=alinux2023", "CK_REGION=us-east-1", "CK_STORE=/fsx/containers")
    assert eff.node.head[-4:] == ("CK_ECR_REGISTRIES=", "CK_STORE_GC_TIMER=0", "CK_STORE_GC_GRACE_HOURS=72",
                                  "CK_STORE_GC_STALE_DAYS=7")
    assert eff.node.compute == eff.node.head[:-4], "compute nodes get neither an empty registry list nor gc settings"


def test_the_spec_says_otherwise(tmp_path):
    text = MINIMAL.replace("        max: 2\n", "        max: 2\n        efa: false\n", 1)
    text = text.replace("  - name: gpu\n", "  - name: gpu\n    job_exclusive: false\n")
    text += ("storage:\n  fsx_lustre:\n    mount_dir: /lustre\n    image_store: /lustre/images/sqsh\n"
             "    new:\n      deployment_type: PERSISTENT_1\n")
    eff = expand(_load(tmp_path, text))
    gpu = eff.queues[0]
    assert (gpu.efa, gpu.placement_group, gpu.has_gpu, gpu.job_exclusive) == (False, False, True, False)
    assert (eff.storage.image_store, eff.storage.image_store_fs_path) == ("/lustre/images/sqsh", "/images/sqsh")
    assert eff.storage.new.throughput_mb_per_tib == 200  # PERSISTENT_1's default


def test_capacity_blocks_never_get_a_placement_group():
    block = next(q for q in expand(load("p5-capacity-block")).queues if q.capacity_type == "capacity_block")
    assert (block.efa, block.placement_group, block.pc_capacity_type) == (True, False, "CAPACITY_BLOCK")


def test_existing_resources_are_not_created():
    eff = expand(load("p4d-existing"))
    assert eff.network.new is None and eff.network.existing.vpc_id.startswith("vpc-")
    assert eff.storage.new is None and eff.storage.existing_file_system_id == "fs-0123456789abcdef0"


def test_arm_fleet_and_private_ecr(tmp_path):
    ecr = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
    text = MINIMAL.replace("p5.48xlarge", "g5g.2xlarge").replace("c6i.2xlarge", "c7g.2xlarge")
    text += ("head_node:\n  instance_type: c7g.2xlarge\ncontainers:\n  images:\n"
             f"    - name: b\n      uri: {ecr}/team/b@sha256:{'b' * 64}\n"
             f"    - name: a\n      uri: {ecr}/team/a@sha256:{'a' * 64}\n"
             f"    - name: a2\n      uri: {ecr}/team/a:v2\n")
    eff = expand(_load(tmp_path, text))
    assert eff.containers.platform == "linux/arm64"
    assert eff.containers.ecr_registries == (ecr,)
    assert eff.containers.ecr_repositories == (EcrRepository("123456789012", "us-west-2", "team/a"),
                                               EcrRepository("123456789012", "us-west-2", "team/b"))
    assert eff.node.compute[-1] == f"CK_ECR_REGISTRIES={ecr}"
    assert eff.queues[0].has_gpu and not eff.queues[0].has_nvme  # g5g: GPUs, no instance store


def test_deploy_time_sets_the_expiry():
    eff = expand(load("demo"), deploy_time=datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC))
    assert eff.lifecycle.deploy_time == datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
    assert eff.lifecycle.expires_at == datetime(2026, 12, 4, 8, 0, tzinfo=UTC)  # 72 h, to the minute


def test_the_effective_spec_is_frozen():
    eff = expand(load("demo"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        eff.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        eff.queues[0].efa = False  # type: ignore[misc]
    assert isinstance(eff.queues, tuple) and isinstance(eff.node.head, tuple)


# --- one definition: what the remaining readers of the spec see is the effective value ----------------------

SPEC_VARIANTS = [
    "",
    "storage:\n  fsx_lustre:\n    mount_dir: /lustre/\n",
    "storage:\n  fsx_lustre:\n    new:\n      deployment_type: SCRATCH_2\n",
    "storage:\n  fsx_lustre:\n    new:\n      deployment_type: PERSISTENT_1\n      throughput_mb_per_tib: 50\n",
    "storage:\n  fsx_lustre:\n    existing:\n      file_system_id: fs-0123456789abcdef0\n",
    "network:\n  existing:\n    vpc_id: vpc-0123abcd\n    head_node_subnet_id: subnet-0123abcd\n"
    "    compute_subnet_id: subnet-0123abcd\n",
    "network:\n  new:\n    cidr: 10.1.0.0/16\n",
]


@pytest.mark.parametrize("edit", [
    ("instance_type: p5.48xlarge", "instance_type: p9.huge"),  # unknown to the catalog
    ("max: 4\n", "max: 4\ncontainers:\n  images:\n    - name: x\n      uri: 'not a reference!'\n"),
    ("max: 4\n", "max: 4\nstorage:\n  fsx_lustre:\n    mount_dir: /fsx\n    image_store: /elsewhere\n"),
])
def test_expansion_never_raises_on_a_spec_the_rules_refuse(edit):
    """The rules (through node_settings) and diff's cost delta expand specs that were not validated."""
    spec, marks, problems = parse_spec(MINIMAL.replace(*edit, 1), "t.yaml")
    assert spec is not None and not problems
    assert [p for p in rules.check(spec, marks) if p.level == "error"]
    eff = expand_spec(spec)
    assert eff.name == "t" and eff.node.head
