"""One store, many clusters (issue #28, part 2): clusters of one platform, each its own head node, network,
hostnames and Slurm (a fleet each, fleet.py), on ONE FSx directory and one registry.

What it proves: two clusters' head nodes syncing the same store AT ONCE (images both locks pin, and images
only one has) leave every image published once, a manifest listing both clusters' images, stable names on
their digests' files, the sync's record matching the files, no debris, and every registry blob fetched once in
all (the sync lock on the shared file system serialises the imports; the second sync plans again under it and
finds the shared images done). A third cluster with the same images then starts on the warm store: its head
node asks the registry for nothing, its sync finds every image present, and the first container job on its
compute node starts from the store.

Stand-ins (as the tier's others, docs/testing.md): FSx is one local directory bind-mounted on every node, so
the flock between head nodes is the local file system's (Lustre's is cluster-wide with ``flock`` mounts,
which ParallelCluster's FSx mounts use); the registry is the loopback one; images are small (busybox + a
file naming the image); newest enroot + pyxis generation only (the store code is the same for both).
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import runtime_build
from cluster_flow import SHARED, SYNC_UNIT, run_launcher, wait_unit
from fleet import Fleet
from fleet_flow import PROFILE, STORE
from images_fakes import FakeRegistry
from platform_flow import TAG, Cluster, boot_head, prepare, relock, repository, serve_image, sync_rows
from registry import serve_on
from tier import stage_for

NEWEST = max(runtime_build.GENERATIONS)
BOTH, ONLY_A, ONLY_B = ["base", "tools"], ["alpha"], ["beta"]


@dataclass
class Platform:
    fsx: Path
    registry: FakeRegistry
    loopback: str
    fleets: dict[str, Fleet]
    workdir: Path

    @property
    def store(self) -> Path:
        return self.fsx / "containers"

    @property
    def staging(self) -> Path:
        return self.fsx / ".containers.clusterkit"

    def manifest(self) -> dict:
        return json.loads((self.store / "manifest.json").read_text())


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    """Three clusters' fleets (one compute node each), started, on one FSx directory; one registry on all
    three networks. Nothing is booted yet."""
    stage = stage_for(NEWEST)
    fsx = tmp_path_factory.mktemp("platform-fsx")
    fsx.chmod(0o755)
    with contextlib.ExitStack() as stack:
        fleets = {}
        for name in ("plat-a", "plat-b", "plat-c"):
            fleet = Fleet(tmp_path_factory.mktemp(f"fleet-{name}"), stage, PROFILE, count=1, fsx_dir=fsx)
            stack.callback(fleet.stop)
            fleets[name] = fleet.start()
        registry, loopback = stack.enter_context(serve_on(*(f.fabric for f in fleets.values())))
        yield Platform(fsx, registry, loopback, fleets, tmp_path_factory.mktemp("platform-specs"))


WAITING = "(another sync is running)"  # the line a sync logs while the other holds the lock (store.flock_file)


@pytest.fixture(scope="module")
def concurrent(platform) -> dict[str, Cluster]:
    """Clusters A and B locked, then both head nodes booted at once (threads). Their syncs overlap for certain:
    the registry holds every blob until one sync logs that it waits for the other's lock, so whichever took the
    lock first is still importing when the other plans and reaches it."""
    clusters = {
        "plat-a": prepare(platform.fleets["plat-a"], platform.registry, platform.loopback, platform.workdir,
                          "plat-a", BOTH + ONLY_A),
        "plat-b": prepare(platform.fleets["plat-b"], platform.registry, platform.loopback, platform.workdir,
                          "plat-b", BOTH + ONLY_B),
    }
    platform.registry.log.clear()  # from here on: the head nodes' traffic only
    overlapped, done = threading.Event(), threading.Event()

    def hold(_repo: str, kind: str) -> None:
        if kind == "blobs":
            overlapped.wait(timeout=120)  # then served as usual (None: no injected fault)

    platform.registry.hook = hold
    errors: list[BaseException] = []

    def watch() -> None:
        while not (overlapped.is_set() or done.is_set()):
            for cluster in clusters.values():
                log = cluster.run_head(["cat", f"/run/ck-test/units/{SYNC_UNIT}.log"], check=False).stdout
                if WAITING in log:
                    overlapped.set()
            time.sleep(0.2)

    def boot(cluster: Cluster) -> None:
        try:
            boot_head(cluster)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    watcher = threading.Thread(target=watch)
    threads = [threading.Thread(target=boot, args=(c,)) for c in clusters.values()]
    for thread in [watcher, *threads]:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    done.set()
    watcher.join(timeout=30)
    platform.registry.hook = None
    assert not errors, errors
    for cluster in clusters.values():
        assert cluster.sync_rc == "0", f"{cluster.name}'s image sync exited {cluster.sync_rc}:\n{cluster.sync_log}"
    return clusters


def blob_paths(registry: FakeRegistry, images: list[str]) -> set[str]:
    """Every blob (config and layers) of the images' locked manifests, as the registry's log names them."""
    paths = set()
    for name in images:
        body, _ = registry.manifests[(repository(name), TAG)]
        doc = json.loads(body)
        for blob in [doc["config"], *doc["layers"]]:
            paths.add(f"/v2/{repository(name)}/blobs/{blob['digest']}")
    return paths


def test_two_head_nodes_syncing_one_store_at_once_publish_each_image_once(platform, concurrent) -> None:
    a, b = concurrent["plat-a"], concurrent["plat-b"]
    # They overlapped: one waited for the other's lock, then planned again and found the shared images done.
    waited = [c for c in (a, b) if WAITING in c.sync_log]
    assert len(waited) == 1, (a.sync_log, b.sync_log)
    second = waited[0]
    rows = sync_rows(second.sync_log, [i.name for i in second.lock.images])
    only = ONLY_A if second is a else ONLY_B
    assert {n: rows[n] for n in BOTH} == {n: ("present", "imported by a concurrent sync") for n in BOTH}, \
        second.sync_log
    assert {n: rows[n][0] for n in only} == {n: "imported" for n in only}, second.sync_log

    # Every locked image of both clusters is in the manifest, on one content file per digest.
    locked = {i.name: i for c in (a, b) for i in c.lock.images}
    assert sorted(locked) == sorted(BOTH + ONLY_A + ONLY_B)
    shared = [{i.name: i.digest for i in c.lock.images if i.name in BOTH} for c in (a, b)]
    assert shared[0] == shared[1] and len(shared[0]) == len(BOTH), "both locks pin the shared images' digests"
    manifest = platform.manifest()
    assert {n: e["digest"] for n, e in manifest["images"].items()} == {n: i.digest for n, i in locked.items()}
    assert manifest.get("rejected", {}) == {}
    expected_entries = {"manifest.json"}
    for name, img in locked.items():
        rel = f"{name}/{img.digest.removeprefix('sha256:')}.sqsh"
        assert sorted(os.listdir(platform.store / name)) == [rel.split("/")[1]], name
        assert os.readlink(platform.store / f"{name}.sqsh") == rel
        assert manifest["images"][name]["file"] == rel
        assert manifest["images"][name]["size"] == (platform.store / rel).stat().st_size
        expected_entries |= {name, f"{name}.sqsh"}
    # The store holds published content only; the staging directory no import or write left behind.
    assert set(os.listdir(platform.store)) == expected_entries
    for sub in ("partial", "tmp"):
        assert os.listdir(platform.staging / sub) == [], sub
    assert not (platform.staging / "quarantine").exists()
    files = json.loads((platform.staging / "published.json").read_text())["files"]
    assert sorted(files) == sorted(e["file"] for e in manifest["images"].values()), files
    for rel, entry in files.items():
        data = (platform.store / rel).read_bytes()
        assert (entry["size"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest()), rel

    # Each blob fetched once in all, by whichever head node imported its image.
    gets = collections.Counter(path for method, path, _ in platform.registry.log
                               if method == "GET" and "/blobs/" in path)
    assert gets == {path: 1 for path in blob_paths(platform.registry, list(locked))}, gets

    # The published record matches the files: the real verify of each cluster's lock, and a deep re-check
    # (sync --verify-all: unsquashfs + the sha256 of every file against the record) that imports nothing.
    seen = len(platform.registry.log)
    for cluster in (a, b):
        verify = cluster.verify()
        assert verify.returncode == 0, verify.stdout + verify.stderr
        for img in cluster.lock.images:
            assert f"verify: {img.name}: present" in verify.stdout, verify.stdout
        deep = cluster.run_head(["python3", f"{SHARED}/clusterkit_node.pyz", "sync", "--verify-all", "--store",
                                 STORE, "--lock", f"{SHARED}/images.lock"], check=False)
        assert deep.returncode == 0, deep.stdout + deep.stderr
        names = [i.name for i in cluster.lock.images]
        assert {s for s, _ in sync_rows(deep.stdout, names).values()} == {"present"}, deep.stdout
    assert platform.registry.log[seen:] == []


def test_a_cluster_on_the_warm_platform_imports_nothing_and_its_first_job_starts_from_the_store(
        platform, concurrent) -> None:
    """Cluster C pins A's images: its head node's sync finds all of them present with zero registry requests,
    and the first container job on its compute node (the locked registry name, pyxis 0.24's importer) runs
    the store's file."""
    fleet = platform.fleets["plat-c"]
    c = prepare(fleet, platform.registry, platform.loopback, platform.workdir, "plat-c", BOTH + ONLY_A)
    assert [i.digest for i in c.lock.images] == [i.digest for i in concurrent["plat-a"].lock.images]
    platform.registry.log.clear()
    manifest_before = (platform.store / "manifest.json").read_bytes()
    start = time.monotonic()
    boot_head(c)
    assert c.sync_rc == "0", c.sync_log
    names = [i.name for i in c.lock.images]
    assert sync_rows(c.sync_log, names) == {n: ("present", "") for n in names}, c.sync_log
    assert platform.registry.log == [], "the warm platform's new head node asked the registry for nothing"
    assert (platform.store / "manifest.json").read_bytes() == manifest_before

    failed = [b for b in fleet.boot_computes(c.compute_args) if isinstance(b, BaseException)]
    assert failed == []
    fleet.wait_idle()
    image = c.lock.images[0]
    uri = f"{platform.registry.host}#{repository(image.name)}:{TAG}"
    head = fleet.head
    assert head is not None
    job = head.run(["srun", "-N1", f"--container-image={uri}", "cat", "/etc/ck-image"], user="ckuser1",
                   timeout=180)
    first_job_s = time.monotonic() - start
    assert job.stdout.strip() == image.name, job.stdout + job.stderr
    answer = fleet.computes[0].run(["python3", f"{SHARED}/clusterkit_node.pyz", "get", f"docker://{uri}"],
                                   user="ckuser1")
    assert answer.stdout.strip() == f"{STORE}/{image.name}/{image.digest.removeprefix('sha256:')}.sqsh"
    assert platform.registry.log == [], "no node of cluster C asked the registry for anything"
    print(f"\nwarm cluster {c.name}: head node boot to store synced {c.sync_s:.1f} s, to first container job "
          f"{first_job_s:.1f} s, 0 registry requests")


def test_a_cluster_destroyed_mid_import_leaves_the_lock_and_its_import_to_the_next_cluster(platform,
                                                                                             concurrent) -> None:
    """Last in the module: it takes cluster A's head node away. A and C both move to a new image; A's update
    syncs first and holds the lock while its download hangs; C's sync waits for that lock; then A's head node is
    gone (every process in it killed, as when the cluster is destroyed: flock dies with its holder, on Lustre
    once the client is evicted). C's sync takes the lock, removes A's half-done import, imports the image
    itself and publishes it; the store holds every image once and nothing of A's attempt."""
    a, c_fleet = concurrent["plat-a"], platform.fleets["plat-c"]
    serve_image(platform.registry, "gamma")
    images = BOTH + ONLY_A + ["gamma"]
    c = Cluster("plat-c", c_fleet, platform.workdir / "plat-c.yaml", a.lock, [])
    for cluster in (a, c):
        relock(cluster, platform.registry, platform.loopback, images)
    released = threading.Event()

    def hold(repo: str, kind: str) -> None:
        if kind == "blobs" and repo == repository("gamma"):
            released.wait(timeout=120)  # A's download hangs here until A is gone

    platform.registry.hook = hold
    try:
        run_launcher(a.fleet.head)  # A's OnNodeUpdated: the sync takes the lock, starts importing gamma
        partial = platform.staging / "partial"
        a.fleet.head.wait(lambda: any(p.name.startswith("gamma.") for p in partial.iterdir()), "A's import", 60)
        (a_partial,) = [p.name for p in partial.iterdir()]
        run_launcher(c_fleet.head)
        c_fleet.head.wait(lambda: WAITING in c.run_head(["cat", f"/run/ck-test/units/{SYNC_UNIT}.log"],
                                                         check=False).stdout, "C's sync waiting for A's lock", 60)
        a.fleet.head.stop()  # cluster A is destroyed mid-import
    finally:
        released.set()
        platform.registry.hook = None
    assert wait_unit(c_fleet.head, SYNC_UNIT, timeout=300) == "0"
    log = c_fleet.head.read(f"/run/ck-test/units/{SYNC_UNIT}.log")
    assert f"removing stale temp file {STORE.replace('containers', '.containers.clusterkit')}/partial/{a_partial}" \
        in log, log
    assert sync_rows(log, images)["gamma"][0] == "imported", log
    manifest = platform.manifest()
    assert sorted(manifest["images"]) == sorted(images + ONLY_B), manifest
    gamma = next(i for i in c.lock.images if i.name == "gamma")
    assert os.listdir(platform.store / "gamma") == [f"{gamma.digest.removeprefix('sha256:')}.sqsh"]
    for sub in ("partial", "tmp"):
        assert os.listdir(platform.staging / sub) == [], sub
    verify = c.verify()
    assert verify.returncode == 0 and "verify: gamma: present" in verify.stdout, verify.stdout + verify.stderr
