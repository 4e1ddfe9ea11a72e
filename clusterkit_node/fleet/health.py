"""``health``: the node health loop's commands: run a tier's checks, drain on failure, record, show.

  health check --tier quick|boot --source prolog|idle|boot   (this node; a failure drains it, exit 1)
  health show [NODE...] [--format table|json] [--last N]      (each node's last checks, from the store)
  health schedule                                            (head node timer: submit the deep check on idle nodes)
  health deep --queue Q                                      (the deep check's Slurm job; fleet/health_deep.py)
  health dcgm --budget S --level N --job J                   (one node's DCGM diagnostic inside that job)

Where each tier runs and why (docs/operations.md "Node health"): the quick check before every job (the prolog
``50_clusterkit_node_health``: a failure drains the node with ClusterKit's reason first, then fails the prolog, and
Slurm requeues the job elsewhere without holding it: ParallelCluster's slurm.conf sets ``nohold_on_prolog_fail``;
Slurm's "Prolog error" does not replace a reason already set, node_mgr.c) and on idle nodes (Slurm's
``HealthCheckProgram``, ``HealthCheckNodeState=IDLE``); the boot check at OnNodeConfigured after the self-test, before
slurmd starts; the deep check as a Slurm job on idle nodes. ParallelCluster's clustermgtd replaces a static node that
is DRAIN and idle (``is_drained``: IDLE+DRAIN or DOWN+DRAIN) under the same NodeName within its ~60 s loop, and
powers down a dynamic one (aws-parallelcluster-node slurm_resources.py, clustermgtd.py).

A check that cannot judge (no plan in the bundle, a node name that is not ParallelCluster's, the node's settings
unreadable) says so and exits 0: a ClusterKit fault must never drain a fleet. Stdlib only, Python 3.9.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from typing import Any, Dict, List

from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, UsageError, log, print_table, warn
from clusterkit_node.contract.health_plan import PLAN_NAME
from clusterkit_node.fleet import health_record as record
from clusterkit_node.fleet.health_checks import Budget, quick
from clusterkit_node.fleet.health_node import load_plan, node_env, node_store, queue_of, settle, slurm_tool, this_node
from clusterkit_node.node.facts import host_path
from clusterkit_node.node.pyxis_importer import Refused

SHOW_SCHEMA = "clusterkit.node-health/v1"  # health show --format json (clusterkit status --nodes reads it)
TIERS = ("quick", "boot")
SOURCES = ("prolog", "idle", "boot")


def cmd_check(a: argparse.Namespace) -> int:
    node = a.node or this_node()
    plan, why = load_plan(a.plan)
    if plan is None:
        warn(f"health: not judged: {why}")
        return EXIT_OK
    qh, resource = queue_of(plan, node)
    if qh is None:
        log(f"health: not judged: {resource}")
        return EXIT_OK
    if a.tier == "quick" and not qh.quick:
        return EXIT_OK
    try:
        store = node_store(a.store)
    except (OSError, Refused) as exc:
        warn(f"health: not judged: the node's settings: {exc}")
        return EXIT_OK
    env = node_env()
    expect = qh.resources.get(resource)
    if expect is None:
        log(f"health: not judged: compute resource {resource} of {node} is not in the health plan")
        return EXIT_OK
    started = time.monotonic()
    cursor_path = a.cursor or host_path(env, record.CURSOR)
    results, cursor = quick(env, expect, store, Budget(qh.quick_budget_s), record.read_cursor(cursor_path))
    try:
        record.write_cursor(cursor, cursor_path)
    except OSError as exc:
        warn(f"health: could not keep the kernel log position: {exc}")
    seconds = time.monotonic() - started
    ok = settle(plan, store, a.tier, a.source, node, results, seconds, cursor.boot_id, env, not a.no_drain)
    if ok:
        log(f"health: {node}: {a.tier} check passed in {seconds:.2f} s: "
            + "; ".join(f"{r.check} {r.detail}" for r in results))
    return EXIT_OK if ok else EXIT_FAILED


def summary(entries: List[Dict[str, Any]]) -> Dict[str, object]:
    last = entries[-1] if entries else {}
    failed = [r for r in last.get("results", []) if not r.get("ok")]
    drains = [e for e in entries if e.get("drained")]
    return {"last": last, "failed": failed, "last_drain": drains[-1] if drains else None}


def brief(entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The last drain and the last check, with their failures only: what ``clusterkit status --nodes`` shows, small
    enough for SSM's inline output (24,000 characters) on clusters of tens of nodes."""
    keep = ("at", "tier", "source", "ok", "boot_id", "drained")
    drains = [e for e in entries if e.get("drained")]
    chosen = ([drains[-1]] if drains and drains[-1] is not entries[-1] else []) + entries[-1:]
    return [{**{k: e.get(k) for k in keep},
             "results": [r for r in e.get("results", []) if isinstance(r, dict) and not r.get("ok")]}
            for e in chosen]


def slurm_states(env: Dict[str, str]) -> Dict[str, Dict[str, str]]:
    """Each node's state and reason as slurmctld has them (``sinfo -N``), {} where Slurm does not answer (a compute
    node without slurmctld's ear, a test root): the history stands on its own."""
    try:
        proc = subprocess.run([slurm_tool("sinfo", env), "-h", "-N", "-o", "%N|%T|%E"], capture_output=True,
                              text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    states: Dict[str, Dict[str, str]] = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        name, _, rest = line.partition("|")
        state, _, why = rest.partition("|")
        if name and state:
            states[name] = {"state": state, "reason": "" if why == "none" else why}
    return states


def cmd_show(a: argparse.Namespace) -> int:
    plan, why = load_plan(a.plan)
    cluster = a.cluster or (plan.cluster if plan else None)
    if cluster is None:
        raise UsageError([f"health show: which cluster? ({why}; give --cluster NAME)"])
    try:
        store = node_store(a.store)
    except (OSError, Refused) as exc:
        raise UsageError([f"health show: the node's settings: {exc} (give --store DIR)"]) from None
    bad = [n for n in a.nodes if not record.NODE_RE.fullmatch(n)]
    if bad or not record.CLUSTER_RE.fullmatch(cluster):
        raise UsageError([f"health show: {(bad or [cluster])[0]!r} is not a node or cluster name"])
    slurm = slurm_states(node_env())
    names = a.nodes or sorted(set(record.nodes(store, cluster)) | set(slurm))
    report = {n: record.history(store, cluster, n, a.last) for n in names}
    if a.summary:
        report = {n: brief(entries) for n, entries in report.items()}
    if a.format == "json":
        print(json.dumps({"schema": SHOW_SCHEMA, "cluster": cluster, "nodes": report,
                          "slurm": {n: slurm[n] for n in names if n in slurm}}, indent=2, sort_keys=True))
        return EXIT_OK
    rows = []
    for n in names:
        state = slurm.get(n, {}).get("state", "-")
        s = summary(report[n])
        last = s["last"]
        if not last:
            rows.append([n, state, "-", "-", "never checked", ""])
            continue
        failed = s["failed"]
        assert isinstance(last, dict) and isinstance(failed, list)
        result = "ok" if last.get("ok") else "FAILED " + ", ".join(f"{r['check']}: {r['detail']}" for r in failed)
        drain_entry = s["last_drain"]
        drained = f"drained {drain_entry['at']} (boot {drain_entry['boot_id'][:8]})" if isinstance(drain_entry,
                                                                                                   dict) else ""
        rows.append([n, state, str(last.get("at")), f"{last.get('tier')}/{last.get('source')}", result, drained])
    print_table(["NODE", "SLURM", "LAST CHECK", "TIER", "RESULT", "LAST DRAIN"], rows)
    return EXIT_OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("health", help="the node health loop: check (drain on failure), show, schedule, deep")
    hs = p.add_subparsers(dest="health_command", required=True)
    c = hs.add_parser("check", help="this node's quick or boot check; a failure drains the node, exit 1")
    c.add_argument("--tier", choices=TIERS, required=True)
    c.add_argument("--source", choices=SOURCES, required=True, help="what ran it: the prolog, Slurm's "
                   "HealthCheckProgram on an idle node, or the boot")
    c.add_argument("--node", help="this node's Slurm NodeName (default: the short hostname)")
    c.add_argument("--store", help="the image store (default: CK_STORE of /etc/clusterkit/node.env)")
    c.add_argument("--plan", help=f"the health plan (default: {PLAN_NAME} in the bundle)")
    c.add_argument("--cursor", help=argparse.SUPPRESS)
    c.add_argument("--no-drain", action="store_true", help="record and report only")
    s = hs.add_parser("show", help="each node's last checks, from the store (a replaced node's history included)")
    s.add_argument("nodes", nargs="*")
    s.add_argument("--store")
    s.add_argument("--plan")
    s.add_argument("--cluster")
    s.add_argument("--last", type=int, default=20, help="entries per node (default 20)")
    s.add_argument("--format", choices=("table", "json"), default="table")
    s.add_argument("--summary", action="store_true", help="per node only the last drain and the last check")
    from clusterkit_node.fleet import health_deep  # noqa: PLC0415 (the deep tier's subcommands)
    health_deep.add_parsers(hs)


def cmd_health(a: argparse.Namespace) -> int:
    if a.health_command == "check":
        return cmd_check(a)
    if a.health_command == "show":
        return cmd_show(a)
    from clusterkit_node.fleet import health_deep  # noqa: PLC0415
    return health_deep.run(a)
