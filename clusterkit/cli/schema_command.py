"""``clusterkit schema``: the spec's JSON Schema, as committed for editors."""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("schema")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit.render.spec_schema import schema_text

    sys.stdout.write(schema_text())
    return 0
