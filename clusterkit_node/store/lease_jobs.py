"""Which store leases belong to jobs that have ended, as this cluster's Slurm says.

Why: the lease directory ``<staging>/inuse/`` must be writable by every job user (the pyxis importer writes a step's
lease as the job's user), so a user can leave a lease naming any store file and never release it; gc would then keep
that file for ``--lease-days`` (14 by default) after the job. A lease is a job's: where its host is a node of this
cluster and Slurm no longer knows its job as alive, it holds nothing, whatever its age. A lease from another
cluster's node is that cluster's gc's to judge (its own Slurm); here it holds until ``--lease-days``.

What Slurm is asked (``scontrol -o show node`` and ``scontrol -o show job``: one ``Key=Value`` line per node or
job, the format of Slurm 22.05 through 24.x): node names (ParallelCluster names each compute node's host after its
Slurm node), job ids and their states. A job in a final state (``COMPLETED``, ``CANCELLED``, ...; Slurm keeps it for
``MinJobAge``) or absent has ended. When scontrol cannot answer, nothing is judged (``None``): leases keep their age
rule, never less.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import FrozenSet, Optional

# Slurm's final job states (slurm.h job_state_reason ... JOB_COMPLETE and later; squeue(1) "JOB STATE CODES").
FINAL_STATES = frozenset(("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
                          "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"))
NODE_NAME = re.compile(r"(?:^|\s)NodeName=(\S+)")
JOB_ID = re.compile(r"(?:^|\s)JobId=([0-9]+)")
JOB_STATE = re.compile(r"(?:^|\s)JobState=([A-Z_]+)")
TIMEOUT_S = 20


@dataclass(frozen=True)
class SlurmView:
    nodes: FrozenSet[str]  # this cluster's node names
    alive: FrozenSet[str]  # ids of jobs Slurm knows in a non-final state

    def ended(self, host: str, job: str) -> bool:
        """Whether a lease from ``host`` (short or full host name) for ``job`` belongs to an ended job here."""
        return host.split(".")[0] in self.nodes and job not in self.alive


def _scontrol(scontrol: str, *words: str) -> Optional[str]:
    try:
        done = subprocess.run([scontrol, "-o", "show", *words], capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def slurm_view(scontrol: str) -> Optional[SlurmView]:
    """This cluster's nodes and live jobs, or None when Slurm cannot be asked (no scontrol, no slurmctld)."""
    nodes, jobs = _scontrol(scontrol, "node"), _scontrol(scontrol, "job")
    if nodes is None or jobs is None:
        return None
    alive = set()
    for line in jobs.splitlines():
        job, state = JOB_ID.search(line), JOB_STATE.search(line)
        if job and state and state.group(1) not in FINAL_STATES:
            alive.add(job.group(1))
    return SlurmView(nodes=frozenset(m.group(1) for m in NODE_NAME.finditer(nodes)), alive=frozenset(alive))
