"""``clusterkit_node.pyz drift``: group the node fingerprints per queue and show what differs (head node).

Nodes of one queue should run identical software; when they do not (an AMI or bootstrap change rolled
out to some nodes only), the table shows which fields differ and which nodes run what. Each node's
driver is also checked against the images the store serves now: a node that booted before a new image
arrived was never checked against it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

from clusterkit_node.contract import compat
from clusterkit_node.contract.bundle_files import RULES_NAME, load_rules
from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, UsageError, print_table, warn
from clusterkit_node.contract.layout import legacy_nodes_dir, nodes_dir
from clusterkit_node.fleet.fingerprint import FINGERPRINT_VERSION
from clusterkit_node.store.manifest import read_manifest_bytes

# Software that must be identical on all nodes of a queue (same AMI, same bootstrap). Instance type and
# compute resource may differ inside one queue by design, so they describe a node without counting.
DRIFT_FIELDS = ("ami_id", "kernel", "nvidia_driver", "cuda_driver_api", "efa_installer", "libfabric",
                "enroot", "pyxis", "squashfuse_reader", "slurm", "manifest_sha256")
NODE_FIELDS = ("hostname", "queue", "compute_resource", "instance_type", "instance_id", "recorded_at")


def natural_key(name: str) -> List[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def fingerprint_files(dirs: List[str]) -> Dict[str, str]:
    """[<cluster>/]<host>.json -> path, from the first of dirs holding it (dot files are temp files); a
    directory inside a nodes directory is one cluster's (fingerprint.py), read one level down."""
    files: Dict[str, str] = {}
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            continue
        for name in names:
            path = os.path.join(d, name)
            if not name.startswith(".") and name.endswith(".json"):
                files.setdefault(name, path)
            elif not name.startswith(".") and os.path.isdir(path) and not os.path.islink(path):
                for inner in sorted(os.listdir(path)):
                    if not inner.startswith(".") and inner.endswith(".json"):
                        files.setdefault(f"{name}/{inner}", os.path.join(path, inner))
    return files


def read_fingerprints(dirs: List[str], max_age_hours: Optional[float]) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Every <host>.json in dirs (a host in several: the first dir wins); (fingerprints, skipped with
    reason)."""
    found: List[Dict[str, Any]] = []
    skipped: List[str] = []
    files = fingerprint_files(dirs)
    now = _dt.datetime.now(_dt.timezone.utc)
    for name in sorted(files, key=natural_key):
        path = files[name]
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            skipped.append(f"{path}: unreadable ({exc})")
            continue
        if not isinstance(doc, dict) or doc.get("fingerprint_version") != FINGERPRINT_VERSION:
            skipped.append(f"{path}: not a version {FINGERPRINT_VERSION} fingerprint")
            continue
        doc.setdefault("hostname", name.rsplit("/", 1)[-1][:-len(".json")])
        if max_age_hours is not None:
            try:
                at = _dt.datetime.strptime(str(doc.get("recorded_at")), "%Y-%m-%dT%H:%M:%SZ")
            except ValueError:
                skipped.append(f"{path}: recorded_at {doc.get('recorded_at')!r} is not a UTC timestamp")
                continue
            age = (now - at.replace(tzinfo=_dt.timezone.utc)).total_seconds() / 3600
            if age > max_age_hours:
                skipped.append(f"{path}: recorded {age:.1f} h ago (older than --max-age-hours "
                               f"{max_age_hours:g})")
                continue
        found.append(doc)
    return found, skipped


def group_queue(fps: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Nodes with identical DRIFT_FIELDS form one group; biggest group first, labelled A, B, ..."""
    groups: Dict[Tuple[str, ...], List[Dict[str, Any]]] = {}
    for fp in fps:
        groups.setdefault(tuple(str(fp.get(k)) for k in DRIFT_FIELDS), []).append(fp)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), natural_key(g[0]["hostname"])))
    out = []
    for i, members in enumerate(ordered):
        label = chr(ord("A") + i) if i < 26 else f"G{i + 1}"
        times = sorted(str(m.get("recorded_at")) for m in members)
        out.append({"label": label,
                    "nodes": sorted((m["hostname"] for m in members), key=natural_key),
                    "fingerprint": {k: members[0].get(k) for k in DRIFT_FIELDS},
                    "recorded": [times[0], times[-1]]})
    return out


def current_incompatibilities(store: str, fps: List[Dict[str, Any]], rules_path: Optional[str]
                              ) -> Tuple[List[Dict[str, Any]], str]:
    """Each node's driver against the images the store serves NOW: a node that booted before a new
    image arrived was never checked against it."""
    try:
        rules = load_rules(rules_path)
        _sha, manifest = read_manifest_bytes(store)
    except (UsageError, ValueError) as exc:
        text = "; ".join(exc.lines) if isinstance(exc, UsageError) else str(exc)
        return [], f"cannot check drivers against the current images: {text}"
    found = []
    for fp in fps:
        driver = fp.get("nvidia_driver")
        if not driver:
            continue
        for name in sorted(manifest["images"]):
            versions = manifest["images"][name].get("versions") or {}
            for f in compat.check(rules, name, versions, driver):
                if f.kind == "driver_for_cuda" and f.level == "error":
                    found.append({"node": fp["hostname"], "image": name, "rule": f.rule,
                                  "message": f.message})
    return found, ""


def short_nodes(nodes: List[str], limit: int = 4) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" (+{len(nodes) - limit} more)" if len(nodes) > limit else "")


def cmd_drift(args: argparse.Namespace) -> int:
    """Head node: do the nodes of each queue run the same software? (exit 1 when they do not)"""
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        raise UsageError([f"store {store} is not a directory (is FSx mounted at "
                          f"{os.path.dirname(store)}?)"])
    # The previous layout's <store>/.nodes too: a node still running the previous bundle may write there
    # after the head node's sync moved the directory's content (store.migrate_legacy).
    fps, skipped = read_fingerprints([nodes_dir(store), legacy_nodes_dir(store)], args.max_age_hours)
    if args.cluster is not None:  # its own nodes, and those of a bundle that recorded no cluster
        fps = [fp for fp in fps if fp.get("cluster") in (None, args.cluster)]
    # clusters on one platform share the store and may share queue names: with several, a queue is <cluster>/<queue>
    several = len({fp.get("cluster") for fp in fps if fp.get("cluster")}) > 1
    by_queue: Dict[str, List[Dict[str, Any]]] = {}
    for fp in fps:
        queue = fp.get("queue") or "(unknown)"
        by_queue.setdefault(f"{fp['cluster']}/{queue}" if several and fp.get("cluster") else queue, []).append(fp)
    report: Dict[str, Any] = {"queues": {}, "skipped": skipped, "nodes": len(fps)}
    for queue in sorted(by_queue):
        groups = group_queue(by_queue[queue])
        differing = [k for k in DRIFT_FIELDS
                     if len({str(g["fingerprint"].get(k)) for g in groups}) > 1]
        report["queues"][queue] = {"drift": len(groups) > 1, "differing_fields": differing,
                                   "groups": groups, "nodes": len(by_queue[queue])}
    incompatible, no_check = current_incompatibilities(store, fps, args.rules) if fps else ([], "")
    report["incompatible"] = incompatible
    # enroot/pyxis pairs on which an option does not work (node_profiles.json "pairings"), as each node recorded them
    pairings: Dict[str, Dict[str, Any]] = {}
    for fp in fps:
        for item in fp.get("pairing_warnings") or []:
            entry = pairings.setdefault(str(item.get("id")), {"message": item.get("message"), "nodes": []})
            entry["nodes"].append(fp["hostname"])
    report["pairing_warnings"] = pairings
    report["drift"] = any(q["drift"] for q in report["queues"].values())
    bad = report["drift"] or bool(incompatible)
    if args.format == "json":
        print(json.dumps(report, indent=2, sort_keys=True))
        sys.stdout.flush()
        return EXIT_FAILED if bad else EXIT_OK
    for line in skipped:
        warn(f"drift: skipped {line}")
    if no_check:
        warn(f"drift: {no_check}")
    if not fps:
        print(f"no node fingerprints in {nodes_dir(store)} (compute nodes write them at OnNodeConfigured)")
        return EXIT_OK
    for queue, q in report["queues"].items():
        groups = q["groups"]
        if not q["drift"]:
            print(f"queue {queue}: {q['nodes']} node(s), one fingerprint: no drift")
            continue
        print(f"queue {queue}: {q['nodes']} nodes, {len(groups)} different fingerprints: DRIFT")
        headers = ["  FIELD"] + [f"{g['label']} ({len(g['nodes'])} node{'s' if len(g['nodes']) > 1 else ''})"
                               for g in groups]
        rows = [[k] + ["-" if g["fingerprint"].get(k) is None else str(g["fingerprint"][k])
                       for g in groups] for k in q["differing_fields"]]
        rows.append(["nodes"] + [short_nodes(g["nodes"]) for g in groups])
        rows.append(["recorded"] + [g["recorded"][0] if g["recorded"][0] == g["recorded"][1]
                                    else f"{g['recorded'][0]}..{g['recorded'][1]}" for g in groups])
        print_table(headers, [["  " + r[0]] + r[1:] for r in rows])
    for item in incompatible:
        print(f"node {item['node']}: {item['message']} [{item['rule']}]")
    for pairing_id, entry in sorted(pairings.items()):
        warn(f"drift: {short_nodes(sorted(entry['nodes']))}: {entry['message']} [{pairing_id}]")
    drifting = [q for q, v in report["queues"].items() if v["drift"]]
    print(f"{len(fps)} node(s) in {len(report['queues'])} queue(s): "
          f"{'drift in ' + ', '.join(drifting) if drifting else 'no drift'}"
          f"{f'; {len(incompatible)} node/image pair(s) the node driver cannot run' if incompatible else ''}")
    return EXIT_FAILED if bad else EXIT_OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    d = sub.add_parser("drift", help="head node: group node fingerprints per queue, show what differs; "
                                     "exit 1 when nodes of one queue differ")
    d.add_argument("--store", required=True)
    d.add_argument("--rules", help=f"compatibility rules (default: {RULES_NAME} next to the zipapp)")
    d.add_argument("--format", choices=("table", "json"), default="table")
    d.add_argument("--max-age-hours", type=float,
                   help="ignore fingerprints recorded longer ago (nodes long gone)")
    d.add_argument("--cluster", help="only this cluster's nodes (on a platform; default: every cluster's, each "
                                     "queue named <cluster>/<queue> when the store has several)")
