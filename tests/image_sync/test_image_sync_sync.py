"""`clusterkit_node.pyz sync` against a real store directory with real squashfs files.

Real: the node zipapp (subprocess), NVIDIA enroot 4.1.2 pulling from a loopback registry (see
real_enroot.py), mksquashfs/unsquashfs 4.5.1, flock between two processes, rename. Stand-ins: the
registry and the content of the images (marker files, not real libraries).
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import time


def test_fresh_sync_publishes_images_under_final_and_stable_names(sandbox):
    sandbox.write_lock([sandbox.image("pytorch", repository="nvidia/pytorch"),
                        sandbox.image("ubuntu", repository="library/ubuntu")])
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    manifest = sandbox.manifest()
    assert manifest["manifest_version"] == 1
    assert sorted(manifest["images"]) == ["pytorch", "ubuntu"]
    for name, entry in manifest["images"].items():
        hexd = entry["digest"].split(":")[1]
        assert entry["file"] == f"{name}/{hexd}.sqsh"
        final = sandbox.store / entry["file"]
        assert stat.S_IMODE(final.stat().st_mode) == 0o644
        assert entry["size"] == final.stat().st_size
        link = sandbox.store / f"{name}.sqsh"
        assert os.readlink(link) == entry["file"], "stable name must be a relative symlink"
        assert subprocess.run(["unsquashfs", "-s", str(link)], capture_output=True).returncode == 0
        assert entry["squash_options"] == "-comp lzo -noD"
        assert entry["compression"] == "lzo"
        assert entry["enroot_version"] == "4.1.2"  # what the real enroot answers
        assert entry["source"].endswith(":latest")
        assert entry["synced_at"].endswith("Z")
        assert entry["status"] == "ok"
    # one progress line per image, then the final table
    assert "pytorch: imported" in proc.stdout and "MB/s" in proc.stdout
    table = [ln.split() for ln in proc.stdout.splitlines() if not ln[:4].isdigit()]
    assert table[0] == ["NAME", "DIGEST", "STATUS", "SIZE_MB", "DETAIL"]
    assert [r[2] for r in table[1:]] == ["imported", "imported"]
    assert not list(sandbox.store.rglob(".*")), "temp files left"
    assert sandbox.unpublished() == []


def test_squash_options_from_environment_are_recorded_and_used(sandbox):
    sandbox.write_lock([sandbox.image("app")])
    sandbox.env["ENROOT_SQUASH_OPTIONS"] = "-comp zstd -Xcompression-level 3 -b 1M"
    assert sandbox.sync().returncode == 0
    entry = sandbox.manifest()["images"]["app"]
    assert entry["squash_options"] == "-comp zstd -Xcompression-level 3 -b 1M"
    assert entry["compression"] == "zstd"
    out = subprocess.run(["unsquashfs", "-s", str(sandbox.store / "app.sqsh")], capture_output=True,
                         text=True).stdout
    assert "Compression zstd" in out and "Block size 1048576" in out


def test_resync_of_20_present_images_is_a_fast_noop_without_any_subprocess(sandbox):
    sandbox.write_lock([sandbox.image(f"img{i:02d}") for i in range(20)])
    first = sandbox.sync()
    assert first.returncode == 0, first.stderr
    assert len(sandbox.imports()) == 20
    def snapshot():  # the store and its staging sibling (the no-op path takes no lock)
        return {p: p.lstat().st_mtime_ns for d in (sandbox.store, sandbox.staging) for p in d.rglob("*")}

    before = snapshot()
    # No enroot and no unsquashfs reachable: the present-image path must not run anything.
    env = dict(sandbox.env, PATH="/nonexistent")
    started = time.perf_counter()
    second = sandbox.run("sync", "--lock", str(sandbox.lock), "--store", str(sandbox.store), env=env)
    elapsed = time.perf_counter() - started
    print(f"no-op re-sync of 20 images: {elapsed:.3f} s (whole process, interpreter start included)")
    assert second.returncode == 0, second.stderr
    assert elapsed < 1.5
    assert len(sandbox.imports()) == 20
    assert [ln.split()[2] for ln in second.stdout.splitlines()[1:]] == ["present"] * 20
    assert snapshot() == before, "store was modified"


def test_two_concurrent_syncs_import_each_image_once(sandbox):
    sandbox.write_lock([sandbox.image(n) for n in ("a", "b", "c")])
    sandbox.set_spec({"*": {"sleep": 0.3}})
    procs = [sandbox.popen_sync(), sandbox.popen_sync()]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    uris = sandbox.imports()
    assert sorted(uris) == sorted(set(uris)) and len(uris) == 3, uris
    assert sorted(sandbox.manifest()["images"]) == ["a", "b", "c"]
    # the loser waited for the lock, re-checked and found the images present
    assert any("waiting for" in o for o, _ in outs)
    assert any("imported by a concurrent sync" in o for o, _ in outs)
    assert any(f"waiting for {sandbox.staging / 'sync.lock'}" in o for o, _ in outs)


def test_truncated_sqsh_is_detected_by_size_and_reimported(sandbox, squashfs_check):
    sandbox.set_spec({"test/app": {"big_mb": 1}})
    sandbox.write_lock([sandbox.image("app", compressed_size=2_000_000),
                        sandbox.image("other")])
    assert sandbox.sync().returncode == 0
    final = sandbox.store / sandbox.manifest()["images"]["app"]["file"]
    full = final.stat().st_size
    with open(final, "r+b") as fh:
        fh.truncate(full // 2)
    # `unsquashfs -s` alone accepts this file (it reads the superblock only); the bytes_used check
    # is what catches it when a file is checked.
    ok, detail = squashfs_check.check_squashfs(str(final))
    assert not ok and detail.startswith("truncated: file has"), detail
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert "truncated or replaced" in proc.stdout
    assert sandbox.imports().count(sandbox.image("app")["enroot_uri"]) == 2
    assert sandbox.imports().count(sandbox.image("other")["enroot_uri"]) == 1
    assert final.stat().st_size == full == sandbox.manifest()["images"]["app"]["size"]
    assert subprocess.run(["unsquashfs", "-s", str(final)], capture_output=True).returncode == 0


def test_verify_all_catches_same_size_corruption_that_the_fast_path_skips(sandbox):
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    final = sandbox.store / sandbox.manifest()["images"]["app"]["file"]
    with open(final, "r+b") as fh:
        fh.write(b"JUNK")  # clobber the magic, keep the size
    sandbox.as_bit_rot(final)
    full = sandbox.fast_sync_then_verify_all()
    assert "--verify-all: unsquashfs -s failed" in full.stdout
    assert final.read_bytes()[:4] == b"hsqs"


def test_failing_import_is_retried_with_backoff_then_reported_while_others_succeed(sandbox):
    sandbox.write_lock([sandbox.image("bad"), sandbox.image("good1"), sandbox.image("good2")])
    sandbox.set_spec({"test/bad": {"fail": "always"}})
    proc = sandbox.sync("--retries", "2")
    assert proc.returncode == 1
    bad_uri = sandbox.image("bad")["enroot_uri"]
    assert sandbox.imports().count(bad_uri) == 3, "1 attempt + 2 retries"
    assert "retrying in 0.01 s" in proc.stdout and "retrying in 0.02 s" in proc.stdout
    rows = {ln.split()[0]: ln.split()[2] for ln in proc.stdout.splitlines() if not ln[:4].isdigit()}
    assert rows == {"NAME": "STATUS", "bad": "failed", "good1": "imported", "good2": "imported"}
    assert "bad: 3 attempts failed; last: enroot import exited 1" in proc.stderr
    assert "503 Service Unavailable" in proc.stderr
    assert "bad" not in sandbox.manifest()["images"]
    assert not (sandbox.store / "bad.sqsh").exists()
    assert not (sandbox.store / "bad").exists(), "failed attempts must leave nothing in the store"
    assert not list((sandbox.staging / "partial").iterdir()), "failed attempts must leave no files"


def test_transient_failure_succeeds_on_retry(sandbox):
    sandbox.write_lock([sandbox.image("flaky")])
    sandbox.set_spec({"test/flaky": {"fail": 2}})
    proc = sandbox.sync("--retries", "3")
    assert proc.returncode == 0, proc.stderr
    assert len(sandbox.imports()) == 3
    assert "attempt 2/4 failed" in proc.stderr and "flaky" in sandbox.manifest()["images"]


def test_new_digest_for_a_name_swaps_the_stable_link_and_keeps_the_old_file(sandbox):
    sandbox.write_lock([sandbox.image("app", generation=0)])
    assert sandbox.sync().returncode == 0
    old = sandbox.store / sandbox.manifest()["images"]["app"]["file"]
    sandbox.write_lock([sandbox.image("app", generation=1)])
    assert sandbox.sync().returncode == 0
    new = sandbox.manifest()["images"]["app"]
    assert new["digest"] == sandbox.image("app", generation=1)["digest"]
    assert os.readlink(sandbox.store / "app.sqsh") == new["file"]
    assert old.exists(), "running jobs may still use the previous image"


def test_unrecorded_final_file_is_adopted_without_import(sandbox):
    """A crash between the rename and the manifest write leaves a complete file nobody recorded."""
    sandbox.set_spec({"nvidia/pytorch": {"versions": sandbox.full_versions}})
    sandbox.write_lock([sandbox.image("app", repository="nvidia/pytorch")])
    assert sandbox.sync().returncode == 0
    (sandbox.store / "app.sqsh").unlink()
    (sandbox.store / "manifest.json").write_text(json.dumps({"manifest_version": 1, "images": {}}))
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert "adopting" in proc.stdout and len(sandbox.imports()) == 1
    entry = sandbox.manifest()["images"]["app"]
    assert entry["versions"] == sandbox.full_versions
    assert os.readlink(sandbox.store / "app.sqsh") == entry["file"]


def test_corrupt_manifest_is_moved_aside_and_rebuilt_from_the_files(sandbox):
    sandbox.write_lock([sandbox.image("a"), sandbox.image("b")])
    assert sandbox.sync().returncode == 0
    (sandbox.store / "manifest.json").write_text('{"images": {"a": ')
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert "not valid JSON" in proc.stderr and "moving it to" in proc.stderr
    assert len(list(sandbox.staging.glob("manifest.json.corrupt-*"))) == 1
    assert sandbox.unpublished() == [], "the corrupt manifest is moved out of the store"
    assert sorted(sandbox.manifest()["images"]) == ["a", "b"]
    assert len(sandbox.imports()) == 2, "rebuilt by adoption, not by importing again"


def test_lock_errors_are_one_line_each_with_exit_2(sandbox):
    sandbox.lock.write_text('{"images": [\n  {"name": "x",}\n]}\n')
    proc = sandbox.sync()
    assert proc.returncode == 2
    assert f"{sandbox.lock}:2:" in proc.stderr and "not valid JSON" in proc.stderr
    bad = sandbox.image("ok")
    bad2 = dict(sandbox.image("two"), digest="sha256:abc", name="../evil")
    bad3 = dict(sandbox.image("three"), enroot_uri="docker://x#y@" + sandbox.image("zzz")["digest"])
    bad4 = sandbox.image("four")
    bad4["name"] = "other.sqsh"
    sandbox.write_lock([bad, bad2, bad3, bad4])
    proc = sandbox.sync()
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert any("images[0].digest: 'sha256:abc' is not sha256:<64 lowercase hex>" in ln for ln in lines)
    assert any("images[0].name: '../evil' is not a store name" in ln for ln in lines)
    assert any("images[3].enroot_uri" in ln and "does not pin digest" in ln for ln in lines)
    assert any("images[2].name: 'other.sqsh' collides with store entries" in ln for ln in lines)
    assert all(ln.startswith(f"image_sync: {sandbox.lock}: images[") for ln in lines), lines
    assert not sandbox.imports()


def test_store_whose_parent_is_missing_is_refused(sandbox):
    sandbox.write_lock([sandbox.image("a")])
    proc = sandbox.run("sync", "--lock", str(sandbox.lock), "--store", str(sandbox.root / "fsx" / "c"))
    assert proc.returncode == 2
    assert "parent directory" in proc.stderr and "is FSx mounted?" in proc.stderr
    assert not (sandbox.root / "fsx").exists()


def test_missing_enroot_is_a_usage_error(sandbox):
    sandbox.write_lock([sandbox.image("a")])
    env = dict(sandbox.env, PATH="/usr/bin:/bin")
    proc = sandbox.run("sync", "--lock", str(sandbox.lock), "--store", str(sandbox.store), env=env)
    assert proc.returncode == 2 and "enroot not found on PATH" in proc.stderr


def test_runs_on_python_3_9(sandbox, python39):
    """clusterkit_node promises stdlib-only Python 3.9+ (the oldest python3 on supported AMIs): the zipapp's
    sync, status and verify run there."""
    sandbox.set_spec({"nvidia/pytorch": {"versions": sandbox.full_versions}})
    sandbox.write_lock([sandbox.image("pytorch", repository="nvidia/pytorch", expect={"cuda": "12.8"})])
    for args in (["sync", "--lock", str(sandbox.lock), "--store", str(sandbox.store)],
                 ["status", "--store", str(sandbox.store), "--lock", str(sandbox.lock)],
                 ["verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock)]):
        proc = subprocess.run([python39, sandbox.cmd()[1], *args], env=sandbox.env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, (args, proc.stderr)
    assert sandbox.manifest()["images"]["pytorch"]["versions"] == sandbox.full_versions
