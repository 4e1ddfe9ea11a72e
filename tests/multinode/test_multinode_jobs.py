"""Jobs across a real multi-node cluster: one head node, three compute nodes (own namespaces, own slurmd),
one store, the Debian-built PyTorch + Open MPI image, REAL enroot + pyxis of both generations.

What it proves that one node could not: the store's one file starts on three nodes at once; Slurm places
ranks on three hosts; enroot's Slurm hooks hand each container what a distributed job needs (the
pytorch hook's MASTER_ADDR/RANK/WORLD_SIZE, the PMI hook's PMIx variables and mounts); gloo and Open MPI
reach each other between containers on different hosts over the fabric; and the registry is asked for
nothing after the head node's import.
"""
from __future__ import annotations

import json
import math

import pytest
from fleet_flow import IMAGE

# One DDP training step of a tiny model (23 parameters: each rank's line stays well under Slurm's 4 KiB
# output chunks). Every rank takes its shard of one fixed batch; DDP averages the
# gradients (gloo allreduce), so every rank ends with the gradient of the whole batch's mean loss, which is
# what one process computes on the whole batch (SINGLE below runs exactly that).
DDP_STEP = r'''
import json, os, socket, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH = 12

def data():
    g = torch.Generator().manual_seed(1234)
    return torch.randn(BATCH, 4, generator=g), torch.randn(BATCH, 2, generator=g)

def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).double()

def grads(m):
    return [v for p in m.parameters() for v in p.grad.flatten().tolist()]

x, y = data()
x, y = x.double(), y.double()
if sys.argv[1:] == ["single"]:
    m = model()
    torch.nn.functional.mse_loss(m(x), y).backward()
    print(json.dumps({"grads": grads(m)}))
    sys.exit(0)
dist.init_process_group("gloo")  # env:// from the hook: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
share = BATCH // world
m = DDP(model())
torch.nn.functional.mse_loss(m(x[rank * share:(rank + 1) * share]), y[rank * share:(rank + 1) * share]).backward()
g = grads(m.module)
print(json.dumps({"rank": rank, "world": world, "node": socket.gethostname(), "torch": torch.__version__,
                  "master": os.environ.get("MASTER_ADDR"), "grads": g, "checksum": sum(g)}), flush=True)
dist.destroy_process_group()
'''

MPI_ALLREDUCE = r'''
import json, socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM)
print(json.dumps({"rank": comm.Get_rank(), "size": comm.Get_size(), "node": socket.gethostname(),
                  "sum": total, "library": MPI.Get_library_version().splitlines()[0]}), flush=True)
'''


def job_image(up) -> str:
    """What a job names: the locked registry name where pyxis has ClusterKit's importer (>= 0.24), else the
    store file (pyxis 0.20 has no importer; docs/images.md)."""
    return up.registry_name if up.generation.pyxis_version >= "0.24" else up.sqsh


def ranks(output: str) -> list[dict]:
    return sorted((json.loads(line) for line in output.splitlines() if line.startswith("{")),
                  key=lambda r: r["rank"])


def test_every_compute_node_booted_joined_and_fingerprinted(up) -> None:
    names = [n.slurm_node for n in up.fleet.computes]
    for boot in up.compute_boots:
        assert [phase for phase, _ in boot.steps] == ["init", "OnNodeStart", "config", "OnNodeConfigured",
                                                      "finalize"]
    manifest = json.loads((up.fleet.fsx / "containers" / "manifest.json").read_text())
    assert manifest["images"][IMAGE]["digest"] == up.digest == up.lock.images[0].digest, up.sync_log
    stored = sorted(str(p.relative_to(up.fleet.fsx)) for p in (up.fleet.fsx / "containers").rglob("*.sqsh"))
    assert f"containers/{IMAGE}/{up.digest.removeprefix('sha256:')}.sqsh" in stored, (stored, up.sync_log)
    prints = sorted(p.stem for p in (up.fleet.fsx / ".containers.clusterkit" / "nodes").glob("*.json"))
    assert set(names) <= set(prints)


def test_a_ddp_step_spans_three_nodes_and_equals_one_process(up) -> None:
    home = "/home/ckuser1"
    up.fleet.head.write(f"{home}/ddp_step.py", DDP_STEP)
    script = (f"#!/bin/bash\nset -euo pipefail\n"
              f"srun --container-image={job_image(up)} python3 {home}/ddp_step.py\n")
    state, out = up.fleet.head.sbatch(script, user="ckuser1", args=("-N", "3", "--ntasks-per-node=2"),
                                      timeout=240)
    assert state == "COMPLETED", out + up.fleet.logs()
    got = ranks(out)
    assert [r["rank"] for r in got] == list(range(6)) and {r["world"] for r in got} == {6}
    assert sorted({r["node"] for r in got}) == ["cknode1", "cknode2", "cknode3"]
    # Debian builds 1.13.1 from a tree that calls itself 1.13.0a0 (torch.__version__)
    assert {r["torch"][:4] for r in got} == {"1.13"} and {r["master"] for r in got} == {"cknode1"}
    assert len({json.dumps(r["grads"]) for r in got}) == 1, "every rank ends with the same allreduced gradient"
    single = up.fleet.head.run(
        ["srun", "-N1", "-n1", "-w", "cknode1", f"--container-image={job_image(up)}", "python3",
         f"{home}/ddp_step.py", "single"], user="ckuser1", timeout=180)
    expected = json.loads(single.stdout.strip().splitlines()[-1])["grads"]
    assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(got[0]["grads"], expected))
    assert up.registry.log == [], "no node asked the registry for anything after the head node's import"


@pytest.mark.parametrize("mpi", ["pmix"])
def test_an_mpi_allreduce_spans_three_nodes(up, mpi: str) -> None:
    home = "/home/ckuser1"
    up.fleet.head.write(f"{home}/allreduce.py", MPI_ALLREDUCE)
    script = (f"#!/bin/bash\nset -euo pipefail\n"
              f"srun --mpi={mpi} --container-image={job_image(up)} python3 {home}/allreduce.py\n")
    state, out = up.fleet.head.sbatch(script, user="ckuser1", args=("-N", "3", "--ntasks-per-node=2"),
                                      timeout=240)
    assert state == "COMPLETED", out + up.fleet.logs()
    got = ranks(out)
    assert [r["rank"] for r in got] == list(range(6)) and {r["size"] for r in got} == {6}, out
    assert {r["sum"] for r in got} == {21}
    assert sorted({r["node"] for r in got}) == ["cknode1", "cknode2", "cknode3"]
    assert all("Open MPI" in r["library"] for r in got)
