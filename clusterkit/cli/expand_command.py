"""``clusterkit expand NAME``: the effective spec, every default and derived value resolved, as YAML or JSON."""
from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("expand")
    p.add_argument("name", metavar="NAME|PATH")
    p.add_argument("--format", choices=("yaml", "json"), default="yaml", help="output format (default: yaml)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json

    import yaml

    from clusterkit.effective.expand import as_data, expand
    from clusterkit.pipeline.loader import load
    from clusterkit.render.rendered_files import NoAliasDumper

    data = as_data(expand(load(args.name)))
    if args.format == "json":
        print(json.dumps(data, indent=2))
    else:
        print(yaml.dump(data, Dumper=NoAliasDumper, sort_keys=False, default_flow_style=False, width=120), end="")
    return 0
