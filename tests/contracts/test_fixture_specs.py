"""The tests read their own specs, never "whatever is in cluster_configs/" (docs/testing.md "Fixture specs").

A user's own specs live in cluster_configs/ beside the shipped examples. A test that enumerated the folder broke on
them (a spec with no committed render, no golden, no recorded price) or quietly required them to be complete; with
two `clusterkit init` specs there, `make test-fast` failed 14 tests. The shipped examples are named in
tests/shipped.py; this checks that list against the checkout and that no test module goes back to enumerating.
"""
from __future__ import annotations

import re
from pathlib import Path

from clusterkit.paths import CONFIG_DIR, RENDERED_DIR
from tests import shipped

TESTS = Path(__file__).resolve().parents[1]
# What enumerating the checkout's spec folder looks like: the loader's "every spec", or a glob/listing of the folder.
ENUMERATES = re.compile(r"all_spec_paths\(\)|checkout_specs\(\)|"
                        r"(CONFIG_DIR|CONFIGS|\"cluster_configs\"\))\s*\.\s*(r?glob\(\s*\"\*\.(yaml|images\.lock)\"|iterdir\()")


def test_every_shipped_example_is_complete_in_the_checkout() -> None:
    for name in shipped.SPECS:
        for path in (CONFIG_DIR / f"{name}.yaml", CONFIG_DIR / f"{name}.images.lock", RENDERED_DIR / f"{name}.yaml"):
            assert path.is_file(), f"{path}: a shipped example's file is missing (tests/shipped.py names it)"
    for name in shipped.PLATFORMS:
        assert (CONFIG_DIR / "platforms" / f"{name}.yaml").is_file(), name
    assert shipped.spec_paths() == sorted(shipped.spec_paths())


def test_no_test_enumerates_the_checkouts_spec_folder() -> None:
    found = [f"{path.relative_to(TESTS)}:{number}: {line.strip()}"
             for path in sorted(TESTS.rglob("*.py")) if path.name != "shipped.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if ENUMERATES.search(line) and "ENUMERATES" not in line]
    assert not found, ("tests that read every spec of cluster_configs/ (a user's own included): name the shipped "
                       "examples (tests/shipped.py) or copy them to a folder of the test's own:\n" + "\n".join(found))

