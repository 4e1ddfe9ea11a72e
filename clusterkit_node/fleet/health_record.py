"""Each node's health check history, kept on the shared store so it outlives the instance.

Why on FSx: ParallelCluster replaces a drained static node under the same Slurm NodeName (clustermgtd's
``add_instances``), so the history of ``gpu-st-p5-3`` lives at ``<staging>/health/<cluster>/<node>/`` on the
store, which every cluster of a platform mounts and which outlives both the instance and the cluster; each entry
names the boot it came from, so an operator tells the drained instance from its replacement.

One file per check (``<UTC time to the microsecond>-<tier>-<pid>.json``), written whole by the node that ran the
check (or by the deep check's batch job, for the nodes it judged) and never rewritten: no read-modify-write, so two
writers (the prolog's check and the deep job's judgement) never lose each other's entry. The writer keeps the newest
KEEP entries of the node. Where the previous check stopped reading the kernel log is local (``CURSOR``): kmsg
sequence numbers belong to one boot of one instance.

Stdlib only, Python 3.9.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional

from clusterkit_node.contract.layout import health_dir, tmp_dir
from clusterkit_node.fleet.health_checks import Cursor, Result
from clusterkit_node.store.atomic_files import ensure_dir, write_json_atomic
from clusterkit_node.store.staging import ensure_staging

KEEP = 200
CURSOR = "/var/lib/clusterkit/health/kmsg-cursor.json"
ENTRY_RE = re.compile(r"^\d{8}T\d{6}\.\d{6}Z-(quick|boot|deep)-\d+\.json$")
NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
CLUSTER_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,59}$")


@dataclass(frozen=True)
class Entry:
    at: str  # UTC, ISO 8601
    node: str
    tier: str  # quick, boot or deep
    source: str  # prolog, idle, boot, deep job <id>
    ok: bool
    seconds: float
    boot_id: str
    results: List[Dict[str, Any]]
    drained: str = ""  # the reason Slurm took, when this check drained the node
    drain_problem: str = ""  # why the drain did not happen, when it did not

    @staticmethod
    def of(node: str, tier: str, source: str, results: List[Result], seconds: float, boot: str,
           drained: str = "", drain_problem: str = "") -> "Entry":
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return Entry(at, node, tier, source, all(r.ok for r in results), round(seconds, 3), boot,
                     [asdict(r) for r in results], drained, drain_problem)


def node_dir(store: str, cluster: str, node: str) -> str:
    if not CLUSTER_RE.fullmatch(cluster) or not NODE_RE.fullmatch(node):
        raise ValueError(f"not a cluster and node name: {cluster!r} {node!r}")
    return os.path.join(health_dir(store), cluster, node)


def append(store: str, cluster: str, entry: Entry) -> str:
    """Write ``entry`` as a new file of its node's history; drop the oldest beyond KEEP. Returns its path."""
    ensure_staging(store)
    for d in (health_dir(store), os.path.join(health_dir(store), cluster), node_dir(store, cluster, entry.node)):
        ensure_dir(d)
    ensure_dir(tmp_dir(store))
    now = time.time()  # names sort in the order the entries were written, to the microsecond
    stamp = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}.{int(now % 1 * 1e6):06d}Z"
    name = f"{stamp}-{entry.tier}-{os.getpid()}.json"
    folder = node_dir(store, cluster, entry.node)
    path = write_json_atomic(os.path.join(folder, name),
                             os.path.join(tmp_dir(store), f"health.{entry.node}.json.tmp-{os.getpid()}"), asdict(entry))
    names = sorted(n for n in os.listdir(folder) if ENTRY_RE.match(n))
    for old in names[:-KEEP]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, old))
    return path


def history(store: str, cluster: str, node: str, last: Optional[int] = None) -> List[Dict[str, Any]]:
    """The node's entries, oldest first (unreadable entries skipped: a half-written file cannot exist, a hand-edited
    one is not ours to judge)."""
    folder = node_dir(store, cluster, node)
    try:
        names = sorted(n for n in os.listdir(folder) if ENTRY_RE.match(n))
    except FileNotFoundError:
        return []
    out = []
    for name in names[-last:] if last else names:
        with contextlib.suppress(OSError, ValueError):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                doc = json.load(f)
            if isinstance(doc, dict):
                out.append(doc)
    return out


def nodes(store: str, cluster: str) -> List[str]:
    try:
        return sorted(n for n in os.listdir(os.path.join(health_dir(store), cluster)) if NODE_RE.fullmatch(n))
    except FileNotFoundError:
        return []


def read_cursor(path: str = CURSOR) -> Optional[Cursor]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return Cursor(str(doc["boot_id"]), int(doc["seq"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_cursor(cursor: Cursor, path: str = CURSOR) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(asdict(cursor), f)
    os.replace(tmp, path)
