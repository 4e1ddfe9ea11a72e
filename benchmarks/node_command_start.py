#!/usr/bin/env python3
"""What a node command costs before it does anything: the zipapp's start, this tree against a git ref.

The Slurm prolog runs ``clusterkit_node.pyz user-dirs --prolog`` at every job start on every node of the
allocation, pyxis runs the zipapp as its importer (``get URI``, then ``release``) for every container step that
names an image, and every node script calls ``node-args`` first; all pay the zipapp's imports. The zipapp is built
exactly as the bundle builds it (clusterkit.artifacts.bundle.build_zip: no .pyc, so every start compiles what it
imports, as on a node), once from the working tree and once from ``--base`` (default: the commit before the node
package's command table became lazy), and each command runs in alternating rounds. CPU seconds (user + sys of
the child, from getrusage) are what a node pays; wall is noisier on a shared machine.

The per-job rows are real runs in a throwaway root (CK_ROOT, as the node tests use it) with the environment
Slurm and pyxis give them: ``user-dirs --prolog`` reads an enroot.conf naming three per-user parents (root's,
0755) and finds the job user's dirs already made (every job but a user's first on a node; run as root, the
user is uid 27001, else the caller, whose parents are then not root's: the prolog says so and exits 0);
``get`` resolves a locked name to a published store file (the image lock next to the zipapp, the sync's
record, a lease written into inuse/) and ``release`` removes the lease ``get`` left (re-made, untimed,
before each run).
Run from the repo root: `.venv/bin/python benchmarks/node_command_start.py --rounds 15`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from clusterkit.artifacts.bundle import ZIPAPP_MAIN, ZIPAPP_SHEBANG, build_zip, build_zipapp  # noqa: E402
from clusterkit.images.lock_file import ImageLock, LockedImage, lock_text  # noqa: E402
from clusterkit_node.contract.layout import inuse_dir, record_path  # noqa: E402
from clusterkit_node.store import published  # noqa: E402

# label: (argv, per-job: runs with the job's environment in the throwaway root)
COMMANDS = {
    "user-dirs --help (the prolog's imports)": (["user-dirs", "--help"], False),
    "node-args (every node script's first call)": (["node-args", "--role", "compute", "--", "CK_CLUSTER=demo",
                                                    "CK_OS=rhel9"], False),
    "status of an empty store": (["status", "--store", "@STORE@"], False),
    "user-dirs --prolog (the Slurm prolog, per job and node)": (["user-dirs", "--prolog"], True),
    "importer get (pyxis, per container step)": (["get", "docker://nvcr.io#nvidia/pytorch:25.01-py3"], True),
    "importer release (pyxis, per container step)": (["release"], True),
}
STORE = "/fsx/containers"
NOT_ROOT = " (not root: the prolog finds parents that are not root's, says so and exits 0)"
HEX = "a" * 64
JOB_UID, JOB_GID = (27001, 27000) if os.geteuid() == 0 else (os.getuid(), os.getgid())
ENROOT_CONF = ("ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)\n"
               "ENROOT_DATA_PATH /var/tmp/enroot/data/user-$(id -u)\n"
               "ENROOT_CACHE_PATH /var/tmp/enroot/cache/user-$(id -u)\n"
               "ENROOT_TEMP_PATH /var/tmp/enroot/tmp\n")


def job_root(tmp: Path) -> dict[str, str]:
    """A node root for the per-job commands (see the docstring); returns their environment. The image lock goes
    next to the zipapps in ``tmp`` (the importer reads the lock next to itself)."""
    root = tmp / "root"
    (root / "etc/enroot").mkdir(parents=True)
    (root / "etc/enroot/enroot.conf").write_text(ENROOT_CONF)
    for parent in ("run/enroot", "var/tmp/enroot/data", "var/tmp/enroot/cache"):
        (root / parent).mkdir(parents=True)
        (root / parent).chmod(0o755)
        (root / parent / f"user-{JOB_UID}").mkdir(mode=0o700)
        os.chown(root / parent / f"user-{JOB_UID}", JOB_UID, JOB_GID)
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
    return {"CK_ROOT": str(root), "SLURM_JOB_UID": str(JOB_UID), "SLURM_JOB_GID": str(JOB_GID),
            "SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0", "PYXIS_RUNTIME_PATH": str(root / "run/pyxis")}


def lease(env: dict[str, str]) -> Path:
    """The lease ``get`` leaves and ``release`` removes (pyxis_importer.lease_path)."""
    host = platform.node().split(".")[0] or "localhost"
    return Path(env["CK_ROOT"] + inuse_dir(STORE), f"{host}.41.0.{JOB_UID}.json")


def zipapp_at(ref: str) -> bytes:
    """The zipapp of ``ref``'s clusterkit_node, built the way the bundle builds it."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "clusterkit_node"], check=True,
                             capture_output=True).stdout
    files = {"__main__.py": ZIPAPP_MAIN}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".py"):
                handle = tar.extractfile(member)
                assert handle is not None
                files[member.name] = handle.read()
    return build_zip(files, prefix=ZIPAPP_SHEBANG)


def run_once(pyz: Path, argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    if argv == ["release"] and env:
        lease(env).write_text("{}")  # what get left
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-I", str(pyz), *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, check=False, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if env and (done.returncode != 0 or (argv == ["release"] and lease(env).exists())):
        raise SystemExit(f"{pyz.name} {' '.join(argv)}: exit {done.returncode}, {done.stderr.decode()[-300:]!r}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="488364d", help="git ref to compare with (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=15)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base, now = Path(tmp, "base.pyz"), Path(tmp, "now.pyz")
        base.write_bytes(zipapp_at(a.base))
        now.write_bytes(build_zipapp())
        store = Path(tmp, "store")
        store.mkdir()
        job_env = dict(os.environ, **job_root(Path(tmp)))
        rows = []
        for label, (argv, per_job) in COMMANDS.items():
            argv = [str(store) if w == "@STORE@" else w for w in argv]
            env = job_env if per_job else None
            cpu: dict[str, list[float]] = {"base": [], "now": []}
            wall: dict[str, list[float]] = {"base": [], "now": []}
            run_once(now, argv, env), run_once(base, argv, env)  # warm-up (page cache)
            for _ in range(a.rounds):
                for name, pyz in (("base", base), ("now", now)):
                    c, w = run_once(pyz, argv, env)
                    cpu[name].append(c)
                    wall[name].append(w)
            b, n = statistics.median(cpu["base"]), statistics.median(cpu["now"])
            rows.append(f"| {label} | {b * 1000:.0f} | {n * 1000:.0f} | {n / b:.2f} | "
                        f"{statistics.median(wall['base']) * 1000:.0f} | {statistics.median(wall['now']) * 1000:.0f} |")
    print(f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}; {dt.date.today().isoformat()}; {a.rounds} alternating rounds after a "
          f"warm-up, medians; base {a.base}, now the working tree; per-job rows as uid {JOB_UID}"
          f"{'' if os.geteuid() == 0 else NOT_ROOT}.\n")
    print("| command | base CPU ms | now CPU ms | now/base | base wall ms | now wall ms |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
