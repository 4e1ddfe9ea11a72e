"""``clusterkit status NAME``: deployed stacks, TTL expiry, head node (clusterkit.deployed.status_report)."""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("status")
    p.add_argument("name", metavar="NAME|PATH")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: the report as data")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit.deployed.status_report import cloudformation_client, status_lines
    from clusterkit.pipeline.loader import load
    from clusterkit.spec.files import deploy_command

    loaded = load(args.name, check_lock=False)
    spec = loaded.spec
    if args.format == "json":
        from clusterkit.deployed.status_report import report_json, status_report

        sys.stdout.write(report_json(status_report(spec, cloudformation_client(spec.region))))
    else:
        print("\n".join(status_lines(spec, cloudformation_client(spec.region),
                                      deploy=deploy_command(loaded.source.path))))
    return 0
