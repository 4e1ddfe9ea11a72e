"""``clusterkit cost NAME``: hourly and 30-day estimate from list prices (clusterkit.cost), of a cluster (with its
share of a platform it runs on) or of a platform."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

FAIL_ON = ("incomplete",)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "cost",
        description="Estimate what a cluster, or a platform (platforms/<name>.yaml), costs at list prices.",
        epilog="A cluster on a platform shows its share: the platform's total split evenly between the cluster\n"
               "specs in its directory that name the platform.\n\n"
               "Exit codes: 0 the estimate was made (with --fail-on incomplete: every price was found);\n"
               "1 --fail-on incomplete and a price is missing (the totals are a lower bound); 2 a spec or\n"
               "argument problem.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME|PATH", help="a cluster or platform name, or a spec or platform file path")
    p.add_argument("--refresh", action="store_true",
                   help="price the instance types with the AWS Price List API now (needs AWS credentials)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: the estimate as data")
    p.add_argument("--fail-on", choices=FAIL_ON, metavar="incomplete",
                   help="exit 1 when a price is missing, after printing the estimate (for automation)")
    p.set_defaults(run=run)


def platform_file(name_or_path: str) -> Path | None:
    """The platform file ``name_or_path`` means, or None for a cluster spec: a path inside a ``platforms/``
    directory, or a bare name with a platform file and no cluster spec of that name."""
    from clusterkit.paths import CONFIG_DIR
    from clusterkit.spec.files import PLATFORMS_DIR_NAME, platforms_dir, resolve

    path = resolve(name_or_path)
    if path != CONFIG_DIR / f"{name_or_path}.yaml":  # a path
        return path if path.parent.name == PLATFORMS_DIR_NAME else None
    platform = platforms_dir(CONFIG_DIR) / f"{name_or_path}.yaml"
    return platform if not path.exists() and platform.is_file() else None


def run(args: argparse.Namespace) -> int:
    from clusterkit.cost import estimate as cost
    from clusterkit.cost import platform_cost

    book, unknown = cost.load_prices(), list[str]()
    platform = platform_file(args.name)
    if platform is not None:
        if args.refresh:  # a platform has no instance types: nothing to ask
            print("clusterkit cost: --refresh prices instance types; a platform has none (its prices come from "
                  f"{cost.PRICES_PATH.name})", file=sys.stderr)
        estimate = platform_cost.load_estimate(platform, book)
    else:
        from clusterkit.effective.expand import expand
        from clusterkit.pipeline.loader import load, lock_or_none

        loaded = load(args.name)
        effective = expand(loaded)
        if args.refresh:
            book, unknown = cost.refresh_ec2(book, effective.region, cost.instance_types(effective))
        estimate = cost.estimate(effective, lock_or_none(loaded.source.path), book,
                                 platform_cost.share_of(loaded, book))
    if args.format == "json":
        from clusterkit.cli.machine_output import cost_json

        sys.stdout.write(cost_json(estimate, book, unknown))
    else:
        print("\n".join(cost.report(estimate, book, unknown)))
    if args.fail_on == "incomplete" and not estimate.complete:
        print(f"clusterkit cost: --fail-on incomplete: {cost.incomplete(estimate).removeprefix('incomplete: ')} "
              f"({'; '.join(cost.brief(m) for m in estimate.missing)})",
              file=sys.stderr)
        return 1
    return 0
