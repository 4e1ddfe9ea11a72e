"""The store's concurrency rules (clusterkit_node/store/concurrency.py, docs/store-concurrency.md), each pinned by a
test that fails when the rule is broken: the sync lock excludes a second process and does not nest, every write the
rules allow only under the lock refuses without it (gc's removal, the records, debris), the lease and gc rules
decide as the page says, and the sync's record never rides inside the manifest.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import SCRIPT, staging_of

from clusterkit_node.contract.lock import LockedImage
from clusterkit_node.store import cluster_records, concurrency, debris, gc, manifest, sync_state
from clusterkit_node.store.concurrency import LockRuleBroken, sync_lock, try_sync_lock

REPO = Path(__file__).resolve().parents[2]
HEX = "d" * 64

# A second process, from the shipped zipapp: holds or tries the sync lock and says what happened.
OTHER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from clusterkit_node.store.concurrency import sync_lock, try_sync_lock
store, mode = sys.argv[2], sys.argv[3]
if mode == "try":
    with try_sync_lock(store) as held:
        print("held" if held else "busy", flush=True)
else:
    with sync_lock(store):
        print("locked", flush=True)
"""


def other(store: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", OTHER, str(SCRIPT), str(store), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "containers"
    path.mkdir()
    return path


def image(name: str = "app") -> LockedImage:
    return LockedImage(name=name, digest="sha256:" + HEX, enroot_uri="docker://x@sha256:" + HEX, source="x",
                       compressed_size=1, registry="x", repository="x", platform="linux/amd64", expect={})


# --- rule writers-hold-the-sync-lock: one holder at a time -----------------------------------------------------

def test_a_second_process_cannot_take_the_sync_lock_while_it_is_held(store):
    with sync_lock(str(store)):
        tried = other(store, "try")
        assert tried.communicate(timeout=60)[0] == "busy\n"
        waiting = other(store, "wait")
        time.sleep(1.0)
        assert waiting.poll() is None, "a second sync_lock must wait while the lock is held"
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert out.splitlines()[-1] == "locked" and "(another sync is running)" in out, "it waited, saying so"
    assert other(store, "try").communicate(timeout=60)[0] == "held\n", "released when its holder leaves"


def test_the_lock_dies_with_its_holder(store):
    """kill -9 of a holder never blocks the next sync (flock, not a lock file's existence)."""
    holder = subprocess.Popen([sys.executable, "-c", OTHER.replace('print("locked", flush=True)',
                                                                   'print("locked", flush=True); time.sleep(600)'),
                               str(SCRIPT), str(store), "wait"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    assert other(store, "try").communicate(timeout=60)[0] == "busy\n"
    holder.kill()
    holder.wait()
    with try_sync_lock(str(store)) as held:
        assert held


def test_the_sync_lock_does_not_nest(store):
    """A second flock on another descriptor would wait for its own process forever: refused instead."""
    with sync_lock(str(store)):
        with pytest.raises(LockRuleBroken, match="already held"):
            with sync_lock(str(store)):
                pass
        assert concurrency.holds_sync_lock(str(store))
    assert not concurrency.holds_sync_lock(str(store))


def test_holding_is_per_thread_and_ends_with_the_block(store):
    seen = []
    with sync_lock(str(store)):
        t = threading.Thread(target=lambda: seen.append(concurrency.holds_sync_lock(str(store))))
        t.start()
        t.join()
        assert concurrency.holds_sync_lock(str(store))
    assert seen == [False], "another thread does not hold this thread's lock"
    with pytest.raises(ZeroDivisionError):
        with sync_lock(str(store)):
            1 / 0
    assert not concurrency.holds_sync_lock(str(store)), "released on an exception too"


def test_a_failed_try_holds_nothing(store):
    proc = subprocess.Popen([sys.executable, "-c", OTHER.replace('print("locked", flush=True)',
                                                                 'print("locked", flush=True); time.sleep(600)'),
                             str(SCRIPT), str(store), "wait"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "locked\n"
        with try_sync_lock(str(store)) as held:
            assert not held
            with pytest.raises(LockRuleBroken):
                concurrency.require_sync_lock(str(store), "writing")
    finally:
        proc.kill()
        proc.wait()


# --- every locked write refuses without the lock ----------------------------------------------------------------

def test_gc_refuses_to_remove_without_the_sync_lock(store):
    rel = f"app/{HEX}.sqsh"
    (store / "app").mkdir()
    (store / rel).write_bytes(b"x" * 10)
    plan = gc.Plan(candidates=[gc.Candidate(name="app", file=rel, size=10, last_referenced_by="-", status="",
                                            remove=True)], records=[], expired_leases=[], seen={})
    with pytest.raises(LockRuleBroken, match="gc-removes-only-unused"):
        gc.remove_files(str(store), plan, quiet=True)
    assert (store / rel).exists(), "nothing removed"
    with sync_lock(str(store)):
        assert gc.remove_files(str(store), plan, quiet=True) == 10
    assert not (store / rel).exists()


@pytest.mark.parametrize("write", [
    pytest.param(lambda s: cluster_records.write_cluster_record(s, cluster="alpha", images=[], synced_at=0,
                                                                seen_at=0), id="cluster-record"),
    pytest.param(lambda s: sync_state.write_record(s, {}), id="published-record"),
    pytest.param(lambda s: sync_state.unpublish(s, sync_state.SyncState(manifest.empty_manifest()), image(), "t"),
                 id="unpublish"),
    pytest.param(lambda s: manifest.load_manifest_for_sync(s), id="corrupt-manifest-aside"),
    pytest.param(lambda s: debris.migrate_legacy(s), id="legacy-migration"),
])
def test_writes_of_shared_state_refuse_without_the_lock_and_work_with_it(store, write):
    before = sorted(p.name for p in staging_of(store).rglob("*")) if staging_of(store).exists() else []
    with pytest.raises(LockRuleBroken, match="without holding .*sync.lock"):
        write(str(store))
    after = sorted(p.name for p in staging_of(store).rglob("*")) if staging_of(store).exists() else []
    assert after == before, "refused before writing anything"
    with sync_lock(str(store)):
        write(str(store))


def test_debris_is_removed_only_under_the_lock(store):
    """Without the lock a partial may be a live import of another sync: clean_debris refuses and keeps it."""
    with sync_lock(str(store)):
        pass  # creates the staging dirs
    partial = staging_of(store) / "partial" / f"app.{HEX}.sqsh.partial-{os.getpid()}"
    partial.mkdir()
    with pytest.raises(LockRuleBroken, match="debris-only-under-the-lock"):
        debris.clean_debris(str(store))
    assert partial.exists()
    with sync_lock(str(store)):
        debris.clean_debris(str(store))
    assert not partial.exists()


# --- lease-protects and gc-removes-only-unused decide as the page says -----------------------------------------

def test_a_lease_protects_its_file_until_it_is_older_than_lease_days():
    now = 1_000_000.0
    assert concurrency.lease_active(now - 86400, now=now, lease_days=1.0)
    assert not concurrency.lease_active(now - 86401, now=now, lease_days=1.0)


def test_gc_keeps_in_the_documented_order():
    keep = dict(now=100.0, grace_until=200.0, grace_until_text="T")
    assert concurrency.gc_keeps(live_users=["alpha"], holders=["pid 1"], **keep) == "kept: referenced by alpha"
    assert concurrency.gc_keeps(live_users=[], holders=["pid 1", "job 2"], **keep) == "kept: in use by pid 1; job 2"
    assert concurrency.gc_keeps(live_users=[], holders=[], **keep) == "kept: within grace until T"
    assert concurrency.gc_keeps(live_users=[], holders=[], now=200.0, grace_until=200.0,
                                grace_until_text="T") is None


# --- the sync's state: the record beside the manifest, never inside it ------------------------------------------

def test_the_record_travels_beside_the_manifest_and_the_formats_stay(store):
    img = image()
    (store / "app").mkdir()
    (store / img.rel_file).write_bytes(b"hsqs")
    state = sync_state.SyncState(manifest=manifest.empty_manifest())
    with sync_lock(str(store)):
        sync_state.record_published(str(store), state, img, "e" * 64)
        state.manifest["images"]["app"] = {"digest": img.digest, "file": img.rel_file, "size": 4}
        manifest.write_manifest(str(store), state.manifest)
        loaded = sync_state.load_state(str(store))
    assert set(state.manifest) == {"manifest_version", "images", "rejected"}
    assert json.loads((store / "manifest.json").read_text()) == {
        "manifest_version": 1, "images": {"app": {"digest": img.digest, "file": img.rel_file, "size": 4}}}
    record = json.loads((staging_of(store) / "published.json").read_text())
    assert sorted(record) == ["files", "record_version"] and record["record_version"] == 1
    assert record["files"][img.rel_file]["sha256"] == "e" * 64
    assert loaded.manifest["images"] == state.manifest["images"]
    if os.geteuid() == 0:  # the record is trusted (and so read back) only when root wrote it
        assert loaded.published == record["files"]
    assert loaded.published_entry("other/x.sqsh") == {}


def test_no_store_module_keeps_a_record_key_in_the_manifest():
    """The old RECORD_KEY rode in the manifest dict; nothing may index the manifest with it again."""
    sources = "".join(p.read_text() for p in (REPO / "clusterkit_node" / "store").glob("*.py"))
    assert "RECORD_KEY" not in sources and '["record"]' not in sources


# --- the rules in code are the rules on the page ---------------------------------------------------------------

def test_every_rule_has_its_section_in_docs_store_concurrency_md():
    page = (REPO / "docs" / "store-concurrency.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^#+ .*`([a-z-]+)`", page, re.MULTILINE))
    ids = [rule.id for rule in concurrency.RULES]
    assert len(ids) == len(set(ids))
    assert set(ids) == headings, "one section per rule, named by its id (docs/store-concurrency.md)"
