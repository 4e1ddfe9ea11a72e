"""The multi-node tests that run on the newest enroot + pyxis generation only: an MPI allreduce over PMIx, a job
that steps on one of its nodes by a user new to them, and the faults a fleet has (a node whose self-test fails, nodes
verifying while a new digest is published, a node lost mid-job).

Why not both generations: on the older one every container start extracts the 1.5 GB image on every node
(pyxis 0.20 has no in-place start), which would put the tier past its time in ``make test``;
test_multinode_jobs.py runs the older generation through the boot, the DDP step and drift.
"""
from __future__ import annotations

import json
import threading
import time

import pytest
import runtime_build
from cluster_flow import SHARED, SYNC_UNIT, rootfs, run_launcher, wait_unit
from fleet import QUEUE, compute_names
from fleet_flow import IMAGE, REPOSITORY, STORE, TAG, fleet_up, lock_and_upload
from images_fakes import add_rootfs_image
from lifecycle import Lifecycle
from tier import stage_for

from jobs import MPI_ALLREDUCE, run_3x2

NEWEST = max(runtime_build.GENERATIONS)


@pytest.fixture(scope="module")
def up(training_layer, shared_fsx, tmp_path_factory):
    yield from fleet_up(NEWEST, training_layer, shared_fsx, tmp_path_factory)


@pytest.mark.parametrize("mpi", ["pmix"])
def test_an_mpi_allreduce_spans_three_nodes(up, mpi: str) -> None:
    got, _ = run_3x2(up, "allreduce.py", MPI_ALLREDUCE, f"--mpi={mpi}")
    assert {r["size"] for r in got} == {6}
    assert {r["sum"] for r in got} == {21}
    assert sorted({r["node"] for r in got}) == compute_names(3)
    assert all("Open MPI" in r["library"] for r in got)


def test_a_user_new_to_the_nodes_whose_job_steps_only_on_one_leaves_none_drained(up) -> None:
    """pyxis' job epilog runs `enroot list` as the job's user on every allocated node, and enroot makes the user's
    dirs at every start, which root's 0755 parents refuse: so the prolog must have run on every node of the
    allocation, stepped on or not (PrologFlags=Alloc, rendered as CustomSlurmSettings). ckuser2 has never run on
    these nodes; its job's one step runs on the first node only."""
    head = up.fleet.head
    state, out = head.sbatch("#!/bin/bash\nhostname\n", user="ckuser2", args=("-N", "3"), timeout=120)
    assert state == "COMPLETED", out
    up.fleet.wait_idle(timeout=30)
    for node in up.fleet.computes:
        data = node.run(["stat", "-c", "%U %a", "/scratch/enroot/data/user-27002"], check=False)
        assert data.stdout.strip() == "ckuser2 700", (node.slurm_node, data)


# --- faults a fleet has ---------------------------------------------------------------------------------------

def test_a_node_whose_self_test_fails_does_not_join(up) -> None:
    """/dev/fuse closed to users on one node (a custom AMI's udev rule, say): where the plugstack line asks for
    squashfuse its boot fails in one line naming the fix; the running fleet is untouched."""
    name = compute_names(1, first=5)[0]
    node = up.fleet.extra_node(name, stage_for(up.generation.key), fuse_mode="0600")
    try:
        boot = Lifecycle(node, up.compute_args)
        if "use_squashfuse=1" in up.fleet.head.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf"):
            with pytest.raises(AssertionError) as failed:
                boot.compute_boot(first=True, until="OnNodeConfigured")
            assert "/dev/fuse" in str(failed.value), failed.value
        else:  # extraction needs no /dev/fuse: the node would join
            boot.compute_boot(first=True, until="OnNodeConfigured")
    finally:
        node.stop()
        for left in (up.fleet.fsx / ".containers.clusterkit" / "nodes").glob(f"*/{name}.json"):
            left.unlink()
    up.fleet.wait_idle()


def test_nodes_verifying_while_the_head_node_publishes_a_new_digest_see_no_broken_store(up) -> None:
    """The lock moves ``train`` to a new digest (a small image, so the import is quick) and the head node's
    OnNodeUpdated runs the sync, while two compute nodes run their boot-time ``verify`` over and over: every
    run passes (a missing image is a warning, never a failure or a half-written file), and afterwards the
    store serves the new digest."""
    head, verifiers = up.fleet.head, up.fleet.computes[:2]
    add_rootfs_image(up.registry, REPOSITORY, "small", [rootfs()], env=("PYTORCH_VERSION=1.13.1",))
    up.spec_path.write_text(up.spec_path.read_text().replace(f":{TAG}\n", ":small\n"))
    lock, _ = lock_and_upload(up.fleet, up.registry, up.loopback_url, up.spec_path)
    assert lock.images[0].digest != up.digest
    results: list[tuple[str, int, str]] = []
    done = threading.Event()

    def verify_loop(node) -> None:
        while not done.is_set():
            proc = node.run(["python3", f"{SHARED}/clusterkit_node.pyz", "verify", "--store", STORE, "--lock",
                             f"{SHARED}/images.lock"], check=False)
            results.append((node.slurm_node, proc.returncode, proc.stdout + proc.stderr))

    threads = [threading.Thread(target=verify_loop, args=(n,)) for n in verifiers]
    for thread in threads:
        thread.start()
    try:
        run_launcher(head)  # OnNodeUpdated: the new bundle, then the image-sync unit
        rc = wait_unit(head, SYNC_UNIT, timeout=300)
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)
    assert rc == "0", head.read(f"/run/ck-test/units/{SYNC_UNIT}.log")
    assert len(results) >= 4 and {name for name, _, _ in results} == {n.slurm_node for n in verifiers}
    bad = [r for r in results if r[1] != 0 or "Traceback" in r[2]]
    assert bad == [], bad[:2]
    manifest = json.loads((up.fleet.fsx / "containers" / "manifest.json").read_text())
    assert manifest["images"][IMAGE]["digest"] == lock.images[0].digest


def test_a_node_lost_mid_job_fails_the_job_leaves_the_store_and_the_rest_run(up) -> None:
    """Last in the module: it takes a node away. A three-node job runs; the third node's machine goes (every
    process in it killed, slurmd included). Slurm marks the node down and requeues the job; the store on the
    file system is what it was (verify on the head node); the next job runs on the two nodes left. Jobs name
    the store's stable file: the image the lock names now (an earlier test moved it to a new digest)."""
    head, lost = up.fleet.head, up.fleet.computes[-1]
    manifest_before = (up.fleet.fsx / "containers" / "manifest.json").read_bytes()
    job = head.run(["sbatch", "--parsable", "-N", "3", "--ntasks-per-node=1", "--chdir=/home/ckuser1",
                    "--output=/home/ckuser1/lost.out", "--wrap",
                    f"srun --container-image={up.sqsh} sleep 120"], user="ckuser1").stdout.strip()
    head.wait(lambda: head.job_state(job) == "RUNNING", f"job {job} running", 120)
    time.sleep(3)  # the step's containers start on every node
    lost.stop()
    # Slurm's answer (slurm.conf(5) JobRequeue=1, its default; whether the slurm.conf ParallelCluster writes
    # changes it was not checked): the node is set DOWN and the batch job requeued, to wait for three nodes.
    head.wait(lambda: "Restarts=1" in head.run(["scontrol", "show", "job", job]).stdout, f"job {job} requeued", 90)
    head.wait(lambda: head.job_state(job) == "PENDING", f"job {job} pending again (after COMPLETING)", 60)
    # not responding first (Slurm's idle health check RPC or its ping finds it gone: "*"), DOWN at SlurmdTimeout
    head.wait(lambda: "DOWN" in head.run(["sinfo", "-h", "-n", lost.slurm_node, "-o", "%T"]).stdout.upper(),
              f"{lost.slurm_node} down", 60)
    head.run(["scancel", job])
    assert (up.fleet.fsx / "containers" / "manifest.json").read_bytes() == manifest_before
    verify = head.run(["python3", f"{SHARED}/clusterkit_node.pyz", "verify", "--store", STORE, "--lock",
                       f"{SHARED}/images.lock"], check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    left = [n.slurm_node for n in up.fleet.computes[:-1]]
    state, out = head.sbatch(f"#!/bin/bash\nsrun --container-image={up.sqsh} hostname\n", user="ckuser1",
                             args=("-N", "2", "-w", ",".join(left)), timeout=180)
    assert state == "COMPLETED", out + up.fleet.logs()
    assert sorted(line for line in out.splitlines() if line.startswith(f"{QUEUE}-st-")) == left
