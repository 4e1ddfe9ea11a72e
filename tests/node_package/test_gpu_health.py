"""The deep GPU check at boot (clusterkit_node/node/gpu_health.py) against stand-in dcgmi and scontrol scripts: a pass,
a failing diagnostic and a hung one drain the node with a reason and exit 1, a check that cannot run is skipped as
ParallelCluster's own gpu_health_check.sh skips it. The real slurmctld side:
tests/real_runtime/test_gpu_check_job_start.py."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit_node.node import gpu_health, slurm_drain

REPO = Path(__file__).resolve().parents[2]


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return str(path)


def _run(tmp_path: Path, dcgmi_body: str, budget: int = 5) -> tuple[subprocess.CompletedProcess, str]:
    dcgmi = _script(tmp_path / "dcgmi", dcgmi_body)
    calls = tmp_path / "scontrol.calls"
    scontrol = _script(tmp_path / "scontrol", f'printf "%s\\n" "$@" >> {calls}\n')
    proc = subprocess.run([sys.executable, "-m", "clusterkit_node", "gpu-health", "--node", "p5-dy-gpu-1",
                           "--budget", str(budget), "--dcgmi", dcgmi, "--scontrol", scontrol],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    return proc, calls.read_text() if calls.exists() else ""


def test_a_passing_diagnostic_drains_nothing(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path, 'echo "| Memory | Pass |"\n')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "INFO gpu-health: dcgmi diag -r 2 passed" in proc.stdout
    assert calls == ""


def test_a_failing_diagnostic_drains_the_node_with_the_failing_test(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path, 'echo "| Deployment | Pass |"; echo "| Memory | Fail - GPU 3: ECC DBE |"; exit 226\n')
    assert proc.returncode == 1
    assert calls.splitlines() == ["update", "NodeName=p5-dy-gpu-1", "State=DRAIN",
                                  "Reason=clusterkit gpu-health: dcgmi diag -r 2 exited 226: Memory | Fail - GPU 3: "
                                  "ECC DBE"]
    assert proc.stdout.splitlines()[-1].startswith("ERROR clusterkit gpu-health: dcgmi diag -r 2 exited 226")
    assert "drained p5-dy-gpu-1" in proc.stdout


def test_a_diagnostic_past_its_budget_is_killed_and_drains(tmp_path: Path) -> None:
    started = time.monotonic()
    proc, calls = _run(tmp_path, "sleep 30 & wait\n", budget=1)
    assert time.monotonic() - started < 10, "the budget bounds the check, child processes included"
    assert proc.returncode == 1
    assert "Reason=clusterkit gpu-health: dcgmi diag -r 2 did not finish within its 1 s budget" in calls


@pytest.mark.parametrize("body", ['echo "Error: unable to establish a connection to the specified host: localhost"; '
                                  "exit 255\n"])
def test_a_check_that_cannot_reach_dcgm_is_skipped_not_drained(tmp_path: Path, body: str) -> None:
    proc, calls = _run(tmp_path, body)
    assert proc.returncode == 0
    assert "WARN gpu-health: skipped" in proc.stdout and calls == ""


def test_a_drain_slurm_refuses_is_said() -> None:
    problem = gpu_health.drain("/bin/false", "n1", "clusterkit gpu-health: x")
    assert problem is not None and "exited 1" in problem


def test_a_long_reason_is_cut() -> None:
    why = gpu_health.reason(gpu_health.Outcome("fail", "x" * 400, 1.0))
    assert len(why) == slurm_drain.REASON_MAX and why.startswith("clusterkit gpu-health: ")
