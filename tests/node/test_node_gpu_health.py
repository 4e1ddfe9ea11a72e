"""compute_node_configured.sh's run_gpu_health (the deep GPU check at boot, CK_GPU_HEALTH=boot) in a sandbox root.

Real: the script and the bundle's enroot.sh (bash), and the node package's `gpu-health` command (clusterkit_node/node/
gpu_health.py: it runs dcgmi, reads its table, drains through scontrol). Stand-ins (node_sandbox.py): `dcgmi` (DCGM's
`dcgmi diag -r 2` result table, a pass or a failing GPU Memory row with exit 226), `systemctl` (is-active answers
CK_TEST_UNIT_ACTIVE), `scontrol` (at /opt/slurm/bin, where PC installs it), `hostname`, and the rest of the node
zipapp (selftest, verify, fingerprint pass). The gpu-health command alone, against more dcgmi outcomes:
tests/node_package/test_gpu_health.py; against a real slurmctld: tests/real_runtime/test_gpu_check_job_start.py.
"""
from __future__ import annotations

import os

import pytest
from node_sandbox import COMPUTE_ARGS, Sandbox

GPU_HEALTH_ARGS = (*COMPUTE_ARGS, "CK_GPU_HEALTH=boot", "CK_GPU_HEALTH_BUDGET=30")
NODE = "gpu-dy-p5-1"  # hostname -s of the stand-in's gpu-dy-p5-1.demo.pcluster
DCGM_UNIT = "nvidia-dcgm"


@pytest.fixture
def compute(sandbox: Sandbox) -> Sandbox:
    """A GPU compute node after the head node's bootstrap; Slurm's scontrol in /opt/slurm/bin, as PC installs it."""
    sandbox.install_bundle_as_shared()
    sandbox.write("opt/slurm/etc/plugstack.conf", "include /opt/slurm/etc/plugstack.conf.d/*\n")
    sandbox.write("opt/slurm/etc/plugstack.conf.d/pyxis.conf",
                  "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis container_scope=job\n")
    (sandbox.root / "fsx/containers").mkdir(parents=True)
    (sandbox.root / "opt/slurm/bin").mkdir(parents=True)
    os.symlink(sandbox.bin / "scontrol", sandbox.root / "opt/slurm/bin/scontrol")
    return sandbox


def _boot(compute: Sandbox, *, dcgmi: str = "pass", dcgm_active: bool = False, args=GPU_HEALTH_ARGS):
    return compute.run("compute_node_configured.sh", *args,
                       env={"CK_TEST_DCGMI": dcgmi, "CK_TEST_UNIT_ACTIVE": "1" if dcgm_active else "0"})


def _dcgm_unit(r) -> list[list[str]]:
    """systemctl calls about DCGM's host engine (the first boot also runs daemon-reload for slurmd's drop-in)."""
    return [c for c in r.calls("systemctl") if DCGM_UNIT in c]


def _log(compute: Sandbox) -> str:
    return compute.read("var/log/clusterkit/bootstrap.log")


def test_a_passing_check_starts_dcgm_for_itself_and_stops_it_again(compute: Sandbox) -> None:
    r = _boot(compute, dcgm_active=False)
    assert r.returncode == 0, r.stderr
    assert r.calls("dcgmi") == [["diag", "-r", "2"]]
    assert r.calls("clusterkit_node.pyz:real")[-1] == [
        "gpu-health", "--node", NODE, "--budget", "30", "--scontrol", str(compute.root / "opt/slurm/bin/scontrol")]
    assert _dcgm_unit(r) == [["is-active", "--quiet", DCGM_UNIT], ["start", DCGM_UNIT], ["stop", DCGM_UNIT]]
    assert r.calls("scontrol") == []
    for text in (r.stdout, _log(compute)):
        assert f"compute_node_configured.sh INFO gpu-health: dcgmi diag -r 2 on {NODE}, budget 30 s" in text
        assert "compute_node_configured.sh INFO gpu-health: dcgmi diag -r 2 passed in " in text
        assert "done: node ready for container jobs" in text
    assert " ERROR " not in r.stderr and " WARN " not in r.stdout


def test_a_passing_check_leaves_a_running_dcgm_alone(compute: Sandbox) -> None:
    r = _boot(compute, dcgm_active=True)
    assert r.returncode == 0, r.stderr
    assert r.calls("dcgmi") == [["diag", "-r", "2"]]
    assert _dcgm_unit(r) == [["is-active", "--quiet", DCGM_UNIT]]
    assert "INFO gpu-health: dcgmi diag -r 2 passed in " in _log(compute)


def test_a_failing_check_drains_the_node_naming_the_test_and_fails_the_boot(compute: Sandbox) -> None:
    r = _boot(compute, dcgmi="fail")
    assert r.returncode == 1
    why = "clusterkit gpu-health: dcgmi diag -r 2 exited 226: GPU Memory | Fail - GPU: 3"
    assert r.calls("scontrol") == [["update", f"NodeName={NODE}", "State=DRAIN", f"Reason={why}"]]
    (error,) = [line for line in r.stderr.splitlines() if " ERROR " in line]
    assert f"compute_node_configured.sh ERROR {why} (after " in error
    assert f"drained {NODE}: the boot fails and ParallelCluster replaces the instance" in error
    assert error in _log(compute).splitlines()
    assert "node ready for container jobs" not in r.stdout + _log(compute)
    # the node is replaced: DCGM, started for the check, is stopped only after a pass (run_gpu_health's comment)
    assert _dcgm_unit(r) == [["is-active", "--quiet", DCGM_UNIT], ["start", DCGM_UNIT]]


def test_without_ck_gpu_health_no_gpu_check_runs(compute: Sandbox) -> None:
    r = _boot(compute, args=COMPUTE_ARGS)
    assert r.returncode == 0, r.stderr
    assert "dcgmi" not in r.command_names and "hostname" not in r.command_names
    assert r.calls("systemctl") == [["daemon-reload"]]
    assert r.calls("scontrol") == []
    assert "gpu-health" not in r.stdout + _log(compute)
    assert not [c for c in r.calls("clusterkit_node.pyz:real") if c[0] == "gpu-health"]
