"""Every test module's file name is unique across tests/: pytest's default import mode ("prepend", no __init__.py
in the test folders) imports a module by its base name, so a second test_x.py in another folder is an "import file
mismatch" collection error, but only when both are collected in one worker (CI found
tests/real_runtime/test_gpu_health.py beside tests/node_package/test_gpu_health.py)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
