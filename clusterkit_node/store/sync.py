"""``clusterkit_node.pyz sync``: bring the store in step with the lock (head node).

Why: a present image is skipped after a stat and a manifest lookup only (no hashing, no subprocess),
so a re-run on every node update costs milliseconds even with tens of GB in the store. A ``.sqsh``
whose size differs from the manifest (truncated or replaced) is re-imported; ``--verify-all``
additionally runs ``unsquashfs -s`` and a superblock/size check on every present image (slower, reads
metadata) and compares each file's sha256 with the one recorded when it was published (reads it all).
Every present image's ``lstat`` is also compared with the sync's own record of what it published
(published.py, in the never-exported staging directory): a file whose identity changed (written,
replaced, touched by an FSx import) is re-hashed under the lock; the same content is recorded again, other
content is logged as an error with both hashes, taken out of service and re-imported (``recheck``).
Only images that need work take the lock, and they are planned again under it (another
sync may have finished them meanwhile). A store still holding the previous layout's lock or node
fingerprints takes the lock once to move them out (debris.migrate_legacy). Who holds the lock when, and
what readers see meanwhile: docs/store-concurrency.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import time
from dataclasses import dataclass
from types import FrameType
from typing import Dict, List, Optional, Sequence, Tuple

from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, UsageError, error, log, mb, print_table, warn
from clusterkit_node.contract.lock import LockedImage, load_image_lock
from clusterkit_node.image.squashfs import check_squashfs, content_sha256
from clusterkit_node.image.versions import expect_problems
from clusterkit_node.store.atomic_files import file_size
from clusterkit_node.store.cluster_records import (
    DEFAULT_STALE_DAYS,
    ClusterRecord,
    NameCheck,
    check_cluster,
    name_conflicts,
    read_records,
    record_images,
    same_images,
    write_cluster_record,
)
from clusterkit_node.store.concurrency import PLAN_AGAIN_UNDER_THE_LOCK, require_sync_lock, sync_lock, try_sync_lock
from clusterkit_node.store.debris import clean_debris, legacy_present, migrate_legacy
from clusterkit_node.store.disk_preflight import preflight
from clusterkit_node.store.image_import import Result, import_image
from clusterkit_node.store.manifest import write_manifest
from clusterkit_node.store.published import changes
from clusterkit_node.store.stable_names import drop_stable_name, image_dir_problem, point_stable_name, stable_name_ok
from clusterkit_node.store.staging import ensure_inuse_dir, ensure_store
from clusterkit_node.store.sync_config import DEFAULT_HEARTBEAT, SyncConfig, enroot_setting, enroot_version
from clusterkit_node.store.sync_state import SyncState, load_state, peek_state, record_published, unpublish


@dataclass
class Plan:
    """What one image needs. action: none | relink | promote | demote | adopt | import | reimport
    (recorded but failed a check: taken out of service first) | recheck (identity changed since
    publish, or never recorded: re-hash) | rejected."""

    action: str
    reason: str = ""


def plan_image(store: str, state: SyncState, img: LockedImage, verify: bool) -> Plan:
    """Decide with two lstats and dictionary lookups only (the O(1) path); ``verify`` adds the
    unsquashfs/superblock check and the sha256 of present files."""
    manifest = state.manifest
    path = os.path.join(store, img.rel_file)
    entry = manifest["images"].get(img.name)
    recorded = bool(entry and entry.get("digest") == img.digest and entry.get("file") == img.rel_file)
    escape = image_dir_problem(store, img)
    if escape:  # never follow it: whatever is behind it is outside the store
        return Plan("reimport" if recorded else "import", escape)
    size = file_size(path)
    rejected = manifest.get("rejected", {}).get(img.name)
    if entry and recorded:
        if size is None:
            return Plan("reimport", "missing (or not a regular file) although recorded in the manifest")
        if size != entry.get("size"):
            return Plan("reimport", f"size {size} differs from the manifest's {entry.get('size')} "
                                    f"(truncated or replaced)")
        changed = identity_change(state, img, path)
        if changed:
            return Plan("recheck", changed)
        if verify:
            ok, detail = check_squashfs(path)
            if not ok:
                return Plan("reimport", f"--verify-all: {detail}")
            if content_sha256(path) != state.published[img.rel_file]["sha256"]:
                return Plan("reimport", "--verify-all: content differs from the sha256 recorded at import "
                                        "(same-size corruption)")
        problems = expect_problems(img.expect, entry.get("versions", {}))
        if problems:
            return Plan("demote", "; ".join(problems))
        if not stable_name_ok(store, img):
            return Plan("relink", "stable name missing or pointing elsewhere")
        return Plan("none")
    if rejected and rejected.get("digest") == img.digest and rejected.get("file") == img.rel_file \
            and size is not None and size == rejected.get("size"):
        changed = identity_change(state, img, path)
        if changed:
            return Plan("recheck", changed)
        problems = expect_problems(img.expect, rejected.get("versions", {}))
        if problems:
            return Plan("rejected", "; ".join(problems))
        return Plan("promote", "expectations now met")
    if size is not None:
        return Plan("adopt", "file present but not recorded (interrupted run?)")
    return Plan("import", "not in the store")


def identity_change(state: SyncState, img: LockedImage, path: str) -> str:
    """Why the file must be re-hashed ('' if not): no record of it, or its lstat differs from the one
    recorded at publish."""
    entry = state.published.get(img.rel_file)
    if not entry or entry.get("digest") != img.digest:
        return "not in the sync's record of published files (published by an older ClusterKit, or the record " \
               "was lost): hashing it once to record it"
    diff = changes(entry, os.lstat(path))
    return f"changed since it was published ({', '.join(diff)}): re-hashing it" if diff else ""


class Stopped(BaseException):
    """SIGTERM arrived (systemctl stop, shutdown): unwinds the sync (enroot is killed on the way) so the
    journal gets a line saying so instead of nothing."""


def _stopped(signum: int, _frame: Optional[FrameType]) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second SIGTERM must not interrupt the line below
    raise Stopped()


def cmd_sync(args: argparse.Namespace) -> int:
    """``sync``; a SIGTERM ends it with one line, then the process dies by that signal, as systemd expects."""
    doing = ["planning"]
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        return sync_images(args, doing)
    except Stopped:
        error(f"sync stopped by SIGTERM (systemctl stop or shutdown) while {doing[0]}: nothing half-imported is "
              f"published; the next sync removes the partial files and resumes")
    finally:  # None: a handler not set from Python, which cannot be restored from here
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    return EXIT_FAILED  # not reached


def sync_images(args: argparse.Namespace, doing: List[str]) -> int:
    """Plan every locked image without the lock, then (only when there is work, migration or a changed record)
    plan again and do the work under it; doing[0] says what is under way."""
    lock = load_image_lock(args.lock)
    images = sorted(lock.images, key=lambda image: image.name)
    cluster = check_cluster(lock.cluster, f"{args.lock}: cluster")
    store = os.path.abspath(args.store)
    env = dict(os.environ)
    cfg = SyncConfig(store=store, retries=max(0, args.retries), backoff=max(0.0, args.backoff),
                     verify_all=args.verify_all, env=env,
                     squash_options=enroot_setting("ENROOT_SQUASH_OPTIONS", env),
                     heartbeat=max(0.0, args.heartbeat))
    ensure_store(store)
    results: Dict[str, Result] = {}
    names = NameRule(store=store, cluster=cluster, stale_days=args.stale_days)
    check, wanted, own = names.check(images, quiet=True)
    pending = [img for img, _ in plan_all(store, peek_state(store), unrefused(images, check), cfg.verify_all,
                                          results)]
    # A record that changes is written under the lock BEFORE any image is planned there: a gc waiting for the
    # lock then sees this cluster's files as referenced, and one that ran before cannot have removed a file this
    # run found present, because everything is planned again under the lock.
    record_changed = not same_images(own, wanted)
    if pending or legacy_present(store) or record_changed:
        with sync_lock(store):
            check = sync_locked(cfg, names, images, pending, record_changed, results, doing)
    else:
        check, wanted, own = names.check(images)  # its warnings (the locked branch says them there)
        if due(own, wanted):  # the no-op stays lock- and write-free while the record is fresh
            with try_sync_lock(store) as held:
                if held:
                    write_cluster_record(store, cluster=cluster, images=wanted, synced_at=time.time(),
                                         seen_at=time.time())
                else:
                    log("the sync lock is held (another cluster's sync or a gc): this cluster's record is "
                        "unchanged; its seen_at is refreshed by the next run or the heartbeat")
    return report(images, results, check)


def unrefused(images: Sequence[LockedImage], check: NameCheck) -> List[LockedImage]:
    return [img for img in images if img.name not in check.refused]


def plan_all(store: str, state: SyncState, images: Sequence[LockedImage], verify: bool,
             results: Dict[str, Result], concurrent: Sequence[LockedImage] = ()) -> List[Tuple[LockedImage, Plan]]:
    """Plan each image: one that needs nothing (present, rejected) gets its result here, the others come back as
    work. concurrent: the images an earlier look found pending (present now: a concurrent sync imported them)."""
    work: List[Tuple[LockedImage, Plan]] = []
    for img in images:
        plan = plan_image(store, state, img, verify)
        if plan.action == "none":
            results[img.name] = Result(img, "present", state.manifest["images"][img.name]["size"],
                                       "imported by a concurrent sync" if img in concurrent else "")
        elif plan.action == "rejected":
            results[img.name] = Result(img, "rejected", state.manifest["rejected"][img.name]["size"], plan.reason)
        else:
            work.append((img, plan))
    return work


def sync_locked(cfg: SyncConfig, names: "NameRule", images: List[LockedImage], pending: List[LockedImage],
                record_changed: bool, results: Dict[str, Result], doing: List[str]) -> NameCheck:
    """The locked part of a sync: the cluster record first, debris, then every image that may need work planned
    again (rule plan-again-under-the-lock) and its work done. Returns the name check made under the lock."""
    store, env = cfg.store, cfg.env
    require_sync_lock(store, "syncing", PLAN_AGAIN_UNDER_THE_LOCK)
    check, wanted, own = names.check(images)
    if due(own, wanted):
        write_cluster_record(store, cluster=names.cluster, images=wanted, synced_at=time.time(),
                             seen_at=time.time())
    ensure_inuse_dir(store)
    migrate_legacy(store)
    clean_debris(store)
    state = load_state(store)  # another sync may have finished meanwhile
    # a changed record: everything again (a gc that ran before the record was written may have removed any file)
    work = plan_all(store, state, unrefused(images if record_changed else pending, check), cfg.verify_all,
                    results, concurrent=pending)
    to_import = [img for img, plan in work if plan.action in ("import", "reimport")]
    # a recheck re-imports only what turns out changed: it needs enroot, not the disk preflight (a
    # store an older ClusterKit published is all rechecks once, and must not need room for a copy)
    rechecks = any(p.action == "recheck" for _, p in work)
    tools = (["enroot"] if to_import or rechecks else []) + \
        (["unsquashfs"] if any(p.action != "relink" for _, p in work) else [])
    missing = [t for t in tools if shutil.which(t, path=env.get("PATH")) is None]
    if missing:
        raise UsageError([f"{' and '.join(missing)} not found on PATH {env.get('PATH', '')} "
                          f"(install enroot and squashfs-tools on the head node)"])
    problems = preflight(cfg, to_import)
    if problems:
        raise UsageError(problems)
    if to_import or rechecks or any(p.action == "adopt" for _, p in work):
        cfg.enroot_version = enroot_version(env)
    for img, plan in work:
        log(f"{img.name}: {plan.action} ({plan.reason})")
        doing[0] = f"{img.name}: {plan.action}"
        results[img.name] = apply_plan(cfg, state, img, plan)
    return check


def report(images: List[LockedImage], results: Dict[str, Result], check: NameCheck) -> int:
    """The table of every image, one error line per failure; the exit code."""
    for name, line in check.refused.items():
        img = next(i for i in images if i.name == name)
        results[name] = Result(img, "refused", 0, line)
    rows = []
    for img in images:
        r = results[img.name]
        status = "failed" if r.status == "rejected" else r.status
        detail = f"rejected: {r.detail}" if r.status == "rejected" else r.detail
        rows.append([img.name, img.short, status, f"{mb(r.size):.1f}", detail])
    print_table(["NAME", "DIGEST", "STATUS", "SIZE_MB", "DETAIL"], rows)
    failed = [r for r in results.values() if r.status in ("failed", "rejected")]
    for r in failed:
        error(f"{r.img.name}: {r.detail}")
    for r in results.values():
        if r.status == "refused":
            error(r.detail)
    return EXIT_FAILED if failed or check.refused else EXIT_OK


# A record whose images are current is rewritten only when its seen_at is older than this: the sync runs every
# 15 minutes and its no-op must stay a few lstats; the hourly heartbeat refreshes seen_at too.
REFRESH_SECONDS = 3600


def due(own: Optional[ClusterRecord], wanted: List[Dict[str, str]]) -> bool:
    """Must this run (re)write the cluster's record? When it names other images, or its seen_at is old."""
    return not same_images(own, wanted) or own is None or time.time() - own.seen_at > REFRESH_SECONDS


@dataclass
class NameRule:
    """The one-name-one-digest rule against the other clusters' records (cluster_records.name_conflicts)."""

    store: str
    cluster: str
    stale_days: float

    def check(self, images: List[LockedImage], quiet: bool = False
              ) -> Tuple[NameCheck, List[Dict[str, str]], Optional[ClusterRecord]]:
        """(what is refused, the record this cluster should have, the record it has). A refused image keeps the
        entry this cluster's record had for its name (its jobs may still use that file: gc must keep it)."""
        records, problems = read_records(self.store)
        check = name_conflicts(images, records, cluster=self.cluster, now=time.time(), stale_days=self.stale_days)
        if not quiet:
            for line in problems:
                warn(f"{line}: not checked against this cluster's image names (gc refuses to run until it is fixed)")
            for line in check.warnings:
                warn(line)
        own = next((r for r in records if r.cluster == self.cluster), None)
        wanted = record_images([i for i in images if i.name not in check.refused])
        for name in check.refused:
            kept = own.image(name) if own else None
            if kept is not None:
                wanted.append({"name": kept.name, "digest": kept.digest, "file": kept.file})
        return check, sorted(wanted, key=lambda e: e["name"]), own


def apply_plan(cfg: SyncConfig, state: SyncState, img: LockedImage, plan: Plan) -> Result:
    """Do what plan says for img (under the sync lock)."""
    store, manifest = cfg.store, state.manifest
    require_sync_lock(store, f"{img.name}: {plan.action}")
    if plan.action == "none":
        return Result(img, "present", manifest["images"][img.name]["size"])
    if plan.action == "rejected":
        return Result(img, "rejected", manifest["rejected"][img.name]["size"], plan.reason)
    if plan.action == "recheck":
        return recheck(cfg, state, img)
    if plan.action == "relink":
        point_stable_name(store, img)
        return Result(img, "present", manifest["images"][img.name]["size"], "stable name repaired")
    if plan.action == "promote":
        entry = manifest["rejected"].pop(img.name)
        entry["status"] = "ok"
        entry.pop("reason", None)
        point_stable_name(store, img)
        manifest["images"][img.name] = entry
        write_manifest(store, manifest)
        return Result(img, "present", entry["size"], "now meets expect; stable name set")
    if plan.action == "demote":
        entry = manifest["images"].pop(img.name)
        entry["status"], entry["reason"] = "rejected", plan.reason
        drop_stable_name(store, img)
        manifest.setdefault("rejected", {})[img.name] = entry
        write_manifest(store, manifest)
        return Result(img, "rejected", entry["size"], plan.reason)
    if plan.action == "reimport":
        unpublish(store, state, img, plan.reason)
    return import_image(cfg, state, img, adopt=plan.action == "adopt")


def recheck(cfg: SyncConfig, state: SyncState, img: LockedImage) -> Result:
    """Re-hash a file whose identity changed (or was never recorded) against the sha256 of the record
    (else the manifest's, written at import by an older ClusterKit): the same content is recorded
    again and planned as usual; other content is an error naming both hashes, and the file is taken
    out of service and re-imported by digest."""
    store, manifest = cfg.store, state.manifest
    path = os.path.join(store, img.rel_file)
    section = "images" if manifest["images"].get(img.name, {}).get("digest") == img.digest else "rejected"
    entry = manifest[section][img.name]
    record = state.published_entry(img.rel_file)
    expected = record.get("sha256") if record.get("digest") == img.digest else entry.get("sha256", "")
    actual = content_sha256(path)
    if not expected:  # an older ClusterKit recorded no sha256: the squashfs check is all there is
        ok, detail = check_squashfs(path)
        expected = actual if ok else f"none recorded ({detail})"
    if actual != expected:
        error(f"{img.name}: {path} changed after it was published: sha256 {actual}, recorded {expected}; "
              f"taking it out of service and re-importing {img.digest}")
        if section == "rejected":
            del manifest["rejected"][img.name]
        unpublish(store, state, img, "content changed after publish")
        return import_image(cfg, state, img, adopt=False)
    record_published(store, state, img, actual)
    log(f"{img.name}: {path}: content unchanged (sha256 {actual[:12]}); recorded its current identity")
    plan = plan_image(store, state, img, cfg.verify_all)
    if plan.action == "recheck":  # changed again while it was hashed: take no chances
        plan = Plan("reimport", plan.reason)
    return apply_plan(cfg, state, img, plan)


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    s = sub.add_parser("sync", help="import missing locked images into the store (head node)")
    s.add_argument("--lock", required=True, help="cluster_configs/<name>.images.lock")
    s.add_argument("--store", required=True, help="image store directory, e.g. /fsx/containers")
    s.add_argument("--retries", type=int, default=2,
                   help="extra attempts per image after a failed import (default 2)")
    s.add_argument("--backoff", type=float, default=15.0,
                   help="seconds before the first retry, doubled each time (default 15)")
    s.add_argument("--verify-all", action="store_true",
                   help="also check every present image with unsquashfs -s (reads metadata)")
    s.add_argument("--heartbeat", type=float, default=DEFAULT_HEARTBEAT, metavar="SECONDS",
                   help="seconds between progress lines (time, bytes so far, throughput) while an image "
                        f"imports (default {DEFAULT_HEARTBEAT:g}; 0: none)")
    s.add_argument("--stale-days", type=float, default=DEFAULT_STALE_DAYS, metavar="DAYS",
                   help="another cluster's record not refreshed for this long no longer pins its image names "
                        f"(default {DEFAULT_STALE_DAYS:g})")
