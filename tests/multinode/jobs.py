"""The jobs the multi-node tier runs, as files a user would submit, and how their output is read."""
from __future__ import annotations

import json

from clusterkit_node.image.versions import version_key

# One DDP training step of a tiny model (23 parameters: each rank's line stays well under Slurm's 4 KiB output
# chunks). Every rank takes its shard of one fixed batch; DDP averages the gradients (gloo allreduce), so every
# rank ends with the gradient of the whole batch's mean loss, which is what one process computes on the whole
# batch: rank 0 then runs exactly that, without DDP, and prints it as the "single" line.
DDP_STEP = r'''
import json, os, socket
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
dist.init_process_group("gloo")  # env:// from the hook: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
share = BATCH // world
m = DDP(model())
torch.nn.functional.mse_loss(m(x[rank * share:(rank + 1) * share]), y[rank * share:(rank + 1) * share]).backward()
g = grads(m.module)
print(json.dumps({"rank": rank, "world": world, "node": socket.gethostname(), "torch": torch.__version__,
                  "master": os.environ.get("MASTER_ADDR"), "grads": g, "checksum": sum(g)}), flush=True)
dist.destroy_process_group()
if rank == 0:  # the same step in one process on the whole batch, no DDP: the reference
    single = model()
    torch.nn.functional.mse_loss(single(x), y).backward()
    print("single " + json.dumps(grads(single)), flush=True)
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
    return up.registry_name if version_key(up.generation.pyxis_version) >= version_key("0.24") else up.sqsh


def ranks(output: str) -> list[dict]:
    return sorted((json.loads(line) for line in output.splitlines() if line.startswith("{")),
                  key=lambda r: r["rank"])


def image_report(up) -> str:
    """A job step printing, per node, the store file its containers start from: what ClusterKit's importer
    answers pyxis for the job's image name (pyxis >= 0.24, run as pyxis runs it: as the job's user), or where
    the store's stable name points (pyxis 0.20 starts the stable name). The file is named by its digest."""
    if job_image(up) == up.sqsh:
        resolve = f"readlink -f {up.sqsh}"
    else:
        uri = "docker://" + up.registry_name  # its '#' is mid-word: no shell comment
        resolve = f"python3 /opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz get {uri}"
    return f"srun --ntasks-per-node=1 bash -c 'echo \"image $(hostname) $({resolve})\"'\n"


def images_started(out: str) -> dict[str, str]:
    """node -> store file, from image_report's lines."""
    return {host: path for _, host, path in (line.split() for line in out.splitlines() if line.startswith("image "))}


def run_3x2(up, name: str, program: str, srun_options: str = "") -> tuple[list[dict], str]:
    """``program`` as ~ckuser1/<name> (the shared home), run by ``sbatch -N 3 --ntasks-per-node=2`` of one
    ``srun [srun_options] --container-image=<the job image> python3 <it>``; (the ranks' JSON lines by rank, the
    job's output)."""
    home = "/home/ckuser1"
    up.fleet.head.write(f"{home}/{name}", program)
    script = (f"#!/bin/bash\nset -euo pipefail\n{image_report(up)}"
              f"srun {srun_options} --container-image={job_image(up)} python3 {home}/{name}\n")
    state, out = up.fleet.head.sbatch(script, user="ckuser1", args=("-N", "3", "--ntasks-per-node=2"),
                                      timeout=240)
    assert state == "COMPLETED", out + up.fleet.logs()
    got = ranks(out)
    assert [r["rank"] for r in got] == list(range(6)), out
    return got, out
