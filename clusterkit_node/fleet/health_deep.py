"""The deep check: DCGM's diagnostic on each node and NCCL's all_reduce between pairs of nodes, as a Slurm job on idle
nodes, and the judgement that drains only the node the pairs point at.

Why a Slurm job: the scheduler then guarantees what a cron job on the nodes could not: the check holds its nodes
exclusively, no user job shares them, and a job that arrives later waits at most the check's time limit
(``--time``, the plan's ``budget_s``). ``health schedule`` (the head node's timer) submits one job per queue over
that queue's idle nodes whose last deep check is older than ``every_hours``, with ``--deadline`` so a job that
cannot start within a minute is removed instead of queueing ahead of users' work later.

Why pairs: an all_reduce over many nodes says "something is slow" and not where. Each node runs in two pairs of a
ring (a-b, b-c, c-a); a node whose every pair is below the threshold while other pairs pass is the slow one.
Two nodes alone cannot be told apart: both are recorded as suspects and neither is drained; nor is anyone when
more than half the nodes look slow (a threshold or the network, not a node: a judgement must not drain a fleet).

Bandwidth: nccl-tests' ``all_reduce_perf`` prints ``# Avg bus bandwidth : X`` (GB/s; nccl-tests src/common.cu);
that figure is compared with the plan's ``nccl_min_busbw_gbps``. It runs from the node's PATH (or
/opt/nccl-tests/build, where AWS's DLAMI-style images keep it); a node without it skips the NCCL part, said.
DCGM: ``dcgmi diag -r LEVEL`` within what is left of the budget (node/gpu_health.py), skipped without dcgmi.

Stdlib only, Python 3.9.
"""
from __future__ import annotations

import argparse
import calendar
import math
import os
import re
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from clusterkit_node.contract.bundle_files import LIVE_ZIPAPP
from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, log, warn
from clusterkit_node.contract.health_plan import DEEP_JOB_NAME, NAME, HealthPlan
from clusterkit_node.fleet import health_record as record
from clusterkit_node.fleet.health_checks import Result, boot_id, run_bounded
from clusterkit_node.fleet.health_node import load_plan, node_env, node_store, settle, slurm_tool, this_node
from clusterkit_node.node.facts import find_tool
from clusterkit_node.node.gpu_health import diagnose
from clusterkit_node.node.pyxis_importer import Refused

NCCL_PATHS = ("/opt/nccl-tests/build/all_reduce_perf",)
AVG_BUSBW = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")
NCCL_ARGS = ("-b", "1G", "-e", "1G", "-f", "2", "-g", "1")  # one 1 GiB message, one GPU per rank
START_WINDOW_S = 60  # a deep job that cannot start within this is removed (sbatch --deadline)


@dataclass(frozen=True)
class Pair:
    nodes: Tuple[str, str]
    busbw: Optional[float]  # None: the test did not produce a figure
    detail: str

    def ok(self, threshold: float) -> bool:
        return self.busbw is not None and self.busbw >= threshold


def ring(nodes: Sequence[str]) -> List[Tuple[str, str]]:
    """a-b for two nodes; a-b, b-c, ..., z-a for more (every node in two pairs)."""
    if len(nodes) < 2:
        return []
    if len(nodes) == 2:
        return [(nodes[0], nodes[1])]
    return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]


def judge(nodes: Sequence[str], pairs: Sequence[Pair], threshold: float) -> Tuple[List[str], List[str]]:
    """(nodes to drain, suspects not drained). A node is slow when every pair it ran in failed; nobody is drained
    when only two nodes ran or more than half the nodes look slow (the threshold or the network, not a node)."""
    failed = [p for p in pairs if not p.ok(threshold)]
    involved = sorted({n for p in failed for n in p.nodes})
    if not failed:
        return [], []
    tested = [n for n in nodes if any(n in p.nodes for p in pairs)]
    slow = [n for n in tested if all(not p.ok(threshold) for p in pairs if n in p.nodes)]
    if len(tested) < 3 or len(slow) * 2 > len(tested):
        return [], involved
    return slow, sorted(set(involved) - set(slow))


def busbw(output: str) -> Optional[float]:
    m = AVG_BUSBW.search(output)
    return float(m.group(1)) if m else None


def pair_test(nodes: Tuple[str, str], gpus: int, env: Dict[str, str], timeout: float) -> Pair:
    srun = slurm_tool("srun", env)
    exe = find_tool("all_reduce_perf", env, *NCCL_PATHS) or "all_reduce_perf"
    cmd = [srun, f"--nodelist={nodes[0]},{nodes[1]}", "--nodes=2", f"--ntasks-per-node={max(1, gpus)}",
           "--overcommit", "--kill-on-bad-exit=1", exe, *NCCL_ARGS]
    rc, out = run_bounded(cmd, env, timeout)
    figure = busbw(out) if rc == 0 else None
    if figure is None:
        last = [ln for ln in out.splitlines() if ln.strip()][-1:] or ["no output"]
        why = "timed out" if rc is None else f"exited {rc}: {last[0].strip()}"
        return Pair(nodes, None, f"all_reduce_perf {nodes[0]}+{nodes[1]} {why}")
    return Pair(nodes, figure, f"all_reduce_perf {nodes[0]}+{nodes[1]}: {figure:g} GB/s")


def hostnames(nodelist: str, env: Dict[str, str]) -> List[str]:
    rc, out = run_bounded([slurm_tool("scontrol", env), "show", "hostnames", nodelist], env, 30)
    return [ln.strip() for ln in out.splitlines() if ln.strip()] if rc == 0 else []


def cmd_deep(a: argparse.Namespace) -> int:
    """The deep job's batch script: DCGM on each node (a step per node), then the NCCL pairs, then the judgement."""
    env = node_env()
    plan, why = load_plan(a.plan)
    if plan is None or plan.queue(a.queue) is None:
        warn(f"health deep: not judged: {why or f'queue {a.queue} is not in the health plan'}")
        return EXIT_OK
    qh = plan.queues[a.queue]
    deep = qh.deep
    started = time.monotonic()
    job = os.environ.get("SLURM_JOB_ID", "?")
    nodes = hostnames(os.environ.get("SLURM_JOB_NODELIST", ""), env)
    try:
        store = a.store or node_store()
    except (OSError, Refused) as exc:
        warn(f"health deep: not judged: the node's settings: {exc}")
        return EXIT_OK
    log(f"health deep: job {job} on {','.join(nodes)}: dcgm level {deep.dcgm_level}, NCCL threshold "
        f"{deep.nccl_min_busbw_gbps:g} GB/s, budget {deep.budget_s} s")
    if deep.dcgm_level:
        per_node = max(30.0, (deep.budget_s - (time.monotonic() - started)) / 2)
        zipapp = a.zipapp or LIVE_ZIPAPP
        run_bounded([slurm_tool("srun", env), f"--nodes={len(nodes)}", "--ntasks-per-node=1", "python3", "-I", zipapp,
              "health", "dcgm", "--level", str(deep.dcgm_level), "--budget", str(int(per_node)), "--job", job,
              "--store", store], env, per_node + 30)
    pairs: List[Pair] = []
    if deep.nccl_min_busbw_gbps and len(nodes) >= 2:
        gpus = max((e.gpus for e in qh.resources.values()), default=1)
        for pair in ring(nodes):
            left = deep.budget_s - (time.monotonic() - started) - 10
            if left <= 0:
                warn("health deep: the budget is spent; the remaining pairs are not tested")
                break
            pairs.append(pair_test(pair, gpus, env, left))
    threshold = deep.nccl_min_busbw_gbps
    slow, suspects = judge(nodes, pairs, threshold) if pairs else ([], [])
    seconds = time.monotonic() - started
    for node in nodes:
        mine = [p for p in pairs if node in p.nodes]
        # a pair below the threshold fails this node's entry only where the judgement says the node is the slow one
        results = [Result("nccl", p.ok(threshold) or node not in slow, p.detail + (
            "" if p.ok(threshold) else f" (below {threshold:g} GB/s" + (")" if node in slow else
                                                                       "; not this node's: see its other pairs)")))
                   for p in mine]
        if node in suspects:
            results.append(Result("nccl", True, "a suspect, not drained: its failing pairs do not single it out"))
        if results:  # a failing result exists only for a node judged slow: settle drains just those
            settle(plan, store, "deep", f"deep job {job}", node, results, seconds, "", env, do_drain=True)
    for p in pairs:
        log(f"health deep: {p.detail}")
    if suspects:
        warn(f"health deep: failing pairs do not single out a node ({', '.join(suspects)}): none drained")
    log(f"health deep: done in {seconds:.0f} s; drained: {', '.join(slow) or 'none'}")
    return EXIT_FAILED if slow else EXIT_OK


def cmd_dcgm(a: argparse.Namespace) -> int:
    """One node's DCGM diagnostic inside the deep job (an srun step on each node): record, drain on failure."""
    env = node_env()
    node = this_node()
    plan, why = load_plan(a.plan)
    if plan is None:
        warn(f"health dcgm: not judged: {why}")
        return EXIT_OK
    dcgmi = find_tool("dcgmi", env)
    if dcgmi is None:
        log(f"health dcgm: {node}: no dcgmi: the DCGM diagnostic is skipped")
        return EXIT_OK
    outcome = diagnose(dcgmi, a.level, a.budget)
    result = Result("dcgm", outcome.status != "fail", outcome.detail, outcome.seconds)
    ok = settle(plan, a.store, "deep", f"deep job {a.job}", node, [result], outcome.seconds, boot_id(env), env,
                do_drain=True)
    return EXIT_OK if ok else EXIT_FAILED


def last_deep(store: str, cluster: str, node: str) -> Optional[float]:
    """When the node's last deep check ran (epoch seconds), from its history."""
    for entry in reversed(record.history(store, cluster, node)):
        if entry.get("tier") == "deep":
            try:
                return float(calendar.timegm(time.strptime(str(entry["at"]), "%Y-%m-%dT%H:%M:%SZ")))
            except (KeyError, ValueError):
                return None
    return None


def due_nodes(plan: HealthPlan, queue: str, idle: List[str], store: str, now: float) -> List[str]:
    every = plan.queues[queue].deep.every_hours * 3600
    return [n for n in idle if (last_deep(store, plan.cluster, n) or 0) + every <= now]


def idle_nodes(queue: str, env: Dict[str, str]) -> List[str]:
    """The queue's nodes Slurm shows idle and nothing else (not drained, not powered down, not reserved)."""
    rc, out = run_bounded([slurm_tool("sinfo", env), "-h", "-N", "-p", queue, "-o", "%N %T"], env, 30)
    return sorted({ln.split()[0] for ln in out.splitlines() if len(ln.split()) == 2 and ln.split()[1] == "idle"}) \
        if rc == 0 else []


def submitted(queue: str, env: Dict[str, str]) -> bool:
    rc, out = run_bounded([slurm_tool("squeue", env), "-h", "-n", DEEP_JOB_NAME, "-p", queue, "-o", "%i"], env, 30)
    return rc != 0 or bool(out.strip())  # squeue failing: do not pile jobs up


def batch_script(queue: str, zipapp: str) -> str:
    return f"#!/bin/bash\nexec python3 -I {zipapp} health deep --queue {queue}\n"


def cmd_schedule(a: argparse.Namespace) -> int:
    """The head node's timer: one deep job per queue that has idle nodes due for it."""
    env = node_env()
    plan, why = load_plan(a.plan)
    if plan is None:
        warn(f"health schedule: nothing scheduled: {why}")
        return EXIT_OK
    store = a.store or node_store()
    zipapp = a.zipapp or LIVE_ZIPAPP
    for queue, qh in sorted(plan.queues.items()):
        if not qh.deep.every_hours or not NAME.fullmatch(queue):
            continue
        if submitted(queue, env):
            log(f"health schedule: {queue}: a deep check is already queued or running")
            continue
        due = due_nodes(plan, queue, idle_nodes(queue, env), store, time.time())
        if not due:
            continue
        minutes = math.ceil(qh.deep.budget_s / 60)
        cmd = [slurm_tool("sbatch", env), "--parsable", f"--job-name={DEEP_JOB_NAME}", f"--partition={queue}",
               f"--nodelist={','.join(due)}", f"--nodes={len(due)}", "--exclusive", f"--time={minutes}",
               f"--deadline=now+{minutes * 60 + START_WINDOW_S}", "--output=/dev/null"]
        try:
            proc = subprocess.run(cmd, input=batch_script(queue, zipapp), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=env, timeout=60)
            out, rc = proc.stdout.strip(), proc.returncode
        except (OSError, subprocess.TimeoutExpired) as exc:
            out, rc = str(exc), 1
        if rc == 0:
            log(f"health schedule: {queue}: deep check job {out} on {','.join(due)} ({minutes} min limit)")
        else:
            warn(f"health schedule: {queue}: sbatch refused the deep check: {out.splitlines()[-1:] or out}")
    return EXIT_OK


def add_parsers(hs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    sc = hs.add_parser("schedule", help="head node: submit the deep check on idle nodes that are due (a timer runs it)")
    d = hs.add_parser("deep", help="the deep check's Slurm job: DCGM per node, NCCL between pairs, drain the slow")
    d.add_argument("--queue", required=True)
    g = hs.add_parser("dcgm", help="one node's DCGM diagnostic inside the deep job")
    g.add_argument("--level", type=int, choices=(1, 2, 3, 4), required=True)
    g.add_argument("--budget", type=int, required=True)
    g.add_argument("--job", required=True)
    g.add_argument("--store", required=True)
    for p in (sc, d, g):
        p.add_argument("--plan", help="the health plan (default: the bundle's)")
    for p in (sc, d):
        p.add_argument("--store")
        p.add_argument("--zipapp", help=argparse.SUPPRESS)


def run(a: argparse.Namespace) -> int:
    return {"schedule": cmd_schedule, "deep": cmd_deep, "dcgm": cmd_dcgm}[a.health_command](a)
