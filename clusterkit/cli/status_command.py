"""``clusterkit status NAME``: deployed stacks, TTL expiry, head node (clusterkit.deployed.status_report); with
``--nodes``, each compute node's health checks and Slurm state, read on the head node (deployed.node_checks)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("status")
    p.add_argument("name", metavar="NAME|PATH")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: the report as data")
    p.add_argument("--nodes", action="store_true",
                   help="each compute node's last health checks and Slurm state (SSM on the head node)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit import clock
    from clusterkit.deployed.status_report import cloudformation_client, report_json, report_lines, status_report
    from clusterkit.pipeline.loader import load
    from clusterkit.spec.files import deploy_command

    loaded = load(args.name, check_lock=False)
    spec = loaded.spec
    now = clock.utc_now()
    report = status_report(spec, cloudformation_client(spec.region), now)
    checks = None
    if args.nodes:
        from clusterkit.deployed import node_checks

        checks = (node_checks.read(node_checks.ssm_client(spec.region), report.head_node) if report.head_node
                  else node_checks.NodeChecks(unread="no head node: the cluster stack is not deployed"))
    if args.format == "json":
        if checks is None:
            sys.stdout.write(report_json(report))
        else:
            from clusterkit.deployed.node_checks import as_json
            from clusterkit.jsondoc import dumps

            sys.stdout.write(dumps({**json.loads(report_json(report)), "nodes": as_json(checks)}))
        return 0
    lines = report_lines(report, now, deploy=deploy_command(loaded.source.path))
    if checks is not None:
        from clusterkit.deployed.node_checks import lines as node_lines

        lines += node_lines(checks)
    print("\n".join(lines))
    return 0
