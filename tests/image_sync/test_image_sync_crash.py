"""Crash safety: kill -9 in the middle of an import or of a manifest write.

Real: SIGKILL of the whole process group (as systemd stops a unit), the real enroot 4.1.2 killed mid
import, rename/fsync on the local filesystem, a concurrent reader process. The fault is injected at the
loopback registry (it holds the image's layer, so enroot is stuck downloading when killed).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from tests.waiting import wait_for


def test_kill_9_mid_import_leaves_nothing_under_final_names_and_next_run_recovers(sandbox):
    sandbox.set_spec({"test/slow": {"sleep": 60}})
    sandbox.write_lock([sandbox.image("done"), sandbox.image("slow")])
    proc = sandbox.popen_sync(start_new_session=True)
    slow_dir = sandbox.store / "slow"
    staged = sandbox.staging / "partial"
    partial = wait_for(lambda: list(staged.glob("slow.*.partial-*")) if staged.exists() else [])
    assert partial[0].name.endswith(f".partial-{proc.pid}")
    # the real enroot is now downloading the held layer
    wait_for(lambda: any(m == "GET" and "/blobs/" in p for m, p, _ in sandbox.registry.fake.log
                         if "test/slow" in p))
    assert sandbox.unpublished() == [], "the import's work directory is staged outside the store"

    status = sandbox.run("status", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    rows = {ln.split()[0]: ln for ln in status.stdout.splitlines()}
    assert "in progress" in rows["slow"] and f"pid {proc.pid}" in rows["slow"]
    assert " present " in rows["done"]

    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    # Nothing of "slow" is visible under a final name (nor in the store at all); only the staged
    # work directory remains, next to the store.
    assert not (sandbox.store / "slow.sqsh").exists()
    assert not slow_dir.exists()
    assert [p.name for p in staged.iterdir()] == [partial[0].name]
    assert sandbox.unpublished() == []
    assert "slow" not in sandbox.manifest()["images"]
    assert "done" in sandbox.manifest()["images"]
    status = sandbox.run("status", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert " missing " in {ln.split()[0]: ln for ln in status.stdout.splitlines()}["slow"]

    sandbox.set_spec({})
    again = sandbox.sync()
    assert again.returncode == 0, again.stderr
    assert "removing stale temp file" in again.stdout and "dead pid" in again.stdout
    assert not list(slow_dir.glob(".*")) and not list(staged.iterdir())
    entry = sandbox.manifest()["images"]["slow"]
    assert os.readlink(sandbox.store / "slow.sqsh") == entry["file"]
    assert subprocess.run(["unsquashfs", "-s", str(sandbox.store / "slow.sqsh")],
                          capture_output=True).returncode == 0


def test_a_partial_file_of_an_older_version_is_debris_too(sandbox):
    """Before import work directories, a crashed run left a plain <name>.<hex>.sqsh.partial-<pid>
    file: the next sync under the lock removes it as well."""
    sandbox.write_lock([sandbox.image("app")])
    staged = sandbox.staging / "partial"
    staged.mkdir(parents=True)
    sandbox.store.mkdir()
    old = staged / f"app.{sandbox.image('app')['digest'][7:]}.sqsh.partial-999999"
    old.write_bytes(b"hsqs" + b"\0" * 4092)
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert f"removing stale temp file {old}" in proc.stdout
    assert not list(staged.iterdir())


def test_manifest_readers_only_ever_see_complete_json_during_a_sync(sandbox):
    sandbox.write_lock([sandbox.image(f"img{i}") for i in range(8)])
    sandbox.store.mkdir()
    reads, bad = [], []
    stop = threading.Event()

    def reader():
        path = sandbox.store / "manifest.json"
        while not stop.is_set():
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            try:
                reads.append(len(json.loads(text)["images"]))
            except ValueError as exc:
                bad.append((exc, text[-80:]))

    t = threading.Thread(target=reader)
    t.start()
    try:
        proc = sandbox.sync()
    finally:
        stop.set()
        t.join()
    assert proc.returncode == 0, proc.stderr
    assert not bad, bad[:3]
    assert reads and max(reads) == 8
    assert reads == sorted(reads), "manifest only grows during one sync"


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])  # the node zipapp: its package, as the nodes import it
    from clusterkit_node.store import manifest as image_store
    store, n = sys.argv[2], 0
    pad = "x" * 200000          # big enough that a write takes several syscalls
    while True:
        n += 1
        image_store.write_manifest(store, {"images": {"gen": {"n": n, "pad": pad}}})
        print(n, flush=True)
""")


def test_kill_9_during_manifest_writes_never_leaves_a_half_written_manifest(sandbox, store_debris, concurrency):
    sandbox.store.mkdir()
    for round_ in range(16):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, sandbox.cmd()[1], str(sandbox.store)],
                                  stdout=subprocess.PIPE, text=True)
        for _ in range(3 + round_ * 2):  # let it complete a few writes, then kill at an arbitrary point
            writer.stdout.readline()
        time.sleep(0.0005 * round_)
        writer.kill()
        writer.wait()
        doc = json.loads((sandbox.store / "manifest.json").read_text())
        assert doc["manifest_version"] == 1 and doc["images"]["gen"]["n"] >= 1
        assert len(doc["images"]["gen"]["pad"]) == 200000
        assert [p.name for p in sandbox.store.iterdir()] == ["manifest.json"], "temp files are staged"
    # leftover temp files of killed writers are not manifests and are cleaned under the lock
    assert list((sandbox.staging / "tmp").glob("store.manifest.json.tmp-*"))
    with concurrency.sync_lock(str(sandbox.store)):  # debris is debris only under the lock
        store_debris.clean_debris(str(sandbox.store))
    assert [p.name for p in sandbox.store.iterdir()] == ["manifest.json"]
    assert not list((sandbox.staging / "tmp").iterdir())
