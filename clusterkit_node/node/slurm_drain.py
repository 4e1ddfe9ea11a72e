"""Draining a node in Slurm with a reason: what every ClusterKit check that finds a broken node does.

Why a drain and a reason: ParallelCluster's clustermgtd replaces a static node Slurm shows drained (DRAIN and no
job) and powers down a dynamic one; the reason is what ``sinfo -R`` shows the operator, so it says which check
failed, what it saw and where the history is. Slurm keeps longer reasons; REASON_MAX keeps a ``sinfo -R`` column
and one log line readable.
"""
from __future__ import annotations

import subprocess
from typing import Optional

REASON_MAX = 200


def _one_line(text: str) -> str:
    return " ".join(text.split())


def clip(text: str) -> str:
    """One line of at most REASON_MAX characters (Slurm stores the reason verbatim)."""
    text = _one_line(text)
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3] + "..."


def drain(scontrol: str, node: str, why: str) -> Optional[str]:
    """None when Slurm took the drain, else why not (one line). ``why`` goes to Slurm as one argv word."""
    try:
        proc = subprocess.run([scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={clip(why)}"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{scontrol} update: {exc}"
    if proc.returncode != 0:
        return f"{scontrol} update exited {proc.returncode}: {_one_line(proc.stderr or proc.stdout)}"
    return None
