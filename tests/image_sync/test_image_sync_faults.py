"""Faults a node can meet end in one line and a non-zero exit, never a traceback; nothing corrupt or
half-written is served under a published name; the next run repairs the store.

Real: the node zipapp, the real enroot, a read-only bind mount and a full tmpfs made in a private mount
namespace (unshare, as root). Stand-in: the registry (faults injected there)."""
from __future__ import annotations

import os
import subprocess

import pytest


def in_namespace(sandbox, setup: str, *args: str) -> subprocess.CompletedProcess:
    """Run the node zipapp with args in a private mount namespace after the shell lines in setup."""
    if os.geteuid() != 0:
        pytest.fail("these tests need root (mount namespaces); `make test` runs as root in CI")
    script = f"set -e\n{setup}\nexec \"$@\""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                           *sandbox.cmd(*args)], env=sandbox.env, capture_output=True, text=True, timeout=120)


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if " error: " in ln]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_failed_reimport_never_leaves_the_stable_name_on_a_truncated_file(sandbox):
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    final = sandbox.store / sandbox.manifest()["images"]["app"]["file"]
    with open(final, "r+b") as fh:
        fh.truncate(final.stat().st_size // 2)
    sandbox.set_spec({"test/app": {"fail": "always"}})
    proc = sandbox.sync("--retries", "0")
    assert proc.returncode == 1
    assert not os.path.lexists(sandbox.store / "app.sqsh"), "the stable name must not serve it"
    assert not final.exists() and "app" not in sandbox.manifest()["images"]
    quarantined = list((sandbox.staging / "quarantine").iterdir())
    assert len(quarantined) == 1 and quarantined[0].name.startswith(f"app+{final.name}.")
    assert sandbox.unpublished() == []
    status = sandbox.run("status", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert " missing " in [ln for ln in status.stdout.splitlines() if ln.startswith("app ")][0]
    sandbox.set_spec({})
    assert sandbox.sync().returncode == 0
    assert os.readlink(sandbox.store / "app.sqsh") == sandbox.manifest()["images"]["app"]["file"]


def test_a_directory_where_the_image_goes_is_moved_aside(sandbox):
    img = sandbox.image("app")
    sandbox.write_lock([img])
    squatter = sandbox.store / "app" / f"{img['digest'][7:]}.sqsh"
    squatter.mkdir(parents=True)
    (squatter / "note").write_text("someone's\n")
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert squatter.is_file() and "not a regular file" in proc.stdout
    (aside,) = (sandbox.staging / "quarantine").iterdir()
    assert (aside / "note").read_text() == "someone's\n", "nothing is lost"


def test_a_directory_in_place_of_the_stable_name_is_one_line(sandbox):
    sandbox.write_lock([sandbox.image("app")])
    sandbox.store.mkdir()
    (sandbox.store / "app.sqsh").mkdir()
    proc = sandbox.sync()
    assert proc.returncode == 1
    line = one_line(proc.stderr)
    assert f"{sandbox.store}/app.sqsh" in line and "(a directory is in the way" in line


def test_a_read_only_store_is_one_line(sandbox):
    sandbox.write_lock([sandbox.image("a")])
    assert sandbox.sync().returncode == 0
    sandbox.write_lock([sandbox.image("a"), sandbox.image("b")])
    root = sandbox.root
    proc = in_namespace(sandbox, f'mount --bind "{root}" "{root}"\nmount -o remount,bind,ro "{root}"',
                        "sync", "--lock", str(sandbox.lock), "--store", str(sandbox.store), "--backoff", "0")
    assert proc.returncode == 1, proc.stderr
    assert "Read-only file system (the file system is read-only: is FSx mounted read-write?)" in one_line(proc.stderr)
    assert sandbox.sync().returncode == 0, "the next run, read-write again, repairs"
    assert sorted(sandbox.manifest()["images"]) == ["a", "b"]


def test_a_full_disk_while_writing_the_manifest_is_one_line_and_leaves_nothing_half_written(sandbox):
    fs = sandbox.root / "fs"
    fs.mkdir()
    store = fs / "store"
    sandbox.write_lock([sandbox.image("a")])
    common = f'mount -t tmpfs -o size=16m cktest "{fs}"'
    args = ("sync", "--lock", str(sandbox.lock), "--store", str(store), "--backoff", "0")
    # one namespace for the whole story: sync, lose the manifest, fill the disk, sync (adopts -> writes)
    setup = "\n".join([
        common,
        '"$@" >/dev/null',
        f'rm "{store}/manifest.json"',
        f'dd if=/dev/zero of="{fs}/filler" bs=64k 2>/dev/null || true',
        'if "$@"; then echo "second sync succeeded" >&2; exit 9; fi',
        f'test ! -e "{store}/manifest.json"',
        f'ls -A "{fs}/.store.clusterkit/tmp" >&2',
        f'rm "{fs}/filler"',
    ])
    proc = in_namespace(sandbox, setup, *args)
    assert proc.returncode == 0, proc.stderr  # the third run (exec) repairs: adopts, writes the manifest
    err = proc.stderr
    assert "Traceback" not in err
    assert f"{store}/manifest.json: writing it: No space left on device (the file system is full" in err
    assert "store.manifest.json.tmp" not in err, "the partial temp manifest is removed at once"


def test_same_size_corruption_inside_the_image_is_caught_by_the_deep_checks(sandbox):
    """Flipped bytes in a data block keep the size and the superblock: the boot-time verify cannot see
    them (it must stay cheap); `verify --deep` and `sync --verify-all` compare the sha256 recorded at
    import and catch them, and the sync repairs the image."""
    sandbox.set_spec({"test/app": {"big_mb": 1}})
    sandbox.write_lock([sandbox.image("app")])
    assert sandbox.sync().returncode == 0
    entry = sandbox.manifest()["images"]["app"]
    assert len(entry["sha256"]) == 64
    final = sandbox.store / entry["file"]
    with open(final, "r+b") as fh:
        fh.seek(final.stat().st_size // 2)
        chunk = fh.read(64)
        fh.seek(-64, 1)
        fh.write(bytes(b ^ 0xFF for b in chunk))
    sandbox.as_bit_rot(final)  # a write changes the ctime, which the plain sync catches (test_image_sync_integrity)
    args = ("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert sandbox.run(*args).returncode == 0, "the cheap boot-time check does not read the data"
    deep = sandbox.run(*args, "--deep")
    assert deep.returncode == 1
    assert "app: " in one_line(deep.stderr) and "is corrupt: sha256" in deep.stderr
    full = sandbox.fast_sync_then_verify_all()
    assert "content differs from the sha256 recorded at import" in full.stdout
    assert sandbox.run(*args, "--deep").returncode == 0
