"""Sizing advice: warnings with numbers, from the spec, the image lock and the offline catalog.

``advise`` runs after the rules on a spec without errors (``loader.load``), on its effective spec
(``clusterkit.effective.expand``: resolved FSx throughput, local NVMe from the catalog); everything it says is
a warning (with its id from ``clusterkit.spec.warning_ids``), so ``validate`` still passes. The checks:

- FSx fan-out: every compute node turns each locked image into a container, and where pyxis extracts
  (``enroot create``: pyxis < 0.24, or ``use_squashfuse: false``) it reads the whole ``.sqsh`` from FSx
  to do it, so a job start on all max nodes reads ``nodes x sum(.sqsh)`` at the file system's baseline
  throughput (capacity x per-unit throughput). Squashfuse starts (pyxis >= 0.24) read only the blocks a
  job touches: the message adds that figure, from the measured share (SQUASHFUSE_READ_SHARE).
- Head node root volume: image imports on a head node without local NVMe unpack into the root volume
  (clusterkit_node/node/enroot_files.py ``layout``); the head node's disk preflight factors
  (clusterkit_node/contract/sizing.py) say how much.
- Compute root volume: on a queue whose instances have no local NVMe, pyxis unpacks each job's image
  into ENROOT_DATA_PATH on the root volume (enroot_files.py ``layout``), about TEMP_FACTOR x the
  image's compressed size, and ParallelCluster sizes that volume like the AMI unless told otherwise.
- Capacity blocks whose min/max differ from the block's instance count, when the spec states it.
- The start path nodes of the spec's OS will take: ``clusterkit_node.node.start_path.choose`` (what every node runs
  on facts it measures) run on the OS's profile (clusterkit/data/node_profiles.json). Where ParallelCluster's
  AMI lacks squashfuse (alinux2023), pyxis extracts every image onto node-local disk even with
  ``use_squashfuse`` on: a warning with the fix, and the fan-out figures use the extraction numbers. Where its
  squashfuse reads on one thread (every AMI but ubuntu2404's: node_profiles.json ``squashfuse_ll``), nodes extract
  too unless ``containers.pyxis.single_threaded_in_place``: a warning predicting each image's start.

A compute subnet too small for max nodes x EFA interfaces is an error, not advice: rules/network.py owns it.

Sizes come from the lock's ``compressed_size``; an image without one (``lock --offline``) is assumed to
be ``DEFAULT_IMAGE_GIB`` and the message says so.
"""
from __future__ import annotations

import functools
import math
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from clusterkit.effective.expand import EffectiveNewFsx, EffectiveSpec
from clusterkit.paths import NODE_PROFILES
from clusterkit.rules import limits
from clusterkit.spec.errors import Problem
from clusterkit.spec.yaml_reader import Marks
from clusterkit_node.contract import profiles as node_profiles
from clusterkit_node.contract.lock import ImageLock
from clusterkit_node.contract.settings import block_bytes
from clusterkit_node.contract.sizing import (
    CACHE_FACTOR,
    STORE_FACTOR_COMPRESSED,
    STORE_FACTOR_UNCOMPRESSED_DATA,
    TEMP_FACTOR,
    data_uncompressed,
)
from clusterkit_node.node.squashfuse_reader import THREADS_BY_DEFAULT_SINCE, version_tuple
from clusterkit_node.node.start_path import SQUASHFUSE, StartFacts, StartPath, choose

GIB = 1024 ** 3
GB = 1000 ** 3
MB = 1000 ** 2  # FSx quotes MBps: 10^6 bytes per second
DEFAULT_IMAGE_GIB = 20  # compressed size assumed for an image the lock has no size for (deliberately large)
FANOUT_WARN_SECONDS = 600  # a job on all max nodes should not wait more than 10 min for its image
SCRATCH_2_MB_PER_TIB = 200  # SCRATCH_2 baseline disk throughput (FSx user guide, SSD performance table)
OS_RESERVE_GIB = limits.MIN_HEAD_ROOT_GIB  # the AMI's own share, as the rules count it
FSX_TIERS = {tier: limits.FSX_THROUGHPUT[tier] for tier in ("PERSISTENT_2", "PERSISTENT_1")}
FSX_CAPACITY_STEP_GIB = 2400


# Squashfuse starts: bytes read from the store, as a share of the .sqsh, by a job that reads JOB_READS of
# its image's bytes, by (squashfs block size, -no-fragments). Measured with the real enroot 4.1.2 + pyxis
# 0.24.0, 4 GB image, zstd level 3, store read-ahead 128 KiB: docs/benchmarks.md (benchmarks/squashfuse_start.py,
# 2026-12-01). A block, and a fragment block of small files' tails, is read and decompressed whole.
JOB_READS = 0.25
SQUASHFUSE_READ_SHARE = {(128 * 1024, False): 0.354, (128 * 1024, True): 0.349,
                         (1024 * 1024, False): 0.438, (1024 * 1024, True): 0.363}


@dataclass(frozen=True)
class ImageSize:
    name: str
    compressed_bytes: int
    assumed: bool  # True: the lock has no size for it


def image_sizes(spec: EffectiveSpec, lock: ImageLock | None) -> list[ImageSize]:
    """One entry per image of the spec: the lock's size, or the stated assumption."""
    known = {e.name: e.compressed_size for e in (lock.images if lock else ())}
    sizes = []
    for image in spec.containers.images:
        size = known.get(image.name)
        if isinstance(size, int) and size > 0:
            sizes.append(ImageSize(image.name, size, False))
        else:
            sizes.append(ImageSize(image.name, DEFAULT_IMAGE_GIB * GIB, True))
    return sizes


@dataclass(frozen=True)
class SharedStore:
    """The distinct images on a store several clusters share: .sqsh bytes by file, and how many sizes were assumed."""

    sqsh: dict[str, int]  # a locked digest (one file, however many clusters name it), else "<cluster>/<image>"
    assumed: int


def shared_store(clusters: Iterable[tuple[EffectiveSpec, ImageLock | None]]) -> SharedStore:
    """What a platform's store holds for these clusters: one digest is one ``.sqsh``, so an image two clusters
    lock to the same digest counts once; an image without a locked digest counts for each cluster."""
    sqsh: dict[str, int] = {}
    assumed = 0
    for spec, lock in clusters:
        known = {e.name: e.digest for e in (lock.images if lock else ())}
        for size in image_sizes(spec, lock):
            key = known.get(size.name) or f"{spec.name}/{size.name}"
            if key not in sqsh:
                sqsh[key] = sqsh_bytes(spec, [size])
                assumed += size.assumed
    return SharedStore(sqsh, assumed)


def store_factor(squash_options: str) -> float:
    return STORE_FACTOR_UNCOMPRESSED_DATA if data_uncompressed(squash_options) else STORE_FACTOR_COMPRESSED


def block_size(squash_options: str) -> int:
    """mksquashfs -b in bytes (the nodes' own reading, clusterkit_node.contract.settings); 128 KiB when not given."""
    words = shlex.split(squash_options)
    for flag, value in zip(words, words[1:]):
        if flag == "-b":
            size = block_bytes(value)
            if size is not None:
                return size
    return 128 * 1024


def squashfuse_share(squash_options: str) -> float:
    """Measured share of the .sqsh a squashfuse start reads for a JOB_READS job, at the nearest measured
    block size at or above this one (the largest measured beyond them)."""
    block = block_size(squash_options)
    no_fragments = "-no-fragments" in shlex.split(squash_options)
    measured = sorted({b for b, _ in SQUASHFUSE_READ_SHARE})
    return SQUASHFUSE_READ_SHARE[(next((b for b in measured if b >= block), measured[-1]), no_fragments)]


def sqsh_bytes(spec: EffectiveSpec, sizes: list[ImageSize]) -> int:
    """Bytes of ``.sqsh`` in the store (what every node reads, and what the S3 twin holds)."""
    factor = store_factor(spec.containers.enroot.squash_options)
    return sum(int(factor * s.compressed_bytes) for s in sizes)


def max_nodes(spec: EffectiveSpec) -> int:
    return sum(cr.max for q in spec.queues for cr in q.compute_resources)


def fsx_throughput_mb_s(fsx: EffectiveNewFsx, per_unit: int | None = None, capacity_gib: int | None = None) -> float:
    """Baseline throughput in MB/s: capacity (TiB) x per-unit throughput (SCRATCH_2: 200 MB/s/TiB)."""
    capacity = fsx.capacity_gib if capacity_gib is None else capacity_gib
    unit = per_unit or fsx.throughput_mb_per_tib or SCRATCH_2_MB_PER_TIB
    if fsx.deployment_type == "SCRATCH_2" and per_unit is None:
        unit = SCRATCH_2_MB_PER_TIB
    return capacity / 1024 * unit


@dataclass(frozen=True)
class FanOut:
    nodes: int
    per_node_bytes: int
    total_bytes: int
    mb_per_s: float

    @property
    def seconds(self) -> float:
        return self.total_bytes / MB / self.mb_per_s if self.mb_per_s else math.inf


def fan_out(spec: EffectiveSpec, sizes: list[ImageSize]) -> FanOut | None:
    """All max nodes reading every locked image once; None without a new file system or images."""
    new = spec.storage.new
    if new is None or not sizes:
        return None
    per_node = sqsh_bytes(spec, sizes)
    nodes = max_nodes(spec)
    return FanOut(nodes, per_node, per_node * nodes, fsx_throughput_mb_s(new))


def advise(spec: EffectiveSpec, marks: Marks, lock: ImageLock | None, *, relock: str) -> list[Problem]:
    """Every sizing warning for a spec that has no errors; ``relock``: the command that locks this spec with
    registry access (files.lock_command), which records the sizes an offline lock lacks."""
    sizes = image_sizes(spec, lock)
    problems: list[Problem] = []
    for check in (_start_path, _fan_out, _head_root, _compute_root, _capacity_blocks):
        problems.extend(check(spec, marks, sizes, relock=relock))
    return problems


def _assumed(sizes: list[ImageSize], relock: str) -> str:
    n = sum(s.assumed for s in sizes)
    if not n:
        return ""
    return (f"{n} of {len(sizes)} image sizes assumed {DEFAULT_IMAGE_GIB} GiB, none in the lock: `{relock}` with "
            "registry access records them")


# What validate assumes of a node beyond its profile: the newest enroot/pyxis pair the tests run (the pyxis of
# each 3.16.1 AMI is not known, node_profiles.json "pyxis"); nodes with an older pyxis extract anyway.
ASSUMED_PYXIS, ASSUMED_ENROOT = "0.24.0", "4.1.2"


@functools.cache
def _profiles() -> node_profiles.Profiles:
    return node_profiles.load(str(NODE_PROFILES))


def start_path(spec: EffectiveSpec) -> StartPath | None:
    """The start path nodes of the spec's OS take, on pyxis >= 0.24 (None: no profile for the OS)."""
    profile = _profiles().get(spec.os)
    if profile is None:
        return None
    reader = profile.squashfuse_ll.value
    version = version_tuple(reader)
    threaded = version is not None and version >= THREADS_BY_DEFAULT_SINCE
    facts = StartFacts(pyxis=ASSUMED_PYXIS, enroot=ASSUMED_ENROOT, squashfuse=profile.has("squashfuse"),
                       fuse_overlayfs=profile.has("fuse-overlayfs"), fuse_for_users=profile.fuse_for_users,
                       fuse_detail=f"mode {profile.dev_fuse_mode.value} on ParallelCluster's {spec.os} AMI",
                       multi_threaded_reader=threaded,
                       reader=(f"squashfuse_ll {reader}, multi-threaded" if threaded else
                               f"squashfuse, single-threaded; its squashfuse_ll {reader or 'is absent'}"
                               + (" is older than 0.3.0" if reader else "")))
    return choose(facts, wanted=spec.containers.pyxis.use_squashfuse,
                  single_threaded_ok=spec.containers.pyxis.single_threaded_in_place)


def _start_path(spec: EffectiveSpec, m: Marks, sizes: list[ImageSize], *, relock: str) -> Iterator[Problem]:
    if not spec.containers.pyxis.use_squashfuse or not sizes:
        return
    decided = start_path(spec)
    if decided is None or decided.path == SQUASHFUSE:
        return
    profile = _profiles().get(spec.os)
    assert profile is not None
    if decided.slow_reader:
        threaded = _profiles().profiles["ubuntu2404"].squashfuse_ll.value
        starts = ", ".join(f"{s.name} {s.compressed_bytes / GB:.1f} GB{' (assumed)' if s.assumed else ''}"
                           for s in sizes)
        yield m.problem("os", f"containers on {spec.os} nodes start by extraction, not in place: the AMI's "
                              f"{decided.facts.reader if decided.facts else 'squashfuse'} (reads in place would be up "
                              f"to 4.5x slower), so every job start first unpacks its image onto node-local disk, "
                              f"a time that grows with the image ({starts})",
                        f"use os: ubuntu2404 (its squashfuse_ll {threaded} is multi-threaded) or a custom AMI with "
                        "squashfuse_ll >= 0.3.0; or, for large images that jobs read little of, "
                        "containers.pyxis.single_threaded_in_place: true with a reason",
                        level="warning", id="container-start-extracts-slow-reader")
        return
    lacking = " or ".join(decided.missing) or f"/dev/fuse usable by users (mode {profile.dev_fuse_mode.value})"
    yield m.problem("os", f"containers on {spec.os} nodes start by extraction, not in place: ParallelCluster's "
                          f"{spec.os} AMI has no {lacking}, so every job start unpacks its whole image onto "
                          "node-local disk", "use os: ubuntu2404 (its AMI ships squashfuse and a multi-threaded "
                    "squashfuse_ll) or a custom AMI that adds it; clusterkit/data/node_profiles.json cites the "
                    "cookbook",
                    level="warning", id="container-start-extracts")


def _fan_out(spec: EffectiveSpec, m: Marks, sizes: list[ImageSize], *, relock: str) -> Iterator[Problem]:
    fan = fan_out(spec, sizes)
    if fan is None or fan.seconds <= FANOUT_WARN_SECONDS:
        return
    new = spec.storage.new
    assert new is not None
    base = "storage.fsx_lustre.new"
    path = f"{base}.throughput_mb_per_tib" if new.deployment_type in FSX_TIERS else f"{base}.capacity_gib"
    hints = [_faster(new, fan.total_bytes)]
    if data_uncompressed(spec.containers.enroot.squash_options):
        hints.append(f"squash options store data uncompressed ({STORE_FACTOR_UNCOMPRESSED_DATA:g}x the layers); "
                     f"compressed ones (-comp zstd) read about {STORE_FACTOR_COMPRESSED:g}x")
    hints.append(_assumed(sizes, relock))
    message = (f"image fan-out: {fan.nodes} nodes x {len(sizes)} images ({fan.per_node_bytes / GB:.1f} GB of .sqsh "
               f"per node) = {fan.total_bytes / GB:.1f} GB at {fan.mb_per_s:.0f} MB/s takes {fan.seconds / 60:.1f} min "
               f"(over {FANOUT_WARN_SECONDS // 60} min)")
    decided = start_path(spec)
    if spec.containers.pyxis.use_squashfuse and (decided is None or decided.path == SQUASHFUSE):
        share = squashfuse_share(spec.containers.enroot.squash_options)
        message += (f" where pyxis extracts (pyxis < 0.24); squashfuse starts (pyxis >= 0.24) read about "
                    f"{share:.0%} of it for jobs reading {JOB_READS:.0%} of their image: "
                    f"{share * fan.seconds / 60:.1f} min")
    yield m.problem(path, message, "; ".join(h for h in hints if h), level="warning", id="image-fanout-slow")


def _faster(new: EffectiveNewFsx, total_bytes: int) -> str:
    """The smallest per-unit tier, else capacity, that brings the fan-out under the threshold."""
    needed = total_bytes / MB / FANOUT_WARN_SECONDS
    tiers = FSX_TIERS.get(new.deployment_type, ())
    for tier in tiers:
        rate = fsx_throughput_mb_s(new, per_unit=tier)
        if rate >= needed:
            return f"throughput_mb_per_tib: {tier} takes {total_bytes / MB / rate / 60:.1f} min"
    unit = max(tiers) if tiers else SCRATCH_2_MB_PER_TIB
    capacity = max(FSX_CAPACITY_STEP_GIB,
                   math.ceil(needed / unit * 1024 / FSX_CAPACITY_STEP_GIB) * FSX_CAPACITY_STEP_GIB)
    rate = fsx_throughput_mb_s(new, per_unit=unit, capacity_gib=capacity)
    where = f" at {unit} MB/s/TiB" if tiers else ""
    return f"capacity_gib: {capacity}{where} takes {total_bytes / MB / rate / 60:.1f} min"


def root_volume_need_gib(sizes: list[ImageSize]) -> float:
    """Root volume an import on the head node needs: the AMI, the largest unpack, every cached layer."""
    largest = max((s.compressed_bytes for s in sizes), default=0)
    total = sum(s.compressed_bytes for s in sizes)
    return OS_RESERVE_GIB + (TEMP_FACTOR * largest + CACHE_FACTOR * total) / GIB


def _head_root(spec: EffectiveSpec, m: Marks, sizes: list[ImageSize], *, relock: str) -> Iterator[Problem]:
    if not sizes:
        return
    if spec.head_node.has_nvme:
        return  # ParallelCluster mounts the instance store at /scratch; imports unpack there
    need = root_volume_need_gib(sizes)
    have = spec.head_node.root_volume_gib
    if need <= have:
        return
    largest = max(sizes, key=lambda s: s.compressed_bytes)
    total = sum(s.compressed_bytes for s in sizes)
    hint = (f"{OS_RESERVE_GIB} GiB for the AMI + {TEMP_FACTOR:g}x the largest image ({largest.name}, "
            f"{largest.compressed_bytes / GIB:.1f} GiB) unpacking + {CACHE_FACTOR:g}x all layers cached "
            f"({total / GIB:.1f} GiB); set root_volume_gib: {math.ceil(need)} or use a head node with local NVMe")
    assumed = _assumed(sizes, relock)
    yield m.problem("head_node.root_volume_gib",
                    f"importing the images needs {need:.0f} GiB on the root volume but it has {have} GiB",
                    f"{hint}; {assumed}" if assumed else hint, level="warning", id="head-root-volume-small")


def compute_root_need_gib(sizes: list[ImageSize]) -> float:
    """Root volume a compute node without NVMe needs: the AMI plus the largest image unpacked."""
    largest = max((s.compressed_bytes for s in sizes), default=0)
    return OS_RESERVE_GIB + TEMP_FACTOR * largest / GIB


def _compute_root(spec: EffectiveSpec, m: Marks, sizes: list[ImageSize], *, relock: str) -> Iterator[Problem]:
    if not sizes:
        return
    need = compute_root_need_gib(sizes)
    largest = max(sizes, key=lambda s: s.compressed_bytes)
    for i, queue in enumerate(spec.queues):
        if queue.has_nvme:
            continue  # ParallelCluster mounts the instance store at /scratch; containers unpack there
        have = queue.root_volume_gib if queue.root_volume_gib is not None else OS_RESERVE_GIB
        if need <= have:
            continue
        said = f"{have} GiB" if queue.root_volume_gib is not None else f"the AMI's size (about {OS_RESERVE_GIB} GiB)"
        hint = (f"{OS_RESERVE_GIB} GiB for the AMI + {TEMP_FACTOR:g}x the largest image ({largest.name}, "
                f"{largest.compressed_bytes / GIB:.1f} GiB compressed) unpacked per job; set "
                f"queues[{i}].root_volume_gib: {math.ceil(need)}")
        assumed = _assumed(sizes, relock)
        yield m.problem(f"queues[{i}].root_volume_gib" if queue.root_volume_gib is not None else f"queues[{i}].name",
                        f"queue {queue.name} has no instance-store NVMe: containers unpack onto a root volume of "
                        f"{said}, and the largest image needs {need:.0f} GiB",
                        f"{hint}; {assumed}" if assumed else hint, level="warning", id="compute-root-volume-small")


def _capacity_blocks(spec: EffectiveSpec, m: Marks, sizes: list[ImageSize], *, relock: str) -> Iterator[Problem]:
    for i, queue in enumerate(spec.queues):
        if queue.capacity_type != "capacity_block":
            continue
        for j, cr in enumerate(queue.compute_resources):
            count = cr.reservation_instance_count
            if count is None or count == cr.max:
                continue
            path = f"queues[{i}].compute_resources[{j}].reservation_instance_count"
            if cr.max > count:
                yield m.problem(path, f"min/max {cr.max} exceed the capacity block's {count} instances",
                                f"nodes beyond the block never launch; set min and max to {count}",
                                level="warning", id="capacity-block-exceeded")
            else:
                yield m.problem(path, f"min/max {cr.max} use {cr.max} of the capacity block's {count} instances",
                                f"the whole block is paid for; set min and max to {count}",
                                level="warning", id="capacity-block-partial")
