#!/usr/bin/env python3
"""Container starts across a multi-node cluster, and the time to a cluster's first multi-node job.

A fleet of one head node and three compute nodes (tests/multinode/fleet.py: each node in its own mount,
network and UTS namespaces, real Slurm across them, one shared store) is brought up with ClusterKit's scripts
as the multi-node tier does (tests/multinode/fleet_flow.bring_up), with the Debian-built PyTorch + Open MPI
image (tests/multinode/training_image.py, about 1.5 GB unpacked). Three bring-ups, in this order:

  1. newest generation (enroot 4.1.2 + pyxis 0.24.0), COLD store: the head node imports the image;
  2. newest generation, WARM store (the same FSx directory, a new cluster): nothing to import;
  3. older generation (enroot 3.4.1 + pyxis 0.20.0), warm store.

For each: the time from the start of the bring-up (serve and lock the image, upload the bundle: about 1 s;
then the head node's boot, the compute nodes' boots and the image sync) to the store being synced and to the
first successful 3-node job (`srun -N3 true` in the container, run as soon as every node is idle), then for
--rounds rounds, each after dropping the page cache and with the cluster idle, `srun -N1` and `srun -N3
--ntasks-per-node=1` of `true` in the container (the locked registry name where pyxis has the importer, else
the store file), and how much of the store file the page cache holds after the start (fincore): the bytes read
from the store for that start. All nodes share this machine's one page cache, so the 3-node figure is the
union of what the nodes read: for the in-place path it is the blocks the start touches, for extraction the
whole file once (each node then writes its own copy).

What it does not measure: FSx (the store is a local directory: no Lustre client, no network per node), GPUs,
nodes on separate machines (three nodes share two cores here, so 3-node starts contend for CPU).

Run as root from the repo root (the real-runtime tier's Debian packages; enroot/pyxis are built and cached by
tests/real_runtime/runtime_build.py, the image by tests/multinode/training_image.py):

    .venv/bin/python benchmarks/multinode_start.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
for sub in ("tests/real_runtime", "tests/images", "tests/slurm", "tests/multinode", "benchmarks"):
    sys.path.insert(0, str(REPO / sub))

import runtime_build  # noqa: E402
import training_image  # noqa: E402
from container_start import drop_caches, machine  # noqa: E402
from fleet import Fleet  # noqa: E402
from fleet_flow import PROFILE, Up, bring_up  # noqa: E402
from registry import serve_on  # noqa: E402
from tier import stage_for  # noqa: E402

from jobs import job_image  # noqa: E402

USER = "ckuser1"


class _Factory:
    """The bits of pytest's tmp_path_factory that bring_up uses."""

    def __init__(self, root: Path):
        self.root, self.n = root, 0

    def mktemp(self, name: str) -> Path:
        self.n += 1
        path = self.root / f"{name}{self.n}"
        path.mkdir()
        return path


def srun(up: Up, nodes: int) -> float:
    start = time.monotonic()
    up.fleet.head.run(["srun", f"-N{nodes}", "--ntasks-per-node=1", f"--container-image={job_image(up)}", "true"],
                      user=USER, timeout=600)
    return time.monotonic() - start


def resident_mb(up: Up) -> float:
    """MB of the store's image file in the page cache (fincore), i.e. read since the caches were dropped."""
    sqsh = next((up.fleet.fsx / "containers" / "train").glob("*.sqsh"))
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(sqsh)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1e6


def one(label: str, gen: str, fsx: Path, layer: training_image.Layer, rounds: int, tmp: _Factory) -> list[str]:
    generation = runtime_build.GENERATIONS[gen]
    fleet = Fleet(tmp.mktemp(f"fleet-{gen}"), stage_for(gen), PROFILE, fsx_dir=fsx)
    try:
        fleet.start()
        with serve_on(fleet.fabric) as (registry, loopback):
            begin = time.monotonic()
            up = bring_up(fleet, generation, registry, loopback, layer, tmp.mktemp("spec"))
            srun(up, 3)
            first_job = time.monotonic() - begin
            starts: dict[int, list[float]] = {1: [], 3: []}
            read: dict[int, list[float]] = {1: [], 3: []}
            for _ in range(rounds):
                for n in (1, 3):
                    fleet.wait_idle(120)
                    drop_caches()
                    starts[n].append(srun(up, n))
                    read[n].append(resident_mb(up))
            imported = sum(1 for method, path, _ in up.boot_requests if method == "GET" and "/blobs/" in path)
            med = {n: statistics.median(v) for n, v in starts.items()}
            return [f"| {label} | {generation.enroot_version} + {generation.pyxis_version} | "
                    f"{imported} | {up.timings['store_synced_s']:.1f} | {first_job:.1f} | {med[1]:.2f} | "
                    f"{med[3]:.2f} | {med[3] / med[1]:.1f}x | {statistics.median(read[1]):.0f} | "
                    f"{statistics.median(read[3]):.0f} |"]
    finally:
        fleet.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    layer = training_image.build()
    root = Path(tempfile.mkdtemp(prefix="ck-multinode-bench-"))
    root.chmod(0o755)
    tmp = _Factory(root)
    fsx = tmp.mktemp("fsx")
    try:
        rows = []
        newest, older = max(runtime_build.GENERATIONS), min(runtime_build.GENERATIONS)
        for label, gen in (("cold store", newest), ("warm store", newest), ("warm store", older)):
            rows += one(label, gen, fsx, layer, args.rounds, tmp)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sqsh_note = "image layer 469 MB gzip, about 1.5 GB unpacked (Debian bookworm, python3-torch 1.13, Open MPI 4.1)"
    print(f"Machine: {machine()}; {dt.date.today().isoformat()}; 1 head + 3 compute node roots, profile {PROFILE}; "
          f"{sqsh_note}; {args.rounds} rounds, page cache dropped before every start; medians\n")
    print("| cluster | enroot + pyxis | blobs pulled at boot | store synced s | bring-up to first 3-node job s | "
          "start 1 node s | start 3 nodes s | 3 vs 1 | store MB read, 1 node | store MB read, 3 nodes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
