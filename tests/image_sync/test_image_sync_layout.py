"""The store holds published content only; staging and housekeeping live in its sibling directory.

FSx exports everything under the store directory to S3 (data repository association), so the store may
hold only `<name>/<hex>.sqsh`, the `<name>.sqsh` symlinks and `manifest.json`; the lock, import temp
files, manifest/link/fingerprint temp files and node fingerprints live in `.<store>.clusterkit/` next
to it. Also: a store written by the previous layout (all of that inside the store) is migrated.

Real: the node zipapp (subprocess), squashfs-tools, flock held by another process, SIGKILL, rename, a
tmpfs mounted by root (skipped where mounting is not allowed), the real enroot importing from a loopback
registry (real_enroot.py). No FSx and no S3 here: that the association exports
exactly what is under the store is FSx's documented behaviour, not something these tests can observe.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.waiting import wait_for


def modes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): oct(stat.S_IMODE(p.lstat().st_mode))
            for p in [root, *root.rglob("*")]}


def fingerprint(sandbox, host: str) -> subprocess.CompletedProcess:
    return sandbox.run("fingerprint", "--store", str(sandbox.store), "--lock", str(sandbox.lock),
                       "--node-name", host, env=dict(sandbox.env, AWS_EC2_METADATA_DISABLED="true"))


def test_only_published_content_under_the_store_after_failed_and_killed_imports(sandbox):
    sandbox.write_lock([sandbox.image("good"), sandbox.image("bad"), sandbox.image("slow")])
    sandbox.set_spec({"test/bad": {"fail": "always"}, "test/slow": {"sleep": 60}})
    proc = sandbox.popen_sync("--retries", "1", start_new_session=True)
    partial_dir = sandbox.staging / "partial"
    partial = wait_for(lambda: list(partial_dir.glob("slow.*.sqsh.partial-*")) if partial_dir.exists() else [])
    assert partial[0].name == f"slow.{sandbox.image('slow')['digest'][7:]}.sqsh.partial-{proc.pid}"
    wait_for(lambda: any(m == "GET" and "test/slow/blobs/" in p for m, p, _ in sandbox.registry.fake.log))
    assert sandbox.unpublished() == [], "mid-import"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)

    assert sandbox.unpublished() == [], "after kill -9 mid-import and a failed import"
    assert sorted(p.name for p in sandbox.store.iterdir()) == ["good", "good.sqsh", "manifest.json"]
    assert [p.name for p in partial_dir.iterdir()] == [partial[0].name], "debris stays in staging"
    assert (sandbox.staging / "sync.lock").is_file()

    sandbox.set_spec({"test/bad": {"fail": "always"}})
    again = sandbox.sync("--retries", "0")
    assert again.returncode == 1, again.stderr  # bad still fails; slow is imported now
    assert f"removing stale temp file {partial[0]}" in again.stdout
    assert fingerprint(sandbox, "gpu-st-p5-1").returncode == 0
    assert fingerprint(sandbox, "gpu-st-p5-2").returncode == 0

    assert sandbox.unpublished() == []
    manifest = sandbox.manifest()
    assert sorted(manifest["images"]) == ["good", "slow"]
    published = sorted(p.relative_to(sandbox.store).as_posix() for p in sandbox.store.rglob("*"))
    assert published == sorted(["manifest.json", "good", "good.sqsh", manifest["images"]["good"]["file"],
                                "slow", "slow.sqsh", manifest["images"]["slow"]["file"]])
    # the sibling holds the lock, the record of published files, the (now empty) partial and tmp dirs and
    # the fingerprints
    assert modes(sandbox.staging) == {
        ".": "0o755", "sync.lock": "0o644", "published.json": "0o644", "partial": "0o755", "tmp": "0o755",
        "nodes": "0o755", "nodes/gpu-st-p5-1.json": "0o644", "nodes/gpu-st-p5-2.json": "0o644",
        "clusters": "0o755", "clusters/demo.json": "0o644", "inuse": "0o1777"}
    assert sandbox.staging.parent == sandbox.store.parent
    assert sandbox.staging.stat().st_dev == sandbox.store.stat().st_dev


def test_manifest_and_link_temp_files_are_staged_then_renamed_in(sandbox, image_store, stable_names, image_lock,
                                                                  monkeypatch):
    """write_manifest and point_stable_name write in <staging>/tmp and rename across directories."""
    sandbox.store.mkdir()
    img = image_lock.LockedImage(name="app", digest="sha256:" + "b" * 64,
                                 enroot_uri="docker://x@sha256:" + "b" * 64, source="x", compressed_size=1,
                                 registry="x", repository="x", platform="linux/amd64", expect={})
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((os.path.dirname(src), os.path.dirname(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(image_store.os, "replace", spy)
    image_store.write_manifest(str(sandbox.store), {"images": {}})
    stable_names.point_stable_name(str(sandbox.store), img)
    monkeypatch.undo()
    tmp = str(sandbox.staging / "tmp")
    assert seen == [(tmp, str(sandbox.store)), (tmp, str(sandbox.store))]
    assert os.readlink(sandbox.store / "app.sqsh") == "app/" + "b" * 64 + ".sqsh"
    assert json.loads((sandbox.store / "manifest.json").read_text()) == {"manifest_version": 1, "images": {}}
    assert not list((sandbox.staging / "tmp").iterdir())


def make_legacy_store(sandbox) -> dict:
    """A store as the previous image_sync left it: lock, fingerprints and temp files inside it."""
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    hexd = sandbox.image("app")["digest"][7:]
    dead = 2 ** 22 + 4321  # above pid_max's default: never a live process
    legacy = {
        ".sync.lock": "",
        f"app/.{hexd}.sqsh.partial-{dead}": "partial",
        f".manifest.json.tmp-{dead}": "{",
        f".app.sqsh.link-{dead}": None,  # a symlink
        ".nodes/gpu-st-p5-1.json": None,  # a real fingerprint, moved here below
        f".nodes/.gpu-st-p5-9.json.tmp-{dead}": "{",
    }
    assert fingerprint(sandbox, "gpu-st-p5-1").returncode == 0
    (sandbox.store / ".nodes").mkdir()
    os.replace(sandbox.staging / "nodes/gpu-st-p5-1.json", sandbox.store / ".nodes/gpu-st-p5-1.json")
    os.symlink(f"app/{hexd}.sqsh", sandbox.store / f".app.sqsh.link-{dead}")
    for rel, text in legacy.items():
        if text is not None:
            (sandbox.store / rel).write_text(text)
    old = time.time() - 3600
    os.utime(sandbox.store / f".nodes/.gpu-st-p5-9.json.tmp-{dead}", (old, old))
    os.unlink(sandbox.staging / "sync.lock")
    return legacy


def test_previous_layout_is_migrated_by_the_next_sync_even_with_nothing_to_import(sandbox):
    legacy = make_legacy_store(sandbox)
    assert sorted(sandbox.unpublished()) == sorted([*legacy, ".nodes"])
    drift = sandbox.run("drift", "--store", str(sandbox.store))
    assert drift.returncode == 0 and "queue gpu: 1 node(s)" in drift.stdout, "drift reads the old .nodes/"

    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert len(sandbox.imports()) == 1, "nothing imported again"
    assert f"removed {sandbox.store / '.sync.lock'}" in proc.stdout
    assert "moved 1 node fingerprint(s)" in proc.stdout
    assert sandbox.unpublished() == [], legacy
    assert sorted(p.name for p in (sandbox.staging / "nodes").iterdir()) == ["gpu-st-p5-1.json"]
    drift = sandbox.run("drift", "--store", str(sandbox.store))
    assert drift.returncode == 0 and "queue gpu: 1 node(s)" in drift.stdout

    before = {p: p.lstat().st_mtime_ns for d in (sandbox.store, sandbox.staging) for p in d.rglob("*")}
    assert sandbox.sync().returncode == 0
    after = {p: p.lstat().st_mtime_ns for d in (sandbox.store, sandbox.staging) for p in d.rglob("*")}
    assert after == before, "migrated once; the next re-sync is the lock-free no-op again"


def test_migration_waits_for_a_sync_of_the_previous_version_holding_the_old_lock(sandbox):
    make_legacy_store(sandbox)
    fd = os.open(sandbox.store / ".sync.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # an old image_sync still importing
    try:
        proc = sandbox.popen_sync()
        wait_for(lambda: (sandbox.staging / "sync.lock").exists())
        time.sleep(0.3)
        assert proc.poll() is None, "must wait for the old lock"
        assert (sandbox.store / ".sync.lock").exists()
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"waiting for {sandbox.store / '.sync.lock'} (another sync is running)" in out
    assert sandbox.unpublished() == []


def test_a_newer_fingerprint_in_the_new_layout_wins_over_the_old_one(sandbox):
    make_legacy_store(sandbox)
    assert fingerprint(sandbox, "gpu-st-p5-1").returncode == 0  # rewritten by a node of this version
    new = (sandbox.staging / "nodes/gpu-st-p5-1.json").read_text()
    assert sandbox.sync().returncode == 0
    assert (sandbox.staging / "nodes/gpu-st-p5-1.json").read_text() == new
    assert not (sandbox.store / ".nodes").exists()


@pytest.fixture
def tmpfs(small_tmpfs):
    """A real 20 MiB filesystem, or skip where mounting is not allowed."""
    if small_tmpfs is None:
        pytest.skip("cannot mount a tmpfs here")
    return small_tmpfs


def test_a_store_that_is_a_mount_point_is_refused(sandbox, tmpfs):
    """Its sibling would be on another file system: renames would fail and the preflight would count
    the partial file on the wrong one."""
    sandbox.store = tmpfs
    sandbox.write_lock([sandbox.image("app")])
    proc = sandbox.sync()
    assert proc.returncode == 2
    assert (f"{tmpfs}: the store is a mount point or on another file system than {tmpfs.parent}, where "
            f"{sandbox.staging} holds the lock") in proc.stderr
    assert sandbox.imports() == [] and not sandbox.staging.exists()


def test_preflight_counts_the_staged_partial_on_the_store_file_system(sandbox, tmpfs):
    """store and staging share the tmpfs: the .sqsh (first the partial, then renamed) is counted once,
    against --store's file system."""
    sandbox.store = tmpfs / "containers"
    sandbox.env["ENROOT_SQUASH_OPTIONS"] = "-comp lzo -noD"
    sandbox.write_lock([sandbox.image("app", compressed_size=8_000_000)])  # 3x (-noD) > 20 MiB
    proc = sandbox.sync()
    assert proc.returncode == 2
    line = [ln for ln in proc.stderr.splitlines() if "preflight" in ln]
    assert len(line) == 1 and "needs 24000000 bytes" in line[0], proc.stderr
    assert f"filesystem of {sandbox.store}: " in line[0] and f"{sandbox.store} (--store)" in line[0]
    assert sandbox.imports() == []
    sandbox.write_lock([sandbox.image("app", compressed_size=1_000_000)])
    assert sandbox.sync().returncode == 0
    assert sandbox.unpublished() == []
