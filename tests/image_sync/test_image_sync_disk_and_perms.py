"""Disk preflight on a real, small tmpfs and file modes seen by an unprivileged user.

Real: a 20 MiB tmpfs mounted by root, statvfs, `runuser -u nobody`, umask 077. Stand-in: the fake
enroot (never reached by the preflight test: the point is that nothing is imported).
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest


def test_preflight_fails_early_when_enroot_temp_is_too_small(sandbox, small_tmpfs, image_sync,
                                                             disk_preflight, monkeypatch, capsys):
    sandbox.write_lock([sandbox.image("small", compressed_size=1_000_000),
                        sandbox.image("huge", compressed_size=10_000_000)])
    if small_tmpfs is not None:
        sandbox.env["ENROOT_TEMP_PATH"] = str(small_tmpfs / "enroot-tmp")  # not created yet: probe parent
        proc = sandbox.sync()
        rc, err = proc.returncode, proc.stderr
        free = shutil.disk_usage(small_tmpfs).free
    else:  # fallback only where mount is not permitted: fake the free space in-process
        free = 20 * 2**20
        real = shutil.disk_usage
        monkeypatch.setattr(disk_preflight.shutil, "disk_usage",
                            lambda p: real(p)._replace(free=free) if "enroot-tmp" in str(p) else real(p))
        monkeypatch.setattr(os, "environ", dict(sandbox.env))
        rc = image_sync.main(["sync", "--lock", str(sandbox.lock), "--store", str(sandbox.store)])
        err = capsys.readouterr().err
    print(err)
    assert rc == 2, err
    line = [ln for ln in err.splitlines() if "preflight" in ln]
    assert len(line) == 1, err
    # 3x the largest compressed image (huge: 10 MB) must fit where enroot unpacks it
    assert "needs 30000000 bytes (30.0 MB)" in line[0]
    assert f"{free} bytes" in line[0] and "ENROOT_TEMP_PATH" in line[0] and "huge" in line[0]
    assert sandbox.imports() == [], "nothing may be imported after a failed preflight"


def test_preflight_store_factor_depends_on_data_compression(sandbox, image_lock, sync_config, disk_preflight,
                                                             monkeypatch):
    img = image_lock.LockedImage(name="a", digest="sha256:" + "a" * 64, enroot_uri="docker://x@sha256:"
                                 + "a" * 64, source="x", compressed_size=100_000_000,
                                 registry="x", repository="x", platform="linux/amd64", expect={})
    store = str(sandbox.root)
    real = shutil.disk_usage
    monkeypatch.setattr(disk_preflight.shutil, "disk_usage", lambda p: real(p)._replace(free=250_000_000))
    env = {"ENROOT_TEMP_PATH": str(sandbox.root), "ENROOT_CACHE_PATH": str(sandbox.root)}

    def problems(opts: str) -> list:
        cfg = sync_config.SyncConfig(store=store, retries=0, backoff=0, verify_all=False, env=env,
                                     squash_options=opts)
        return disk_preflight.preflight(cfg, [img])

    # all three on one filesystem: temp 300 MB + cache 100 MB + store 120 or 300 MB > 250 MB either way
    assert "needs 520000000 bytes" in problems("-comp zstd")[0]
    assert "needs 700000000 bytes" in problems("-comp lzo -noD")[0]
    monkeypatch.setattr(disk_preflight.shutil, "disk_usage", lambda p: real(p)._replace(free=600_000_000))
    assert problems("-comp zstd") == []
    assert problems("-noI -noD -noF -noX -no-duplicates") != []


def test_enroot_settings_follow_env_then_enroot_conf_then_enroot_defaults(sync_config, tmp_path):
    conf = tmp_path / "enroot.conf"
    conf.write_text("# comment\nENROOT_TEMP_PATH   ${SCRATCH:-/var/tmp}/enroot/tmp\n"
                    "ENROOT_SQUASH_OPTIONS\t-comp zstd -Xcompression-level 3 -b 1M\n")
    env = {"CK_ENROOT_CONF": str(conf), "HOME": "/root"}
    assert sync_config.enroot_setting("ENROOT_TEMP_PATH", env) == "/var/tmp/enroot/tmp"
    assert sync_config.enroot_setting("ENROOT_TEMP_PATH", dict(env, SCRATCH="/scratch")) == \
        "/scratch/enroot/tmp"
    assert sync_config.enroot_setting("ENROOT_TEMP_PATH", dict(env, ENROOT_TEMP_PATH="/x")) == "/x"
    assert sync_config.enroot_setting("ENROOT_SQUASH_OPTIONS", env) == "-comp zstd -Xcompression-level 3 -b 1M"
    bare = {"CK_ENROOT_CONF": str(tmp_path / "missing"), "HOME": "/root"}
    assert sync_config.enroot_setting("ENROOT_TEMP_PATH", bare) == "/tmp"
    assert sync_config.enroot_setting("ENROOT_TEMP_PATH", dict(bare, TMPDIR="/t")) == "/t"
    assert sync_config.enroot_setting("ENROOT_CACHE_PATH", bare) == "/root/.cache/enroot"
    assert sync_config.enroot_setting("ENROOT_SQUASH_OPTIONS", bare) == "-comp lzo -noD"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root and runuser")
def test_store_is_readable_by_an_unprivileged_user_even_with_umask_077(sandbox):
    # pytest's tmp dirs are 0700; the store's parent must be traversable like /fsx is
    parent = Path(tempfile.mkdtemp(prefix="ck-store-", dir="/tmp"))
    try:
        os.chmod(parent, 0o755)
        sandbox.store = parent / "containers"
        sandbox.write_lock([sandbox.image("pytorch")])
        proc = sandbox.sync(preexec_fn=lambda: os.umask(0o077))
        assert proc.returncode == 0, proc.stderr
        entry = sandbox.manifest()["images"]["pytorch"]
        for path in (sandbox.store, sandbox.store / "pytorch", sandbox.staging,
                     sandbox.staging / "partial", sandbox.staging / "tmp"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o755
        for path in (sandbox.store / "manifest.json", sandbox.store / entry["file"]):
            assert stat.S_IMODE(path.stat().st_mode) == 0o644

        def as_nobody(*cmd):
            return subprocess.run(["runuser", "-u", "nobody", "--", *cmd], capture_output=True)

        assert as_nobody("cat", str(sandbox.store / "manifest.json")).returncode == 0
        read = as_nobody("cat", str(sandbox.store / "pytorch.sqsh"))
        assert read.returncode == 0 and len(read.stdout) == entry["size"]
        assert as_nobody("unsquashfs", "-s", str(sandbox.store / "pytorch.sqsh")).returncode == 0
        lock = parent / "demo.images.lock"
        shutil.copy(sandbox.lock, lock)
        os.chmod(lock, 0o644)
        script = parent / "clusterkit_node.pyz"  # pytest's tmp dirs may sit in a 0700 dir
        shutil.copy(sandbox.cmd()[1], script)
        os.chmod(script, 0o644)
        verify = as_nobody("python3", str(script), "verify", "--store", str(sandbox.store),
                           "--lock", str(lock))
        assert verify.returncode == 0, verify.stderr
        assert b"1/1 locked images present" in verify.stdout
    finally:
        shutil.rmtree(parent)
