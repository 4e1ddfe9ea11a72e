"""Every repository path ClusterKit's code uses, named once, and the project root they hang from.

The root is the directory holding ``cdk.json``, found by walking up from this file, never from the
current directory: ``.venv/bin/clusterkit`` (an editable install, so this file stays in the checkout)
must find the same specs and scripts from any directory, and the code must never pair itself with
another checkout's committed files (a rendered config is a function of both). Package data
(``clusterkit/data``) is located from the package, like any installed package's data.

Stdlib only and cheap: ``clusterkit.catalog.lookup`` imports it and must stay fast, and ``stacks/`` reads it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Final

from clusterkit.spec.errors import ClusterKitError

ROOT_MARKER: Final = "cdk.json"


class ProjectRootNotFound(ClusterKitError):
    """The package is not inside a ClusterKit checkout (e.g. a non-editable ``pip install .``)."""


def find_root(start: Path) -> Path:
    """The nearest directory at or above ``start`` that holds ``cdk.json``; one-line error if none does."""
    for directory in (start, *start.parents):
        if (directory / ROOT_MARKER).is_file():
            return directory
    raise ProjectRootNotFound(f"{start}: no {ROOT_MARKER} here or in any parent directory (clusterkit runs from a "
                              "ClusterKit checkout: `pip install -e <checkout>`, or `python -m clusterkit` in it)")


# Package data: shipped in the distribution (pyproject.toml [tool.setuptools.package-data]).
PACKAGE_DIR: Final = Path(__file__).resolve().parent
DATA_DIR: Final = PACKAGE_DIR / "data"
INSTANCE_TYPES: Final = DATA_DIR / "instance_types.json"  # written by clusterkit.catalog.build
REGIONS: Final = DATA_DIR / "regions.json"  # written by clusterkit.catalog.build
PRICES: Final = DATA_DIR / "prices.json"
COMPAT_RULES: Final = DATA_DIR / "compat_rules.json"  # also shipped to the nodes in the bootstrap bundle
# the NVIDIA driver of each ParallelCluster version's AMIs (validate only)
AMI_DRIVERS: Final = DATA_DIR / "ami_drivers.json"
NODE_PROFILES: Final = DATA_DIR / "node_profiles.json"  # also shipped: what each OS's PC AMI has for containers
AWS_LIMITS: Final = DATA_DIR / "aws_limits.json"

# The checkout.
ROOT: Final = find_root(PACKAGE_DIR.parent)
CDK_JSON: Final = ROOT / ROOT_MARKER
SPEC_REFERENCE: Final = ROOT / "docs" / "spec-reference.md"  # written by clusterkit.render.rendered_files
CONFIG_DIR_NAME: Final = "cluster_configs"  # also the git paths' prefix (clusterkit.diff.report)
CONFIG_DIR: Final = ROOT / CONFIG_DIR_NAME  # <name>.yaml specs and their <name>.images.lock
RENDERED_DIR: Final = CONFIG_DIR / "rendered"  # committed ParallelCluster configs, <name>.yaml
SPEC_SCHEMA: Final = CONFIG_DIR / "clusterkit-spec.schema.json"  # JSON Schema (clusterkit.render.spec_schema)
PLATFORM_SCHEMA: Final = CONFIG_DIR / "clusterkit-platform.schema.json"  # the same, of a platform file
SCRIPTS_DIR: Final = ROOT / "bootstrap_scripts"  # the node bash scripts (clusterkit.artifacts.bundle ships them)
NODE_PACKAGE_DIR: Final = ROOT / "clusterkit_node"  # shipped as one zipapp (clusterkit.artifacts.bundle)
VERSION_GUARD_HANDLER: Final = ROOT / "stacks" / "version_guard_handler.py"  # Lambda source, shipped inline
PCLUSTER_REQUIREMENTS: Final = ROOT / "requirements-pcluster.txt"  # pins aws-parallelcluster == DEFAULT_PC_VERSION
PCLUSTER_VENV: Final = ROOT / ".venv-pcluster"  # `make pcluster-venv`
PCLUSTER_PYTHON: Final = PCLUSTER_VENV / "bin" / "python"
