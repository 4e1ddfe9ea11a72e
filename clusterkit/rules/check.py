"""Semantic rules over a parsed spec: what ParallelCluster, EC2 and FSx would reject, found before deploy.

Each rule yields ``Problem``s located through the spec's ``Marks``; this module runs them in spec order, then
the catch-alls. Facts about instance types and regions come from the committed catalog (``clusterkit/data``),
so validation is offline.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from clusterkit.effective.expand import expand_spec
from clusterkit.effective.node_settings import setting_field
from clusterkit.rules import aws_limits
from clusterkit.rules.cluster import acknowledge, identity, settings
from clusterkit.rules.containers import compat, containers, nvidia_container_cli, single_threaded_in_place
from clusterkit.rules.limits import AWS_INTEGER_MAX
from clusterkit.rules.login_nodes import login_nodes
from clusterkit.rules.network import network
from clusterkit.rules.queues import head_node, queues
from clusterkit.rules.security import compute_imds
from clusterkit.rules.storage import storage
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks
from clusterkit_node.contract import settings as node


def check(spec: ClusterSpec, marks: Marks) -> list[Problem]:
    """Every rule, in spec order; errors and warnings together."""
    problems: list[Problem] = []
    for rule in (identity, network, head_node, storage, queues, login_nodes, containers, nvidia_container_cli,
                 single_threaded_in_place, compat, compute_imds, settings,
                 aws_limits.check, acknowledge):
        problems.extend(rule(spec, marks))
    # Catch-alls, after the specific rules (whose messages say more): each field once.
    reported = {p.path for p in problems if p.level == "error"}
    for rule in (_node_settings, _control_characters, _aws_integers):
        for problem in rule(spec, marks):
            if problem.path not in reported:
                reported.add(problem.path)
                problems.append(problem)
    return problems


def _node_settings(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """Every KEY=VALUE the spec gives the nodes, against the nodes' own contract (clusterkit_node/contract/settings.py):
    a value validate accepts is one no node refuses at boot."""
    for line in expand_spec(spec).node.head:  # malformed image references are the images' own rule
        key, _, value = line.partition("=")
        setting = node.BY_KEY[key]
        problem = setting.problem(value)
        if problem:
            yield m.problem(setting_field(spec, key), problem, setting.hint)


def _control_characters(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """No newline, tab or other control character in any value: values reach files, shells and AWS APIs."""
    for path, value in _strings(spec, ""):
        if any(not c.isprintable() for c in value):
            yield m.problem(path, f"{value!r} contains a control character (newline, tab, ...)",
                            "write it on one line; a YAML block scalar (| or >) keeps its final newline")


def _aws_integers(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """No whole number beyond what AWS APIs take (32-bit integers), for fields no specific rule bounds above."""
    for path, value in _values(spec, ""):
        if isinstance(value, int) and not isinstance(value, bool) and value > AWS_INTEGER_MAX:
            yield m.problem(path, f"{value} is larger than any AWS API takes",
                            f"AWS reads whole numbers as 32-bit integers, at most {AWS_INTEGER_MAX}; real limits "
                            "(service quotas) are far lower")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    for path, item in _values(value, path):
        if isinstance(item, str):
            yield path, item


def _values(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every scalar of the spec with its path (mapping keys as written)."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _values(getattr(value, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _values(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _values(item, f"{path}.{key}")
    else:
        yield path, value

