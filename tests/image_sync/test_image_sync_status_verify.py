"""`status` (head node) and `verify` (compute nodes) output and exit codes.

Real: the node zipapp (subprocesses), the real enroot filling the store (real_enroot.py), squashfs-tools'
unsquashfs (including its refusal of an unknown compressor). Stand-ins: the loopback registry, and in
one test a wrapper `unsquashfs` imitating a squashfs-tools build without zstd (its error text is
squashfs-tools 4.5.1's wording).
"""
from __future__ import annotations

import json
import stat

import pytest


def rows(text: str) -> dict:
    return {ln.split()[0]: ln for ln in text.splitlines() if ln and not ln[:4].isdigit()}


def snapshot(store):
    return sorted((str(p), p.lstat().st_mtime_ns) for p in store.rglob("*"))


def test_status_lists_present_missing_and_older_digests(sandbox):
    sandbox.write_lock([sandbox.image("a"), sandbox.image("b")])
    assert sandbox.sync().returncode == 0
    sandbox.write_lock([sandbox.image("a"), sandbox.image("b", generation=1), sandbox.image("c")])
    proc = sandbox.run("status", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert proc.returncode == 0, proc.stderr
    table = rows(proc.stdout)
    assert table["NAME"].split() == ["NAME", "DIGEST", "STATE", "SIZE_MB", "SYNCED_AT", "VERSIONS",
                                     "DETAIL"]
    assert table["a"].split()[2] == "present"
    assert table["b"].split()[2] == "missing"
    old = sandbox.image("b")["digest"].split(":")[1][:12]
    assert f"store has {old}" in table["b"]
    assert table["c"].split()[2] == "missing"


def test_status_without_lock_lists_the_manifest_and_flags_corrupt_files(sandbox):
    sandbox.write_lock([sandbox.image("a"), sandbox.image("b")])
    assert sandbox.sync().returncode == 0
    with open(sandbox.store / sandbox.manifest()["images"]["b"]["file"], "ab") as fh:
        fh.write(b"x")
    proc = sandbox.run("status", "--store", str(sandbox.store))
    assert proc.returncode == 0
    table = rows(proc.stdout)
    assert table["a"].split()[2] == "present" and table["b"].split()[2] == "corrupt"


def test_status_of_a_missing_store_fails(sandbox):
    proc = sandbox.run("status", "--store", str(sandbox.root / "nope"))
    assert proc.returncode == 1 and "is not a directory" in proc.stderr


def test_verify_reports_present_and_missing_and_never_writes(sandbox):
    sandbox.write_lock([sandbox.image("a")])
    assert sandbox.sync().returncode == 0
    sandbox.write_lock([sandbox.image("a"), sandbox.image("later")])
    before = snapshot(sandbox.store)
    env = dict(sandbox.env, PATH="/usr/bin:/bin")  # no enroot on compute nodes' PATH here
    proc = sandbox.run("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "verify: a: present" in proc.stdout
    assert "verify: warning: later:" in proc.stderr and "missing from" in proc.stderr
    assert "verify: unsquashfs reads lzo images (a)" in proc.stdout
    assert "verify: 1/2 locked images present" in proc.stdout
    assert snapshot(sandbox.store) == before
    assert len(sandbox.imports()) == 1


def test_verify_fails_only_when_the_store_is_unusable_from_this_node(sandbox):
    """No FSx is this node's problem (exit 1, PC replaces the node); a manifest that is missing (the
    head node's first sync still running) or unreadable (the head node rebuilds it) is not: the node
    boots with a warning, so static nodes racing the first import never feed Slurm's protected mode."""
    sandbox.write_lock([sandbox.image("a")])
    args = ("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    proc = sandbox.run(*args)
    assert proc.returncode == 1
    assert f"image store {sandbox.store} is not a directory (is FSx mounted at {sandbox.root}?)" in proc.stderr
    sandbox.store.mkdir()
    proc = sandbox.run(*args)
    assert proc.returncode == 0, proc.stderr
    assert f"no {sandbox.store}/manifest.json yet: the head node's first image sync has not finished" in proc.stderr
    assert "verify: 0/1 locked images present" in proc.stdout
    for text, says in (('{"manifest_version": 1, "images": ', "not valid JSON"),
                       ("{}", "images: missing or not an object"),
                       ('{"manifest_version": 1, "images": {"a": "x"}}', "images.a: not an object"),
                       ('{"manifest_version": 1, "images": {"a": {"digest": 1}}}', "images.a.digest: 1 is not a str")):
        (sandbox.store / "manifest.json").write_text(text)
        proc = sandbox.run(*args)
        assert proc.returncode == 0, proc.stderr
        assert says in proc.stderr and "the head node's next image sync moves it aside" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_status_before_the_first_sync_has_written_a_manifest(sandbox):
    """The first sync is importing and has not written manifest.json yet: status shows the lock."""
    sandbox.write_lock([sandbox.image("a"), sandbox.image("b")])
    sandbox.store.mkdir()
    for extra in (("--lock", str(sandbox.lock)), ()):
        proc = sandbox.run("status", "--store", str(sandbox.store), *extra)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
    table = rows(sandbox.run("status", "--store", str(sandbox.store), "--lock", str(sandbox.lock)).stdout)
    assert " missing " in table["a"] and " missing " in table["b"]


def test_verify_of_an_empty_lock_without_a_manifest_boots(sandbox):
    sandbox.write_lock([])
    sandbox.store.mkdir()
    proc = sandbox.run("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert proc.returncode == 0, proc.stderr
    assert "verify: 0/0 locked images present" in proc.stdout


@pytest.mark.parametrize("entry", ['"x"', '{"digest": 1, "file": "a/b.sqsh", "size": 3}',
                                   '{"digest": "sha256:00", "file": "a/b.sqsh", "size": "3"}'])
def test_a_manifest_entry_of_the_wrong_shape_is_repaired_by_the_next_sync(sandbox, entry):
    sandbox.write_lock([sandbox.image("a")])
    assert sandbox.sync().returncode == 0
    (sandbox.store / "manifest.json").write_text('{"manifest_version": 1, "images": {"a": %s}}' % entry)
    status = sandbox.run("status", "--store", str(sandbox.store))
    assert status.returncode == 1 and "Traceback" not in status.stderr and "images.a" in status.stderr
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert "moving it to" in proc.stderr and "Traceback" not in proc.stderr
    assert sandbox.manifest()["images"]["a"]["status"] == "ok"
    assert len(sandbox.imports()) == 1, "repaired by adoption, no new import"


def test_verify_names_a_compressor_the_local_unsquashfs_cannot_read(sandbox):
    """Real unsquashfs: the image's superblock is edited to compressor id 7, which no build knows."""
    sandbox.write_lock([sandbox.image("a")])
    assert sandbox.sync().returncode == 0
    path = sandbox.store / sandbox.manifest()["images"]["a"]["file"]
    with open(path, "r+b") as fh:
        fh.seek(20)
        fh.write((7).to_bytes(2, "little"))
    proc = sandbox.run("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert proc.returncode == 1
    assert "cannot read unknown (id 7)-compressed images" in proc.stderr
    assert "unsquashfs says 'unknown'" in proc.stderr


def test_verify_fails_on_a_node_whose_unsquashfs_lacks_zstd(sandbox):
    """Stand-in: a wrapper `unsquashfs` that behaves like a build without zstd (as squashfs-tools
    built without ZSTD_SUPPORT does) and otherwise calls the real one."""
    sandbox.write_lock([sandbox.image("a")])
    sandbox.env["ENROOT_SQUASH_OPTIONS"] = "-comp zstd -Xcompression-level 3 -b 1M"
    assert sandbox.sync().returncode == 0
    wrapper_dir = sandbox.root / "no-zstd"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "unsquashfs"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for last; do :; done\n'
        'if [ "$1" != "-s" ] && /usr/bin/unsquashfs -s "$last" | grep -q "Compression zstd"; then\n'
        '  echo "Filesystem uses zstd compression, this is unsupported by this version" >&2\n'
        '  printf "Decompressors available:\\n\\tgzip\\n\\tlzo\\n\\txz\\n" >&2\n'
        "  exit 1\nfi\n"
        'exec /usr/bin/unsquashfs "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = dict(sandbox.env, PATH=f"{wrapper_dir}:/usr/bin:/bin")
    proc = sandbox.run("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock), env=env)
    assert proc.returncode == 1
    assert "this node's unsquashfs cannot read zstd-compressed images" in proc.stderr
    # and the real unsquashfs of this machine does read them
    assert sandbox.run("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock)).returncode == 0


def test_verify_with_an_unreadable_lock_is_a_usage_error(sandbox):
    sandbox.store.mkdir()
    (sandbox.store / "manifest.json").write_text(json.dumps({"manifest_version": 1, "images": {}}))
    proc = sandbox.run("verify", "--store", str(sandbox.store), "--lock", str(sandbox.root / "none"))
    assert proc.returncode == 2 and "cannot read image lock" in proc.stderr
