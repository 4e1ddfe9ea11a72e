"""``clusterkit_node.pyz sync``: bring the store in step with the lock (head node).

Why: a present image is skipped after a stat and a manifest lookup only (no hashing, no subprocess),
so a re-run on every node update costs milliseconds even with tens of GB in the store. A ``.sqsh``
whose size differs from the manifest (truncated or replaced) is re-imported; ``--verify-all``
additionally runs ``unsquashfs -s`` and a superblock/size check on every present image (slower, reads
metadata) and compares each file's sha256 with the one recorded when it was published (reads it all).
Only images that need work take the lock, and they are planned again under it (another
sync may have finished them meanwhile). A store still holding the previous layout's lock or node
fingerprints takes the lock once to move them out (store.migrate_legacy).
"""
from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from .console import EXIT_FAILED, EXIT_OK, UsageError, error, log, mb, print_table
from .disk_preflight import preflight
from .image_import import Result, import_image
from .lock import LockedImage, load_lock
from .squashfs import check_squashfs, content_sha256
from .store import (
    MANIFEST_VERSION,
    clean_debris,
    drop_stable_name,
    ensure_store,
    file_size,
    legacy_present,
    load_manifest_for_sync,
    migrate_legacy,
    point_stable_name,
    read_manifest,
    stable_name_ok,
    sync_lock,
    unpublish,
    write_manifest,
)
from .sync_config import SyncConfig, enroot_setting, enroot_version
from .versions import expect_problems


@dataclass
class Plan:
    """What one image needs. action: none | relink | promote | demote | adopt | import | reimport
    (recorded but failed a check: taken out of service first) | rejected."""

    action: str
    reason: str = ""


def plan_image(store: str, manifest: Dict[str, Any], img: LockedImage, verify: bool) -> Plan:
    """Decide with a stat and dictionary lookups only (the O(1) path); ``verify`` adds the
    unsquashfs/superblock check of present files."""
    path = os.path.join(store, img.rel_file)
    size = file_size(path)
    entry = manifest["images"].get(img.name)
    rejected = manifest.get("rejected", {}).get(img.name)
    if entry and entry.get("digest") == img.digest and entry.get("file") == img.rel_file:
        if size is None:
            return Plan("reimport", "missing although recorded in the manifest")
        if size != entry.get("size"):
            return Plan("reimport", f"size {size} differs from the manifest's {entry.get('size')} "
                                    f"(truncated or replaced)")
        if verify:
            ok, detail = check_squashfs(path)
            if not ok:
                return Plan("reimport", f"--verify-all: {detail}")
            if entry.get("sha256") and content_sha256(path) != entry["sha256"]:
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
        problems = expect_problems(img.expect, rejected.get("versions", {}))
        if problems:
            return Plan("rejected", "; ".join(problems))
        return Plan("promote", "expectations now met")
    if size is not None:
        return Plan("adopt", "file present but not recorded (interrupted run?)")
    return Plan("import", "not in the store")


def cmd_sync(args: argparse.Namespace) -> int:
    images = load_lock(args.lock)
    store = os.path.abspath(args.store)
    env = dict(os.environ)
    cfg = SyncConfig(store=store, retries=max(0, args.retries), backoff=max(0.0, args.backoff),
                     verify_all=args.verify_all, env=env,
                     squash_options=enroot_setting("ENROOT_SQUASH_OPTIONS", env),
                     heartbeat=max(0.0, args.heartbeat))
    ensure_store(store)
    try:
        manifest = read_manifest(store)
    except ValueError:  # dealt with under the lock (load_manifest_for_sync)
        manifest = {"manifest_version": MANIFEST_VERSION, "images": {}, "rejected": {}}
    results: Dict[str, Result] = {}
    pending: List[LockedImage] = []
    for img in images:
        plan = plan_image(store, manifest, img, cfg.verify_all)
        if plan.action == "none":
            results[img.name] = Result(img, "present", manifest["images"][img.name]["size"])
        elif plan.action == "rejected":
            results[img.name] = Result(img, "rejected", manifest["rejected"][img.name]["size"],
                                       plan.reason)
        else:
            pending.append(img)
    if pending or legacy_present(store):
        with sync_lock(store):
            migrate_legacy(store)
            clean_debris(store)
            manifest = load_manifest_for_sync(store)  # another sync may have finished meanwhile
            work: List[Tuple[LockedImage, Plan]] = []
            for img in pending:
                plan = plan_image(store, manifest, img, cfg.verify_all)
                if plan.action == "none":
                    results[img.name] = Result(img, "present", manifest["images"][img.name]["size"],
                                               "imported by a concurrent sync")
                elif plan.action == "rejected":
                    results[img.name] = Result(img, "rejected", manifest["rejected"][img.name]["size"],
                                               plan.reason)
                else:
                    work.append((img, plan))
            to_import = [img for img, plan in work if plan.action in ("import", "reimport")]
            tools = (["enroot"] if to_import else []) + \
                (["unsquashfs"] if any(p.action in ("import", "reimport", "adopt") for _, p in work) else [])
            missing = [t for t in tools if shutil.which(t, path=env.get("PATH")) is None]
            if missing:
                raise UsageError([f"{' and '.join(missing)} not found on PATH {env.get('PATH', '')} "
                                  f"(install enroot and squashfs-tools on the head node)"])
            problems = preflight(cfg, to_import)
            if problems:
                raise UsageError(problems)
            if to_import or any(p.action == "adopt" for _, p in work):
                cfg.enroot_version = enroot_version(env)
            for img, plan in work:
                log(f"{img.name}: {plan.action} ({plan.reason})")
                results[img.name] = apply_plan(cfg, manifest, img, plan)
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
    return EXIT_FAILED if failed else EXIT_OK


def apply_plan(cfg: SyncConfig, manifest: Dict[str, Any], img: LockedImage, plan: Plan) -> Result:
    store = cfg.store
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
        unpublish(store, manifest, img, plan.reason)
    return import_image(cfg, manifest, img, adopt=plan.action == "adopt")
