"""Import contracts, read from the code itself (ast, every import at any depth, lazy ones included):

- no import cycle inside ``clusterkit`` or ``clusterkit_node`` (a lazy import that dodges a cycle at import
  time is still a cycle in the design: the diff modules were split along their seams to end the last one);
- ``clusterkit_node`` imports only the standard library and itself: it ships to nodes with no pip.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.contracts.import_reader import imports_of, module_name

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("clusterkit", "clusterkit_node")


def _modules() -> dict[str, Path]:
    return {module_name(path, REPO): path for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    return imports_of(path, name)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {i for i in _imports(name, path) if i in modules and i != name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    graph = _graph()
    assert len(graph) > 30 and "clusterkit.diff.structure" in graph["clusterkit.diff.impact"]
    assert _cycles(graph) == []


@pytest.mark.parametrize("name", sorted(n for n in _modules() if n.startswith("clusterkit_node")))
def test_node_package_imports_only_the_standard_library(name: str) -> None:
    outside = sorted(i for i in _imports(name, _modules()[name])
                     if i.split(".")[0] not in sys.stdlib_module_names and i.split(".")[0] != "clusterkit_node"
                     and i != "__future__")
    assert outside == []


def test_no_module_name_means_two_jobs():
    """A name in ``clusterkit`` (module or package) is never also a module of ``clusterkit_node``: the two
    ran different jobs under one name (compat, status, versions, cli) until they were renamed."""
    cli_side = {p.stem for p in (REPO / "clusterkit").rglob("*.py")} | {
        p.name for p in (REPO / "clusterkit").iterdir() if (p / "__init__.py").exists()}
    node_side = {p.stem for p in (REPO / "clusterkit_node").rglob("*.py")} | {
        p.name for p in (REPO / "clusterkit_node").iterdir() if (p / "__init__.py").exists()}
    assert sorted((cli_side & node_side) - {"__init__", "__main__"}) == []
