#!/usr/bin/env python3
"""What the node health loop's quick check costs, as the prolog runs it before every job on every node.

The check runs the bundle's zipapp (built as the bundle builds it: no .pyc, so every start compiles what it imports,
as on a node) exactly as ``prolog.d/50_clusterkit_node_health`` does: ``python3 -I clusterkit_node.pyz health check
--tier quick --source prolog``, with ``--no-drain`` (nothing to drain on a pass). The node is a p5 as the checks see
it: stand-in ``nvidia-smi`` and ``fi_info`` (shell scripts answering in the real tools' formats, as in
tests/multinode/gpu_standin.py: 8 H100s, 32 EFA devices), a kernel log of N records in the /dev/kmsg format under
CK_ROOT, a store directory. So the figures are the check's own cost (the zipapp's start, reading the kernel log,
recording to the store) plus two shell scripts; a real nvidia-smi on 8 GPUs takes longer (not measured here: no GPU),
which the budget bounds. Rows alternate in each round; wall and CPU (user + sys of the child) medians.

Run from the repo root: `.venv/bin/python benchmarks/health_check.py --rounds 15`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from clusterkit.artifacts.bundle import build_zipapp  # noqa: E402
from clusterkit_node.contract.health_plan import Deep, Expect, HealthPlan, QueueHealth, dumps  # noqa: E402

NODE = "gpu-st-p5-1"
NVIDIA_SMI = "#!/bin/bash\nfor i in 0 1 2 3 4 5 6 7; do echo \"$i, NVIDIA H100 80GB HBM3, 0\"; done\n"
FI_INFO = ("#!/bin/bash\nfor i in $(seq 0 31); do printf 'provider: efa\\n    fabric: efa\\n    domain: "
           "rdmap%ss0-rdm\\n' \"$i\"; done\n")


def setup(work: Path, kmsg_records: int) -> tuple[list[str], dict[str, str]]:
    root, bins, store = work / "root", work / "bin", work / "fsx" / "containers"
    for d in (root / "proc/sys/kernel/random", root / "dev", root / "etc/clusterkit", bins, store):
        d.mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("bench\n")
    (root / "dev/kmsg").write_text("".join(f"6,{i},{i},-;eth0: link up {i}\n" for i in range(kmsg_records)))
    (root / "etc/clusterkit/node.env").write_text(f"CK_STORE='{store}'\n")
    for name, body in (("nvidia-smi", NVIDIA_SMI), ("fi_info", FI_INFO)):
        (bins / name).write_text(body)
        (bins / name).chmod(0o755)
    plan = work / "health_plan.json"
    plan.write_text(dumps(HealthPlan("bench", 300, {"gpu": QueueHealth(True, 10, {"p5": Expect(8, "H100", 32)},
                                                                     Deep())})))
    zipapp = work / "clusterkit_node.pyz"
    zipapp.write_bytes(build_zipapp())
    argv = [sys.executable, "-I", str(zipapp), "health", "check", "--tier", "quick", "--source", "prolog",
            "--node", NODE, "--plan", str(plan), "--no-drain", "--cursor", str(work / "cursor.json")]
    env = {"CK_ROOT": str(root), "PATH": f"{bins}:/usr/bin:/bin"}
    return argv, env


def timed(argv: list[str], env: dict[str, str], before=None) -> tuple[float, float]:
    if before:
        before()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[3:6]} exited {proc.returncode}: {proc.stderr[-500:]}")
    return wall, (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--kmsg-records", type=int, default=5000, help="kernel log records to scan (a booted node's)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        argv, env = setup(work, a.kmsg_records)
        cursor = work / "cursor.json"
        rows = {
            "python3 -c pass (the interpreter alone)": ([sys.executable, "-I", "-c", "pass"], None),
            f"quick check, first of a boot (scans {a.kmsg_records} kmsg records)":
                (argv, lambda: cursor.unlink(missing_ok=True)),
            "quick check, next (kmsg from the cursor)": (argv, None),
        }
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in rows}
        timed(argv, env)  # warm the page cache once
        for _ in range(a.rounds):
            for label, (cmd, before) in rows.items():
                results[label].append(timed(cmd, env, before))
    print(f"# Quick health check cost ({platform.node()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {dt.date.today().isoformat()}, {a.rounds} rounds)\n")
    print("| what | wall median (min-max) ms | CPU median ms |")
    print("|---|---|---|")
    for label, got in results.items():
        walls, cpus = [w * 1000 for w, _ in got], [c * 1000 for _, c in got]
        print(f"| {label} | {statistics.median(walls):.0f} ({min(walls):.0f}-{max(walls):.0f}) | "
              f"{statistics.median(cpus):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
