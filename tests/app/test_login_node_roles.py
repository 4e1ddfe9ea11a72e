"""Least privilege of the login nodes' role (docs/security.md "Login nodes"): ClusterKit treats it as every login
user's, as on compute nodes, so a login pool of the shipped p5-capacity-block spec holds exactly the compute queues'
policies and, evaluated the same way (tests/app/test_node_roles.py), reads no SSM parameter and nothing outside its
cluster, while it can still fetch its frozen stage 0.

Real: the synthesized Cluster template (cdk-nag inside synth), ClusterKit's managed policies in it. Not real: IAM
itself (tests/iam_eval.py); ParallelCluster's own login-role statements are not evaluated (listed in the doc).
"""
from __future__ import annotations

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.pipeline.loader import load
from tests.app.test_node_roles import _cluster, _leaks
from tests.iam_eval import Decision, Request, decide

SPEC = "p5-capacity-block"


def test_login_pools_hold_the_compute_policies_and_reach_nothing_beyond_the_cluster(synthesized):
    stacks, assembly = synthesized[SPEC]
    cluster = _cluster(stacks, assembly, load(SPEC))
    config = cluster.template["Resources"]
    pools = next(r["Properties"]["ClusterConfiguration"]["LoginNodes"]["Pools"] for r in config.values()
                 if r["Type"] == "Custom::PclusterCluster")
    assert pools
    stage0 = node_artifacts(load(SPEC)).login_stage0
    assert stage0 is not None
    for pool in pools:
        assert pool["Iam"] == cluster.queues()[0]["Iam"]
        role = cluster.role(pool)
        assert _leaks(cluster, role) == [], pool["Name"]
        parameter = f"arn:aws:ssm:{cluster.region}:{cluster.account}:parameter/clusterkit/{SPEC}/bootstrap-bundle"
        assert decide(role, Request("ssm:GetParameter", parameter)) is Decision.EXPLICIT_DENY
        assert decide(role, Request("s3:GetObject", cluster.artifacts.replace("*", stage0.key))) is Decision.ALLOW
