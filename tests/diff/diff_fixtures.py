"""Builds tests/diff/fixtures/: a base set of cluster files and, per case, the files the change rewrites.

The fixtures are a committed snapshot on purpose: ``clusterkit diff`` compares committed files and never
re-renders, so its tests need stable inputs rather than whatever today's bootstrap scripts hash to.
Regenerate them only when the rendered format itself changes, then the goldens:

    .venv/bin/python tests/diff/diff_fixtures.py
    CK_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/diff -q

Base: the repository's demo and p4d-existing spec and lock, rendered here. Each case edits the demo
spec (and lock) as a person would and renders it the same way (the real loader and renderer), so only
the edit differs between the two sides. ``prices.json`` is
a copy of clusterkit/data/prices.json, so the cost lines of the goldens move only when this snapshot
does. The one stand-in: the bumped pytorch digest is made up (sha256 of a label), as no registry is
reachable here.
"""
from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = HERE / "fixtures"
BASE_CLUSTERS = ("demo", "p4d-existing")
DELETE_LIST = "DELETE"
PRICES = FIXTURES / "prices.json"  # per case: repository paths the change removes, one a line

OLD_PYTORCH = "96990c82825613c3bdeebb66675c7c91b0123f64a5895623316dc5b824e0d7a9"
NEW_PYTORCH = hashlib.sha256(b"clusterkit diff fixture: nvcr.io/nvidia/pytorch:25.02-py3").hexdigest()

# case -> (old text, new text) edits of demo.yaml; each old text must occur exactly once.
SPEC_EDITS: dict[str, list[tuple[str, str]]] = {
    "queue-max": [("        max: 4\n", "        max: 8\n")],
    "instance-type": [("        instance_type: p5.48xlarge\n", "        instance_type: p5en.48xlarge\n")],
    "image-digest": [(f"pytorch:25.01-py3@sha256:{OLD_PYTORCH}", f"pytorch:25.02-py3@sha256:{NEW_PYTORCH}")],
    "fsx-throughput": [("      throughput_mb_per_tib: 250\n", "      throughput_mb_per_tib: 500\n")],
    "head-node": [("  instance_type: c6i.2xlarge\n  root_volume_gib: 200\n",
                   "  instance_type: c6i.4xlarge\n  root_volume_gib: 200\n")],
    # Not in the rendered config at all (it picks the provider template): only the spec changes.
    "pc-version": [("parallelcluster_version: 3.16.1\n", "parallelcluster_version: 3.14.0\n")],
}
# A pull request doing several of the above at once (the sample in docs/review.md).
SPEC_EDITS["mixed"] = [*SPEC_EDITS["queue-max"], *SPEC_EDITS["instance-type"], *SPEC_EDITS["image-digest"],
                       *SPEC_EDITS["head-node"]]
CASES = (*SPEC_EDITS, "cluster-added-removed")


def _files(name: str) -> list[str]:
    return [f"cluster_configs/{name}.yaml", f"cluster_configs/{name}.images.lock",
            f"cluster_configs/rendered/{name}.yaml"]


def _bump_lock(text: str) -> str:
    import dataclasses

    from clusterkit.images.lock_file import lock_text, parse_lock_text

    lock, problems = parse_lock_text(text, "lock")
    assert lock is not None and not problems, problems
    bumped = tuple(dataclasses.replace(entry, digest=f"sha256:{NEW_PYTORCH}",
                                       source=f"nvcr.io/nvidia/pytorch:25.02-py3@sha256:{NEW_PYTORCH}",
                                       enroot_uri=f"docker://nvcr.io#nvidia/pytorch@sha256:{NEW_PYTORCH}")
                   if entry.name == "pytorch" else entry for entry in lock.images)
    return lock_text(dataclasses.replace(lock, images=bumped))


def _render(name: str, spec_text: str, lock_text: str) -> str:
    """The rendered config of a spec, through the real loader (rules + lock check) and renderer."""
    from clusterkit.pipeline.loader import load
    from clusterkit.render.rendered_files import rendered_text

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / f"{name}.yaml"
        spec.write_text(spec_text, encoding="utf-8")
        (Path(tmp) / f"{name}.images.lock").write_text(lock_text, encoding="utf-8")
        return rendered_text(load(str(spec)))


def build(out: Path = FIXTURES) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copyfile(REPO / "clusterkit" / "data" / "prices.json", out / PRICES.name)
    base = out / "base" / "cluster_configs"
    (base / "rendered").mkdir(parents=True)
    for name in BASE_CLUSTERS:  # rendered again, so base and cases come from the same scripts
        spec_text, lock_text = (REPO / _files(name)[0]).read_text(), (REPO / _files(name)[1]).read_text()
        (base / f"{name}.yaml").write_text(spec_text, encoding="utf-8")
        (base / f"{name}.images.lock").write_text(lock_text, encoding="utf-8")
        (base / "rendered" / f"{name}.yaml").write_text(_render(name, spec_text, lock_text), encoding="utf-8")
    spec, lock = (base / "demo.yaml").read_text(), (base / "demo.images.lock").read_text()
    for case, edits in SPEC_EDITS.items():
        new_spec = spec
        for old, new in edits:
            assert new_spec.count(old) == 1, (case, old)
            new_spec = new_spec.replace(old, new)
        new_lock = _bump_lock(lock) if case in ("image-digest", "mixed") else lock
        written = {"demo.yaml": new_spec, "demo.images.lock": new_lock,
                   "rendered/demo.yaml": _render("demo", new_spec, new_lock)}
        for rel, text in written.items():
            if (base / rel).read_text() != text:  # a case holds only the files its change rewrites
                target = out / "cases" / case / "cluster_configs" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    case = out / "cases" / "cluster-added-removed"
    for rel in _files("p5-capacity-block"):
        (case / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, case / rel)
    (case / DELETE_LIST).write_text("\n".join(_files("p4d-existing")) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    build()
    print(f"wrote {FIXTURES.relative_to(REPO)}")
