"""Separate interpreters with different hash seeds print the same bytes: set and dict ordering, or a timestamp,
would show up here. Only fresh processes have another seed, so this file is in the ``process`` tier
(tests/tiers.py): the unit tier imports, never spawns."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "cli" / "golden" / "demo.expanded.yaml"


def _run(seed: str, *args: str) -> str:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=True,
                          timeout=120, env={**os.environ, "PYTHONHASHSEED": seed}).stdout


def test_render_is_deterministic_across_processes() -> None:
    """Byte-identical configs, bundles and spec reference."""
    code = ("import hashlib; from clusterkit.pipeline.loader import load; "
            "from clusterkit.artifacts.bundle import node_artifacts; "
            "from clusterkit.render.rendered_files import rendered_text; l = load('p5-capacity-block'); "
            "from clusterkit.render.rendered_files import spec_reference_text; "
            "print(hashlib.sha256(rendered_text(l).encode()).hexdigest(), node_artifacts(l).bundle.sha256, "
            "hashlib.sha256(spec_reference_text().encode()).hexdigest())")
    outputs = {_run(seed, "-c", code) for seed in ("1", "2", "3")}
    assert len(outputs) == 1, outputs


def test_expand_output_does_not_depend_on_the_hash_seed() -> None:
    """Sets and dicts (tags, registries, repositories) come out sorted: any seed prints the golden copy."""
    golden = GOLDEN.read_text(encoding="utf-8")
    for seed in ("1", "2"):
        out = _run(seed, "-m", "clusterkit", "expand", "demo")
        assert out == golden, seed
