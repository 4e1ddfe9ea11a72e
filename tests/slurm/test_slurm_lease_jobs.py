"""gc's question to Slurm (clusterkit_node/store/lease_jobs.py) answered by the real scontrol: Debian's Slurm 22.05
with its real slurmctld and slurmd on 127.0.0.1 (tests/slurm/slurm_cluster.py). What is checked: the node name,
a running job as alive, the same job cancelled (still listed for MinJobAge, in a final state) as ended, and no
answer at all (slurmctld unreachable) as "cannot judge", never as "ended"."""
from __future__ import annotations

import os

import pytest

from clusterkit_node.store.lease_jobs import slurm_view


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    return slurm_cluster


def test_the_real_scontrol_says_which_jobs_ended(slurm_env) -> None:
    cluster = slurm_env
    job = cluster.run("sbatch", "--parsable", "--output=/dev/null", "--wrap", "sleep 60").stdout.strip().split(";")[0]
    try:
        cluster._wait(lambda: cluster.job_field(job, "%T") == "RUNNING", 20, f"job {job} running")
        view = slurm_view("scontrol")
        assert view is not None
        assert "cknode1" in view.nodes
        assert job in view.alive
        assert not view.ended("cknode1.cluster.internal", job)
        assert view.ended("cknode1", str(int(job) + 1000))  # a job Slurm never had
        assert not view.ended("another-cluster-node", "1")  # not this cluster's node: not ours to judge
    finally:
        cluster.run("scancel", job, check=False)
    cluster._wait(lambda: cluster.job_field(job, "%T") in ("", "CANCELLED", "COMPLETED"), 20, f"job {job} ended")
    view = slurm_view("scontrol")
    assert view is not None and job not in view.alive and view.ended("cknode1", job)


def test_no_slurmctld_is_no_answer(slurm_env, monkeypatch, tmp_path) -> None:
    conf = tmp_path / "slurm.conf"
    text = open(slurm_env.conf, encoding="utf-8").read()
    conf.write_text(text.replace(f"SlurmctldPort={slurm_env.ctld_port}", "SlurmctldPort=1"), encoding="utf-8")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert "SlurmctldPort=1" in conf.read_text() and os.environ["SLURM_CONF"] == str(conf)
    assert slurm_view("scontrol") is None
