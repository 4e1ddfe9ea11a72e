"""The deep GPU check at node boot: DCGM's level-2 diagnostic within a time budget, and a drain that says why.

Why at boot and not in the job's prolog: ParallelCluster's ``HealthChecks.Gpu.Enabled`` runs the same diagnostic
(cookbook ``files/default/config_slurm/scripts/health_checks/gpu_health_check.sh``: ``dcgmi diag -r 2``) from the
prolog (``prolog.d/90_pcluster_health_check_manager``, its own timeout 600 s) at EVERY job start on every
allocated node. On p5, level 2 takes 2.5 to 10.5 minutes (awsome-distributed-ai, gpu-cluster-healthcheck README),
PC's slurm.conf gives a batch job 180 s to start (``BatchStartTimeout=180``), and aws-parallelcluster#6777 (open)
is that story on p4d/p5: ``Prolog hung on node``. At OnNodeConfigured no job is waiting on the check (slurmd starts
after it), so the queues whose check outlasts the start budget run it here, once per node, instead
(clusterkit/effective/gpu_check_place.py decides which; docs/troubleshooting.md "GPU health checks and the job start").

What it does: runs ``dcgmi diag -r LEVEL`` and kills it (its whole process group) when the budget is spent. A pass
or a check that cannot run (no dcgmi, DCGM's host engine unreachable: ParallelCluster's own script skips then
too) exits 0 with an INFO or WARN line. A failure or a timeout drains the node in Slurm with a reason that starts
``clusterkit gpu-health:`` (``scontrol update NodeName=... State=DRAIN Reason=...``: ``sinfo -R`` shows it) and
exits 1, so the boot fails and ParallelCluster replaces the instance; the drain keeps any job off the node in the
meantime (a job that made the node power up stays allocated to it, not started, until PC replaces it).

Output: "LEVEL message" lines, the protocol ``ck_node_apply`` logs (file_set.py). Stdlib only, Python 3.9.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, List

from clusterkit_node.node.slurm_drain import clip, drain

DCGMI_LEVEL = 2  # gpu_health_check.sh: DCGMI_LEVEL=2 ("Medium (Extended System Validation)")
REASON_PREFIX = "clusterkit gpu-health"
# dcgmi's words when it cannot reach nv-hostengine (DCGM's "Unable to establish a connection to the specified host");
# ParallelCluster's script skips the check when it cannot start nvidia-dcgm, and so does this one.
NO_HOST_ENGINE = re.compile(r"unable to (establish a )?connect|host engine", re.IGNORECASE)
# dcgmi diag prints a table: a failing test row reads "| Memory  | Fail - GPU 3 ...|" (DCGM's diag output).
FAIL_LINE = re.compile(r"\bfail", re.IGNORECASE)
NODE_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


@dataclass(frozen=True)
class Outcome:
    status: str  # "pass", "fail" or "skipped"
    detail: str  # one line
    seconds: float


def _one_line(text: str) -> str:
    return " ".join(text.split())


def diagnose(dcgmi: str, level: int, budget_s: float, clock: Callable[[], float] = time.monotonic) -> Outcome:
    """``dcgmi diag -r LEVEL``, killed with its process group once ``budget_s`` is spent."""
    started = clock()
    command = f"dcgmi diag -r {level}"
    try:
        proc = subprocess.Popen([dcgmi, "diag", "-r", str(level)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
    except OSError as exc:
        return Outcome("skipped", f"cannot run {dcgmi}: {exc.strerror or exc}", 0.0)
    try:
        out, _ = proc.communicate(timeout=budget_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return Outcome("fail", f"{command} did not finish within its {budget_s:g} s budget", clock() - started)
    seconds = clock() - started
    if proc.returncode == 0:
        return Outcome("pass", f"{command} passed", seconds)
    lines: List[str] = [_one_line(line) for line in out.splitlines() if line.strip()]
    if any(NO_HOST_ENGINE.search(line) for line in lines):
        return Outcome("skipped", f"{command} could not reach DCGM's host engine (is nvidia-dcgm running?): "
                       f"{next(line for line in lines if NO_HOST_ENGINE.search(line))}", seconds)
    failed = [line.strip("| ") for line in lines if FAIL_LINE.search(line)]
    why = "; ".join(failed[:2]) if failed else (lines[-1] if lines else "no output")
    return Outcome("fail", f"{command} exited {proc.returncode}: {why}", seconds)


def reason(outcome: Outcome) -> str:
    return clip(f"{REASON_PREFIX}: {outcome.detail}")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("gpu-health", help="the deep GPU check at boot: dcgmi diag within a budget; a failure drains "
                                          "the node with a reason and exits 1")
    p.add_argument("--node", required=True, help="this node's Slurm NodeName (what a failure drains)")
    p.add_argument("--budget", type=int, required=True, help="seconds dcgmi diag may take before it counts as failed")
    p.add_argument("--level", type=int, default=DCGMI_LEVEL, choices=(1, 2, 3, 4))
    p.add_argument("--scontrol", default="scontrol")
    p.add_argument("--dcgmi", help="dcgmi to run (default: the one on the node's PATH)")


def cmd_gpu_health(a: argparse.Namespace) -> int:
    dcgmi = a.dcgmi or shutil.which("dcgmi", path=NODE_PATH)
    if dcgmi is None:
        print("WARN gpu-health: no dcgmi on this node: the deep GPU check is skipped (ParallelCluster's AMIs ship "
              "DCGM; its own gpu_health_check.sh skips the same way)", flush=True)
        return 0
    print(f"INFO gpu-health: dcgmi diag -r {a.level} on {a.node}, budget {a.budget} s", flush=True)
    outcome = diagnose(dcgmi, a.level, a.budget)
    if outcome.status == "pass":
        print(f"INFO gpu-health: {outcome.detail} in {outcome.seconds:.0f} s", flush=True)
        return 0
    if outcome.status == "skipped":
        print(f"WARN gpu-health: skipped: {outcome.detail}", flush=True)
        return 0
    why = reason(outcome)
    problem = drain(a.scontrol, a.node, why)
    if problem is None:
        print(f"ERROR {why} (after {outcome.seconds:.0f} s); drained {a.node}: the boot fails and ParallelCluster "
              "replaces the instance", flush=True)
    else:
        print(f"ERROR {why} (after {outcome.seconds:.0f} s); could not drain {a.node}: {problem}", flush=True)
    return 1
