"""LoginNodes pool rules: what ParallelCluster 3.16.1 refuses in ``LoginNodes.Pools``, and what would boot a login
node that cannot run (an instance type of another CPU architecture than the head node's AMI).

Sources (the .venv-pcluster wheel): ``pcluster/schemas/cluster_schema.py`` ``LoginNodesPoolSchema`` (Count >= 0,
GracetimePeriod 3 to 120), ``pcluster/config/cluster_config.py`` (``LoginNodesPool._register_validators``:
InstanceTypeValidator and NameValidator; ``LoginNodes``: DuplicateNameValidator; ``_register_login_node_validators``:
MaxCountValidator against ``MAX_NUMBER_OF_LOGIN_NODE_POOLS``) and ``official_ami``, which picks the AMI by the HEAD
node's architecture for every pool without a custom AMI (``login_nodes_ami``).
"""
from __future__ import annotations

from collections.abc import Iterator

from clusterkit.catalog import lookup as catalog
from clusterkit.rules.common import duplicates
from clusterkit.rules.limits import (
    LOGIN_GRACETIME_MINUTES,
    LOGIN_POOL_NAME,
    MAX_LOGIN_POOLS,
    MIN_LOGIN_COUNT,
    RESERVED_NAMES,
)
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks, did_you_mean


def login_nodes(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    pools = spec.login_nodes
    if len(pools) > MAX_LOGIN_POOLS:
        yield m.problem("login_nodes", f"{len(pools)} login node pools; ParallelCluster allows {MAX_LOGIN_POOLS}",
                        "merge pools of the same instance type (count sets how many nodes a pool runs)")
    yield from duplicates(m, [(f"login_nodes[{i}].name", p.name) for i, p in enumerate(pools)], "login node pool")
    head = catalog.instance_type(spec.head_node.instance_type)
    low, high = LOGIN_GRACETIME_MINUTES
    for i, pool in enumerate(pools):
        pp = f"login_nodes[{i}]"
        if not LOGIN_POOL_NAME.fullmatch(pool.name) or pool.name in RESERVED_NAMES:
            yield m.problem(f"{pp}.name", f"'{pool.name}' is not a valid login node pool name",
                            "lowercase letter first; lowercase letters, digits, hyphens; at most 25; not 'default'")
        facts = catalog.instance_type(pool.instance_type)
        if facts is None:
            yield m.problem(f"{pp}.instance_type", f"unknown instance type '{pool.instance_type}'",
                            did_you_mean(pool.instance_type, catalog.instance_type_names()))
        elif head is not None and facts.arch != head.arch:
            yield m.problem(f"{pp}.instance_type",
                            f"{pool.instance_type} is {facts.arch}, the head node is {head.arch}",
                            "login nodes boot the head node's AMI (ParallelCluster picks it by the head node's "
                            "architecture): pick a login instance type of the same architecture")
        if pool.count < MIN_LOGIN_COUNT:
            yield m.problem(f"{pp}.count", f"must be >= {MIN_LOGIN_COUNT} (got {pool.count})",
                            "0 stops the pool's login nodes; set the number of login nodes to run")
        if not low <= pool.gracetime_minutes <= high:
            yield m.problem(f"{pp}.gracetime_minutes", f"{pool.gracetime_minutes} is outside {low} to {high} minutes",
                            f"ParallelCluster's GracetimePeriod takes {low} to {high}; its default is 10")
