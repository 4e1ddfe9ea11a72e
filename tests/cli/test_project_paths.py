"""clusterkit.paths: the project root is the directory holding cdk.json, and every repository path is named there.

Why these checks: a path built from ``__file__`` somewhere else silently points at another place once the
package moves (an install, a refactor); the guard below keeps every such construction in paths.py.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from clusterkit import paths
from clusterkit.spec.errors import ClusterKitError

OPTIONAL = {"PCLUSTER_VENV", "PCLUSTER_PYTHON"}  # built by `make pcluster-venv`; the tests that need it skip


def named_paths() -> dict[str, Path]:
    return {name: value for name, value in vars(paths).items() if name.isupper() and isinstance(value, Path)}


def test_root_is_the_checkout_holding_cdk_json() -> None:
    assert paths.CDK_JSON.is_file()
    assert paths.ROOT == Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(set(named_paths()) - OPTIONAL))
def test_every_named_path_exists(name: str) -> None:
    path = named_paths()[name]
    assert path.exists(), f"clusterkit.paths.{name} = {path} does not exist"


def test_package_data_lives_in_the_package_not_at_the_root() -> None:
    """Data files ship in the distribution, so they are found from the package even outside a checkout."""
    assert paths.DATA_DIR == paths.PACKAGE_DIR / "data"
    in_data = {name for name, path in named_paths().items() if path.is_relative_to(paths.DATA_DIR)} - {"DATA_DIR"}
    assert {"INSTANCE_TYPES", "REGIONS", "PRICES", "COMPAT_RULES"} <= in_data
    assert {paths.DATA_DIR / p.name for p in paths.DATA_DIR.glob("*.json")} == {named_paths()[n] for n in in_data}


def test_no_root_is_one_clusterkit_error_line(tmp_path: Path) -> None:
    with pytest.raises(paths.ProjectRootNotFound) as caught:
        paths.find_root(tmp_path / "a" / "b")
    assert isinstance(caught.value, ClusterKitError)  # the CLI prints it as one line, exit 2
    assert caught.value.lines() == [str(caught.value)] and "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"{tmp_path / 'a' / 'b'}: no cdk.json here or in any parent directory")


def test_the_nearest_cdk_json_wins(tmp_path: Path) -> None:
    (tmp_path / "cdk.json").write_text("{}")
    (tmp_path / "inner").mkdir()
    assert paths.find_root(tmp_path / "inner") == tmp_path
    (tmp_path / "inner" / "cdk.json").write_text("{}")
    assert paths.find_root(tmp_path / "inner") == tmp_path / "inner"


def _modules() -> list[Path]:
    found = [paths.ROOT / "app.py", *sorted((paths.ROOT / "stacks").glob("*.py"))]
    return found + sorted(paths.PACKAGE_DIR.rglob("*.py"))


@pytest.mark.parametrize("module", _modules(), ids=lambda p: str(p.relative_to(paths.ROOT)))
def test_only_paths_py_derives_locations_from_file(module: Path) -> None:
    """``__file__`` means "where is the checkout": clusterkit.paths answers that, once."""
    if module == Path(paths.__file__).resolve():
        return
    uses = [node.lineno for node in ast.walk(ast.parse(module.read_text(encoding="utf-8")))
            if isinstance(node, ast.Name) and node.id == "__file__"]
    assert not uses, f"{module.relative_to(paths.ROOT)}:{uses[0]}: use a clusterkit.paths name instead of __file__"
