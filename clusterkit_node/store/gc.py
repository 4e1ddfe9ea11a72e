"""``clusterkit_node.pyz gc``: remove store files no cluster on the platform uses any more.

Why each rule (docs/operations.md "Image garbage collection"):

- Candidates are the content files ``<store>/<name>/<hex>.sqsh``. A file a LIVE cluster record names
  (cluster_records.py: seen_at within the stale window) is never removed, whatever else holds.
- Grace: an unreferenced file goes only ``--grace-hours`` after gc FIRST SAW it unreferenced (``<staging>/gc.json``),
  not after its age: a lock that dropped an image yesterday may be rolled back today. A file referenced again
  leaves that state, so its grace starts over the next time.
- Never a file a running job has open: on the node gc runs on, every process's open descriptors and memory maps
  (``/proc/<pid>/fd``, ``/proc/<pid>/maps``: squashfuse holds the file open, an extracted start maps nothing) by
  device and inode; on every other node, the lease the pyxis importer's ``get`` left in ``<staging>/inuse/`` until
  its ``release`` (or until older than ``--lease-days``: a node that died never releases), and never after its job
  ended where the lease comes from a node of this cluster (lease_jobs.py: the directory is every user's to write).
- Dry run by default: the table says for every file why it stays or that it would go. ``--apply`` decides again
  under the sync lock (no sync imports, re-points or writes a record meanwhile), then per removed file drops the
  manifest entries and the stable name that point at it, then its entry in the sync's record, then the file.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import stat
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from clusterkit_node.contract.console import EXIT_OK, UsageError, format_bytes, log, mb, print_table, warn
from clusterkit_node.contract.layout import gc_state_path, inuse_dir, record_path, staging_dir, tmp_dir
from clusterkit_node.store.atomic_files import fsync_dir, write_json_atomic
from clusterkit_node.store.cluster_records import DEFAULT_STALE_DAYS, ClusterRecord, age, read_records
from clusterkit_node.store.concurrency import (
    GC_REMOVES_ONLY_UNUSED,
    gc_keeps,
    lease_active,
    require_sync_lock,
    sync_lock,
)
from clusterkit_node.store.lease_jobs import slurm_view
from clusterkit_node.store.manifest import read_manifest, write_manifest
from clusterkit_node.store.published import RecordError, read_record
from clusterkit_node.store.staging import ensure_staging
from clusterkit_node.store.sync_state import write_record

DEFAULT_GRACE_HOURS = 72.0
DEFAULT_LEASE_DAYS = 14.0  # longer than most jobs; a leased file outliving it is the residual risk (docs)
STATE_VERSION = 1
CONTENT_RE = re.compile(r"^[0-9a-f]{64}\.sqsh$")
LEASE_RE = re.compile(r"^[^.][^/]*\.json$")
MAX_LEASE_BYTES = 4096
SCONTROL = "/opt/slurm/bin/scontrol"  # ParallelCluster's Slurm


@dataclass
class Candidate:
    """One content file and what gc decided for it."""

    name: str
    file: str  # relative to the store
    size: int
    last_referenced_by: str
    status: str
    remove: bool = False


def content_files(store: str) -> List[Tuple[str, str, os.stat_result]]:
    """(name, <name>/<hex>.sqsh, lstat) of every regular content file; symlinks and image dirs that are not real
    directories are never followed (the sync quarantines those)."""
    found = []
    for name in sorted(os.listdir(store)):
        d = os.path.join(store, name)
        if name.startswith(".") or not stat.S_ISDIR(os.lstat(d).st_mode):
            continue
        for f in sorted(os.listdir(d)):
            if CONTENT_RE.match(f):
                st = os.lstat(os.path.join(d, f))
                if stat.S_ISREG(st.st_mode):
                    found.append((name, f"{name}/{f}", st))
    return found


def open_files(proc: str = "/proc") -> Tuple[Dict[Tuple[int, int], Set[str]], int]:
    """(device, inode) -> the processes holding it (open descriptor or memory map), and how many processes could
    not be read (not root: gc then cannot promise that nothing here has a file open)."""
    held: Dict[Tuple[int, int], Set[str]] = {}
    unreadable = 0
    me = str(os.getpid())
    for pid in os.listdir(proc):
        if not pid.isdigit() or pid == me:
            continue
        base = os.path.join(proc, pid)
        try:
            with open(os.path.join(base, "comm"), encoding="utf-8", errors="replace") as fh:
                who = f"pid {pid} ({fh.read().strip()})"
        except OSError:
            continue  # gone meanwhile
        try:
            fds = os.listdir(os.path.join(base, "fd"))
        except FileNotFoundError:
            continue
        except PermissionError:
            unreadable += 1
            continue
        for fd in fds:
            try:
                st = os.stat(os.path.join(base, "fd", fd))
            except OSError:
                continue
            held.setdefault((st.st_dev, st.st_ino), set()).add(who)
        try:
            with open(os.path.join(base, "maps"), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    parts = line.split(None, 5)
                    if len(parts) >= 5 and parts[4] != "0":
                        major, minor = parts[3].split(":")
                        held.setdefault((os.makedev(int(major, 16), int(minor, 16)), int(parts[4])), set()).add(who)
        except (OSError, ValueError):
            pass
    return held, unreadable


@dataclass(frozen=True)
class Lease:
    path: str
    file: str
    holder: str
    mtime: float
    host: str = ""
    job: str = ""


def read_leases(store: str) -> Tuple[List[Lease], List[str]]:
    """The importer's leases (pyxis_importer.take_lease) and the lease files that are not leases (ignored)."""
    directory = inuse_dir(store)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return [], []
    leases, bad = [], []
    for name in names:
        path = os.path.join(directory, name)
        if not LEASE_RE.match(name):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                doc = json.loads(fh.read(MAX_LEASE_BYTES).decode("utf-8")) if stat.S_ISREG(st.st_mode) else None
            if not isinstance(doc, dict) or not isinstance(doc.get("file"), str):
                raise ValueError("no file")
            file = doc["file"]
        except (OSError, ValueError) as exc:
            bad.append(f"{path}: not a lease ({exc})")
            continue
        holder = f"job {doc.get('job', '?')} step {doc.get('step', '?')} on {doc.get('host', '?')} (lease {name})"
        if doc.get("uid") != st.st_uid:  # the importer writes a lease as the job's user: a lease names its owner
            bad.append(f"{path}: not a lease (names uid {doc.get('uid')!r}, owned by uid {st.st_uid})")
            continue
        leases.append(Lease(path=path, file=file, holder=holder, mtime=st.st_mtime, host=str(doc.get("host", "")),
                            job=str(doc.get("job", ""))))
    return leases, bad


def load_state(store: str) -> Dict[str, float]:
    """When gc first saw each file unreferenced (an unreadable state starts every grace period again: safe)."""
    try:
        with open(gc_state_path(store), encoding="utf-8") as fh:
            doc = json.load(fh)
        seen = doc.get("unreferenced_since", {}) if doc.get("state_version") == STATE_VERSION else {}
        return {k: float(v) for k, v in seen.items() if isinstance(k, str) and isinstance(v, (int, float))}
    except (OSError, ValueError, AttributeError):
        return {}


def save_state(store: str, seen: Dict[str, float]) -> bool:
    try:
        ensure_staging(store, "tmp")
        write_json_atomic(gc_state_path(store), os.path.join(tmp_dir(store), f"gc.json.tmp-{os.getpid()}"),
                          {"state_version": STATE_VERSION, "unreferenced_since": {k: int(v) for k, v in
                                                                                    sorted(seen.items())}})
        return True
    except OSError as exc:
        warn(f"cannot record when gc first saw files unreferenced ({exc.strerror}: {gc_state_path(store)}); "
             f"their grace period starts on a run that can (as root)")
        return False


def when(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


@dataclass
class Plan:
    candidates: List[Candidate]
    records: List[ClusterRecord]
    expired_leases: List[Lease]
    seen: Dict[str, float]


def plan_gc(store: str, args: argparse.Namespace, now: float, quiet: bool = False) -> Plan:
    """Decide for every content file (see the module docstring); UsageError when gc cannot know what is used."""
    records, problems = read_records(store)
    if problems:
        raise UsageError([f"{p}: gc cannot know which files that cluster uses; fix or remove the record (the "
                          f"cluster's next `systemctl start clusterkit-image-sync` rewrites it)" for p in problems])
    if not records:
        where = os.path.join(staging_dir(store), "clusters")
        raise UsageError([f"{store}: no cluster has recorded its images in {where} yet (a store synced only by "
                          f"an older ClusterKit): run each cluster's image sync "
                          f"(`systemctl start clusterkit-image-sync` on its head node) before gc"])
    live = [r for r in records if not r.stale(now=now, stale_days=args.stale_days)]
    if not quiet:
        for r in records:
            state = "live" if r in live else "stale: treated as gone, its files are not protected"
            log(f"cluster {r.cluster} (host {r.host}): last seen {age(now - r.seen_at)} ago ({state}); "
                f"{len(r.images)} image(s)")
    held, unreadable = open_files(args.proc)
    if unreadable:
        line = (f"could not read the open files of {unreadable} process(es) (gc runs as root on the head node): "
                f"it cannot promise none of them holds a store file")
        if args.apply:
            raise UsageError([line + "; not removing anything"])
        if not quiet:
            warn(line)
    leases, bad = read_leases(store)
    for line in bad:
        if not quiet:
            warn(line)
    view = slurm_view(args.scontrol)
    if view is None and not quiet:
        log(f"cannot ask Slurm ({args.scontrol}): leases of this cluster's ended jobs hold until --lease-days")
    ended = [lease for lease in leases if view is not None and view.ended(lease.host, lease.job)]
    active = [lease for lease in leases if lease not in ended
              and lease_active(lease.mtime, now=now, lease_days=args.lease_days)]
    expired = [lease for lease in leases if lease not in active]
    old_seen = load_state(store)
    seen: Dict[str, float] = {}
    candidates = []
    for name, rel, st in content_files(store):
        users = [r.cluster for r in live if rel in r.files()]
        last = ", ".join(users) if users else \
            (", ".join(f"{r.cluster} (stale)" for r in records if rel in r.files()) or "-")
        c = Candidate(name=name, file=rel, size=st.st_size, last_referenced_by=last, status="")
        candidates.append(c)
        holders: List[str] = []
        until = now
        if not users:  # only an unreferenced file starts (or keeps) its grace period
            seen[rel] = old_seen.get(rel, now)
            holders = sorted(held.get((st.st_dev, st.st_ino), set())) + \
                sorted(lease.holder for lease in active if lease.file == rel)
            until = seen[rel] + args.grace_hours * 3600
        kept = gc_keeps(live_users=users, holders=holders, now=now, grace_until=until, grace_until_text=when(until))
        c.status, c.remove = (kept, False) if kept else ("would remove", True)
    return Plan(candidates=candidates, records=records, expired_leases=expired, seen=seen)


def remove_files(store: str, plan: Plan, quiet: bool = False) -> int:
    """Under the sync lock: per file, its manifest entries and stable name, then its record entry, then the file
    (nothing points at it any more when it goes). Returns the bytes freed. The lock is checked, not assumed."""
    require_sync_lock(store, "removing store files", GC_REMOVES_ONLY_UNUSED)
    gone = [c for c in plan.candidates if c.remove]
    if not gone:
        return 0
    try:
        manifest = read_manifest(store)
    except ValueError as exc:
        raise UsageError([f"{exc}: run the image sync first (it rebuilds the manifest), then gc"])
    try:
        files: Optional[Dict[str, Dict[str, Any]]] = read_record(record_path(store))
    except RecordError as exc:
        log(f"{exc}: its entries are left to the next sync")
        files = None
    freed = 0
    for c in gone:
        for section in ("images", "rejected"):
            entry = manifest.get(section, {}).get(c.name)
            if entry and entry.get("file") == c.file:
                del manifest[section][c.name]
        write_manifest(store, manifest)
        link = os.path.join(store, f"{c.name}.sqsh")
        try:
            if os.readlink(link) == c.file:
                os.unlink(link)
                fsync_dir(store)
        except OSError:
            pass
        if files is not None and files.pop(c.file, None) is not None:
            write_record(store, files)
        os.unlink(os.path.join(store, c.file))
        freed += c.size
        c.status = "removed"
        if not quiet:
            log(f"removed {os.path.join(store, c.file)} ({format_bytes(c.size)})")
        try:
            os.rmdir(os.path.join(store, c.name))
        except OSError:
            pass  # other digests of the name are still there
    fsync_dir(store)
    return freed


def cmd_gc(args: argparse.Namespace) -> int:
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        raise UsageError([f"{store}: no such store directory (--store is the image store, e.g. /fsx/containers)"])
    now = time.time()
    quiet = args.format == "json"  # stdout is the document
    if args.apply:
        with sync_lock(store):
            plan = plan_gc(store, args, now, quiet)
            freed = remove_files(store, plan, quiet)
            for c in plan.candidates:
                if c.status == "removed":
                    plan.seen.pop(c.file, None)
            save_state(store, plan.seen)
            for lease in plan.expired_leases:
                try:
                    os.unlink(lease.path)
                    if not quiet:
                        log(f"removed expired lease {lease.path} (its job ended, or older than {args.lease_days:g} "
                            "days)")
                except OSError:
                    pass
    else:
        plan = plan_gc(store, args, now, quiet)
        save_state(store, plan.seen)
        freed = sum(c.size for c in plan.candidates if c.remove)
    count = sum(1 for c in plan.candidates if c.remove)
    summary = (f"freed {freed} bytes ({format_bytes(freed)}) in {count} file(s)" if args.apply else
               f"would free {freed} bytes ({format_bytes(freed)}) in {count} file(s); dry run: nothing removed "
               f"(--apply removes them)")
    if args.format == "json":
        print(json.dumps({"store": store, "applied": bool(args.apply), "bytes": freed, "files": [
            asdict(c) for c in plan.candidates], "clusters": [
            {"cluster": r.cluster, "host": r.host, "seen_at": int(r.seen_at),
             "stale": r.stale(now=now, stale_days=args.stale_days)} for r in plan.records]}, indent=2, sort_keys=True))
        return EXIT_OK
    print_table(["NAME", "FILE", "SIZE_MB", "LAST_REFERENCED_BY", "STATUS"],
                [[c.name, c.file, f"{mb(c.size):.1f}", c.last_referenced_by, c.status] for c in plan.candidates])
    print(summary, flush=True)
    return EXIT_OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    g = sub.add_parser("gc", help="head node: list (and with --apply remove) store files no live cluster record "
                                  "names, no process here has open and no node's lease holds, after a grace period")
    g.add_argument("--store", required=True)
    g.add_argument("--apply", action="store_true", help="remove them (default: dry run, a table of what would go)")
    g.add_argument("--grace-hours", type=float, default=DEFAULT_GRACE_HOURS, metavar="H",
                   help=f"keep a file this long after gc first saw it unreferenced (default {DEFAULT_GRACE_HOURS:g})")
    g.add_argument("--stale-days", type=float, default=DEFAULT_STALE_DAYS, metavar="D",
                   help="a cluster record not refreshed for this long is a cluster that is gone "
                        f"(default {DEFAULT_STALE_DAYS:g})")
    g.add_argument("--scontrol", default=SCONTROL, metavar="PATH",
                   help=f"this cluster's scontrol: leases of its nodes' ended jobs hold nothing (default {SCONTROL})")
    g.add_argument("--lease-days", type=float, default=DEFAULT_LEASE_DAYS, metavar="D",
                   help=f"a job's lease older than this no longer protects its file (default {DEFAULT_LEASE_DAYS:g})")
    g.add_argument("--format", choices=("table", "json"), default="table")
    g.add_argument("--proc", default="/proc", help=argparse.SUPPRESS)
