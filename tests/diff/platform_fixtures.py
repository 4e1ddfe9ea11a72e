"""Builds tests/diff/fixtures/platform/: the shipped platform research-east with train-a and train-b, and one
case per kind of platform change, for the ``clusterkit diff`` platform tests (test_diff_platforms.py).

A committed snapshot, like diff_fixtures.py's (its docstring says why): regenerate only when the rendered format
changes, then the goldens:

    .venv/bin/python tests/diff/platform_fixtures.py
    CK_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/diff/test_diff_platforms.py -q

Base: the repository's research-east, train-a and train-b (spec and lock), rendered here by the real loader and
renderer, and a second platform research-west (research-east with another name and CIDR, no cluster on it).
Each case edits files as a person would and re-renders every cluster (what ``make render`` writes), so a case
holds exactly the files the change rewrites.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = HERE / "fixtures" / "platform"
CLUSTERS = ("train-a", "train-b")
EAST = "platforms/research-east.yaml"
WEST = "platforms/research-west.yaml"
NORTH = "platforms/research-north.yaml"

# case -> {file under cluster_configs/: [(old, new)]}; each old text occurs exactly once. A file absent from the
# base is made from EAST with these edits.
EDITS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "platform-capacity": {EAST: [("      capacity_gib: 2400\n", "      capacity_gib: 4800\n")]},
    "platform-cidr": {EAST: [("    cidr: 10.1.0.0/16\n", "    cidr: 10.2.0.0/16\n")]},
    "platform-mount-dir": {EAST: [("    mount_dir: /fsx\n    image_store: /fsx/containers\n",
                                   "    mount_dir: /shared\n    image_store: /shared/containers\n")]},
    "platform-added": {NORTH: [("name: research-east\n", "name: research-north\n"),
                               ("    cidr: 10.1.0.0/16\n", "    cidr: 10.3.0.0/16\n")]},
    "cluster-moved": {"train-b.yaml": [("platform: research-east\n", "platform: research-west\n")]},
}
CASES = tuple(EDITS)


def _edit(text: str, edits: list[tuple[str, str]]) -> str:
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _render_all(config: Path) -> dict[str, str]:
    """Every cluster's rendered config from a cluster_configs/ directory (a copy, so nothing is written there)."""
    from clusterkit.pipeline.loader import load
    from clusterkit.render.rendered_files import rendered_text

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "cluster_configs"
        shutil.copytree(config, copy)
        return {name: rendered_text(load(str(copy / f"{name}.yaml"))) for name in CLUSTERS}


def build(out: Path = FIXTURES) -> None:
    if out.exists():
        shutil.rmtree(out)
    base = out / "base" / "cluster_configs"
    (base / "rendered").mkdir(parents=True)
    (base / "platforms").mkdir()
    source = REPO / "cluster_configs"
    shutil.copyfile(source / EAST, base / EAST)
    west = _edit((source / EAST).read_text(), [("name: research-east\n", "name: research-west\n"),
                                              ("    cidr: 10.1.0.0/16\n", "    cidr: 10.4.0.0/16\n")])
    (base / WEST).write_text(west, encoding="utf-8")
    for name in CLUSTERS:
        for suffix in (".yaml", ".images.lock"):
            shutil.copyfile(source / f"{name}{suffix}", base / f"{name}{suffix}")
    for name, text in _render_all(base).items():
        (base / "rendered" / f"{name}.yaml").write_text(text, encoding="utf-8")
    for case, edits in EDITS.items():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / "cluster_configs"
            shutil.copytree(base, work)
            for rel, changes in edits.items():
                start = (work / rel) if (work / rel).exists() else (work / EAST)
                (work / rel).write_text(_edit(start.read_text(), changes), encoding="utf-8")
            for name, text in _render_all(work).items():
                (work / "rendered" / f"{name}.yaml").write_text(text, encoding="utf-8")
            for path in sorted(p for p in work.rglob("*") if p.is_file()):
                rel_path = path.relative_to(work)
                before = base / rel_path
                if not before.exists() or before.read_text() != path.read_text():
                    target = out / "cases" / case / "cluster_configs" / rel_path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    build()
    print(f"wrote {FIXTURES.relative_to(REPO)}")
