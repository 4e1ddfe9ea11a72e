"""What every health tier does with its results: find the node's plan, drain with a reason, record.

Shared by the quick and boot checks (health.py) and the deep check (health_deep.py), so a failure reads the same in
``sinfo -R`` and in the history whichever tier found it. The reason says which check failed, what it saw and where the
history is; Slurm takes it as one argv word (slurm_drain.py).
"""
from __future__ import annotations

import os
import socket
from typing import Dict, List, Optional, Tuple

from clusterkit_node.contract.bundle_files import data_path
from clusterkit_node.contract.console import UsageError, warn
from clusterkit_node.contract.health_plan import PLAN_NAME, HealthPlan, PlanError, QueueHealth, load
from clusterkit_node.fleet import health_record as record
from clusterkit_node.fleet.health_checks import Result
from clusterkit_node.node.facts import NODE_PATH, find_tool, node_identity
from clusterkit_node.node.pyxis_importer import NODE_ENV, node_settings
from clusterkit_node.node.slurm_drain import REASON_MAX, drain

SLURM_PATHS = ("/opt/slurm/bin",)  # ParallelCluster's Slurm, not always on root's PATH


def node_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = ":".join([env.get("PATH", ""), NODE_PATH, *SLURM_PATHS]).strip(":")
    return env


def slurm_tool(name: str, env: Dict[str, str]) -> str:
    return find_tool(name, env, *(f"{d}/{name}" for d in SLURM_PATHS)) or name


def this_node() -> str:
    return socket.gethostname().split(".")[0]


def node_store(given: Optional[str] = None) -> str:
    """The store the command was given, else CK_STORE of the node's settings (OSError, Refused when unreadable)."""
    return given or node_settings(NODE_ENV)["CK_STORE"]


def load_plan(path: Optional[str]) -> Tuple[Optional[HealthPlan], str]:
    path = path or data_path(PLAN_NAME)
    try:
        return load(path), ""
    except PlanError as exc:
        return None, str(exc)


def reason_for(tier: str, node: str, failed: List[Result]) -> str:
    """What ``sinfo -R`` shows: which check failed, what it saw (shortened first), where the rest is."""
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    tail = f"{more}; history: clusterkit_node.pyz health show {node}"
    head = " ".join(f"clusterkit health {tier}: {failed[0].check}: {failed[0].detail}".split())
    room = REASON_MAX - len(tail)
    return (head if len(head) <= room else head[:room - 3] + "...") + tail


def settle(plan: HealthPlan, store: str, tier: str, source: str, node: str, results: List[Result], seconds: float,
           boot: str, env: Dict[str, str], do_drain: bool) -> bool:
    """Drain when a check failed, record the entry (a record the store refuses is a warning: the drain stands)."""
    failed = [r for r in results if not r.ok]
    drained = problem = ""
    if failed and do_drain:
        why = reason_for(tier, node, failed)
        problem = drain(slurm_tool("scontrol", env), node, why) or ""
        drained = "" if problem else why
    entry = record.Entry.of(node, tier, source, results, seconds, boot, drained, problem)
    if any(r.check == "store" and not r.ok for r in results):
        # a hung Lustre mount blocks every write in the kernel: the prolog must not hang on the record
        warn("health: the check is not recorded on the store: the store did not answer")
    else:
        try:
            record.append(store, plan.cluster, entry)
        except (OSError, UsageError) as exc:
            warn(f"health: could not record the check on the store: {getattr(exc, 'strerror', None) or exc}")
    for r in failed:
        warn(f"health: {node}: {tier} check {r.check} failed: {r.detail}")
    if failed:
        if drained:
            warn(f"health: drained {node}: {drained}")
        elif do_drain:
            warn(f"health: could not drain {node}: {problem}")
    return not failed


def queue_of(plan: HealthPlan, node: str) -> Tuple[Optional[QueueHealth], str]:
    queue, resource = node_identity(node)
    if queue is None:
        return None, f"{node} is not a ParallelCluster compute node name (<queue>-st|dy-<resource>-<n>)"
    qh = plan.queue(queue)
    if qh is None:
        return None, f"queue {queue} is not in the health plan"
    return qh, resource or ""
