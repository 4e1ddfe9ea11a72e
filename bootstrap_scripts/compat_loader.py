"""compat.py and compat_rules.json, loaded from next to image_sync.py (the bundle ships them together).

compat.py is loaded by path under its own module name (the way clusterkit loads it too), and a missing
file is a one-line usage error naming the incomplete bundle rather than a traceback.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Optional

from console import UsageError

COMPAT_MODULE = "compat.py"
RULES_NAME = "compat_rules.json"


def load_compat():
    """compat.py from this script's directory (the bundle ships both side by side)."""
    name = "clusterkit_compat"
    if name in sys.modules:
        return sys.modules[name]
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, COMPAT_MODULE)
    if not os.path.isfile(path):
        raise UsageError([f"{path} not found: the ClusterKit bundle in {here} is incomplete (rebuild "
                          f"and redeploy it with the CDK app)"])
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def default_rules_path() -> str:
    """Next to this script (the bundle), else the repository's clusterkit/data (a checkout)."""
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, RULES_NAME)
    repo = os.path.join(os.path.dirname(here), "clusterkit", "data", RULES_NAME)
    return bundled if os.path.isfile(bundled) or not os.path.isfile(repo) else repo


def load_rules(path: Optional[str]):
    compat = load_compat()
    path = path or default_rules_path()
    try:
        return compat, compat.load_rules(path)
    except compat.RulesError as exc:
        raise UsageError(exc.lines + ["(the compatibility rules ship in the ClusterKit bundle as "
                                      f"{RULES_NAME}; rebuild it with the CDK app)"])
