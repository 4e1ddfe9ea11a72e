"""Several clusters on one platform: each a fleet of its own (fleet.py: its own network, head node, Slurm and
hostnames), all on ONE FSx directory (the platform's image store) and one registry (registry.serve_on over
every fleet's fabric, so its log counts every cluster's requests together).

Images are small (busybox + a file naming the image, tests/real_runtime/cluster_flow.rootfs) so the tier's
added time stays small; the real training image's cold vs warm first job is benchmarks/warm_platform.py's.
A cluster is brought up as fleet_flow does it (ClusterKit's own lock code against the registry, the bundle to
the head node's S3 stand-in, the head node through ParallelCluster's phases: stage 0 -> launcher ->
head_node.sh -> the image-sync unit's real ``enroot import``), with its own cluster name and lock.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from cluster_flow import IMAGE_ENV, SHARED, SYNC_UNIT, rootfs, wait_unit
from fleet import Fleet
from fleet_flow import REPO, STORE, lock_and_upload
from images_fakes import FakeRegistry, add_rootfs_image
from lifecycle import Lifecycle

from clusterkit.images.lock_file import ImageLock

TAG = "v1"


def repository(name: str) -> str:
    return f"ck/{name}"


def serve_image(registry: FakeRegistry, name: str) -> str:
    """A small runnable image whose /etc/ck-image names it (each image its own layer, so its own digest)."""
    return add_rootfs_image(registry, repository(name), TAG, [rootfs(extra={"etc/ck-image": f"{name}\n"})],
                            env=IMAGE_ENV)


def spec_text(cluster: str, registry_host: str, names: list[str], os_name: str, squash_options: str = "") -> str:
    """The demo spec renamed ``cluster`` on the fleet's OS, with ``names`` as its images (``ck/<name>:v1``) and
    the store's default squash options unless given."""
    demo = (REPO / "cluster_configs" / "demo.yaml").read_text()
    demo = demo.replace("\nname: demo\n", f"\nname: {cluster}\n")
    demo = re.sub(r"(?m)^os: .*$", f"os: {os_name}", demo, count=1)
    head = demo[:demo.index("containers:\n")]
    tail = demo[demo.index("\nlifecycle:"):]
    images = "".join(f"    - name: {n}\n      uri: {registry_host}/{repository(n)}:{TAG}\n" for n in names)
    enroot = f"  enroot:\n    squash_options: {squash_options}\n" if squash_options else ""
    return head + "containers:\n" + enroot + "  images:\n" + images + tail


@dataclass
class Cluster:
    """One cluster of the platform: its fleet, name, spec, lock and what its head node's sync did."""

    name: str
    fleet: Fleet
    spec_path: Path
    lock: ImageLock
    compute_args: list[str]
    sync_log: str = ""
    sync_rc: str = ""
    sync_s: float = 0.0  # head node's boot start to its image sync's end

    def run_head(self, cmd: list[str], **kw):
        assert self.fleet.head is not None
        return self.fleet.head.run(cmd, **kw)

    def verify(self):
        """The real ``verify`` of the cluster's own lock against the shared store, on its head node."""
        return self.run_head(["python3", f"{SHARED}/clusterkit_node.pyz", "verify", "--store", STORE, "--lock",
                              f"{SHARED}/images.lock"], check=False)


def prepare(fleet: Fleet, registry: FakeRegistry, loopback_url: str, workdir: Path, name: str,
            images: list[str], *, serve: bool = True, squash_options: str = "") -> Cluster:
    """Serve the images (unless the caller has: ``serve``), lock the cluster's spec against the registry, put
    its bundle in its head node's S3."""
    for image in images if serve else []:
        serve_image(registry, image)
    spec_path = workdir / f"{name}.yaml"  # the file is named after the cluster (the loader's rule)
    spec_path.write_text(spec_text(name, registry.host, images, fleet.profile, squash_options))
    lock, compute_args = lock_and_upload(fleet, registry, loopback_url, spec_path)
    assert fleet.head is not None
    fleet.head.write("/etc/enroot/enroot.conf.d/90-ck-test-http.conf", "ENROOT_ALLOW_HTTP yes\n")
    return Cluster(name, fleet, spec_path, lock, compute_args)


def relock(cluster: Cluster, registry: FakeRegistry, loopback_url: str, images: list[str]) -> None:
    """The cluster's spec now names ``images`` (already served): locked again and its bundle uploaded, as a
    spec change before ``pcluster update-cluster`` (whose OnNodeUpdated is ``run_launcher``)."""
    cluster.spec_path.write_text(spec_text(cluster.name, registry.host, images, cluster.fleet.profile))
    cluster.lock, cluster.compute_args = lock_and_upload(cluster.fleet, registry, loopback_url, cluster.spec_path)


def boot_head(cluster: Cluster, timeout: float = 300) -> Cluster:
    """The head node through ParallelCluster's phases, then until its image-sync unit ends (thread-safe: each
    cluster is its own node root)."""
    head = cluster.fleet.head
    assert head is not None
    start = time.monotonic()
    Lifecycle(head, cluster.compute_args).head_boot()
    cluster.sync_rc = wait_unit(head, SYNC_UNIT, timeout=timeout)
    cluster.sync_s = time.monotonic() - start
    cluster.sync_log = head.read(f"/run/ck-test/units/{SYNC_UNIT}.log")
    return cluster


def sync_rows(log: str, names: list[str]) -> dict[str, tuple[str, str]]:
    """image name -> (STATUS, DETAIL) from the last table the sync printed (NAME DIGEST STATUS SIZE_MB DETAIL)."""
    rows: dict[str, tuple[str, str]] = {}
    for line in log.splitlines():
        cells = line.split(None, 4)
        if len(cells) >= 4 and cells[0] in names:
            rows[cells[0]] = (cells[2], cells[4] if len(cells) > 4 else "")
    return rows
