#!/usr/bin/env python3
"""A cluster on a cold platform vs one on a warm platform: time to the first container job, and what each asks
the registry for.

Two clusters of one platform (tests/multinode/platform_flow.py: each a fleet of its own, a head node and
--computes compute nodes in their own mount, network and UTS namespaces with real Slurm, enroot 4.1.2 + pyxis
0.24.0; one FSx directory; one registry on both clusters' networks), brought up one after the other, the first
still running when the second comes:

  1. cluster A on an EMPTY store (cold): its head node's sync imports the image;
  2. cluster B, another cluster name and head node, locking the SAME image (warm): nothing to import.

For each: from the head node's boot (ParallelCluster's phases: stage 0 -> launcher -> head_node.sh -> the
image-sync unit) to its sync's end ("store synced"), and to the end of the cluster's first container job
(`srun -N<computes> --container-image=<the locked registry name> true` as a user, run as soon as every compute
node is idle; the compute nodes boot while the sync runs, as on ParallelCluster); the registry requests and
blobs fetched while the cluster came up, counted at the registry; the sync's status per image. Serving and
locking the image happen before the clock starts. Every --rounds round starts on a new, empty FSx directory.

Image: the multi-node tier's Debian-built PyTorch + Open MPI image (tests/multinode/training_image.py, layer
469 MB gzip, about 1.5 GB unpacked), squashed with the tier's zstd level 1; --small: the tier's busybox
image (about 1 MB).

What it does not measure: FSx (a local directory: no Lustre client, no network per node), GPUs, separate
machines (every node shares this machine's two cores and page cache), a registry across the internet (the
loopback one answers at memory speed, so the cold import here is the floor of a real one).

Run as root from the repo root (the real-runtime tier's Debian packages; enroot/pyxis are built and cached by
tests/real_runtime/runtime_build.py):

    .venv/bin/python benchmarks/warm_platform.py [--rounds 1] [--computes 1] [--small]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
for sub in ("tests/real_runtime", "tests/images", "tests/multinode", "benchmarks"):
    sys.path.insert(0, str(REPO / sub))

import runtime_build  # noqa: E402
import training_image  # noqa: E402
from cluster_flow import SYNC_UNIT, wait_unit  # noqa: E402
from container_start import machine  # noqa: E402
from fleet import Fleet  # noqa: E402
from fleet_flow import PROFILE, SQUASH  # noqa: E402
from lifecycle import Lifecycle  # noqa: E402
from platform_flow import TAG, prepare, repository, serve_image, sync_rows  # noqa: E402
from registry import serve_on  # noqa: E402
from tier import stage_for  # noqa: E402

USER = "ckuser1"
IMAGE = "train"


def bring_up(fleet: Fleet, registry, loopback: str, workdir: Path, name: str, squash: str) -> dict:
    """One cluster from its head node's boot to its first container job; what it took and asked for."""
    cluster = prepare(fleet, registry, loopback, workdir, name, [IMAGE], serve=False, squash_options=squash)
    registry.log.clear()  # from here on: this cluster's nodes only
    head = fleet.head
    assert head is not None
    start, wall = time.monotonic(), time.time()
    Lifecycle(head, cluster.compute_args).head_boot()
    failed = [b for b in fleet.boot_computes(cluster.compute_args) if isinstance(b, BaseException)]
    rc = wait_unit(head, SYNC_UNIT, timeout=900)
    # when the sync ended (its exit status file's mtime; the node shares this machine's clock), not when we
    # looked: the compute nodes' boots ran meanwhile
    synced = float(head.run(["date", "+%s.%N", "-r", f"/run/ck-test/units/{SYNC_UNIT}.rc"]).stdout) - wall
    log = head.read(f"/run/ck-test/units/{SYNC_UNIT}.log")
    if rc != "0" or failed:
        raise RuntimeError(f"{name}: sync exited {rc}, failed boots {failed}:\n{log}")
    fleet.wait_idle(120)
    booted = time.monotonic() - start
    uri = f"{registry.host}#{repository(IMAGE)}:{TAG}"
    job_start = time.monotonic()
    head.run(["srun", f"-N{len(fleet.computes)}", "--ntasks-per-node=1", f"--container-image={uri}", "true"],
             user=USER, timeout=600)
    now = time.monotonic()
    requests = list(registry.log)
    blobs = collections.Counter(p for m, p, _ in requests if m == "GET" and "/blobs/" in p)
    status = sync_rows(log, [IMAGE])[IMAGE][0]
    return {"synced": synced, "idle": booted, "job": now - job_start, "first": now - start,
            "requests": len(requests), "blobs": len(blobs), "status": status}


def one_round(root: Path, layer, small: bool, computes: int) -> tuple[dict, dict]:
    stage = stage_for(max(runtime_build.GENERATIONS))
    fsx = Path(tempfile.mkdtemp(prefix="fsx-", dir=root))
    fsx.chmod(0o755)
    with contextlib.ExitStack() as stack:
        fleets = {}
        for name in ("plat-a", "plat-b"):
            fleet = Fleet(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root)), stage, PROFILE, count=computes,
                          fsx_dir=fsx)
            stack.callback(fleet.stop)
            fleets[name] = fleet.start()
        registry, loopback = stack.enter_context(serve_on(*(f.fabric for f in fleets.values())))
        if small:
            serve_image(registry, IMAGE)
        else:
            training_image.serve(registry, repository(IMAGE), TAG, layer)
        squash = "" if small else SQUASH
        specs = Path(tempfile.mkdtemp(prefix="specs-", dir=root))
        cold = bring_up(fleets["plat-a"], registry, loopback, specs, "plat-a", squash)
        warm = bring_up(fleets["plat-b"], registry, loopback, specs, "plat-b", squash)
    shutil.rmtree(fsx, ignore_errors=True)
    return cold, warm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--computes", type=int, default=1)
    parser.add_argument("--small", action="store_true", help="the busybox image instead of the training image")
    args = parser.parse_args()
    layer = None if args.small else training_image.build()
    load = os.getloadavg()[0]  # the machine is shared: say how busy it was
    root = Path(tempfile.mkdtemp(prefix="ck-warm-platform-bench-"))
    root.chmod(0o755)
    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    try:
        for _ in range(args.rounds):
            cold, warm = one_round(root, layer, args.small, args.computes)
            runs["cold"].append(cold)
            runs["warm"].append(warm)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[kind])

    image = ("busybox image, about 1 MB" if args.small else
             "image layer 469 MB gzip, about 1.5 GB unpacked (Debian bookworm, python3-torch 1.13, Open MPI 4.1), "
             "squashed with zstd level 1")
    print(f"Machine: {machine()}; {dt.date.today().isoformat()}; two clusters on one FSx directory, each 1 head + "
          f"{args.computes} compute node root(s), profile {PROFILE}, enroot 4.1.2 + pyxis 0.24.0; {image}; "
          f"{args.rounds} round(s), each on an empty store; load average {load:.1f} at the start; medians\n")
    print("| cluster | sync status | registry requests | blobs fetched | head boot to store synced s | "
          "to every node idle s | first job s | head boot to first job done s |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, label in (("cold", "A, cold platform (empty store)"), ("warm", "B, warm platform (A's images)")):
        statuses = "/".join(sorted({r["status"] for r in runs[kind]}))
        print(f"| {label} | {statuses} | {med(kind, 'requests'):.0f} | {med(kind, 'blobs'):.0f} | "
              f"{med(kind, 'synced'):.1f} | {med(kind, 'idle'):.1f} | {med(kind, 'job'):.2f} | "
              f"{med(kind, 'first'):.1f} |")
    print(f"\nwarm / cold: store synced {med('warm', 'synced') / med('cold', 'synced'):.2f}x, first job done "
          f"{med('warm', 'first') / med('cold', 'first'):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
