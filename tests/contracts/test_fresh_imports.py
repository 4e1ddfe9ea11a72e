"""What a fresh interpreter has imported after importing one module: the run-time side of the import contracts
(tests/contracts/test_layers.py reads the imports statically). Only a new process starts with nothing imported, so
this file is in the ``process`` tier (tests/tiers.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_importing_render_loads_no_rules():
    """Importing render reaches no rules, pipeline or CDK (test_layers.py: the same, read statically)."""
    code = ("import sys, clusterkit.render.pcluster_config; "
            "print(sorted(m for m in sys.modules\n"
            "             if m.startswith(('clusterkit.rules', 'clusterkit.pipeline', 'aws_cdk'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
