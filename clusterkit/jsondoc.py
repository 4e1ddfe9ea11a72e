"""The one way ClusterKit prints a JSON document (``validate``, ``lock``, ``cost``, ``diff``, ``status``).

A root utility like ``paths`` and ``atomic``: the CLI and the packages whose reports it prints share it, so
every document has the same key order, indent and final newline.
"""
from __future__ import annotations

import json
from typing import Any


def dumps(data: dict[str, Any]) -> str:
    """Every JSON document the CLI prints: sorted keys, two-space indent, a final newline. Values YAML gave
    that JSON has no type for (a date in a spec diff) are written as their text."""
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
