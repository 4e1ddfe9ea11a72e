"""The spec schema's ``pattern`` values are JavaScript regular expressions, as editors read them: checked by node
itself, a separate process, so this file is in the ``process`` tier (tests/tiers.py)."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from test_schema import _patterns

from clusterkit.render.spec_schema import spec_schema


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_patterns_are_ecma_262_regular_expressions():
    """Editors match ``pattern`` with JavaScript's RegExp (unicode mode): Python's ``re`` is not the judge."""
    patterns = sorted(set(_patterns(spec_schema())))
    assert len(patterns) > 10
    code = "for (const p of JSON.parse(process.argv[1])) new RegExp(p, 'u');"
    subprocess.run(["node", "-e", code, json.dumps(patterns)], check=True, capture_output=True, text=True)
