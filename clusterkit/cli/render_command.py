"""``clusterkit render``: write (or with ``--check``, compare) the committed generated files of each spec."""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("render", help="write cluster_configs/rendered/<name>.yaml")
    p.add_argument("names", nargs="*", metavar="NAME|PATH")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a rendered file is stale")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit.render.rendered_files import render_all

    stale = render_all(args.names, check=args.check)
    if args.check and stale:
        for path in stale:
            print(f"{path}: stale (run `make render`)", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0
