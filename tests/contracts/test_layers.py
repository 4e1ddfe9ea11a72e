"""Layer contracts of DESIGN.md, read from the code (ast: every import at any depth, lazy and
``TYPE_CHECKING`` ones included; every call in the stacks):

- ``clusterkit`` is packages along the data flow plus a few root utilities; each package's ``__init__``
  docstring ends with ``May import: ...``, the other packages its modules may import, and that line is
  the contract this file enforces (read from the docstring, so the rule and its statement cannot drift);
- ``clusterkit`` never imports aws_cdk (or constructs, cdk_nag, jsii) nor ``stacks`` / ``app``;
- render does not import the rules, not even through another module: it reads the effective spec;
  neither does the effective spec itself;
- ``stacks/`` only builds CDK constructs from values it is given: it imports no file, OS or process module,
  calls nothing that reads or writes files, and imports from ``clusterkit`` only the effective spec, the
  spec's types, names and render (no loader, rules, bundle or deploy-context parsing).

tests/contracts/test_import_graph.py holds the cycle and node-package contracts.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.contracts.import_reader import imports_of, module_name

REPO = Path(__file__).resolve().parents[2]
CDK = {"aws_cdk", "constructs", "cdk_nag", "jsii"}
STACK_MODULES = sorted((REPO / "stacks").glob("*.py"))
# What a stack may import from clusterkit at run time (type-only imports: also stack_inputs).
STACKS_MAY_IMPORT = {"clusterkit.effective.expand", "clusterkit.spec.naming", "clusterkit.render.pcluster_config",
                     "clusterkit.spec.model", "clusterkit.render.job_user_guard", "clusterkit.render"}
STACKS_MAY_IMPORT_FOR_TYPES = STACKS_MAY_IMPORT | {"clusterkit.artifacts.stack_inputs"}
NO_FILE_MODULES = {"os", "io", "pathlib", "shutil", "tempfile", "glob", "subprocess", "fileinput", "zipfile", "tarfile"}
FILE_IO_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "mkdir", "makedirs", "touch",
                   "unlink", "rmdir", "rename", "iterdir", "glob", "rglob", "exists", "is_file", "is_dir", "stat",
                   "symlink_to", "chmod", "copy", "copyfile", "copytree", "rmtree"}


def _module_name(path: Path) -> str:
    return module_name(path, REPO)


def _imports(path: Path, tree: ast.AST | None = None, name: str | None = None) -> set[str]:
    return imports_of(path, name or _module_name(path), tree)


def _clusterkit_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((REPO / "clusterkit").rglob("*.py"))}


def _closure(start: str) -> set[str]:
    """Every clusterkit module ``start`` reaches through imports (ast, so lazy and type-only ones count)."""
    modules = _clusterkit_modules()
    graph = {name: {i for i in _imports(path) if i in modules and i != name} for name, path in modules.items()}
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


# --- packages: each imports only what its docstring allows ------------------------------------------------
# Both sides are packages along their seams: ``clusterkit`` (the CLI side, data flow) and ``clusterkit_node`` (the
# node side: contract, image, store, node, fleet); the same contract holds for each.

ROOTS = ("clusterkit", "clusterkit_node")
PACKAGE_DIRS = {root: sorted(p.parent for p in (REPO / root).glob("*/__init__.py")) for root in ROOTS}
PACKAGES = [p.name for p in PACKAGE_DIRS["clusterkit"]]
NODE_PACKAGES = [p.name for p in PACKAGE_DIRS["clusterkit_node"]]
ROOT_UTILITIES = {
    "clusterkit": {"clusterkit", "clusterkit.paths", "clusterkit.atomic", "clusterkit.jsondoc", "clusterkit.clock",
                   "clusterkit.__main__"},
    # the node side's root holds only its entry point and the one command table that wires every package
    "clusterkit_node": {"clusterkit_node", "clusterkit_node.__main__", "clusterkit_node.commands"},
}
ROOT_PACKAGES = {"clusterkit": PACKAGES, "clusterkit_node": NODE_PACKAGES}


def _root_modules(root: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((REPO / root).rglob("*.py"))}


def declared_imports(package: str, root: str = "clusterkit") -> set[str]:
    """The packages named on the ``May import:`` line of ``<root>/<package>/__init__.py``."""
    doc = ast.get_docstring(ast.parse((REPO / root / package / "__init__.py").read_text())) or ""
    lines = [line for line in doc.splitlines() if line.startswith("May import:")]
    assert len(lines) == 1, f"{root}/{package}/__init__.py: the docstring needs one 'May import:' line"
    named = set(lines[0].removeprefix("May import:").replace(",", " ").split()) - {
        "(nothing", "else", "in", f"{root})"}
    known = set(ROOT_PACKAGES[root])
    assert named <= known, f"{root}/{package}: unknown packages {sorted(named - known)}"
    return named


@pytest.mark.parametrize("root", ROOTS)
def test_every_module_lives_in_a_package_or_is_a_root_utility(root):
    loose = {name for name in _root_modules(root) if name.count(".") <= 1 and name not in ROOT_UTILITIES[root]
             and name.split(".")[-1] not in ROOT_PACKAGES[root]}
    assert sorted(loose) == [], "put the module in the package whose job it does (docs/architecture.md)"


@pytest.mark.parametrize("root", ROOTS)
def test_package_inits_import_nothing(root):
    """An __init__ that imported its modules would make every importer of one module depend on all."""
    for directory in PACKAGE_DIRS[root]:
        tree = ast.parse((directory / "__init__.py").read_text())
        assert [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))] == [], directory.name


def forbidden_imports(package: str, modules: dict[str, Path], allowed: set[str], root: str = "clusterkit") -> list[str]:
    """``module imports name`` for each import of a package of ``root`` outside ``allowed`` (and itself)."""
    found = []
    for name, path in modules.items():
        if name.split(".")[:2] != [root, package]:
            continue
        for imported in sorted(_imports(path, name=name)):
            parts = imported.split(".")
            if (parts[0] == root and len(parts) > 1 and parts[1] in ROOT_PACKAGES[root]
                    and parts[1] not in allowed | {package}):
                found.append(f"{name} imports {imported}")
    return found


@pytest.mark.parametrize("root,package", [(r, p) for r in ROOTS for p in ROOT_PACKAGES[r]])
def test_package_imports_only_what_its_docstring_allows(root, package):
    allowed = declared_imports(package, root)
    assert forbidden_imports(package, _root_modules(root), allowed, root) == [], \
        f"{root}/{package}/__init__.py allows only {sorted(allowed)}"


def test_the_package_contract_catches_a_forbidden_import(tmp_path):
    """The checker itself, on a module written here: a lazy import of the rules from spec is reported."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n"
                      "    from clusterkit.rules.check import check\n"
                      "    from clusterkit.spec import errors\n")
    modules = {"clusterkit.spec.bad": module}
    assert forbidden_imports("spec", modules, declared_imports("spec")) == [
        "clusterkit.spec.bad imports clusterkit.rules.check",
        "clusterkit.spec.bad imports clusterkit.rules.check.check"]
    assert forbidden_imports("spec", modules, {"rules"}) == []


def test_the_node_contract_catches_a_store_module_reaching_up(tmp_path):
    """The same checker on the node side: the store configuring a node (store -> node) is reported."""
    module = tmp_path / "bad.py"
    module.write_text("from clusterkit_node.node import start_path\nfrom clusterkit_node.contract import lock\n")
    modules = {"clusterkit_node.store.bad": module}
    assert forbidden_imports("store", modules, declared_imports("store", "clusterkit_node"), "clusterkit_node") == [
        "clusterkit_node.store.bad imports clusterkit_node.node",
        "clusterkit_node.store.bad imports clusterkit_node.node.start_path"]


@pytest.mark.parametrize("root", ROOTS)
def test_declared_package_layers_have_no_cycle(root):
    """The declarations form layers: no package may (even indirectly) import itself."""
    graph = {p: declared_imports(p, root) for p in ROOT_PACKAGES[root]}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            nxt = todo.pop()
            assert nxt != start, f"{root}/{start} reaches itself through its 'May import:' packages"
            if nxt not in seen:
                seen.add(nxt)
                todo.extend(graph[nxt])


# --- clusterkit never imports CDK or the stacks -------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(_clusterkit_modules()))
def test_clusterkit_imports_neither_cdk_nor_stacks(name):
    imported = _imports(_clusterkit_modules()[name])
    assert sorted(i for i in imported if i.split(".")[0] in CDK | {"stacks", "app"}) == []


# --- render reads the effective spec, never the rules --------------------------------------------------------

@pytest.mark.parametrize("module", ["clusterkit.render.pcluster_config", "clusterkit.effective.expand"])
def test_render_and_the_effective_spec_never_reach_the_rules(module):
    reached = _closure(module)
    assert "clusterkit.effective.expand" in reached | {module}
    forbidden = {name for name in _clusterkit_modules()
                 if name.split(".")[1:2] in (["rules"], ["pipeline"], ["artifacts"])}
    assert sorted(reached & forbidden) == []


# --- stacks: CDK from given values, no file I/O, no validation ---------------------------------------------

def _type_checking_imports(tree: ast.Module, path: Path) -> set[str]:
    """Imports under ``if TYPE_CHECKING:`` at module level (annotations only, never executed)."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                found |= _imports(path, ast.Module(body=[stmt], type_ignores=[]))
    return found


def file_io(tree: ast.AST) -> list[str]:
    """Calls that read or write files (``open(...)``, ``path.write_bytes(...)``, ...), as ``line: name``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "open":
                found.append(f"{node.lineno}: open")
            elif isinstance(func, ast.Attribute) and func.attr in FILE_IO_METHODS:
                found.append(f"{node.lineno}: .{func.attr}")
    return found


def test_the_checker_finds_file_io():
    tree = ast.parse("from pathlib import Path\nPath('x').write_bytes(b'')\nopen('y')\nstack.add_dependency(z)\n")
    assert file_io(tree) == ["2: .write_bytes", "3: open"]


@pytest.mark.parametrize("path", STACK_MODULES, ids=lambda p: p.name)
def test_stacks_do_no_file_io(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    assert file_io(tree) == []
    assert sorted(i for i in _imports(path, tree) if i.split(".")[0] in NO_FILE_MODULES) == []


@pytest.mark.parametrize("path", STACK_MODULES, ids=lambda p: p.name)
def test_stacks_import_only_resolved_values_from_clusterkit(path):
    """No loader, rules, bundle (file reads) or deploy-context parsing: stacks are handed the effective spec."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    modules = set(_clusterkit_modules())
    type_only = {i for i in _type_checking_imports(tree, path) if i in modules and i != "clusterkit"}
    runtime = {i for i in _imports(path, tree) if i in modules and i != "clusterkit"} - type_only
    assert sorted(runtime - STACKS_MAY_IMPORT) == []
    assert sorted(type_only - STACKS_MAY_IMPORT_FOR_TYPES) == []


# --- docs/architecture.md's package tables are the tree -----------------------------------------------------

def _architecture_rows(root: str = "clusterkit") -> dict[str, tuple[set[str], set[str]]]:
    """package -> (modules named in its 'owns' cell, packages in its 'may import' cell), for ``root``'s table."""
    rows = {}
    for line in (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith(f"`{root}/") and cells[0].endswith("/`"):
            package = cells[0].strip("`").removeprefix(f"{root}/").rstrip("/")
            owns = set(re.findall(r"`([a-z_]+)`", cells[1]))
            if "`*_command`" in cells[1]:
                owns |= {p.stem for p in (REPO / root / package).glob("*_command.py")}
            may = set() if cells[2] == "nothing else" else set(cells[2].replace(",", " ").split())
            rows[package] = (owns, may)
    return rows


@pytest.mark.parametrize("root", ROOTS)
def test_the_architecture_table_lists_every_package_its_modules_and_its_imports(root):
    rows = _architecture_rows(root)
    assert sorted(rows) == ROOT_PACKAGES[root], f"docs/architecture.md: one row per {root} package"
    for package, (owns, may) in rows.items():
        modules = {p.stem for p in (REPO / root / package).glob("*.py") if p.stem != "__init__"}
        assert owns == modules, f"docs/architecture.md, row {package}: names {sorted(owns)}, tree {sorted(modules)}"
        expected = {"every", "package"} if package == "cli" else declared_imports(package, root)
        assert may == expected, f"docs/architecture.md, row {package}: {sorted(may)}, __init__: {sorted(expected)}"


# --- one clock ------------------------------------------------------------------------------------------------

def test_the_cli_side_reads_the_time_only_through_clusterkit_clock():
    """A report that depends on today's date is testable on any date only if the time comes from one place that
    tests replace (clusterkit/clock.py): ``datetime.now``/``utcnow``/``today`` and ``time.time`` elsewhere would
    tie a test to the calendar again (the TTL test went red on 2026-12-04)."""
    reads = []
    for name, path in _clusterkit_modules().items():
        if name in {"clusterkit.clock", "clusterkit.catalog.build"}:  # build: --as-of defaults to today, by design
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in {"now", "utcnow", "today"} and \
                    isinstance(node.value, ast.Name) and node.value.id in {"datetime", "date"}:
                reads.append(f"{name}:{node.lineno} {node.value.id}.{node.attr}")
    assert reads == [], "read the time through clusterkit.clock.utc_now()"
