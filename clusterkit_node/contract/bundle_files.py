"""Where the node tools find the files shipped next to them: the bundle directory of the zipapp.

The bootstrap bundle is unpacked into ``/opt/parallelcluster/shared/.clusterkit-<digest>/`` (NFS-shared;
``/opt/parallelcluster/shared/clusterkit`` is a link to the live one) and holds ``clusterkit_node.pyz``
next to ``images.lock`` and ``compat_rules.json``. Run from a checkout (tests), the package finds the
rules in ``clusterkit/data``. A missing or unreadable rules file is a one-line usage error naming the
bundle, never a traceback.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional

from clusterkit_node.contract.console import UsageError

if TYPE_CHECKING:  # compat (the rules evaluator) is imported by load_rules only: every command imports this module
    from clusterkit_node.contract import compat

ZIPAPP_NAME = "clusterkit_node.pyz"
LIVE_DIR = "/opt/parallelcluster/shared/clusterkit"  # head_node.sh keeps it pointing at the live bundle (NFS-shared)
LIVE_ZIPAPP = f"{LIVE_DIR}/{ZIPAPP_NAME}"  # what the prolog, pyxis' importer line and systemd units run
LOCK_NAME = "images.lock"
RULES_NAME = "compat_rules.json"
PROFILES_NAME = "node_profiles.json"
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # clusterkit_node/, above contract/


def bundle_dir() -> str:
    """The directory of the zipapp this package was imported from, symlinks resolved (a running command
    keeps reading its own bundle after head_node.sh switched the link); from a checkout, its root."""
    # zipimport's loader names the zip file (mypy does not declare the module global __loader__)
    archive = getattr(__loader__, "archive", None)  # type: ignore[name-defined]
    return os.path.dirname(os.path.realpath(archive)) if archive else os.path.dirname(_PACKAGE_DIR)


def data_path(name: str) -> str:
    """A data file next to the zipapp (the bundle), else the repository's clusterkit/data (a checkout)."""
    bundled = os.path.join(bundle_dir(), name)
    repo = os.path.join(os.path.dirname(_PACKAGE_DIR), "clusterkit", "data", name)
    return bundled if os.path.isfile(bundled) or not os.path.isfile(repo) else repo


def default_rules_path() -> str:
    return data_path(RULES_NAME)


def load_rules(path: Optional[str]) -> compat.RuleSet:
    from clusterkit_node.contract import compat  # noqa: F811 (see the TYPE_CHECKING import)
    path = path or default_rules_path()
    try:
        return compat.load_rules(path)
    except compat.RulesError as exc:
        raise UsageError(exc.lines + ["(the compatibility rules ship in the ClusterKit bundle as "
                                      f"{RULES_NAME}; rebuild it with the CDK app)"])
