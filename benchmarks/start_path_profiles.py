#!/usr/bin/env python3
"""Container start per node profile: which start path each AMI gets, and what it costs.

For each node profile (clusterkit/data/node_profiles.json: alinux2023 lacks squashfuse, ubuntu2204's reads on one
thread, ubuntu2404's squashfuse_ll on many), a
ParallelCluster-shaped node root of that AMI (tests/real_runtime/node_root.py: the programs the AMI lacks are
hidden) is brought up with the REAL enroot 4.1.2 + pyxis 0.24.0 exactly as the tests do
(tests/real_runtime/cluster_flow.bring_up: head-node scripts, image sync, compute scripts with the boot
self-test). Then a synthetic image of --size-mb MB (squash_options.build_tree + busybox) is squashed with the
store's default options into the store, and for --rounds rounds, each after dropping the page cache and
waiting for the node to be idle, an unprivileged user runs

  * `srun true` (no container), and
  * `srun --container-image=/fsx/containers/bench.sqsh true`,

and pyxis's log says which path the start took (squashfuse in place, or `enroot create`). Reported: medians,
and the start overhead (container start - `srun true`). Compare ratios within one run, not absolute times.
What it does not measure: FSx (the store is a local directory), many nodes at once, GPUs.

Run as root from the repo root (the real-runtime tier's Debian packages; enroot/pyxis are built and cached by
tests/real_runtime/runtime_build.py):

    .venv/bin/python benchmarks/start_path_profiles.py [--size-mb 256] [--rounds 5]
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
for sub in ("tests/real_runtime", "tests/images", "tests/slurm", "tests/image_sync", "benchmarks"):
    sys.path.insert(0, str(REPO / sub))

import runtime_build  # noqa: E402
from cluster_flow import bring_up  # noqa: E402
from container_start import add_runtime_files, drop_caches, machine, wait_idle  # noqa: E402
from images_fakes import serve  # noqa: E402
from node_root import NodeRoot  # noqa: E402
from squash_options import build_tree  # noqa: E402

from clusterkit_node.contract.settings import DEFAULT_SQUASH_OPTIONS  # noqa: E402

PROFILES = ("alinux2023", "ubuntu2204", "ubuntu2404")
USER = "ckuser1"
BENCH = "/fsx/containers/bench.sqsh"


def timed(node: NodeRoot, cmd: list[str]) -> float:
    wait_idle(node)
    drop_caches()
    start = time.monotonic()
    node.run(cmd, user=USER, timeout=600)
    return time.monotonic() - start


def measure(profile: str, stage: Path, work: Path, tree: Path, rounds: int) -> dict[str, object]:
    node = NodeRoot(work / f"node-{profile}", stage, profile=profile)
    try:
        node.start()
        node.start_slurm()
        with serve() as registry:
            spec_dir = work / f"spec-{profile}"
            spec_dir.mkdir()
            cluster = bring_up(node, registry, spec_dir)
            host_tree = node.fsx / ".bench-tree"
            shutil.copytree(tree, host_tree, symlinks=True)
            node.run(["mksquashfs", f"/fsx/{host_tree.name}", BENCH, "-all-root", "-noappend", "-no-progress",
                      *DEFAULT_SQUASH_OPTIONS.split()], timeout=900)
            shutil.rmtree(host_tree)
            node.run(["chmod", "0644", BENCH])
            line = node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf")
            plain, started = [], []
            before = len(node.read("/var/log/slurmd.log"))
            for _ in range(rounds):
                plain.append(timed(node, ["srun", "true"]))
                started.append(timed(node, ["srun", f"--container-image={BENCH}", "true"]))
            log = node.read("/var/log/slurmd.log")[before:]
            in_place = log.count(f"starting container from squashfs: {BENCH}")
            extracted = log.count("creating container filesystem")
            path = "squashfuse" if in_place == rounds and not extracted else (
                "extract" if extracted == rounds and not in_place else f"mixed ({in_place}/{extracted})")
            selftest = next((ln.split("selftest: ", 1)[1] for ln in cluster.bootstrap_log.splitlines()
                             if "selftest: " in ln and "start works" in ln), "?")
            return {"profile": profile, "use_squashfuse": "use_squashfuse=1" in line, "path": path,
                    "srun_true": statistics.median(plain), "start": statistics.median(started),
                    "selftest": selftest}
    finally:
        node.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=int, default=256)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    stage = runtime_build.build("gen4")
    with tempfile.TemporaryDirectory(prefix="ck-bench-profiles-") as tmp:
        work = Path(tmp)
        tree = work / "tree"
        build_tree(tree, args.size_mb, seed=7)
        add_runtime_files(tree)
        rows = [measure(profile, stage, work, tree, args.rounds) for profile in PROFILES]
    print(f"Machine: {machine()}; {dt.date.today().isoformat()}; enroot 4.1.2 + pyxis 0.24.0, "
          f"{args.size_mb} MB synthetic image, {DEFAULT_SQUASH_OPTIONS}, {args.rounds} rounds, user {USER}, "
          "page cache dropped before every start; medians")
    print()
    print("| profile | use_squashfuse=1 written | start path taken | `srun true` s | container start s | "
          "overhead s | boot self-test |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        overhead = float(r["start"]) - float(r["srun_true"])  # type: ignore[arg-type]
        print(f"| {r['profile']} | {'yes' if r['use_squashfuse'] else 'no'} | {r['path']} | "
              f"{r['srun_true']:.3f} | {r['start']:.3f} | {overhead:.3f} | {r['selftest']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
