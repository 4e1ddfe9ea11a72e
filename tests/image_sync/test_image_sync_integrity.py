"""No node serves a store file that changed behind the sync's back (issue #26, node side).

The sync keeps its own record of every published file (size, sha256, lstat identity) in the staging
directory FSx never exports; the pyxis importer (``get URI``, run here as pyxis runs it) compares the file's
lstat with it before answering, and the head node's sync re-hashes a file whose identity changed and
takes it out of service when its content differs.

Real: the node zipapp, the real enroot importing from the loopback registry, squashfs-tools, the importer
run as a subprocess. Stand-in: the registry (faults injected there)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import time

from test_image_sync_faults import one_line


def published(sandbox, name: str = "app"):
    return sandbox.store / sandbox.manifest()["images"][name]["file"]


def refused(proc) -> str:
    assert proc.returncode == 1 and proc.stdout == "", proc
    (line,) = proc.stderr.splitlines()
    assert line.startswith("clusterkit importer: error: ") and "Traceback" not in line
    return line


def test_a_file_changed_behind_the_syncs_back_is_served_by_no_node_and_the_sync_replaces_it(sandbox):
    sandbox.set_spec({"test/app": {"big_mb": 1}})
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    final = published(sandbox)
    uri = sandbox.locked_uri("app")
    answer = sandbox.importer(uri)
    assert (answer.returncode, answer.stdout) == (0, f"/store/{final.parent.name}/{final.name}\n"), answer.stderr
    record = json.loads((sandbox.staging / "published.json").read_text())["files"]
    recorded_sha = record[f"app/{final.name}"]["sha256"]
    assert recorded_sha == sandbox.manifest()["images"]["app"]["sha256"]
    time.sleep(0.01)  # a new ctime even where timestamps are coarse
    with open(final, "r+b") as fh:  # same size, same inode: only what lstat shows of the write is left
        fh.seek(final.stat().st_size // 2)
        chunk = fh.read(64)
        fh.seek(-64, 1)
        fh.write(bytes(b ^ 0xFF for b in chunk))
    line = refused(sandbox.importer(uri))
    assert f"refusing /store/app/{final.name} (locked app): it changed after the head node's image sync " \
           f"published it (" in line and "ctime" in line and "systemctl start clusterkit-image-sync" in line
    proc = sandbox.sync()  # the plain sync (no --verify-all): the identity check finds it
    assert proc.returncode == 0, proc.stderr
    err = one_line(proc.stderr)
    assert f"{final} changed after it was published: sha256 " in err and f"recorded {recorded_sha}" in err
    actual = err.split("sha256 ", 1)[1].split(",", 1)[0]
    assert len(actual) == 64 and actual != recorded_sha
    assert len(sandbox.imports()) == 2, "re-imported by digest"
    assert (sandbox.staging / "quarantine").is_dir() and len(list((sandbox.staging / "quarantine").iterdir())) == 1
    assert sandbox.importer(uri).returncode == 0
    assert sandbox.sync().returncode == 0 and len(sandbox.imports()) == 2, "then the fast path again"


def test_a_new_identity_with_the_same_content_is_hashed_once_and_recorded_again(sandbox):
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    final = published(sandbox)
    copy = sandbox.root / "copy.sqsh"
    shutil.copy2(final, copy)
    os.replace(copy, final)  # same bytes, another inode (what a restore from S3 would look like)
    assert "changed after the head node's image sync published it (ino" in refused(sandbox.importer(
        sandbox.locked_uri("app")))
    proc = sandbox.sync()
    assert proc.returncode == 0 and " error: " not in proc.stderr, proc.stderr
    assert "content unchanged" in proc.stdout and len(sandbox.imports()) == 1, "no re-import"
    assert sandbox.importer(sandbox.locked_uri("app")).returncode == 0


def test_a_store_without_a_record_is_hashed_once_and_served_again(sandbox):
    """A store an older ClusterKit published has no record: the importer refuses, the next sync records."""
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    (sandbox.staging / "published.json").unlink()
    assert "published.json: missing" in refused(sandbox.importer(sandbox.locked_uri("app")))
    proc = sandbox.sync()
    assert proc.returncode == 0 and "hashing it once to record it" in proc.stdout, proc.stdout
    assert sandbox.importer(sandbox.locked_uri("app")).returncode == 0 and len(sandbox.imports()) == 1


def test_an_unrecorded_truncated_image_is_taken_out_of_service_when_its_reimport_fails(sandbox):
    """docs/images.md: a truncated image is taken out of service before it is re-imported. Also when the
    manifest does not record it (lost, rebuilt): adopting it fails its check, and the failing re-import
    must not leave it under its name, its stable name, or answered by the importer."""
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    final = published(sandbox)
    (sandbox.store / "manifest.json").unlink()
    with open(final, "r+b") as fh:
        fh.truncate(final.stat().st_size // 2)
    sandbox.set_spec({"test/app": {"fail": "always"}})
    proc = sandbox.sync("--retries", "0")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert not os.path.lexists(sandbox.store / "app.sqsh"), "the stable name must not serve it"
    assert not os.path.lexists(final), "taken out of the store"
    (aside,) = (sandbox.staging / "quarantine").iterdir()
    assert aside.name.startswith(f"app+{final.name}.")
    assert "is not in the store yet" in refused(sandbox.importer(sandbox.locked_uri("app")))
    sandbox.set_spec({})
    assert sandbox.sync().returncode == 0
    assert sandbox.importer(sandbox.locked_uri("app")).returncode == 0


def test_an_image_directory_that_is_a_symlink_is_never_followed_out_of_the_store(sandbox):
    sandbox.write_lock([sandbox.image("app")])
    outside = sandbox.root / "outside"
    outside.mkdir()
    sandbox.store.mkdir()
    (sandbox.store / "app").symlink_to(outside)
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert list(outside.iterdir()) == [], "nothing lands outside the store (FSx would never export it)"
    assert (sandbox.store / "app").is_dir() and not (sandbox.store / "app").is_symlink()
    assert published(sandbox).is_file() and sandbox.unpublished() == []
    assert "is a symlink: the image directory must be a real directory" in proc.stdout
    # later: the published directory moved out and linked back: the importer refuses, the sync re-imports
    moved = sandbox.root / "moved"
    os.replace(sandbox.store / "app", moved)
    (sandbox.store / "app").symlink_to(moved)
    assert "its directory app/ is a symlink" in refused(sandbox.importer(sandbox.locked_uri("app")))
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert not (sandbox.store / "app").is_symlink() and published(sandbox).is_file()
    assert sandbox.unpublished() == [] and len(sandbox.imports()) == 2
    assert sandbox.importer(sandbox.locked_uri("app")).returncode == 0


def test_the_importer_trusts_only_a_record_no_user_can_write(sandbox):
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    record = sandbox.staging / "published.json"
    record.chmod(0o666)
    assert "only root (the head node's image sync) may write it" in refused(
        sandbox.importer(sandbox.locked_uri("app")))
    record.chmod(0o644)
    os.chown(record, 27001, 27001)
    assert "owned by uid 27001" in refused(sandbox.importer(sandbox.locked_uri("app")))
    proc = sandbox.sync()  # the sync does not trust it either: it re-hashes and writes its own
    assert proc.returncode == 0 and "not trusted" in proc.stderr, proc.stderr
    assert record.stat().st_uid == 0 and sandbox.importer(sandbox.locked_uri("app")).returncode == 0


def test_a_sync_stopped_by_sigterm_says_so_in_one_line(sandbox):
    sandbox.set_spec({"test/app": {"hold": True}})
    sandbox.write_lock([sandbox.image("app")])
    proc = sandbox.popen_sync()
    deadline = time.monotonic() + 60
    while not list((sandbox.staging / "partial").glob("app.*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # enroot is downloading
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, (out, err)
    line = one_line(err)
    assert "sync stopped by SIGTERM (systemctl stop or shutdown) while app: import" in line
    sandbox.set_spec({})
    assert sandbox.sync().returncode == 0 and sandbox.unpublished() == []


def test_the_deep_checks_trust_the_record_not_a_manifest_that_vouches_for_a_changed_file(sandbox):
    """manifest.json is exported state: one rewritten to vouch for changed bytes does not fool the deep
    checks, which compare with the sha256 in the sync's own record."""
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    final = published(sandbox)
    with open(final, "r+b") as fh:
        fh.seek(final.stat().st_size // 2)
        fh.write(b"\xff" * 64)
    sandbox.as_bit_rot(final)
    manifest = sandbox.manifest()
    manifest["images"]["app"]["sha256"] = hashlib.sha256(final.read_bytes()).hexdigest()
    (sandbox.store / "manifest.json").write_text(json.dumps(manifest))
    deep = sandbox.run("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock), "--deep")
    assert deep.returncode == 1 and "is corrupt: sha256" in one_line(deep.stderr)
    assert "content differs from the sha256 recorded at import" in sandbox.fast_sync_then_verify_all().stdout
