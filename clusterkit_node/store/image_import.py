"""Bring one image into the store: ``enroot import`` with retries and backoff (or adopt a complete
file an interrupted run left unrecorded), check it, read its versions, publish it, record it.

While enroot runs, its own lines and a heartbeat (time, bytes so far, throughput) go to the log and
a progress record into the work directory for ``status`` (progress.py).

Why: the import writes to ``<staging>/partial/<name>.<hex>.sqsh.partial-<pid>/image.sqsh``, outside the store
that FSx exports to S3, and only a file that passed the squashfs check is renamed to its final name
(same file system: one atomic rename, exported once); ``<store>/<name>/`` is created only then, so a
failed import leaves nothing in the store. An image whose versions contradict ``expect`` is kept but
recorded as rejected and never gets the stable name.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from clusterkit_node.contract.console import error, format_versions, log, mb, now_utc, warn
from clusterkit_node.contract.enroot_uri import import_uri
from clusterkit_node.contract.layout import IMPORT_FILE
from clusterkit_node.contract.lock import LockedImage
from clusterkit_node.image.declared_versions import disagreements
from clusterkit_node.image.image_env import read_nvidia_settings
from clusterkit_node.image.nvidia_hook import plan as hook_plan
from clusterkit_node.image.squashfs import check_squashfs, content_sha256
from clusterkit_node.image.versions import expect_problems, read_versions
from clusterkit_node.store.atomic_files import ensure_dir, file_size, fsync_dir
from clusterkit_node.store.manifest import write_manifest
from clusterkit_node.store.progress import ImportProgress, drop_record, enroot_dirs
from clusterkit_node.store.stable_names import drop_stable_name, ensure_image_dir, point_stable_name, quarantine
from clusterkit_node.store.staging import partial_path, remove_partial
from clusterkit_node.store.sync_config import SyncConfig
from clusterkit_node.store.sync_state import SyncState, record_published, take_out_of_service


@dataclass
class Result:
    img: LockedImage
    status: str  # present | imported | failed | rejected
    size: int = 0
    detail: str = ""


def manifest_entry(cfg: SyncConfig, img: LockedImage, size: int, compressor: str,
                   versions: Dict[str, str], status: str, reason: str = "", sha256: str = "",
                   nvidia: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    entry = {
        "digest": img.digest,
        "file": img.rel_file,
        "size": size,
        "sha256": sha256,
        "compression": compressor,
        "squash_options": cfg.squash_options,
        "enroot_version": cfg.enroot_version,
        "synced_at": now_utc(),
        "source": img.source,
        "versions": versions,
        "status": status,
    }
    if nvidia is not None:  # the NVIDIA_* settings of the image's /etc/environment (absent: not read)
        entry["nvidia"] = nvidia
    if reason:
        entry["reason"] = reason
    return entry


def run_import(cfg: SyncConfig, img: LockedImage, tmp: str, attempt: str = "1/1") -> Tuple[bool, str]:
    """One ``enroot import`` attempt into tmp, with the URI form this enroot parses; (ok, output tail).

    enroot's output (stdout and stderr) goes to the log line by line as it comes, with a heartbeat line
    every ``cfg.heartbeat`` seconds (progress.py); its last lines make the failure message."""
    cmd = ["enroot", "import", "-o", tmp, import_uri(img.enroot_uri, cfg.enroot_version)]
    progress = ImportProgress(img.name, os.path.dirname(tmp), enroot_dirs(cfg.env), cfg.heartbeat, attempt)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=cfg.env)
    except OSError as exc:
        return False, f"cannot run enroot: {exc}"
    returncode = progress.follow(proc)
    tail = " | ".join(progress.tail)
    if returncode != 0:
        return False, f"enroot import exited {returncode}: {tail}"
    if not os.path.isfile(tmp):
        return False, f"enroot import exited 0 but wrote no {tmp}: {tail}"
    return True, tail


def adoptable(state: SyncState, img: LockedImage, final: str) -> Tuple[bool, str, str]:
    """(ok, compressor or why not, sha256) for a final file no manifest entry vouches for: it must pass
    the squashfs check and, when the record knows it, still hold the content recorded at publish."""
    ok, detail = check_squashfs(final)
    if not ok:
        return False, detail, ""
    sha256 = content_sha256(final)
    recorded = state.published_entry(img.rel_file)
    if recorded.get("digest") == img.digest and recorded.get("sha256") != sha256:
        return False, f"sha256 {sha256} is not the {recorded.get('sha256')} recorded at publish", ""
    return True, detail, sha256


def import_image(cfg: SyncConfig, state: SyncState, img: LockedImage, adopt: bool) -> Result:
    """Import (or adopt an unrecorded final file), check, read versions, publish, record (rule publish-order:
    the file at its final name, its published.json entry, the stable name, the manifest entry)."""
    store, manifest = cfg.store, state.manifest
    final = os.path.join(store, img.rel_file)
    work = partial_path(store, img)  # exists for the whole attempt: `status` shows it in progress
    tmp = os.path.join(work, IMPORT_FILE)
    started = time.monotonic()
    source = final if adopt else tmp
    compressor = ""
    sha256 = ""
    if adopt:
        ok, detail, sha256 = adoptable(state, img, final)
        if ok:
            compressor = detail
            log(f"{img.name}: adopting {final} (complete file left unrecorded by an interrupted run)")
        else:
            # out of service BEFORE the import: if it fails, the image is missing, never served broken
            error(f"{img.name}: {final} is unusable ({detail}); taking it out of service and importing again")
            take_out_of_service(store, state, img, detail)
            adopt, source = False, tmp
    if not adopt:
        attempts = cfg.retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            remove_partial(work)
            ensure_dir(work)
            log(f"{img.name}: importing {import_uri(img.enroot_uri, cfg.enroot_version)} "
                f"(enroot {cfg.enroot_version}; attempt {attempt}/{attempts})")
            ok, last = run_import(cfg, img, tmp, f"{attempt}/{attempts}")
            if ok:
                ok, detail = check_squashfs(tmp)
                if ok:
                    compressor = detail
                    break
                last = f"imported file failed the squashfs check: {detail}"
            warn(f"{img.name}: attempt {attempt}/{attempts} failed: {last}")
            remove_partial(work)
            if attempt < attempts:
                delay = cfg.backoff * (2 ** (attempt - 1))
                log(f"{img.name}: retrying in {delay:g} s")
                time.sleep(delay)
        else:
            return Result(img, "failed", detail=f"{attempts} attempts failed; last: {last}")
        os.chmod(tmp, 0o644)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        versions = read_versions(source)
    except RuntimeError as exc:
        if not adopt:
            remove_partial(work)
        return Result(img, "failed", detail=f"cannot read versions: {exc}")
    env = read_nvidia_settings(source)
    if env.settings is None:
        warn(f"{img.name}: NVIDIA_* settings not recorded: {env.source}; each GPU node's fingerprint reads them")
    for key, (said, read) in sorted(disagreements(img.declared, versions).items()):
        warn(f"{img.name}: the image config declares {key} {said} (recorded in the lock), its binaries say {read}: "
             f"{read} counts")
    size = os.stat(source).st_size
    # just written (or adopted, hashed above): cheap now, the reference of the record and the deep checks
    sha256 = sha256 or content_sha256(source)
    if not adopt:
        ensure_image_dir(store, img)
        if os.path.lexists(final) and file_size(final) is None:
            quarantine(store, final, "not a regular file")
        os.replace(tmp, final)
        fsync_dir(os.path.dirname(final))
        drop_record(work)
        os.rmdir(work)
        fsync_dir(os.path.dirname(work))
    elif os.stat(final).st_mode & 0o777 != 0o644:  # chmod changes the ctime the record keeps: only if needed
        os.chmod(final, 0o644)
    record_published(store, state, img, sha256)  # before the manifest: the importer reads the record
    problems = expect_problems(img.expect, versions)
    if problems:
        reason = "; ".join(problems)
        drop_stable_name(store, img)
        if manifest["images"].get(img.name, {}).get("digest") == img.digest:
            del manifest["images"][img.name]
        manifest.setdefault("rejected", {})[img.name] = manifest_entry(
            cfg, img, size, compressor, versions, "rejected", reason, sha256, env.settings)
        write_manifest(store, manifest)
        return Result(img, "rejected", size, reason)
    point_stable_name(store, img)
    manifest["images"][img.name] = manifest_entry(cfg, img, size, compressor, versions, "ok", sha256=sha256,
                                                  nvidia=env.settings)
    manifest.get("rejected", {}).pop(img.name, None)
    write_manifest(store, manifest)
    elapsed = time.monotonic() - started
    rate = mb(size) / elapsed if elapsed > 0 else 0.0
    verb = "adopted" if adopt else "imported"
    log(f"{img.name}: {verb} {mb(size):.1f} MB in {elapsed:.1f} s ({rate:.1f} MB/s) "
        f"versions {format_versions(versions)}"
        + (f"; NVIDIA hook: {hook_plan(env.settings).summary()}" if env.settings is not None else ""))
    return Result(img, "imported", size, f"{elapsed:.1f} s, {rate:.1f} MB/s")
