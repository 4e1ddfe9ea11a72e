"""LoginNodes in the rendered ParallelCluster config: where the pools go, which role they hold, and why a later deploy
can always update them.

Real: the committed rendered configs, render_config on the shipped p5-capacity-block spec (which has a pool), the
node artifacts the deploy uploads. ParallelCluster's own schema and validators accept the result
(tests/pcluster/test_pcluster_rendered.py) and refuse bad pools (tests/pcluster/test_pcluster_agrees.py).
"""
from __future__ import annotations

import dataclasses

import yaml

from clusterkit.artifacts.bundle import LOGIN_STAGE0, node_artifacts
from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load
from clusterkit.render.pcluster_config import SSM_CORE, placeholder_refs, render_config
from clusterkit.render.rendered_files import rendered_path

SPEC = "p5-capacity-block"


def _rendered(name: str) -> dict:
    return yaml.safe_load(rendered_path(load(name)).read_text())


def test_shipped_spec_has_a_login_pool_in_the_compute_subnet_and_cluster_group():
    config = _rendered(SPEC)
    (pool,) = config["LoginNodes"]["Pools"]
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert (pool["Name"], pool["InstanceType"], pool["Count"], pool["GracetimePeriod"]) == ("login", "c6i.xlarge", 2,
                                                                                             15)
    assert pool["Networking"] == {"SubnetIds": queue["Networking"]["SubnetIds"],
                                  "SecurityGroups": queue["Networking"]["SecurityGroups"]}
    assert pool["Networking"]["SubnetIds"] != [config["HeadNode"]["Networking"]["SubnetId"]]


def test_login_nodes_hold_the_compute_role_without_session_manager():
    """Every user on a login node is treated as holding its role (as on compute nodes), so: the compute policy and
    the job-user guard (its explicit Deny of ssm:GetParameter* among them, tests/app/test_node_roles.py), never
    AmazonSSMManagedInstanceCore."""
    config = _rendered(SPEC)
    (pool,) = config["LoginNodes"]["Pools"]
    assert pool["Iam"] == config["Scheduling"]["SlurmQueues"][0]["Iam"]
    assert pool["Iam"] == {"AdditionalIamPolicies": [{"Policy": "${Cluster.ComputeNodePolicyArn}"},
                                                            {"Policy": "${Cluster.JobGuardPolicyArn}"}]}
    assert SSM_CORE.split("/")[-1] not in yaml.safe_dump(pool)


def test_login_actions_name_the_frozen_stage0_with_constant_args():
    """PC 3.16.1 never updates a pool's OnNodeStart/OnNodeConfigured (UNSUPPORTED): both name the frozen login stage 0
    with the event as the one Arg, so no spec or script change can touch them."""
    loaded = load(SPEC)
    artifacts = node_artifacts(loaded)
    assert artifacts.login_stage0 is not None and artifacts.login_stage0.name == LOGIN_STAGE0
    (pool,) = _rendered(SPEC)["LoginNodes"]["Pools"]
    actions = pool["CustomActions"]
    assert {event: action["Args"] for event, action in actions.items()} == {"OnNodeStart": ["start"],
                                                                          "OnNodeConfigured": ["configured"]}
    assert {action["Script"].rsplit("/", 1)[-1] for action in actions.values()} == {artifacts.login_stage0.key}


def test_a_settings_change_leaves_the_login_pool_as_it_was():
    loaded = load(SPEC)
    effective = expand(loaded)
    changed = dataclasses.replace(effective, node=dataclasses.replace(
        effective.node, compute=tuple(a.replace("ENROOT_TRANSFER_RETRIES=8", "ENROOT_TRANSFER_RETRIES=9")
                                      for a in effective.node.compute)))
    artifacts = node_artifacts(loaded)
    before = render_config(effective, placeholder_refs(effective), artifacts)
    after = render_config(changed, placeholder_refs(changed), artifacts)
    assert before["Scheduling"] != after["Scheduling"]
    assert before["LoginNodes"] == after["LoginNodes"]


def test_specs_without_pools_render_no_login_nodes_and_ship_no_login_stage0():
    assert "LoginNodes" not in _rendered("demo")
    assert node_artifacts(load("demo")).login_stage0 is None


def test_export_gives_login_nodes_s3_access_like_compute_nodes():
    """`clusterkit export` (no ClusterKit policies): PC's S3Access on the artifact prefix, as the queues get."""
    effective = expand(load(SPEC))
    refs = dataclasses.replace(placeholder_refs(effective), head_node_policy_arn=None, compute_node_policy_arn=None)
    config = render_config(effective, refs, node_artifacts(load(SPEC)))
    (pool,) = config["LoginNodes"]["Pools"]
    assert pool["Iam"] == config["Scheduling"]["SlurmQueues"][0]["Iam"] and "S3Access" in pool["Iam"]
