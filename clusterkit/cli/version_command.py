"""``clusterkit --version``: what this checkout runs with, for bug reports and CI logs.

ClusterKit's own version from its installed metadata (pyproject.toml), the ParallelCluster version a spec
gets by default, the aws-cdk-lib the stacks synthesize with, and the CDK CLI ``make`` installed under
node_modules. A piece that is not installed says so instead of failing.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from clusterkit import DEFAULT_PC_VERSION


def _dist(name: str) -> str:
    from importlib import metadata  # only when asked: every command's parser has --version, few runs use it

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cdk_cli() -> str:
    from clusterkit.paths import ROOT

    try:
        data = json.loads((ROOT / "node_modules" / "aws-cdk" / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "not installed (make synth installs it)"
    version = data.get("version") if isinstance(data, dict) else None
    return str(version) if version else "unknown"


def version_lines() -> list[str]:
    return [
        f"clusterkit {_dist('clusterkit')}",
        f"ParallelCluster {DEFAULT_PC_VERSION} (default for specs; parallelcluster_version overrides)",
        f"aws-cdk-lib {_dist('aws-cdk-lib')}",
        f"aws-cdk (CLI) {_cdk_cli()}",
    ]


class VersionAction(argparse.Action):
    """``--version``: computed only when asked (it reads package metadata and node_modules)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print("\n".join(version_lines()))
        parser.exit()
