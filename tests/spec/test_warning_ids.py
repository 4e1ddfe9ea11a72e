"""Warning ids (clusterkit/spec/warning_ids.py): one case per registered id that really raises it, every warning
site in the code names a registered id, and docs/spec.md's table is the registry.

Real: the loader, rules, advice and catalog on specs written to tmp_path; the CLI's ParallelCluster step
with its runner replaced (the real one needs .venv-pcluster: tests/pcluster).
"""
from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from test_bad_specs import BASE, _extra, _with

from clusterkit.paths import CONFIG_DIR, ROOT
from clusterkit.pipeline.loader import load
from clusterkit.spec.errors import Problem
from clusterkit.spec.warning_ids import NOT_ACKNOWLEDGEABLE, WARNINGS, acknowledgeable

GIB = 1024 ** 3
DIGEST = "sha256:" + "ab" * 32


def _warnings(tmp_path: Path, text: str, images: dict[str, int] | None = None) -> list[Problem]:
    """Load t.yaml (and a lock with these image sizes) and return its warnings."""
    images = images or {}
    if images:
        text += "containers:\n  images:\n" + "".join(
            f"    - name: {n}\n      uri: example.com/{n}@{DIGEST}\n" for n in images)
        entries = [{"compressed_size": size, "digest": DIGEST, "enroot_uri": f"docker://example.com#{n}@{DIGEST}",
                    "expect": {}, "name": n, "platform": "linux/amd64", "registry": "example.com", "repository": n,
                    "source": f"example.com/{n}@{DIGEST}"} for n, size in sorted(images.items())]
        (tmp_path / "t.images.lock").write_text(json.dumps({"cluster": "t", "images": entries, "lock_version": 1}))
    (tmp_path / "t.yaml").write_text(text)
    return load(str(tmp_path / "t.yaml")).warnings


def _block(count: int) -> str:
    return _with("  - name: gpu\n", "  - name: gpu\n    capacity_type: capacity_block\n").replace(
        "        max: 2\n", "        min: 2\n        max: 2\n        capacity_reservation_id: cr-0123456789abcdef0\n"
                           f"        reservation_instance_count: {count}\n")


def _demo_copy(tmp_path: Path, extra: str = "") -> Path:
    shutil.copyfile(CONFIG_DIR / "demo.images.lock", tmp_path / "demo.images.lock")
    path = tmp_path / "demo.yaml"
    path.write_text((CONFIG_DIR / "demo.yaml").read_text(encoding="utf-8") + extra, encoding="utf-8")
    return path


def _pcluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Problem]:
    from clusterkit.cli import validate_command
    from clusterkit.pcluster import runner as pcluster_runner

    def run_check(configs: list[tuple[str, str, str, str]], mode: str) -> list[dict[str, object]]:
        return [{"path": path, "ok": True, "errors": [
            {"level": "WARNING", "type": "KeyPairValidator", "message": "no key pair", "line": None, "col": None},
            {"level": "ERROR", "type": "EfaValidator", "message": "no EFA", "line": 3, "col": 1}]}
            for _, path, _, _ in configs]

    monkeypatch.setattr(pcluster_runner, "run_check", run_check)
    problems = validate_command._pcluster_problems([load("demo")])
    assert [(p.level, p.id) for p in problems] == [("warning", "pcluster-validator"), ("error", "")]
    return [p for p in problems if p.level == "warning"]


COMPAT = """\
containers:
  images:
    - name: old-efa
      uri: public.ecr.aws/hpc-cloud/nccl-tests:latest
      expect:
        nccl: 2.21.5
        efa_installer: 1.28.0
"""
UNTESTED = COMPAT.replace("        nccl: 2.21.5\n        efa_installer: 1.28.0\n",
                          "        nccl: 2.32.3\n        aws_ofi_nccl: 1.21.1\n")

def _nvidia(tmp_path: Path, text: str, settings: dict[str, str]) -> list[Problem]:
    """t.yaml with one image whose lock entry records these NVIDIA_* settings (read from the image config)."""
    text += f"containers:\n  images:\n    - name: a\n      uri: example.com/a@{DIGEST}\n"
    entry = {"compressed_size": 1, "digest": DIGEST, "enroot_uri": f"docker://example.com#a@{DIGEST}", "expect": {},
             "name": "a", "platform": "linux/amd64", "registry": "example.com", "repository": "a",
             "source": f"example.com/a@{DIGEST}", "nvidia": settings, "nvidia_from": "image config Env"}
    (tmp_path / "t.images.lock").write_text(json.dumps({"cluster": "t", "images": [entry], "lock_version": 1}))
    (tmp_path / "t.yaml").write_text(text)
    return load(str(tmp_path / "t.yaml")).warnings


def _unlocked(tmp_path: Path, text: str) -> list[Problem]:
    (tmp_path / "t.yaml").write_text(text)
    return load(str(tmp_path / "t.yaml"), check_lock=False).warnings


# id -> a case that raises it: (tmp_path, monkeypatch) -> every warning of that case
CASES: dict[str, Callable[[Path, pytest.MonkeyPatch], list[Problem]]] = {
    "container-start-extracts": lambda tmp, mp: _warnings(tmp, _extra("os: alinux2023\n"), {"a": GIB}),
    "container-start-extracts-slow-reader": lambda tmp, mp: _warnings(tmp, _extra("os: ubuntu2204\n"), {"a": GIB}),
    "image-fanout-slow": lambda tmp, mp: load("demo").warnings,
    "head-root-volume-small": lambda tmp, mp: _warnings(
        tmp, _extra("head_node:\n  root_volume_gib: 100\n"), {"a": 20 * GIB, "b": 10 * GIB}),
    "compute-root-volume-small": lambda tmp, mp: _warnings(
        tmp, _with("instance_type: p5.48xlarge", "instance_type: c6i.2xlarge"), {"a": 10 * GIB}),
    "capacity-block-exceeded": lambda tmp, mp: _warnings(tmp, _block(1)),
    "capacity-block-partial": lambda tmp, mp: _warnings(tmp, _block(8)),
    "capacity-block-size-unlisted": lambda tmp, mp: _warnings(
        tmp, _block(2).replace("instance_type: p5.48xlarge", "instance_type: trn1.2xlarge")),
    "instance-type-not-in-az": lambda tmp, mp: _warnings(
        tmp, _with("instance_type: p5.48xlarge", "instance_type: p4de.24xlarge")),
    "image-expect-incompatible": lambda tmp, mp: _unlocked(tmp, BASE + COMPAT),
    "image-combination-untested": lambda tmp, mp: _unlocked(tmp, BASE + UNTESTED),
    "image-no-gpu": lambda tmp, mp: _nvidia(tmp, BASE, {}),
    # ParallelCluster 3.15.0: no AMI driver on record, so a cuda>= requirement cannot be judged offline
    "image-gpu-requirement-unchecked": lambda tmp, mp: _nvidia(
        tmp, _extra("parallelcluster_version: 3.15.0\n"),
        {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all", "NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}),
    "gpu-check-in-job-start": lambda tmp, mp: _warnings(
        tmp, _with("  - name: gpu\n", "  - name: gpu\n    health_checks: {gpu: prolog}\n")),
    "gpu-check-none": lambda tmp, mp: _warnings(
        tmp, _with("  - name: gpu\n", "  - name: gpu\n    health_checks: {gpu: none}\n")),
    # a private ECR image, and ParallelCluster 3.16.1's AMIs only known to ship pyxis 0.20 (no importer): jobs pull
    "compute-imds-job-pulls": lambda tmp, mp: _unlocked(tmp, BASE + "containers:\n  images:\n    - name: app\n"
                                                        "      uri: 123456789012.dkr.ecr.us-east-1.amazonaws.com/"
                                                        f"team/app@{DIGEST}\n"),
    # entries added to the demo's own acknowledge block, which ends the file
    "acknowledgement-unused": lambda tmp, mp: load(str(_demo_copy(
        tmp, "  - id: image-fanout-slow\n    reason: demo\n  - id: capacity-block-partial\n"
             "    reason: no longer applies\n"))).warnings,
    "pcluster-validator": _pcluster,
}


def test_every_registered_id_has_a_case():
    assert list(CASES) == list(WARNINGS)


@pytest.mark.parametrize("warning_id", list(CASES))
def test_each_id_is_raised_by_its_case(tmp_path, monkeypatch, warning_id):
    warnings = CASES[warning_id](tmp_path, monkeypatch)
    assert warning_id in {w.id for w in warnings}, [w.render() for w in warnings]
    assert all(w.level == "warning" and w.id in WARNINGS for w in warnings)
    shown = next(w for w in warnings if w.id == warning_id).render()
    assert f": warning[{warning_id}]: " in shown


def _warning_calls() -> list[tuple[str, ast.Call]]:
    """Calls that make a warning Problem: ``Problem(...)`` / ``marks.problem(...)`` with ``level="warning"``
    (clusterkit/rules/compat_build.py's ``level=`` keywords are fields of the rules file it writes)."""
    found = []
    for path in sorted((ROOT / "clusterkit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = node.func if isinstance(node, ast.Call) else None
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if isinstance(node, ast.Call) and name in ("problem", "Problem") and any(
                    k.arg == "level" and isinstance(k.value, ast.Constant) and k.value.value == "warning"
                    for k in node.keywords):
                found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return found


def _literal_ids() -> dict[str, str]:
    """Every string literal given as ``id=`` in clusterkit/ (both arms of ``x if c else y``), by place."""
    found = {}
    for path in sorted((ROOT / "clusterkit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for k in node.keywords if isinstance(node, ast.Call) else ():
                if k.arg == "id":
                    values = [k.value.body, k.value.orelse] if isinstance(k.value, ast.IfExp) else [k.value]
                    for arm, value in enumerate(values):
                        if isinstance(value, ast.Constant) and value.value:
                            found[f"{path.relative_to(ROOT)}:{node.lineno}" + (f" arm {arm}" if arm else "")] = \
                                value.value
    return found


def test_every_warning_site_names_a_registered_id():
    """Each place that makes a warning (``level="warning"``) gives a literal id, and every literal id given
    anywhere is registered: the ids the code can emit are the registry's."""
    sites = _warning_calls()
    assert len(sites) >= 8
    for where, call in sites:
        ids = [k.value for k in call.keywords if k.arg == "id"]
        arms = [ids[0].body, ids[0].orelse] if len(ids) == 1 and isinstance(ids[0], ast.IfExp) else ids
        assert len(ids) == 1 and all(isinstance(a, ast.Constant) for a in arms), f"{where}: a warning without id="
    literal = _literal_ids()
    assert {where: i for where, i in literal.items() if i not in WARNINGS} == {}
    assert set(literal.values()) == set(WARNINGS)  # each registered id is emitted somewhere


def test_problem_refuses_an_unregistered_id():
    with pytest.raises(ValueError, match="not in clusterkit/spec/warning_ids.py"):
        Problem("f.yaml", 1, 1, "x", "m", level="warning", id="image-fanout-sloww")


def test_ids_are_kebab_case_with_one_line_descriptions():
    for warning_id, text in WARNINGS.items():
        assert warning_id.replace("-", "").isalpha() and warning_id == warning_id.lower(), warning_id
        assert text and "\n" not in text and not text.endswith(".")
    assert set(NOT_ACKNOWLEDGEABLE) < set(WARNINGS)
    assert acknowledgeable() == [i for i in WARNINGS if i not in NOT_ACKNOWLEDGEABLE]


def test_the_docs_table_is_the_registry():
    """docs/spec.md "Warnings and acknowledgements" lists exactly the registry, in its order and words."""
    text = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    section = text.split("## Warnings and acknowledgements\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows == [f"| `{warning_id}` | {text} |" for warning_id, text in WARNINGS.items()]
