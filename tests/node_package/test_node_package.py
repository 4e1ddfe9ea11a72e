"""clusterkit_node: a real stdlib-only package (Python 3.9+) shipped to the nodes as ONE deterministic zipapp.

Real: clusterkit.artifacts.bundle building the zipapp, CPython running it (this interpreter and a real 3.9, the oldest
python3 on supported AMIs: tests/oldest_python.py), a symlinked bundle directory like the nodes' shared link.
The commands themselves are tested where their behaviour is (tests/image_sync, tests/compat, tests/node).
"""
from __future__ import annotations

import ast
import io
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from clusterkit.artifacts.bundle import (
    LEGACY_ENTRY_POINTS,
    ZIPAPP,
    ZIPAPP_MAIN,
    ZIPAPP_SHEBANG,
    build_zipapp,
    node_artifacts,
    node_package_files,
)
from clusterkit.paths import NODE_PACKAGE_DIR
from clusterkit.pipeline.loader import load
from clusterkit.spec.errors import SpecError
from clusterkit_node.contract.layout import image_name_problem
from tests.contracts.import_reader import imports_of as read_imports
from tests.contracts.import_reader import module_name
from tests.spec_text import BASE_SPEC

PACKAGE = NODE_PACKAGE_DIR.name


def zipapp_entries() -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(io.BytesIO(build_zipapp())) as zf:
        return {info.filename: info for info in zf.infolist()}


def package_sources() -> dict[str, str]:
    """module path in the package (``store/manifest``) -> source, for every module of every subpackage."""
    return {path.relative_to(NODE_PACKAGE_DIR).with_suffix("").as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(NODE_PACKAGE_DIR.rglob("*.py"))}


def imports_of(source: str) -> list[tuple[int, str]]:
    """(relative level, module) of every import statement; ``from . import x`` gives (1, "x")."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level and not node.module:
                found += [(node.level, alias.name) for alias in node.names]
            else:
                found.append((node.level, node.module or ""))
    return found


# --- the zipapp ----------------------------------------------------------------------------------------

def test_the_zipapp_is_byte_for_byte_deterministic() -> None:
    first, second = build_zipapp(), build_zipapp()
    assert first == second
    assert first.startswith(ZIPAPP_SHEBANG) and ZIPAPP_SHEBANG == b"#!/usr/bin/python3 -I\n"
    entries = list(zipapp_entries().values())
    assert [e.filename for e in entries] == sorted(e.filename for e in entries)
    assert {e.date_time for e in entries} == {(2020, 1, 1, 0, 0, 0)}
    assert {stat.S_IMODE(e.external_attr >> 16) for e in entries} == {0o644}
    assert {e.compress_type for e in entries} == {zipfile.ZIP_DEFLATED}


def test_the_zipapp_holds_the_whole_package_and_its_entry_point_only() -> None:
    with zipfile.ZipFile(io.BytesIO(build_zipapp())) as zf:
        contents = {name: zf.read(name) for name in zf.namelist()}
    assert contents.pop("__main__.py") == ZIPAPP_MAIN
    assert contents == node_package_files()
    assert sorted(contents) == sorted(f"{PACKAGE}/{name}.py" for name in package_sources())


def test_runs_through_a_linked_directory_from_the_real_path(tmp_path: Path) -> None:
    """The nodes name the zipapp through /opt/parallelcluster/shared/clusterkit, a link head_node.sh swaps
    to a new bundle with one rename; the package must be imported from the real bundle directory (zipimport
    re-reads its archive by path for each module), never through the link."""
    real = tmp_path / ".clusterkit-0123456789abcdef"
    real.mkdir()
    (real / ZIPAPP).write_bytes(build_zipapp())
    link = tmp_path / "clusterkit"
    link.symlink_to(real.name)
    proc = subprocess.run([sys.executable, "-v", str(link / ZIPAPP), "status", "--store", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "store" in proc.stderr
    package_imports = [line for line in proc.stderr.splitlines()
                       if line.startswith(("import 'clusterkit_node", "import clusterkit_node"))]
    assert package_imports and all(str(real / ZIPAPP) in line for line in package_imports), package_imports[:3]


def test_python_m_in_a_checkout_dispatches_like_the_zipapp(tmp_path: Path) -> None:
    """`python -m clusterkit_node` runs the same __main__: the store commands, and pyxis' importer words."""
    repo = NODE_PACKAGE_DIR.parent
    status = subprocess.run([sys.executable, "-m", PACKAGE, "status", "--store", str(tmp_path)], cwd=repo,
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and status.stdout.startswith("NAME")
    release = subprocess.run([sys.executable, "-m", PACKAGE, "release"], cwd=repo, capture_output=True,
                             text=True, timeout=60, env={"PATH": os.environ["PATH"]})
    assert release.returncode == 1 and release.stderr.startswith("clusterkit importer: error: not run by pyxis")


# --- the package ---------------------------------------------------------------------------------------

def test_the_package_imports_nothing_outside_the_stdlib_and_itself() -> None:
    stdlib = set(sys.stdlib_module_names)
    outside = {(name, module) for name, source in package_sources().items()
               for level, module in imports_of(source)
               if level == 0 and module.split(".")[0] not in stdlib | {"__future__", PACKAGE}}
    assert not outside, outside


def test_no_module_touches_sys_path() -> None:
    """Intra-package imports are package imports: nothing puts a directory on sys.path."""
    for name, source in package_sources().items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and node.attr == "path" and \
                    isinstance(node.value, ast.Name) and node.value.id == "sys":
                pytest.fail(f"{PACKAGE}/{name}.py uses sys.path (line {node.lineno})")


def test_the_module_graph_has_no_cycle() -> None:
    """e.g. lock -> layout <- store -> lock: the store's names are the leaf both sides of the store
    import, so the lock reader never imports the store (test_import_graph.py checks every cycle; this pins why)."""
    root = NODE_PACKAGE_DIR.parent
    paths = {module_name(path, root): path for path in sorted(NODE_PACKAGE_DIR.rglob("*.py"))}
    graph = {name: {i for i in read_imports(path, name) if i in paths and i != name} for name, path in paths.items()}
    lock, layout, manifest = (f"{PACKAGE}.contract.lock", f"{PACKAGE}.contract.layout", f"{PACKAGE}.store.stable_names")
    assert manifest not in graph[lock] and layout in graph[lock] and lock in graph[manifest]
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            pytest.fail("import cycle: " + " -> ".join(path[path.index(name):] + (name,)))
        if name in done:
            return
        for other in sorted(graph[name]):
            visit(other, path + (name,))
        done.add(name)

    for module in sorted(graph):
        visit(module, ())


def test_every_module_parses_as_python_3_9() -> None:
    """A static first line of defence; the real 3.9 interpreter below is the proof."""
    with zipfile.ZipFile(io.BytesIO(build_zipapp())) as zf:
        for name in zf.namelist():
            ast.parse(zf.read(name), filename=name, feature_version=(3, 9))


def test_every_module_imports_under_python_3_9(python39: str, tmp_path: Path) -> None:
    """The commands run there in their own tests; this imports the modules no command path reaches."""
    app = tmp_path / ZIPAPP
    app.write_bytes(build_zipapp())
    code = ("import importlib, sys; sys.path.insert(0, sys.argv[1]); "
            "[importlib.import_module('clusterkit_node.' + m) for m in sys.argv[2:]]; print(sys.version_info[:2])")
    proc = subprocess.run([python39, "-I", "-c", code, str(app), *package_sources()], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "(3, 9)\n"), proc.stderr


# --- one definition: the CLI never accepts what a node refuses ------------------------------------------

SPEC = BASE_SPEC + """\
containers:
  images:
    - name: {name}
      uri: ubuntu:22.04
"""


@pytest.mark.parametrize("name", ["pytorch", "nccl-tests.v2", "manifest", "manifest.json", "manifest.json.v2",
                                  "app.sqsh", ".hidden", "-dash", "a" * 129, "with space", "UPPER"])
def test_the_cli_refuses_every_image_name_the_nodes_lock_reader_refuses(tmp_path: Path, name: str) -> None:
    """The lock reader on the nodes (clusterkit_node/contract/lock.py, via layout.image_name_problem) refuses some
    names; `validate` must refuse each of them first (clusterkit/rules/check.py imports the same rule)."""
    spec = tmp_path / "t.yaml"
    spec.write_text(SPEC.format(name=json.dumps(name)))
    try:
        load(str(spec), check_lock=False)
        refused = []
    except SpecError as exc:
        refused = [line for line in exc.lines() if "containers.images[0].name" in line]
    if image_name_problem(name) is not None:
        assert refused, f"{name!r}: the nodes refuse it ({image_name_problem(name)}), validate accepts it"


# --- the previous bundles' entry points -----------------------------------------------------------------

def test_the_previous_entry_points_run_the_zipapp(tmp_path: Path) -> None:
    """During a rolling update, compute nodes launched from the previous launch template run their
    compute_node_configured.sh (`python3 <shared>/image_sync.py verify|fingerprint`), and plugstack lines
    written before the head node's run name pyxis_importer.py: both reach the zipapp of the new bundle."""
    with zipfile.ZipFile(io.BytesIO(node_artifacts(load("demo")).bundle.data)) as zf:
        zf.extractall(tmp_path)
        modes = {name: stat.S_IMODE(zf.getinfo(name).external_attr >> 16) for name in LEGACY_ENTRY_POINTS}
    assert modes == dict.fromkeys(LEGACY_ENTRY_POINTS, 0o755)
    status = subprocess.run([sys.executable, str(tmp_path / "image_sync.py"), "status", "--store", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and status.stdout.startswith("NAME"), status.stderr
    (tmp_path / "pyxis_importer.py").chmod(0o755)
    release = subprocess.run([str(tmp_path / "pyxis_importer.py"), "release"], capture_output=True, text=True,
                             timeout=60, env={})
    assert release.returncode == 1 and release.stderr.startswith("clusterkit importer: error: not run by pyxis")
