"""A ClusterKit cluster brought up on a fleet (fleet.py), the training image included.

The flow, as on ParallelCluster:
  1. the loopback registry serves the Debian-built training image (training_image.py);
  2. ``clusterkit lock``'s own code pins the spec's image to its digest against that registry;
  3. the bundle for the spec goes to the head node's S3 stand-in;
  4. the head node boots in ParallelCluster's phase order (lifecycle.py): config mounts FSx and starts
     slurmctld; OnNodeConfigured runs stage 0 -> launcher -> head_node.sh, which configures enroot and
     pyxis and starts the image-sync unit (the real ``enroot import`` into the shared store);
  5. every compute node boots at once, WHILE that import runs (OnNodeStart, config: instance store, FSx,
     munge; OnNodeConfigured: compute_node_configured.sh with its self-test, store check and fingerprint;
     finalize: slurmd);
  6. the import ends, every node is idle in Slurm.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import runtime_build
from cluster_flow import SYNC_UNIT, put_file, wait_unit
from fleet import HEALTH_INTERVAL_S, Fleet
from images_fakes import FakeRegistry
from lifecycle import Boot, Lifecycle
from registry import serve_on
from runtime_build import Generation
from tier import stage_for
from training_image import Layer, serve

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.effective.expand import expand
from clusterkit.images import resolve as images
from clusterkit.images.lock_file import ImageLock, write_lock
from clusterkit.images.registry import RegistryClient
from clusterkit.pipeline.loader import image_specs, load, platform

REPO = Path(__file__).resolve().parents[2]
IMAGE = "train"
REPOSITORY, TAG = "ck/train", "bookworm-torch1.13"
STORE = "/fsx/containers"
# zstd level 1: the same format as the default's level 3, at a speed a 2-core CI machine can squash ~1 GB in.
SQUASH = "-comp zstd -Xcompression-level 1 -b 128K -no-fragments"
NCCL_MIN_GBPS = 100  # the deep check's threshold on the fleet (healthy stand-in links: gpu_standin.LINK_GBPS)


def spec_text(registry_host: str, os_name: str) -> str:
    """The demo spec on the fleet's OS, with the training image as its one image; Slurm's idle health check every
    HEALTH_INTERVAL_S (fleet.py's slurm.conf holds the same lines) and an NCCL threshold for the deep check (the
    stand-in links run at gpu_standin.LINK_GBPS)."""
    demo = (REPO / "cluster_configs" / "demo.yaml").read_text()
    demo = re.sub(r"(?m)^os: .*$", f"os: {os_name}", demo, count=1)
    demo = demo.replace("        efa: true\n", "        efa: true\n    health_checks:\n      deep:\n"
                        f"        nccl_min_busbw_gbps: {NCCL_MIN_GBPS}\n", 1)
    demo = demo.replace("\ncontainers:\n", f"\nscheduling:\n  health_check_interval_s: {HEALTH_INTERVAL_S}\n\n"
                        "containers:\n", 1)
    head = demo[:demo.index("containers:\n")]
    tail = demo[demo.index("\nlifecycle:"):]
    return (head + "containers:\n  enroot:\n"
            f"    squash_options: {SQUASH}\n"
            "  images:\n"
            f"    - name: {IMAGE}\n"
            f"      uri: {registry_host}/{REPOSITORY}:{TAG}\n" + tail)


@dataclass
class Up:
    """A fleet with ClusterKit on it, and what the bring-up showed."""

    fleet: Fleet
    generation: Generation
    registry: FakeRegistry
    digest: str
    lock: ImageLock
    compute_args: list[str]
    head_boot: Boot
    compute_boots: list[Boot | BaseException]
    sync_log: str
    boot_requests: list[tuple[str, str, str | None]]  # what the registry was asked while the cluster came up
    spec_path: Path
    loopback_url: str  # where the lock's client reaches the registry
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def sqsh(self) -> str:
        return f"{STORE}/{IMAGE}.sqsh"

    @property
    def registry_name(self) -> str:
        """The locked name a job gives ``--container-image`` (enroot's URI form: registry#repository:tag)."""
        return f"{self.registry.host}#{REPOSITORY}:{TAG}"


def lock_and_upload(fleet: Fleet, registry: FakeRegistry, loopback_url: str,
                    spec_path: Path) -> tuple[ImageLock, list[str]]:
    """``clusterkit lock`` against the registry, then the spec's bundle to the head node's S3 stand-in (what a
    deploy does); returns the lock and the compute nodes' Args."""
    assert fleet.head is not None
    loaded = load(str(spec_path), check_lock=False)
    fabric_host, registry.host = registry.host, loopback_url.removeprefix("http://")
    try:  # the lock's client reaches the registry on loopback; the token realm must be loopback too
        lock = images.resolve_lock(loaded.spec.name, image_specs(loaded.spec), platform(loaded.spec),
                                   registry_client=RegistryClient(allow_loopback_http=True,
                                                                  base_urls={fabric_host: loopback_url}))
    finally:
        registry.host = fabric_host
    write_lock(loaded.lock_path, lock)
    loaded = load(str(spec_path))
    put_file(fleet.head, "/var/lib/ck-test/s3/ck-test/bundle.zip", node_artifacts(loaded).bundle.data)
    return lock, list(expand(loaded).node.compute)


def bring_up(fleet: Fleet, generation: Generation, registry: FakeRegistry, loopback_url: str, layer: Layer,
             workdir: Path) -> Up:
    head = fleet.head
    assert head is not None
    timings: dict[str, float] = {}
    start = time.monotonic()
    digest = serve(registry, REPOSITORY, TAG, layer)
    spec_path = workdir / "demo.yaml"
    spec_path.write_text(spec_text(registry.host, fleet.profile))
    lock, compute_args = lock_and_upload(fleet, registry, loopback_url, spec_path)
    registry.log.clear()  # from here on the registry sees only the nodes' traffic
    # Site drop-in: enroot on the head node may talk plain http to the test registry (nothing else changes).
    head.write("/etc/enroot/enroot.conf.d/90-ck-test-http.conf", "ENROOT_ALLOW_HTTP yes\n")
    head_boot = Lifecycle(head, compute_args).head_boot()
    timings["head_configured_s"] = time.monotonic() - start
    compute_boots = fleet.boot_computes(compute_args)  # while the head node's import runs
    timings["computes_booted_s"] = time.monotonic() - start
    rc = wait_unit(head, SYNC_UNIT, timeout=600)
    sync_log = head.read(f"/run/ck-test/units/{SYNC_UNIT}.log")
    timings["store_synced_s"] = time.monotonic() - start
    assert rc == "0", f"image sync exited {rc}:\n{sync_log}"
    failed = [f"{n.slurm_node}: {b}" for n, b in zip(fleet.computes, compute_boots) if isinstance(b, BaseException)]
    assert not failed, "\n".join(failed)
    fleet.wait_idle()
    timings["all_idle_s"] = time.monotonic() - start
    boot_requests = list(registry.log)
    registry.log.clear()  # what jobs ask the registry for, from here on
    return Up(fleet, generation, registry, digest, lock, compute_args, head_boot, compute_boots, sync_log,
              boot_requests, spec_path, loopback_url, timings)


# squashfuse + a multi-threaded squashfuse_ll: the newer generation starts the store file in place
PROFILE = "ubuntu2404"


def fleet_up(gen_key: str, layer: Layer, fsx: Path, tmp_path_factory) -> Iterator[Up]:
    """A fleet of generation ``gen_key`` on the session's FSx directory, ClusterKit brought up on it, stopped
    after (a pytest fixture's body: ``yield from``)."""
    generation = runtime_build.GENERATIONS[gen_key]
    fleet = Fleet(tmp_path_factory.mktemp(f"fleet-{gen_key}"), stage_for(gen_key), PROFILE, fsx_dir=fsx)
    try:
        fleet.start()
        with serve_on(fleet.fabric) as (registry, loopback):
            yield bring_up(fleet, generation, registry, loopback, layer, tmp_path_factory.mktemp(f"spec-{gen_key}"))
    finally:
        fleet.stop()
