"""pyproject.toml ships what the CLI imports (clusterkit, its subpackages, clusterkit_node, the data files)
and nothing the checkout runs by itself (stacks/, tests/, app.py)."""
from __future__ import annotations

import tomllib

from setuptools import find_packages

from clusterkit.paths import DATA_DIR, PACKAGE_DIR, ROOT

CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = CONFIG["tool"]["setuptools"]


def shipped_packages() -> set[str]:
    return set(find_packages(where=str(ROOT), include=SETUPTOOLS["packages"]["find"]["include"]))


def test_every_clusterkit_package_is_shipped() -> None:
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE_DIR.rglob("__init__.py")}
    assert on_disk <= shipped_packages()
    assert {"clusterkit", "clusterkit.pcluster"} <= shipped_packages()


def test_the_cdk_app_and_the_tests_are_not_shipped() -> None:
    assert not {p for p in shipped_packages() if p.split(".")[0] in ("stacks", "tests", "benchmarks")}


def test_every_data_file_is_package_data() -> None:
    patterns = SETUPTOOLS["package-data"]["clusterkit.data"]  # data/ is a namespace package (no __init__.py)
    assert SETUPTOOLS["packages"]["find"]["namespaces"] is True
    covered = {p for pattern in patterns for p in DATA_DIR.glob(pattern)}
    assert sorted(p for p in DATA_DIR.iterdir() if p.is_file()) == sorted(covered)


def test_console_script_and_build_backend() -> None:
    assert CONFIG["project"]["scripts"] == {"clusterkit": "clusterkit.cli.main:main"}
    assert CONFIG["build-system"]["build-backend"] == "setuptools.build_meta"
