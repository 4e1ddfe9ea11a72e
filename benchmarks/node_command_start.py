#!/usr/bin/env python3
"""What a node command costs before it does anything: the zipapp's start, this tree against a git ref.

The Slurm prolog runs ``clusterkit_node.pyz user-dirs --prolog`` at every job start on every node of the
allocation, and every node script calls ``node-args`` first; both pay the zipapp's imports. The zipapp is built
exactly as the bundle builds it (clusterkit.artifacts.bundle.build_zip: no .pyc, so every start compiles what it
imports, as on a node), once from the working tree and once from ``--base`` (default: the commit before the node
package's command table became lazy), and each command runs in alternating rounds. CPU seconds (user + sys of
the child, from getrusage) are what a node pays; wall is noisier on a shared machine.
Run from the repo root: `.venv/bin/python benchmarks/node_command_start.py --rounds 15`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
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

COMMANDS = {
    "user-dirs --help (the prolog's imports)": ["user-dirs", "--help"],
    "node-args (every node script's first call)": ["node-args", "--role", "compute", "--", "CK_CLUSTER=demo",
                                                   "CK_OS=rhel9"],
    "status of an empty store": ["status", "--store", "@STORE@"],
}


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


def run_once(pyz: Path, argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-I", str(pyz), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
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
        rows = []
        for label, argv in COMMANDS.items():
            argv = [str(store) if w == "@STORE@" else w for w in argv]
            cpu = {"base": [], "now": []}
            wall = {"base": [], "now": []}
            run_once(now, argv), run_once(base, argv)  # warm-up (page cache)
            for _ in range(a.rounds):
                for name, pyz in (("base", base), ("now", now)):
                    c, w = run_once(pyz, argv)
                    cpu[name].append(c)
                    wall[name].append(w)
            b, n = statistics.median(cpu["base"]), statistics.median(cpu["now"])
            rows.append(f"| {label} | {b * 1000:.0f} | {n * 1000:.0f} | {n / b:.2f} | "
                        f"{statistics.median(wall['base']) * 1000:.0f} | {statistics.median(wall['now']) * 1000:.0f} |")
    print(f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}; {dt.date.today().isoformat()}; {a.rounds} alternating rounds after a "
          f"warm-up, medians; base {a.base}, now the working tree.\n")
    print("| command | base CPU ms | now CPU ms | now/base | base wall ms | now wall ms |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
