#!/usr/bin/env python3
"""The CDK app: ``cdk synth -c cluster=<name>`` (default ``demo``) builds <Name>-Network, -Storage, -Cluster.

This file only wires: it loads and validates the spec (all problems at once, one line each, exit 2),
builds the three stacks and passes what one needs from another. cdk-nag AwsSolutions checks every synth.
Context ``deploy_time`` (ISO UTC; ``make deploy`` passes it, else "now") starts the TTL clock of
``lifecycle.ttl_hours``; ``ttl_hours`` (``make deploy TTL=...``) overrides the spec's value for one deploy.
"""
from __future__ import annotations

import sys

import aws_cdk as cdk

from clusterkit.errors import EXIT_USER_ERROR, ClusterKitError
from clusterkit.loader import DEFAULT_CLUSTER, Loaded, load
from clusterkit.naming import stack_names
from stacks.cluster import ClusterStack
from stacks.nag import add_checks
from stacks.network import NetworkStack
from stacks.storage import StorageStack
from stacks.ttl import parse_deploy_time, with_ttl_override


def build(app: cdk.App, loaded: Loaded) -> dict[str, cdk.Stack]:
    """The three stacks of one cluster, checked by cdk-nag AwsSolutions at synth (findings raise)."""
    add_checks(app)
    loaded = with_ttl_override(loaded, app.node.try_get_context("ttl_hours"))
    deploy_time = parse_deploy_time(app.node.try_get_context("deploy_time"))
    spec = loaded.spec
    env = cdk.Environment(account=spec.account, region=spec.region)
    names = stack_names(spec.name)
    tags = {"clusterkit:cluster": spec.name, **spec.tags}
    network = NetworkStack(app, names["network"], spec=spec, env=env, tags=tags,
                           description=f"ClusterKit {spec.name}: VPC, subnets and security groups")
    storage = StorageStack(app, names["storage"], spec=spec, vpc=network.vpc, subnet_id=network.compute_subnet_id,
                           security_group=network.fsx_security_group, env=env, tags=tags,
                           description=f"ClusterKit {spec.name}: FSx for Lustre image store (outlives clusters)")
    cluster = ClusterStack(app, names["cluster"], loaded=loaded,
                           head_node_subnet_id=network.head_node_subnet_id,
                           compute_subnet_id=network.compute_subnet_id,
                           security_group_id=network.cluster_security_group.security_group_id,
                           file_system_id=storage.file_system_id, alert_topic=storage.alert_topic,
                           deploy_time=deploy_time, env=env, tags=tags,
                           description=f"ClusterKit {spec.name}: ParallelCluster {spec.parallelcluster_version} cluster")
    return {"network": network, "storage": storage, "cluster": cluster}


def main() -> int:
    app = cdk.App()
    name = app.node.try_get_context("cluster") or DEFAULT_CLUSTER
    try:
        loaded = load(name)
        for warning in loaded.warnings:
            print(warning.render(), file=sys.stderr)
        build(app, loaded)
    except ClusterKitError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return EXIT_USER_ERROR
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
