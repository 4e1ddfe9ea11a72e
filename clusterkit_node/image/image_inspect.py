"""``inspect IMAGE.sqsh``: every version the image reveals, where each was read and why that copy counts, and what
the compatibility rules say about the combination.

Why: the same reader the head node's sync records with (versions.py), shown to a person: a reviewer or an operator
checks a digest bump, or a surprising manifest entry, without a GPU, a mount or a registry.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Dict

from clusterkit_node.contract import compat
from clusterkit_node.contract.bundle_files import RULES_NAME, load_rules
from clusterkit_node.contract.console import EXIT_FAILED, UsageError
from clusterkit_node.image.versions import inspect_image


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("inspect", help="versions inside a .sqsh (CUDA, NCCL, aws-ofi-nccl, libfabric, EFA, "
                                       "PyTorch), each with its source, checked against the compatibility rules")
    p.add_argument("image", metavar="IMAGE.sqsh")
    p.add_argument("--rules", help=f"compatibility rules (default: {RULES_NAME} next to the zipapp)")
    p.add_argument("--format", choices=("text", "json"), default="text")


def cmd_inspect(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.image):
        raise UsageError([f"{args.image}: no such file (an image of the store, e.g. /fsx/containers/<name>.sqsh)"])
    rules = load_rules(args.rules)
    try:
        found = inspect_image(args.image)
    except RuntimeError as exc:
        raise UsageError([f"{args.image}: not a readable squashfs image ({exc})"]) from None
    name = os.path.basename(args.image)
    findings = compat.check(rules, name, found.versions)
    doc: Dict[str, Any] = {
        "image": args.image,
        "versions": found.versions,
        "sources": {k: r.source for k, r in sorted(found.readings.items())},
        "notes": found.notes,
        "findings": [f.as_dict() for f in findings],
    }
    if args.format == "json":
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        width = max((len(k) for k in doc["versions"]), default=0)
        print(f"{args.image}")
        for key, version in doc["versions"].items():
            print(f"  {key:<{width}}  {version:<14} {doc['sources'][key]}")
        if not doc["versions"]:
            print("  (no known component found)")
        for note in found.notes:
            print(f"  note: {note}")
        for f in findings:
            print(f"  {f.level}: {f.text()}")
    return EXIT_FAILED if any(f.level == "error" for f in findings) else 0
