"""``clusterkit export NAME``: the concrete ParallelCluster YAML of a deployed cluster (clusterkit.deployed.export)."""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--bucket", required=True, help="S3 bucket for the node artifacts (under clusterkit/<name>/)")
    p.add_argument("--upload", action="store_true", help="upload the node artifacts and create or update the job-user "
                                                         "guard IAM policy (otherwise only print)")
    p.add_argument("-o", "--output", help="write the YAML here instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clusterkit.atomic import check_writable, write_text
    from clusterkit.deployed.export import export
    from clusterkit.pipeline.loader import load

    loaded = load(args.name)
    if args.output:  # before any AWS call or upload: a path that cannot be written fails first, with nothing done
        check_writable(Path(args.output))
    result = export(loaded, bucket=args.bucket, do_upload=args.upload)
    for uri in result.uploaded:
        print(f"uploaded {uri}", file=sys.stderr)
    if result.guard:
        print(f"job-user guard policy: {result.guard}", file=sys.stderr)
    if args.output:
        write_text(Path(args.output), result.text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(result.text, end="")
    return 0
