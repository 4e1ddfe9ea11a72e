"""``clusterkit_node.pyz fingerprint``: a compute node records what it runs and refuses what it cannot run.

Why: each compute node records a fingerprint of its software (driver, EFA, enroot, pyxis, Slurm, AMI,
the manifest it saw) in <staging>/nodes/<cluster>/<hostname>.json (next to the store, outside the path FSx
exports to S3; see store/staging.py) and refuses to boot when its NVIDIA driver cannot run a locked image's
CUDA, per compat_rules.json (shipped next to the zipapp) evaluated by compat.py: a replaced node
at boot beats a crashed job at hour ten.

Per cluster: clusters on one platform share the store, and ParallelCluster names compute nodes after their queue
and compute resource (``gpu-st-p5-1``), so two clusters with the same queues have the same host names; one
directory per cluster keeps each cluster's fingerprints its own. Without ``--cluster`` (a bundle of the previous
version) the file goes to ``<staging>/nodes/<hostname>.json``, as before.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
from typing import Any, Dict, Tuple

from clusterkit_node.contract import compat
from clusterkit_node.contract import profiles as node_profiles
from clusterkit_node.contract.bundle_files import RULES_NAME, load_rules
from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, UsageError, error, log, now_utc, warn
from clusterkit_node.contract.layout import FINGERPRINT_TMP_RE, NODES_DIR, TMP_DIR, nodes_dir, tmp_dir
from clusterkit_node.contract.lock import LockedImage, load_lock
from clusterkit_node.image.versions import parse_efa_packages
from clusterkit_node.node.facts import (
    EFA_PACKAGES,
    find_tool,
    imds_facts,
    libfabric_version,
    node_identity,
    nvidia_facts,
    pyxis_version,
    read_host_text,
    tool_version,
)
from clusterkit_node.store.atomic_files import ensure_dir, write_json_atomic
from clusterkit_node.store.debris import pid_alive
from clusterkit_node.store.manifest import empty_manifest, read_manifest_bytes
from clusterkit_node.store.staging import ensure_staging

FINGERPRINT_VERSION = 1
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
CLUSTER_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,59}$")  # ParallelCluster's cluster names (settings.py CK_CLUSTER)


def image_versions(img: LockedImage, manifest: Dict[str, Any]) -> Tuple[Dict[str, str], str]:
    """Recorded versions when the store holds this digest, else what the lock expects."""
    entry = manifest["images"].get(img.name)
    if entry and entry.get("digest") == img.digest and isinstance(entry.get("versions"), dict):
        return dict(entry["versions"]), "recorded"
    return dict(img.expect), "expected"


def clean_fingerprint_debris(tmp: str, host: str) -> None:
    """This host's temp files left by a crashed earlier run (no other writer uses this host's name)."""
    for f in os.listdir(tmp):
        m = FINGERPRINT_TMP_RE.match(f)
        if m and m.group("host") == host and not pid_alive(int(m.group("pid"))):
            os.unlink(os.path.join(tmp, f))


def cmd_fingerprint(args: argparse.Namespace) -> int:
    """Compute node, OnNodeConfigured: record what this node runs, refuse what it cannot run."""
    rules = load_rules(args.rules)
    images = load_lock(args.lock)
    env = dict(os.environ)
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        error(f"fingerprint: image store {store} is not a directory (is FSx mounted?)")
        return EXIT_FAILED
    host = args.node_name or socket.gethostname().split(".")[0]
    if not HOSTNAME_RE.fullmatch(host):
        raise UsageError([f"node name {host!r} cannot name a fingerprint file (letters, digits, . _ -)"])
    cluster = args.cluster
    if cluster is not None and not CLUSTER_RE.fullmatch(cluster):
        raise UsageError([f"--cluster {cluster!r} is not a ParallelCluster cluster name (letter first, then "
                          "letters, digits, hyphens; at most 60)"])
    try:
        manifest_sha, manifest = read_manifest_bytes(store)
    except ValueError as exc:
        # the head node's next sync rebuilds it; this node's own facts are still worth recording, and
        # failing the boot over it would only feed Slurm's protected mode (as in `verify`)
        warn(f"fingerprint: {exc} (the head node's next image sync moves it aside and rebuilds it); "
             f"recorded without the store's images")
        manifest_sha, manifest = None, empty_manifest()
    queue, resource = node_identity(host)
    driver, cuda_api, no_driver = nvidia_facts(env)
    imds, no_imds = imds_facts(env)
    efa = parse_efa_packages(read_host_text(env, EFA_PACKAGES))
    enroot_exe = find_tool("enroot", env, "/usr/bin/enroot")
    sinfo = find_tool("sinfo", env, "/opt/slurm/bin/sinfo")
    doc = {
        "fingerprint_version": FINGERPRINT_VERSION,
        "hostname": host,
        "cluster": cluster,
        "queue": queue,
        "compute_resource": resource,
        "recorded_at": now_utc(),
        "instance_type": imds["instance_type"],
        "instance_id": imds["instance_id"],
        "ami_id": imds["ami_id"],
        "kernel": os.uname().release,
        "nvidia_driver": driver,
        "cuda_driver_api": cuda_api,
        "efa_installer": efa.get("efa_installer"),
        "libfabric": libfabric_version(env, efa.get("libfabric")),
        "enroot": tool_version(env, [enroot_exe, "version"], r"^\s*(\d\S*)") if enroot_exe else None,
        "pyxis": pyxis_version(env),
        "slurm": tool_version(env, [sinfo, "--version"], r"^slurm\S*\s+(\S+)") if sinfo else None,
        "manifest_sha256": manifest_sha,
        "rules_as_of": rules.as_of,
    }
    findings = []
    gpu_images = []
    for img in images:
        versions, origin = image_versions(img, manifest)
        if versions.get("cuda"):
            gpu_images.append(img.name)
        for f in compat.check(rules, img.name, versions, driver):
            findings.append((f, origin))
    doc["findings"] = [dict(f.as_dict(), versions=origin) for f, origin in findings]
    pyxis, enroot = doc["pyxis"], doc["enroot"]
    pairings = node_profiles.load().pairing_problems(pyxis=pyxis if isinstance(pyxis, str) else None,
                                                     enroot=enroot if isinstance(enroot, str) else None)
    doc["pairing_warnings"] = [{"id": p.id, "message": text, "source": p.source} for p, text in pairings]
    ensure_staging(store, NODES_DIR, TMP_DIR)
    writer = host if cluster is None else f"{cluster}.{host}"  # one writer per name: another cluster's same host
    clean_fingerprint_debris(tmp_dir(store), writer)
    folder = nodes_dir(store)
    if cluster is not None:
        folder = os.path.join(folder, cluster)
        ensure_dir(folder)
    path = write_json_atomic(os.path.join(folder, f"{host}.json"),
                             os.path.join(tmp_dir(store), f"node.{writer}.json.tmp-{os.getpid()}"), doc)
    shown = {k: doc[k] for k in ("queue", "instance_type", "nvidia_driver", "cuda_driver_api",
                                 "efa_installer", "libfabric", "enroot", "pyxis", "slurm")}
    log(f"fingerprint: wrote {path}: " + " ".join(f"{k}={v if v is not None else '-'}"
                                                  for k, v in shown.items()))
    if no_imds:
        log(f"fingerprint: instance type and AMI unknown: {no_imds}")
    if driver is None and gpu_images:
        warn(f"fingerprint: no NVIDIA driver answers ({no_driver}): CUDA images "
             f"{', '.join(gpu_images)} cannot use GPUs on this node")
    fatal = []
    for f, origin in findings:
        if f.kind == "driver_for_cuda" and f.level == "error":
            fatal.append(f)
            error(f"fingerprint: {f.text()}")
        elif f.level == "error":
            # Image-level: every node would fail the same way, so replacing this one cannot help.
            warn(f"fingerprint: {f.text()} (versions {origin}; an image problem, not this node's: fix "
                 f"the image)")
        else:
            warn(f"fingerprint: {f.text()} (versions {origin})")
    for _pairing, text in pairings:
        warn(f"fingerprint: {text}")
    if fatal:
        error(f"fingerprint: this node cannot run {len(fatal)} locked image(s); failing its bootstrap so "
              f"ParallelCluster replaces it (use an AMI with a newer NVIDIA driver, or images built for "
              f"an older CUDA)")
    return EXIT_FAILED if fatal else EXIT_OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    f = sub.add_parser("fingerprint",
                       help="compute node: record this node's software next to the store (/fsx/containers: "
                            "/fsx/.containers.clusterkit/nodes/<cluster>/<host>.json); "
                            "exit 1 if its NVIDIA driver cannot run a locked image")
    f.add_argument("--store", required=True)
    f.add_argument("--lock", required=True)
    f.add_argument("--rules", help=f"compatibility rules (default: {RULES_NAME} next to the zipapp)")
    f.add_argument("--node-name", help="override the hostname (the Slurm node name <queue>-st|dy-<cr>-<n>)")
    f.add_argument("--cluster", help="this node's cluster: the file goes to nodes/<cluster>/<host>.json (clusters "
                                     "on one platform share the store and their host names)")
