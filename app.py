#!/usr/bin/env python3
"""The CDK app: ``cdk synth -c cluster=<name>`` (default ``demo``) builds <Name>-Network, -Storage, -Cluster; a
cluster on a platform builds <Name>-Alerts and -Cluster, and ``-c platform=<name>`` the platform's -Network, -Storage.

This file only wires: it loads and validates the spec (all problems at once, one line each, exit 2; every error
a user or the machine can cause ends in one line, clusterkit/cli/boundary.py),
turns it and this deploy's context into the effective spec (``clusterkit.pipeline.deploy_context``: ``deploy_time``,
ISO UTC, which ``make deploy`` passes, else "now", starts the TTL clock of ``lifecycle.ttl_hours``;
``ttl_hours``, ``make deploy TTL=...``, overrides the spec's value for one deploy), stages the node
artifacts, and builds the three stacks from those values, passing what one needs from another. The
stacks validate nothing and read no files. cdk-nag AwsSolutions checks every synth.
"""
# ruff: noqa: E402  (the imports after silence_node_banners() must follow it: jsii starts at import)
from __future__ import annotations

import sys

if __name__ == "__main__":  # first: Ctrl-C while aws_cdk and jsii load is one line too (clusterkit/cli/start.py)
    from clusterkit.cli.start import catch_interrupts

    catch_interrupts(program="app.py")

from clusterkit.artifacts.node_banner import silence_node_banners

silence_node_banners()  # before aws_cdk starts jsii: no Node-version banner however cdk.json runs this app

import aws_cdk as cdk

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.artifacts.stack_inputs import stage, version_guard_code
from clusterkit.cli.boundary import Boundary, guarded
from clusterkit.effective.expand import expand_platform
from clusterkit.pipeline.deploy_context import effective_for_deploy
from clusterkit.pipeline.loader import DEFAULT_CLUSTER, Loaded, load
from clusterkit.pipeline.platform import LoadedPlatform
from clusterkit.pipeline.platform import load_checked as load_platform
from stacks.alerts import AlertsStack
from stacks.cluster import ClusterStack
from stacks.nag import add_checks
from stacks.network import NetworkStack
from stacks.storage import StorageStack


def build(app: cdk.App, loaded: Loaded) -> dict[str, cdk.Stack]:
    """The stacks of one cluster, checked by cdk-nag AwsSolutions at synth (findings raise): its network, storage
    and cluster stacks, or on a platform its alerts and cluster stacks (the platform's are its own app)."""
    add_checks(app)
    effective = effective_for_deploy(loaded, ttl_hours=app.node.try_get_context("ttl_hours"),
                                     deploy_time=app.node.try_get_context("deploy_time"))
    artifacts = stage(node_artifacts(loaded), app.outdir)
    env = cdk.Environment(account=effective.account, region=effective.region)
    names, tags, name = effective.names, effective.tag_dict(), effective.name
    if effective.platform is not None:
        alerts = AlertsStack(app, names.alerts_stack, cluster_name=name, notify_email=effective.lifecycle.notify_email,
                             env=env, tags=tags, description=f"ClusterKit {name}: alert topic (outlives the cluster)")
        on_platform = ClusterStack(app, names.cluster_stack, effective=effective, artifacts=artifacts,
                                   version_guard_code=version_guard_code(), alert_topic=alerts.alert_topic,
                                   env=env, tags=tags,
                                   description=f"ClusterKit {name}: ParallelCluster {effective.parallelcluster_version}"
                                               f" cluster on platform {effective.platform.name}")
        return {"alerts": alerts, "cluster": on_platform}
    network = NetworkStack(app, names.network_stack, effective=effective, env=env, tags=tags,
                           description=f"ClusterKit {name}: VPC, subnets and security groups")
    storage = StorageStack(app, names.storage_stack, effective=effective, vpc=network.vpc,
                           subnet_id=network.compute_subnet_id, security_group=network.fsx_security_group,
                           env=env, tags=tags,
                           description=f"ClusterKit {name}: FSx for Lustre image store (outlives clusters)")
    cluster = ClusterStack(app, names.cluster_stack, effective=effective, artifacts=artifacts,
                           version_guard_code=version_guard_code(),
                           head_node_subnet_id=network.head_node_subnet_id,
                           compute_subnet_id=network.compute_subnet_id,
                           security_group_id=network.cluster_security_group.security_group_id,
                           file_system_id=storage.file_system_id, alert_topic=storage.alert_topic,
                           env=env, tags=tags,
                           description=f"ClusterKit {name}: ParallelCluster {effective.parallelcluster_version} "
                                       f"cluster")
    return {"network": network, "storage": storage, "cluster": cluster}


def build_platform(app: cdk.App, loaded: LoadedPlatform) -> dict[str, cdk.Stack]:
    """A platform's network and storage stacks (``-c platform=<name>``); every id its clusters use is exported."""
    add_checks(app)
    effective = expand_platform(loaded.spec)
    env = cdk.Environment(account=effective.account, region=effective.region)
    tags, name = effective.tag_dict(), effective.name
    network = NetworkStack(app, effective.network_stack, effective=effective, env=env, tags=tags,
                           description=f"ClusterKit platform {name}: VPC, subnets and the FSx security group")
    storage = StorageStack(app, effective.storage_stack, effective=effective, vpc=network.vpc,
                           subnet_id=network.compute_subnet_id, security_group=network.fsx_security_group,
                           env=env, tags=tags,
                           description=f"ClusterKit platform {name}: FSx for Lustre image store shared by its clusters")
    return {"network": network, "storage": storage}


def main() -> int:
    app = cdk.App()
    platform = app.node.try_get_context("platform")
    if platform:
        loaded_platform, warnings = load_platform(platform)
        build_platform(app, loaded_platform)
    else:
        loaded = load(app.node.try_get_context("cluster") or DEFAULT_CLUSTER)
        warnings = loaded.warnings
        build(app, loaded)
    for warning in warnings:
        print(warning.render(), file=sys.stderr)
    app.synth()
    return 0


if __name__ == "__main__":
    # The CLI's error boundary (clusterkit/cli/boundary.py): spec errors, unwritable cdk.out and Ctrl-C (which
    # reaches jsii's node kernel too) end in one line each; cdk.json runs this file as `.venv/bin/python app.py`.
    sys.exit(guarded(main, boundary=Boundary(program="app.py", rerun="make synth", leave_at_once=True)))
