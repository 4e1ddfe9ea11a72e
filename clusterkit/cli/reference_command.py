"""``clusterkit reference``: the spec reference (markdown), as committed in docs/spec-reference.md."""
from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("reference")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit.render.spec_reference import spec_reference

    print(spec_reference(), end="")
    return 0
