"""The example specs this repository ships, by name: the fixture set the tests read from ``cluster_configs/``.

A user keeps their own specs in ``cluster_configs/`` too (``clusterkit init`` writes them there), so a test never
enumerates that folder: one that did broke on a user's spec, or demanded prices and renders for it. Tests of
ClusterKit's behaviour name these (or build their own specs in a temporary directory); the checks that the
shipped examples' committed artifacts are fresh (rendered configs, locks, goldens) cover exactly these names.
A new shipped example is added here (tests/contracts/test_fixture_specs.py checks each is tracked by git).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from clusterkit.paths import CONFIG_DIR

SPECS: tuple[str, ...] = ("demo", "p4d-existing", "p5-capacity-block", "train-a", "train-b")
PLATFORMS: tuple[str, ...] = ("research-east",)


def spec_paths() -> list[Path]:
    """``cluster_configs/<name>.yaml`` of each shipped example, in name order (as the folder sorts them)."""
    return [CONFIG_DIR / f"{name}.yaml" for name in sorted(SPECS)]


def lock_paths() -> list[Path]:
    return [CONFIG_DIR / f"{name}.images.lock" for name in sorted(SPECS)]


def copy_examples(dest: Path, names: tuple[str, ...] = SPECS) -> Path:
    """``dest`` made a spec folder holding only these shipped examples, their locks and the shipped platforms:
    for a command that acts on every spec of a folder, or on a platform's member clusters (a user's spec on
    the same platform is a member too)."""
    (dest / "platforms").mkdir(parents=True, exist_ok=True)
    for platform in PLATFORMS:
        shutil.copy(CONFIG_DIR / "platforms" / f"{platform}.yaml", dest / "platforms")
    for name in names:
        shutil.copy(CONFIG_DIR / f"{name}.yaml", dest)
        shutil.copy(CONFIG_DIR / f"{name}.images.lock", dest)
    return dest
