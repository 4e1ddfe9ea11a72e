"""``clusterkit cost NAME``: hourly and 30-day estimate from list prices (clusterkit.cost)."""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cost", help="hourly and 30-day cost estimate from list prices (clusterkit/data/prices.json)")
    p.add_argument("name", metavar="NAME|PATH")
    p.add_argument("--refresh", action="store_true",
                   help="price the instance types with the AWS Price List API now (needs AWS credentials)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: the estimate as data")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit.cost import estimate as cost
    from clusterkit.effective.expand import expand
    from clusterkit.pipeline.loader import load, lock_or_none

    loaded = load(args.name)
    effective = expand(loaded)
    unknown: list[str]
    book, unknown = cost.load_prices(), []
    if args.refresh:
        book, unknown = cost.refresh_ec2(book, effective.region, cost.instance_types(effective))
    estimate = cost.estimate(effective, lock_or_none(loaded.source.path), book)
    if args.format == "json":
        from clusterkit.cli.machine_output import cost_json

        sys.stdout.write(cost_json(estimate, book, unknown))
    else:
        print("\n".join(cost.report(estimate, book, unknown)))
    return 0
