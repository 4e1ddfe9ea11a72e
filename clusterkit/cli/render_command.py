"""``clusterkit render``: write (or with ``--check``, compare) the generated files of each spec.

Each file gets one line: ``wrote`` / ``unchanged`` (or with ``--check`` ``up to date`` / ``stale``), so a
run where everything is current still says so.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("render")
    p.add_argument("names", nargs="*", metavar="NAME|PATH|DIR")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a rendered file is stale")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit.render.rendered_files import render_files

    outputs = render_files(args.names, check=args.check)
    if args.check:
        for output in outputs:
            if output.changed:
                print(f"{output.shown}: stale (run `{output.command}`)", file=sys.stderr)
            else:
                print(f"{output.shown}: up to date")
        return 1 if any(output.changed for output in outputs) else 0
    for output in outputs:
        print(f"{'wrote' if output.changed else 'unchanged'} {output.shown}")
    return 0
