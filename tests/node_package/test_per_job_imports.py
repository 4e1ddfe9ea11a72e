"""What the node commands that run per job import: the Slurm prolog (``user-dirs --prolog``, every job on every
node of its allocation) and pyxis' importer (``get URI`` and ``release``, every container step). Each start of the
zipapp compiles every module of ours it imports (no .pyc in the bundle), and the prolog's time is added to every
job's start (docs/security.md "users on a node"), so each command may import only the modules listed here.

Real runs, not a grep: the zipapp as the bundle builds it, run by a small driver in a fresh interpreter that notes
``sys.modules`` just before the zipapp's ``__main__`` runs and prints what is new after it ran (what the command
imported, however indirectly), with the environment Slurm and pyxis give each command, in a throwaway root
(CK_ROOT). A module of ours or of the standard library outside the command's list fails the test: either the
command needs it (add it, and measure with benchmarks/node_command_start.py) or an import crept in.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.artifacts.bundle import build_zipapp
from clusterkit.images.lock_file import ImageLock, LockedImage, lock_text
from clusterkit_node.contract.layout import inuse_dir, record_path
from clusterkit_node.store import published

HEX = "a" * 64
STORE = "/fsx/containers"
URI = "docker://nvcr.io#nvidia/pytorch:25.01-py3"

# The standard library every per-job command may use (top-level names; Python 3.9's spellings too): regular
# expressions, typing, datetime (log lines), the zipapp's start (runpy, zipimport, importlib) and what those pull.
START = {"__future__", "_collections_abc", "_datetime", "_sre", "_typing", "_weakrefset", "abc", "codecs",
         "collections", "contextlib", "copyreg", "datetime", "enum", "errno", "functools", "importlib", "io",
         "itertools", "keyword", "math", "operator", "os", "pkgutil", "posixpath", "re", "reprlib", "runpy",
         "sre_compile", "sre_constants", "sre_parse", "stat", "sys", "time", "types", "typing", "warnings", "weakref",
         "zipimport", "zlib"}
PROLOG_OURS = {"clusterkit_node", "clusterkit_node.__main__", "clusterkit_node.node", "clusterkit_node.node.user_dirs",
               "clusterkit_node.contract", "clusterkit_node.contract.console",
               "clusterkit_node.contract.enroot_conf_syntax"}
RELEASE_OURS = {"clusterkit_node", "clusterkit_node.__main__", "clusterkit_node.node",
                "clusterkit_node.node.pyxis_importer", "clusterkit_node.contract", "clusterkit_node.contract.console",
                "clusterkit_node.contract.layout"}
ALLOWED = {
    # argv: (ours, standard library beyond START)
    "prolog": (["user-dirs", "--prolog"], PROLOG_OURS, {"syslog"}),  # syslog: a WARN or ERROR line only
    "release": (["release"], RELEASE_OURS, {"shlex"}),
    # get also reads the image lock (a dataclass model, JSON) and the sync's record (JSON), and writes a lease
    "get": ([URI], RELEASE_OURS | {"clusterkit_node.contract.bundle_files", "clusterkit_node.contract.lock",
                                   "clusterkit_node.contract.enroot_uri", "clusterkit_node.store",
                                   "clusterkit_node.store.published"},
            {"shlex", "json", "dataclasses", "copy", "inspect", "ast", "dis", "opcode", "_opcode", "linecache",
             "tokenize", "token", "_ast", "_json", "org"}),
}
# The driver: what `python3 -I clusterkit_node.pyz ARGS` does, with sys.modules noted around the zipapp's __main__.
DRIVER = """
import runpy, sys
pyz = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, pyz)
before = set(sys.modules)
try:
    runpy.run_path(pyz, run_name="__main__")
    code = 0
except SystemExit as exc:
    code = exc.code
sys.stderr.write("CK-NEW-MODULES " + " ".join(sorted(set(sys.modules) - before)) + "\\n")
sys.exit(code)
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A bundle dir (zipapp + image lock) and a node root with enroot.conf, the job user's dirs, a published store
    file and the inuse/ dir; returns the zipapp and the per-job environment."""
    tmp = tmp_path_factory.mktemp("per-job")
    uid, gid = (27001, 27000) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    pyz = tmp / "clusterkit_node.pyz"
    pyz.write_bytes(build_zipapp())
    root = tmp / "root"
    (root / "etc/enroot").mkdir(parents=True)
    (root / "etc/enroot/enroot.conf").write_text("".join(
        f"ENROOT_{key}_PATH {parent}/user-$(id -u)\n"
        for key, parent in (("RUNTIME", "/run/enroot"), ("DATA", "/var/tmp/enroot/data"),
                            ("CACHE", "/var/tmp/enroot/cache"))))
    for parent in ("run/enroot", "var/tmp/enroot/data", "var/tmp/enroot/cache"):
        (root / parent).mkdir(parents=True, mode=0o755)
    (root / "etc/clusterkit").mkdir(parents=True)
    (root / "etc/clusterkit/node.env").write_text(f"CK_CLUSTER='demo'\nCK_STORE='{STORE}'\n")
    image = LockedImage(name="pytorch", source=f"nvcr.io/nvidia/pytorch:25.01-py3@sha256:{HEX}", registry="nvcr.io",
                        repository="nvidia/pytorch", digest=f"sha256:{HEX}",
                        enroot_uri=f"docker://nvcr.io#nvidia/pytorch@sha256:{HEX}", platform="linux/amd64",
                        compressed_size=1, expect={})
    (tmp / "images.lock").write_text(lock_text(ImageLock(cluster="demo", lock_version=1, images=(image,))))
    sqsh = root / STORE.lstrip("/") / "pytorch" / f"{HEX}.sqsh"
    sqsh.parent.mkdir(parents=True)
    sqsh.write_bytes(b"hsqs")
    sqsh.chmod(0o644)
    record = Path(str(root) + record_path(STORE))
    record.parent.mkdir(parents=True)
    entry = dict(published.identity(sqsh.lstat()), digest=f"sha256:{HEX}", sha256="0" * 64)
    record.write_text(json.dumps(published.record_doc({f"pytorch/{HEX}.sqsh": entry})))
    Path(str(root) + inuse_dir(STORE)).mkdir(mode=0o1777)
    (root / "run/pyxis").mkdir(parents=True)
    env = {"CK_ROOT": str(root), "SLURM_JOB_UID": str(uid), "SLURM_JOB_GID": str(gid), "SLURM_JOB_ID": "41",
           "SLURM_STEP_ID": "0", "PYXIS_RUNTIME_PATH": str(root / "run/pyxis"), "PATH": os.environ.get("PATH", "")}
    return pyz, env


def new_modules(pyz: Path, argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    r = subprocess.run([sys.executable, "-I", "-c", DRIVER, str(pyz), *argv], env=env, capture_output=True,
                       text=True, timeout=60)
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("CK-NEW-MODULES ")]
    return r, set(line.split()[1:])


def beyond(modules: set[str], ours: set[str], stdlib: set[str]) -> list[str]:
    """The modules outside the lists: ours by full name, the standard library's by top-level name (anything
    else, e.g. a distribution's sitecustomize hook, is not the zipapp's doing)."""
    top = {m.split(".")[0] for m in modules}
    return sorted({m for m in modules if m.startswith("clusterkit_node") and m not in ours} |
                  {t for t in top if t in sys.stdlib_module_names and t not in START | stdlib})


@pytest.mark.parametrize("command", ["prolog", "get", "release"])
def test_a_per_job_command_imports_only_its_allow_list(node: tuple[Path, dict[str, str]], command: str) -> None:
    pyz, env = node
    argv, ours, stdlib = ALLOWED[command]
    if command == "get":
        argv = ["get", *argv]
    lease = Path(env["CK_ROOT"] + inuse_dir(STORE), f"{os.uname().nodename.split('.')[0]}.41.0.{env['SLURM_JOB_UID']}"
                                                     ".json")
    if command == "release":
        lease.write_text("{}")  # what get left
    r, modules = new_modules(pyz, argv, env)
    assert r.returncode == 0, r.stderr
    # the command did its work: the prolog made nothing new (or said why not), get answered the store file and
    # left its lease, release removed it
    if command == "get":
        assert r.stdout == f"{STORE}/pytorch/{HEX}.sqsh\n" and lease.exists()
    if command == "release":
        assert not lease.exists()
    assert {m for m in modules if m.startswith("clusterkit_node")} >= {"clusterkit_node.__main__"}
    assert beyond(modules, ours, stdlib) == [], (
        f"{command} imports more than its allow-list (tests/node_package/test_per_job_imports.py): every job pays "
        f"for it; import it where it is used, or add it here with a measurement")


def test_the_check_sees_what_a_command_imports(node: tuple[Path, dict[str, str]]) -> None:
    """The same driver on the argparse path (`user-dirs --help`): argparse and the command table show up."""
    pyz, env = node
    _, modules = new_modules(pyz, ["user-dirs", "--help"], env)
    assert {"argparse", "clusterkit_node.commands"} <= set(beyond(modules, PROLOG_OURS, {"syslog"}))
