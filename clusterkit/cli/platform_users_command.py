"""``clusterkit platform-users NAME``: the deployed clusters that use a platform (``make destroy-platform`` asks it
first, and stops while there is one). Exit 0: none; 1: in use, one line naming them."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("platform-users")
    p.add_argument("name", metavar="PLATFORM|PATH")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: the users as data")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit.deployed.platform_users import read_users, refusal
    from clusterkit.deployed.status_report import cloudformation_client
    from clusterkit.pipeline.platform import load_checked

    loaded, _ = load_checked(args.name)
    name = loaded.spec.name
    found = read_users(cloudformation_client(loaded.spec.region), name)
    if args.format == "json":
        sys.stdout.write(json.dumps({"platform": name, "users": [
            {"stack": u.stack, "cluster": u.cluster, "exports": list(u.exports)} for u in found]}, indent=2) + "\n")
    elif found:
        print(refusal(name, found), file=sys.stderr)
    else:
        print(f"platform {name}: no deployed stack imports its exports")
    return 1 if found else 0
