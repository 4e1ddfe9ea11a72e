"""The unit tier imports, never spawns (docs/testing.md "Test tiers"): a spawned ``python -m clusterkit`` cost a
fresh interpreter and ClusterKit's imports each time, and 28 of them made `make test-fast` slow. The CLI runs in
the interpreter (tests/in_process.py); what only a process shows is in the ``process`` tier (tests/tiers.py)."""
from __future__ import annotations

import re
import runpy
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
_TIERS = runpy.run_path(str(TESTS / "tiers.py"))
SPAWNS = re.compile(r"\bsubprocess\.(run|Popen|call|check_call|check_output)\(|\bos\.(system|popen|exec\w*|spawn\w*)\(|"
                    r"\bpty\.(spawn|fork)\(|\bmultiprocessing\b")
# The one program a unit test may run: git, which makes the repositories `diff` reads (milliseconds, no Python).
GIT = re.compile(r"subprocess\.\w+\(\[\s*\"git\"")


def test_no_unit_test_module_spawns() -> None:
    found = [f"{path.relative_to(TESTS)}:{number}: {line.strip()}"
             for path in sorted(TESTS.rglob("test_*.py")) if _TIERS["tier_of"](path) == "unit"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if SPAWNS.search(line) and "SPAWNS" not in line and not GIT.search(line)]
    assert not found, ("unit-tier tests that start a process: run the CLI with tests/in_process.py, or give the file "
                       "the `process` tier in tests/tiers.py:\n" + "\n".join(found))
