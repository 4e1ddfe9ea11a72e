"""Per-cluster records: which images each cluster on a platform uses, so one store can serve many clusters.

Every cluster on a platform syncs into the same store (/work/contract28.md). The store's stable names and its
manifest are keyed by image NAME, so a name means one digest at a time, and only the clusters themselves know
which files they still need. Each ``sync`` therefore writes, atomically and under the sync lock,
``<staging>/clusters/<cluster>.json``::

  {"record_version": 1, "cluster": "<CK_CLUSTER>", "host": "<head node hostname>",
   "synced_at": <epoch s>, "seen_at": <epoch s>,
   "images": [{"name": "...", "digest": "sha256:...", "file": "<name>/<hex>.sqsh"}, ...]}

``heartbeat`` (an hourly timer on the head node) refreshes ``seen_at``: a destroyed cluster stops refreshing,
and once its ``seen_at`` is older than the stale window (``DEFAULT_STALE_DAYS``) every reader treats it as gone
(and says so). Readers: ``sync`` (the one-name-one-digest refusal: ``name_conflicts``) and ``gc`` (a file a live
record names is never removed). The records live in the never-exported staging directory (root 0755), so only
the head nodes' root processes write them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from clusterkit_node.contract.console import EXIT_OK, UsageError, log
from clusterkit_node.contract.layout import CLUSTERS_DIR, TMP_DIR, clusters_dir, lock_path, tmp_dir
from clusterkit_node.contract.lock import LockedImage
from clusterkit_node.store.atomic_files import ensure_dir, write_json_atomic
from clusterkit_node.store.concurrency import require_sync_lock, try_sync_lock
from clusterkit_node.store.staging import ensure_staging

RECORD_VERSION = 1
DEFAULT_STALE_DAYS = 7.0  # a week without a heartbeat (hourly) is a cluster that is gone, not one rebooting
DAY = 86400
CLUSTER_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,59}")  # settings.py CK_CLUSTER: a ParallelCluster name
MAX_RECORD_BYTES = 4 << 20


@dataclass(frozen=True)
class RecordImage:
    name: str
    digest: str
    file: str

    @property
    def short(self) -> str:
        return self.digest.split(":", 1)[-1][:12]


@dataclass(frozen=True)
class ClusterRecord:
    """One cluster's record as read from ``path``."""

    cluster: str
    host: str
    synced_at: float
    seen_at: float
    images: Tuple[RecordImage, ...] = field(default=())
    path: str = ""

    def stale(self, *, now: float, stale_days: float) -> bool:
        return now - self.seen_at > stale_days * DAY

    def files(self) -> List[str]:
        return [i.file for i in self.images]

    def image(self, name: str) -> Optional[RecordImage]:
        return next((i for i in self.images if i.name == name), None)


def record_file(store: str, cluster: str) -> str:
    return os.path.join(clusters_dir(store), f"{cluster}.json")


def check_cluster(cluster: str, where: str) -> str:
    if not CLUSTER_RE.fullmatch(cluster):
        raise UsageError([f"{where}: cluster {cluster!r} is not a ParallelCluster name (letter first, then letters, "
                          f"digits, hyphens; max 60): re-run `make lock` for the cluster's spec"])
    return cluster


def parse_record(path: str, doc: Any) -> ClusterRecord:
    """A record from its JSON; ValueError naming the first field readers could not use."""
    if not isinstance(doc, dict) or doc.get("record_version") != RECORD_VERSION:
        raise ValueError(f"{path}: record_version: not {RECORD_VERSION} (written by a different ClusterKit?)")
    for key, kinds in (("cluster", (str,)), ("host", (str,)), ("synced_at", (int, float)),
                       ("seen_at", (int, float)), ("images", (list,))):
        value = doc.get(key)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise ValueError(f"{path}: {key}: {value!r} is not a {kinds[0].__name__}")
    images = []
    for i, entry in enumerate(doc["images"]):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("name", "digest", "file")):
            raise ValueError(f"{path}: images[{i}]: needs name, digest and file strings")
        images.append(RecordImage(name=entry["name"], digest=entry["digest"], file=entry["file"]))
    return ClusterRecord(cluster=doc["cluster"], host=doc["host"], synced_at=float(doc["synced_at"]),
                         seen_at=float(doc["seen_at"]), images=tuple(images), path=path)


def read_one(path: str) -> ClusterRecord:
    """The record at path (never through a symlink); ValueError: one line naming it and why."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"{path}: over {MAX_RECORD_BYTES} bytes: not a cluster record")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})")
    return parse_record(path, doc)


def read_records(store: str) -> Tuple[List[ClusterRecord], List[str]]:
    """Every cluster record of the store (sorted by cluster) and one line per record that cannot be read."""
    directory = clusters_dir(store)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return [], []
    records, problems = [], []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            records.append(read_one(os.path.join(directory, name)))
        except ValueError as exc:
            problems.append(str(exc))
    return records, problems


def record_images(images: List[LockedImage]) -> List[Dict[str, str]]:
    return [{"name": i.name, "digest": i.digest, "file": i.rel_file} for i in sorted(images, key=lambda i: i.name)]


def write_cluster_record(store: str, *, cluster: str, images: List[Dict[str, str]], synced_at: float,
                         seen_at: float) -> str:
    """Replace ``<staging>/clusters/<cluster>.json`` atomically (the caller holds the sync lock: checked)."""
    require_sync_lock(store, f"writing the record of cluster {cluster}")
    ensure_staging(store, TMP_DIR)
    ensure_dir(clusters_dir(store))
    doc = {"record_version": RECORD_VERSION, "cluster": cluster, "host": socket.gethostname(),
           "synced_at": int(synced_at), "seen_at": int(seen_at), "images": images}
    return write_json_atomic(record_file(store, cluster),
                             os.path.join(tmp_dir(store), f"cluster.{cluster}.json.tmp-{os.getpid()}"), doc)


def same_images(record: Optional[ClusterRecord], images: List[Dict[str, str]]) -> bool:
    if record is None:
        return False
    return [{"name": i.name, "digest": i.digest, "file": i.file} for i in record.images] == images


@dataclass(frozen=True)
class NameCheck:
    """What the one-name-one-digest rule says about a lock: images refused (name -> the error line) and warnings
    about stale records that no longer block."""

    refused: Dict[str, str]
    warnings: List[str]


def name_conflicts(images: List[LockedImage], records: List[ClusterRecord], *, cluster: str, now: float,
                   stale_days: float) -> NameCheck:
    """An image whose name another cluster's live record pins to a different digest is refused: the stable name
    ``<store>/<name>.sqsh`` and the manifest entry are the name's, and would be re-pointed under that cluster's
    running jobs. A stale record (``seen_at`` older than the window) does not block; it is named in a warning."""
    refused: Dict[str, str] = {}
    warnings: List[str] = []
    for img in images:
        for rec in records:
            other = rec.image(img.name)
            if rec.cluster == cluster or other is None or other.digest == img.digest:
                continue
            if rec.stale(now=now, stale_days=stale_days):
                warnings.append(f"{img.name}: cluster {rec.cluster} (host {rec.host}) pinned it to {other.short}, "
                                f"but its record {rec.path} was last seen {age(now - rec.seen_at)} ago (stale after "
                                f"{stale_days:g} days: treated as gone); syncing {img.short}")
                continue
            refused.setdefault(img.name, (
                f"{img.name}: refusing {img.short}: cluster {rec.cluster} (host {rec.host}) uses this name for "
                f"{other.short} on the same store (one name, one digest per platform); give the image another name "
                f"in this cluster's spec (containers.images[].name, then `make lock`), or wait until cluster "
                f"{rec.cluster} is gone (its record goes stale {stale_days:g} days after its last heartbeat)"))
    return NameCheck(refused=refused, warnings=warnings)


def age(seconds: float) -> str:
    days = seconds / DAY
    return f"{days:.1f} days" if days >= 1 else f"{seconds / 3600:.1f} hours"


def cmd_heartbeat(args: argparse.Namespace) -> int:
    """``heartbeat --store S --cluster C``: refresh seen_at of C's record (the hourly timer on the head node)."""
    store = os.path.abspath(args.store)
    cluster = check_cluster(args.cluster, "--cluster")
    path = record_file(store, cluster)
    if not os.path.lexists(path):
        log(f"heartbeat: {path} does not exist yet (the image sync writes it on its first run); nothing to refresh")
        return EXIT_OK
    ensure_staging(store, CLUSTERS_DIR)
    with try_sync_lock(store) as held:
        if not held:
            log(f"heartbeat: {lock_path(store)} is held (a sync or gc is running; the sync refreshes {path} when it "
                f"ends); skipped")
            return EXIT_OK
        try:
            rec = read_one(path)
        except ValueError as exc:
            raise UsageError([f"{exc} (the next `systemctl start clusterkit-image-sync` rewrites it)"])
        now = time.time()
        write_cluster_record(store, cluster=cluster, images=[{"name": i.name, "digest": i.digest, "file": i.file}
                                                             for i in rec.images],
                             synced_at=rec.synced_at, seen_at=now)
    log(f"heartbeat: {path}: seen_at refreshed ({len(rec.images)} image(s) of cluster {cluster})")
    return EXIT_OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    h = sub.add_parser("heartbeat", help="head node: refresh this cluster's record in the store (seen_at), so other "
                                         "clusters' sync and gc know it is alive (an hourly timer runs it)")
    h.add_argument("--store", required=True)
    h.add_argument("--cluster", required=True, help="this cluster's name (CK_CLUSTER)")
