"""A login node on a real fleet: it boots through the pool's own scripts and users submit container jobs from it.

Real: the fleet of tests/multinode (head node, three compute nodes, real Slurm, munge, enroot and pyxis of both
generations, the shared store), one more node on the fabric that Slurm does not know (a login node is no Slurm node),
ParallelCluster's phase order for a login node (init: the shared dirs; OnNodeStart without /opt/slurm; config:
FSx, /opt/slurm, munge; OnNodeConfigured), the frozen login_node_stage0.sh (as fetch_and_run gets it from S3) running
the shared bundle's login_node.sh and the compute scripts with CK_NODE_ROLE=login, and `srun --container-image` typed
on that node as a cluster user: srun loads pyxis there from the NFS-shared plugstack line, the container starts on a
compute node. Not real: ParallelCluster's cookbook itself (lifecycle.py mirrors its phases).
"""
from __future__ import annotations

from cluster_flow import SHARED
from tier import stage_for

from clusterkit.artifacts.bundle import LOGIN_STAGE0, SCRIPTS
from jobs import job_image

STAGE0 = f"/tmp/{LOGIN_STAGE0}"


def test_a_login_node_boots_from_the_pool_scripts_and_submits_container_jobs(up) -> None:
    node = up.fleet.extra_node("login1", stage_for(up.generation.key))
    try:
        node.run(["test", "-f", f"{SHARED}/login_node.sh"])  # init: the head node's bundle is in the shared dir
        node.write(STAGE0, (SCRIPTS / LOGIN_STAGE0).read_text())
        node.hide("/opt/slurm")
        try:
            out = node.run(["bash", STAGE0, "start"]).stdout
        finally:
            node.unhide("/opt/slurm")
        if node.run(["mountpoint", "-q", "/fsx"], check=False).returncode != 0:
            node.mount_fsx()
        node.start_munge()
        out += node.run(["bash", STAGE0, "configured"], timeout=300).stdout
        assert "login node ready: srun and sbatch --container-image load pyxis here" in out, out
        assert "CK_NODE_ROLE='login'" in node.read("/etc/clusterkit/node.env")
        assert "selftest" not in out and "fingerprint" not in out, out
        proc = node.run(["srun", "-N", "1", f"--container-image={job_image(up)}", "python3", "-c",
                         "import socket, torch; print('ran', socket.gethostname(), torch.__version__)"],
                        user="ckuser1", env={"HOME": "/home/ckuser1"}, check=False, timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr + up.fleet.logs()
        (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("ran ")]
        host, version = line.split()[1:]
        assert host in {n.slurm_node for n in up.fleet.computes} and version.startswith("1.13"), line
    finally:
        node.stop()
    up.fleet.wait_idle()
