"""One store, many clusters: per-cluster records, the one-name-one-digest refusal, heartbeat and image gc.

Real: the node zipapp (subprocess) for sync, heartbeat, gc and the pyxis importer's get/release; NVIDIA enroot 4.1.2
importing from the loopback registry (real_enroot.py); squashfs files made with mksquashfs; processes that hold a
file open (a descriptor, a memory map only) found by gc through /proc; flock. Stand-ins: the registry's images, and
in the gc table test the records and the other node's lease are written as the documented JSON (two clusters'
head nodes and a second compute node are not there).
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import SCRIPT, staging_of, write_lock

from clusterkit_node.store import published

DAY = 86400


def lock_for(sandbox, cluster: str, images: list[dict]) -> Path:
    """A lock of ``cluster`` (the sync names its record after the lock's cluster)."""
    path = sandbox.root / f"{cluster}.images.lock"
    write_lock(path, images)
    doc = json.loads(path.read_text())
    doc["cluster"] = cluster
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path


def sync_as(sandbox, lock: Path) -> subprocess.CompletedProcess:
    return sandbox.run("sync", "--lock", str(lock), "--store", str(sandbox.store), "--backoff", "0.01")


def record(sandbox, cluster: str) -> dict:
    return json.loads((staging_of(sandbox.store) / "clusters" / f"{cluster}.json").read_text())


def age_record(sandbox, cluster: str, days: float) -> None:
    path = staging_of(sandbox.store) / "clusters" / f"{cluster}.json"
    doc = json.loads(path.read_text())
    doc["seen_at"] = int(time.time() - days * DAY)
    path.write_text(json.dumps(doc))


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if " error: " in ln]


# --- records written by sync, heartbeat ------------------------------------------------------------------------

def test_sync_writes_its_cluster_record_and_every_run_refreshes_seen_at(sandbox):
    images = [sandbox.image("app"), sandbox.image("tool")]
    lock = lock_for(sandbox, "alpha", images)
    before = time.time()
    proc = sync_as(sandbox, lock)
    assert proc.returncode == 0, proc.stderr
    doc = record(sandbox, "alpha")
    assert doc["record_version"] == 1 and doc["cluster"] == "alpha" and doc["host"] == socket.gethostname()
    assert before - 1 <= doc["synced_at"] <= time.time() and before - 1 <= doc["seen_at"] <= time.time()
    assert doc["images"] == [{"name": i["name"], "digest": i["digest"],
                              "file": f"{i['name']}/{i['digest'].split(':')[1]}.sqsh"} for i in images]
    path = staging_of(sandbox.store) / "clusters" / "alpha.json"
    assert path.stat().st_mode & 0o777 == 0o644
    assert not list((staging_of(sandbox.store) / "tmp").iterdir()), "record temp file left"
    assert (staging_of(sandbox.store) / "inuse").stat().st_mode & 0o7777 == 0o1777
    age_record(sandbox, "alpha", 3)
    again = sync_as(sandbox, lock)  # nothing to import: still refreshes the record
    assert again.returncode == 0, again.stderr
    assert record(sandbox, "alpha")["seen_at"] >= before - 1
    assert record(sandbox, "alpha")["images"] == doc["images"]
    assert sandbox.unpublished() == [], "records must stay out of the exported store"


def test_heartbeat_refreshes_seen_at_only_and_skips_while_the_sync_lock_is_held(sandbox):
    lock = lock_for(sandbox, "alpha", [sandbox.image("app")])
    assert sync_as(sandbox, lock).returncode == 0
    age_record(sandbox, "alpha", 5)
    old = record(sandbox, "alpha")
    beat = sandbox.run("heartbeat", "--store", str(sandbox.store), "--cluster", "alpha")
    assert beat.returncode == 0, beat.stderr
    new = record(sandbox, "alpha")
    assert new["seen_at"] >= time.time() - 60
    assert (new["images"], new["synced_at"], new["cluster"]) == (old["images"], old["synced_at"], "alpha")
    assert "seen_at refreshed" in beat.stdout
    age_record(sandbox, "alpha", 5)
    fd = os.open(staging_of(sandbox.store) / "sync.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a sync importing for hours, or a gc
        busy = sandbox.run("heartbeat", "--store", str(sandbox.store), "--cluster", "alpha")
    finally:
        os.close(fd)
    assert busy.returncode == 0 and "is held" in busy.stdout and "skipped" in busy.stdout
    assert record(sandbox, "alpha")["seen_at"] < time.time() - 4 * DAY
    none = sandbox.run("heartbeat", "--store", str(sandbox.store), "--cluster", "beta")
    assert none.returncode == 0 and "does not exist yet" in none.stdout
    bad = sandbox.run("heartbeat", "--store", str(sandbox.store), "--cluster", "../x")
    assert bad.returncode == 2 and "not a ParallelCluster name" in bad.stderr and "Traceback" not in bad.stderr


# --- one name, one digest --------------------------------------------------------------------------------------

def test_sync_refuses_a_name_another_live_cluster_pins_to_another_digest_and_syncs_the_rest(sandbox):
    app1 = sandbox.image("app", generation=1)
    alpha = lock_for(sandbox, "alpha", [app1])
    assert sync_as(sandbox, alpha).returncode == 0
    manifest_before = sandbox.manifest()["images"]["app"]
    link_before = os.readlink(sandbox.store / "app.sqsh")
    app2, other = sandbox.image("app", generation=2), sandbox.image("other")
    assert app2["digest"] != app1["digest"]
    beta = lock_for(sandbox, "beta", [app2, other])
    proc = sync_as(sandbox, beta)
    assert proc.returncode == 1
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    short1, short2 = app1["digest"][7:19], app2["digest"][7:19]
    for needed in ("app:", short1, short2, "cluster alpha", f"host {socket.gethostname()}",
                   "give the image another name", "containers.images[].name", "make lock", "stale"):
        assert needed in line, (needed, line)
    # nothing of app changed; other was imported
    assert sandbox.manifest()["images"]["app"] == manifest_before
    assert os.readlink(sandbox.store / "app.sqsh") == link_before
    assert not (sandbox.store / "app" / f"{app2['digest'][7:]}.sqsh").exists()
    assert (sandbox.store / "other.sqsh").exists()
    assert [i["name"] for i in record(sandbox, "beta")["images"]] == ["other"]
    table = {ln.split()[0]: ln.split()[2] for ln in proc.stdout.splitlines() if not ln[:4].isdigit()}
    assert table["app"] == "refused" and table["other"] == "imported"
    # alpha's record goes stale (its head node stopped its heartbeat 8 days ago): no longer blocks, and says so
    age_record(sandbox, "alpha", 8)
    later = sync_as(sandbox, beta)
    assert later.returncode == 0, later.stderr
    warning = [ln for ln in later.stderr.splitlines() if "warning:" in ln and "alpha" in ln]
    assert warning and "stale" in warning[0] and "last seen 8.0 days ago" in warning[0]
    assert os.readlink(sandbox.store / "app.sqsh") == f"app/{app2['digest'][7:]}.sqsh"
    assert [i["name"] for i in record(sandbox, "beta")["images"]] == ["app", "other"]


# --- gc ----------------------------------------------------------------------------------------------------------

def make_sqsh(path: Path, size: int) -> int:
    """A real squashfs file (mksquashfs of incompressible data) at path; returns its size."""
    src = path.parent / f".src-{path.name}"
    src.mkdir(parents=True)
    (src / "data").write_bytes(secrets.token_bytes(size))
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mksquashfs", str(src), str(path), "-noappend", "-no-progress", "-quiet"], check=True,
                   capture_output=True)
    for f in src.iterdir():
        f.unlink()
    src.rmdir()
    path.chmod(0o644)
    return path.stat().st_size


def write_cluster_record(staging: Path, cluster: str, host: str, seen_days_ago: float, files: list[str]) -> None:
    (staging / "clusters").mkdir(parents=True, exist_ok=True)
    images = [{"name": f.split("/")[0], "digest": "sha256:" + f.split("/")[1][:-5], "file": f} for f in files]
    now = time.time()
    (staging / "clusters" / f"{cluster}.json").write_text(json.dumps({
        "record_version": 1, "cluster": cluster, "host": host, "synced_at": int(now - seen_days_ago * DAY),
        "seen_at": int(now - seen_days_ago * DAY), "images": images}))


def gc(sandbox, *extra: str) -> subprocess.CompletedProcess:
    return sandbox.run("gc", "--store", str(sandbox.store), *extra)


def table_of(proc: subprocess.CompletedProcess) -> dict[str, list[str]]:
    """FILE -> the row's columns, from gc's table (the columns are separated by two or more spaces)."""
    rows = [ln for ln in proc.stdout.splitlines() if ln and not ln[:4].isdigit()]
    header = rows[0].split()
    assert header == ["NAME", "FILE", "SIZE_MB", "LAST_REFERENCED_BY", "STATUS"], rows[0]
    import re
    return {cols[1]: cols for cols in (re.split(r"\s{2,}", r) for r in rows[1:] if "/" in r.split()[1])}


def test_gc_removes_only_unreferenced_unheld_files_past_grace_with_records_of_two_clusters(sandbox):
    store, staging = sandbox.store, staging_of(sandbox.store)
    hexes = {k: secrets.token_hex(32) for k in ("shared", "gone", "staleonly", "fresh", "mapped", "opened", "leased")}
    rel = {"shared": f"base/{hexes['shared']}.sqsh", "gone": f"base/{hexes['gone']}.sqsh",
           "staleonly": f"old/{hexes['staleonly']}.sqsh", "fresh": f"new/{hexes['fresh']}.sqsh",
           "mapped": f"mapped/{hexes['mapped']}.sqsh", "opened": f"opened/{hexes['opened']}.sqsh",
           "leased": f"leased/{hexes['leased']}.sqsh"}
    sizes = {k: make_sqsh(store / r, 40_000 + 10_000 * i) for i, (k, r) in enumerate(rel.items())}
    # alpha is live and uses the shared file; beta's head node stopped 10 days ago (stale) and used shared + old
    write_cluster_record(staging, "alpha", "head-a", 0.01, [rel["shared"]])
    write_cluster_record(staging, "beta", "head-b", 10, [rel["shared"], rel["staleonly"]])
    # stable names and manifest entries: base's points at the shared file, old's at the stale-only one
    os.symlink(rel["shared"], store / "base.sqsh")
    os.symlink(rel["staleonly"], store / "old.sqsh")
    manifest = {"manifest_version": 1, "rejected": {}, "images": {
        "base": {"digest": "sha256:" + hexes["shared"], "file": rel["shared"], "size": sizes["shared"]},
        "old": {"digest": "sha256:" + hexes["staleonly"], "file": rel["staleonly"], "size": sizes["staleonly"]}}}
    (store / "manifest.json").write_text(json.dumps(manifest))
    files = {r: published.new_entry("sha256:" + r.split("/")[1][:-5], "0" * 64, os.lstat(store / r))
             for r in rel.values()}
    (staging / "published.json").write_text(json.dumps(published.record_doc(files)))
    # gc first saw these unreferenced 100 hours ago (past the 72 h grace); "fresh" it has never seen
    long_ago = int(time.time() - 100 * 3600)
    (staging / "gc.json").write_text(json.dumps({"state_version": 1, "unreferenced_since": {
        rel[k]: long_ago for k in ("gone", "staleonly", "mapped", "opened", "leased", "shared")}}))
    # a job on another node started the leased file (the importer's lease); two processes here hold two files
    (staging / "inuse").mkdir(mode=0o1777)
    (staging / "inuse" / "node-b.7.0.1000.json").write_text(json.dumps({
        "lease_version": 1, "host": "node-b", "job": "7", "step": "0", "uid": 1000, "file": rel["leased"],
        "created": int(time.time())}))
    os.chown(staging / "inuse" / "node-b.7.0.1000.json", 1000, 1000)  # the importer writes it as the job's user
    mapper = subprocess.Popen([sys.executable, "-c", (
        "import mmap, sys, time\n"
        "f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); f.close()\n"
        "print('ready', flush=True); time.sleep(300)"), str(store / rel["mapped"])], stdout=subprocess.PIPE, text=True)
    with open(store / rel["opened"], "rb") as held:
        opener = subprocess.Popen(["sleep", "300"], stdin=held)
    try:
        assert mapper.stdout is not None and mapper.stdout.readline().strip() == "ready"
        dry = gc(sandbox)
        assert dry.returncode == 0, dry.stderr
        rows = table_of(dry)
        status = {k: rows[r][4] for k, r in rel.items()}
        assert status["shared"] == "kept: referenced by alpha"
        assert rows[rel["shared"]][3] == "alpha"
        assert status["staleonly"] == "would remove" and rows[rel["staleonly"]][3] == "beta (stale)"
        assert status["gone"] == "would remove" and rows[rel["gone"]][3] == "-"
        assert status["fresh"].startswith("kept: within grace until 20")
        assert status["mapped"] == f"kept: in use by pid {mapper.pid} (python3)" or \
            status["mapped"].startswith(f"kept: in use by pid {mapper.pid} (")
        assert status["opened"] == f"kept: in use by pid {opener.pid} (sleep)"
        assert status["leased"] == "kept: in use by job 7 step 0 on node-b (lease node-b.7.0.1000.json)"
        freed = sizes["gone"] + sizes["staleonly"]
        assert dry.stdout.splitlines()[-1].startswith(f"would free {freed} bytes (")
        assert "dry run: nothing removed" in dry.stdout
        assert all((store / r).exists() for r in rel.values()), "a dry run removes nothing"
        assert "cluster beta (host head-b): last seen 10.0 days ago (stale" in dry.stdout
        state = json.loads((staging / "gc.json").read_text())["unreferenced_since"]
        assert rel["fresh"] in state and rel["shared"] not in state, "grace starts when gc first sees a file unused"

        applied = gc(sandbox, "--apply")
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.splitlines()[-1].startswith(f"freed {freed} bytes (")
        assert table_of(applied)[rel["gone"]][4] == "removed"
        left = {k for k, r in rel.items() if (store / r).exists()}
        assert left == {"shared", "fresh", "mapped", "opened", "leased"}
        assert os.readlink(store / "base.sqsh") == rel["shared"], "a stable name of another file stays"
        assert not os.path.lexists(store / "old.sqsh"), "the stable name of the removed file goes"
        assert not (store / "old").exists(), "an emptied image directory goes"
        doc = json.loads((store / "manifest.json").read_text())
        assert sorted(doc["images"]) == ["base"]
        kept = json.loads((staging / "published.json").read_text())["files"]
        assert sorted(kept) == sorted(rel[k] for k in left)
    finally:
        mapper.kill()
        opener.kill()
        mapper.wait()
        opener.wait()
    # the holder ended: the file goes on the next run (its grace had passed)
    after = gc(sandbox, "--apply", "--format", "json")
    assert after.returncode == 0, after.stderr
    doc = json.loads(after.stdout)
    assert doc["applied"] is True and doc["bytes"] == sizes["mapped"] + sizes["opened"]
    assert {c["file"] for c in doc["files"] if c["status"] == "removed"} == {rel["mapped"], rel["opened"]}


def test_gc_refuses_to_guess_when_a_record_is_unreadable_or_no_cluster_recorded_anything(sandbox):
    sandbox.store.mkdir()
    make_sqsh(sandbox.store / "app" / f"{'a' * 64}.sqsh", 10_000)
    none = gc(sandbox, "--apply")
    assert none.returncode == 2 and "no cluster has recorded its images" in none.stderr
    assert "Traceback" not in none.stderr
    staging = staging_of(sandbox.store)
    write_cluster_record(staging, "alpha", "head-a", 0, [])
    (staging / "clusters" / "beta.json").write_text("{not json")
    bad = gc(sandbox, "--apply", "--grace-hours", "0")
    assert bad.returncode == 2 and "beta.json" in bad.stderr and "gc cannot know" in bad.stderr
    assert (sandbox.store / "app" / f"{'a' * 64}.sqsh").exists()


def test_importer_lease_protects_a_file_on_other_nodes_until_release(sandbox):
    app1 = sandbox.image("app", generation=1)
    lock = lock_for(sandbox, "alpha", [app1])
    sandbox.lock = lock
    assert sync_as(sandbox, lock).returncode == 0
    got = sandbox.importer(sandbox.locked_uri("app"))
    assert got.returncode == 0, got.stderr
    leases = list((staging_of(sandbox.store) / "inuse").iterdir())
    assert len(leases) == 1
    lease = json.loads(leases[0].read_text())
    assert lease["file"] == f"app/{app1['digest'][7:]}.sqsh" and lease["job"] == "41" and lease["step"] == "0"
    # the cluster moves to another digest: the old file is unreferenced, but a job still uses it
    lock_for(sandbox, "alpha", [sandbox.image("app", generation=2)])
    assert sync_as(sandbox, lock).returncode == 0
    old = lease["file"]
    held = gc(sandbox, "--apply", "--grace-hours", "0")
    assert held.returncode == 0, held.stderr
    assert table_of(held)[old][4].startswith("kept: in use by job 41 step 0 on ")
    assert (sandbox.store / old).exists()
    env = {"CK_ROOT": str(sandbox.root), "PYXIS_RUNTIME_PATH": str(sandbox.root / "pyxis"), "SLURM_JOB_UID": "0",
           "SLURM_JOB_GID": "0", "SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0"}
    released = subprocess.run([sys.executable, "-I", str(sandbox.root / "bundle" / SCRIPT.name), "release"],
                              env=env, capture_output=True, text=True, timeout=60)
    assert released.returncode == 0, released.stderr
    assert not list((staging_of(sandbox.store) / "inuse").iterdir())
    gone = gc(sandbox, "--apply", "--grace-hours", "0")
    assert table_of(gone)[old][4] == "removed" and not (sandbox.store / old).exists()
    # the file alpha's lock names now was never a candidate for removal
    assert all(r[4].startswith("kept: referenced by alpha") for f, r in table_of(gone).items() if f != old)


def _scontrol(sandbox, nodes: str, jobs: str, rc: int = 0) -> Path:
    """A stand-in for this cluster's scontrol, answering `-o show node` and `-o show job` in Slurm's one-line format
    (tests/slurm/test_slurm_lease_jobs.py reads the real one's)."""
    path = sandbox.root / "scontrol"
    path.write_text(f"#!/bin/bash\n[ \"$*\" = '-o show node' ] && {{ printf '%s' {nodes!r}; exit {rc}; }}\n"
                    f"[ \"$*\" = '-o show job' ] && {{ printf '%s' {jobs!r}; exit {rc}; }}\nexit 1\n")
    path.chmod(0o755)
    return path


def test_a_lease_of_an_ended_job_on_this_cluster_holds_nothing(sandbox):
    """The lease directory is every job user's to write, so a lease outliving its job must not pin a file for
    --lease-days: where its host is one of this cluster's nodes and Slurm has the job in a final state (or not at
    all), gc removes the file and the lease. A running job's lease holds; so does every lease when Slurm cannot be
    asked; a lease whose owner is not the uid it names is not a lease."""
    app1 = sandbox.image("app", generation=1)
    lock = lock_for(sandbox, "alpha", [app1])
    sandbox.lock = lock
    assert sync_as(sandbox, lock).returncode == 0
    assert sandbox.importer(sandbox.locked_uri("app")).returncode == 0
    inuse = staging_of(sandbox.store) / "inuse"
    (lease,) = inuse.iterdir()
    old = json.loads(lease.read_text())["file"]
    lock_for(sandbox, "alpha", [sandbox.image("app", generation=2)])
    assert sync_as(sandbox, lock).returncode == 0
    host = socket.gethostname().split(".")[0]
    node = f"NodeName={host} Arch=x86_64 CoresPerSocket=1\nNodeName=other-1 Arch=x86_64\n"
    running = _scontrol(sandbox, node, "JobId=41 JobName=train UserId=root(0) JobState=RUNNING Reason=None\n")
    kept = gc(sandbox, "--apply", "--grace-hours", "0", "--scontrol", str(running))
    assert table_of(kept)[old][4].startswith("kept: in use by job 41 step 0 on "), kept.stdout
    silent = _scontrol(sandbox, node, "", rc=1)  # slurmctld down: nothing judged
    kept = gc(sandbox, "--apply", "--grace-hours", "0", "--scontrol", str(silent))
    assert table_of(kept)[old][4].startswith("kept: in use by job 41"), kept.stdout
    assert "cannot ask Slurm" in kept.stdout
    # a forged lease beside it, written by another user in this job's name, is no lease at all
    forged = inuse / f"{host}.41.1.4242.json"
    forged.write_text(json.dumps({"lease_version": 1, "host": host, "job": "41", "step": "1", "uid": 0, "file": old}))
    os.chown(forged, 4242, 4242)
    ended = _scontrol(sandbox, node, "JobId=41 JobName=train UserId=root(0) JobState=COMPLETED Reason=None\n")
    gone = gc(sandbox, "--apply", "--grace-hours", "0", "--scontrol", str(ended))
    assert gone.returncode == 0, gone.stderr
    assert table_of(gone)[old][4] == "removed" and not (sandbox.store / old).exists()
    assert "not a lease (names uid 0, owned by uid 4242)" in gone.stdout + gone.stderr
    assert not lease.exists() and "its job ended" in gone.stdout


def test_gc_apply_waits_for_the_sync_lock_and_decides_again_under_it(sandbox):
    """No sync runs while gc removes: --apply waits for the sync lock, then reads the records again, so a cluster
    whose sync adopted the file meanwhile (its record now names it) keeps it."""
    store, staging = sandbox.store, staging_of(sandbox.store)
    rel = f"app/{'c' * 64}.sqsh"
    make_sqsh(store / rel, 20_000)
    write_cluster_record(staging, "alpha", "head-a", 0, [])
    fd = os.open(staging / "sync.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a sync is running
        proc = subprocess.Popen(sandbox.cmd("gc", "--store", str(store), "--apply", "--grace-hours", "0"),
                                env=sandbox.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2)  # long enough to read the records, the store and /proc, were it not waiting
        assert proc.poll() is None, "gc --apply must wait for the sync lock"
        assert (store / rel).exists()
        write_cluster_record(staging, "alpha", "head-a", 0, [rel])  # the sync adopted it under its lock
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "waiting for" in out and "another sync is running" in out
    assert (store / rel).exists(), "decided again under the lock: alpha's record names it now"
    assert "kept: referenced by alpha" in out and out.splitlines()[-1].startswith("freed 0 bytes")
