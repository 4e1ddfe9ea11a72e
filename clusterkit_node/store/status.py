"""``clusterkit_node.pyz status``: present / missing / in progress / rejected per image, as a table.

Read-only and lock-free, so it can run while a sync imports: an import in progress is recognised by
its partial entry (in the staging directory next to the store, present from the start of the attempt)
and a live pid. Its SIZE_MB is the bytes the import has written so far (downloaded layers, unpacked
layers and the squashfs, from the sync's last heartbeat record and the work directory itself) and its
DETAIL says the pid, the attempt, how long it has run and its throughput (progress.describe_partial). After the
table, one line per OS package set the head node published for GPU nodes (package_set.published: sizes only).
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Dict, Optional

from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, error, format_versions, mb, print_table
from clusterkit_node.contract.lock import load_lock
from clusterkit_node.store import package_set
from clusterkit_node.store.atomic_files import file_size
from clusterkit_node.store.debris import partials, pid_alive
from clusterkit_node.store.manifest import read_manifest
from clusterkit_node.store.progress import describe_partial


def cmd_status(args: argparse.Namespace) -> int:
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        error(f"store {store} is not a directory (is FSx mounted? has sync run?)")
        return EXIT_FAILED
    try:
        manifest = read_manifest(store)
    except ValueError as exc:
        error(str(exc))
        return EXIT_FAILED
    live = {}
    for path, name, hx, pid in partials(store):
        if pid_alive(pid):
            sofar, how = describe_partial(path)
            live[(name, hx)] = (pid, sofar, how)
    rows = []

    def row(name: str, digest: str, state: str, size: int, entry: Optional[Dict[str, Any]], detail: str) -> None:
        rows.append([name, digest.split(":")[-1][:12], state, f"{mb(size):.1f}",
                     (entry or {}).get("synced_at", "-"),
                     format_versions((entry or {}).get("versions", {})), detail])

    if args.lock:
        images = load_lock(args.lock)
        for img in images:
            entry = manifest["images"].get(img.name)
            rej = manifest["rejected"].get(img.name)
            size = file_size(os.path.join(store, img.rel_file))
            if (img.name, img.hex) in live:
                pid, sofar, how = live[(img.name, img.hex)]
                row(img.name, img.digest, "in progress", sofar, None, f"pid {pid}, {how}")
            elif entry and entry.get("digest") == img.digest and size == entry.get("size"):
                row(img.name, img.digest, "present", size or 0, entry, "")
            elif entry and entry.get("digest") == img.digest:
                row(img.name, img.digest, "corrupt", size or 0, entry,
                    f"file size {size} != manifest {entry.get('size')}")
            elif rej and rej.get("digest") == img.digest:
                row(img.name, img.digest, "rejected", rej.get("size", 0), rej, rej.get("reason", ""))
            else:
                other = f"store has {entry['digest'].split(':')[-1][:12]}" if entry else ""
                row(img.name, img.digest, "missing", 0, None, other)
    else:
        names = sorted(set(manifest["images"]) | set(manifest["rejected"]) | {n for n, _ in live})
        for name in names:
            entry = manifest["images"].get(name)
            rej = manifest["rejected"].get(name)
            for (n, hx), (pid, sofar, how) in sorted(live.items()):
                if n == name:
                    row(name, hx, "in progress", sofar, None, f"pid {pid}, {how}")
            if entry:
                size = file_size(os.path.join(store, entry["file"]))
                state = "present" if size == entry.get("size") else "corrupt"
                row(name, entry["digest"], state, size or 0, entry, "")
            if rej:
                row(name, rej["digest"], "rejected", rej.get("size", 0), rej, rej.get("reason", ""))
    print_table(["NAME", "DIGEST", "STATE", "SIZE_MB", "SYNCED_AT", "VERSIONS", "DETAIL"], rows)
    for directory, pset, problem in package_set.published(store):  # what GPU nodes install (gpu-runtime)
        if pset is None or problem:
            print(f"packages {directory}: corrupt ({problem}): the head node's next sync re-fetches it")
        else:
            print(f"packages {pset.component} {pset.version} {pset.os}-{pset.arch}: present ({pset.format}, "
                  f"{len(pset.files)} files, checked against {pset.verified_against})")
    return EXIT_OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    st = sub.add_parser("status", help="present / missing / in progress per image")
    st.add_argument("--store", required=True)
    st.add_argument("--lock")
