"""``clusterkit_node.pyz fingerprint``: a compute node records what it runs and refuses what it cannot run.

Why: each compute node records a fingerprint of its software (driver, EFA, enroot, pyxis, Slurm, AMI,
the manifest it saw) in <staging>/nodes/<cluster>/<hostname>.json (next to the store, outside the path FSx
exports to S3; see store/staging.py) and refuses to boot when its NVIDIA driver cannot run a locked image's
CUDA, per compat_rules.json (shipped next to the zipapp) evaluated by compat.py: a replaced node
at boot beats a crashed job at hour ten. On a node with a GPU, each locked image's ``NVIDIA_*`` settings are judged
by enroot's NVIDIA hook rule (image/nvidia_hook.py) with this node's driver, CUDA version and GPUs: a container the
hook refuses, or one it gives no libcuda, is an error that fails the boot; one it gives no GPU a warning. The
settings come from the store (the manifest entry the sync recorded from the image's /etc/environment, else that file
read from the .sqsh), else from the lock (what ``clusterkit lock`` read from the image config); the fingerprint says
which.

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
from typing import Any, Dict, List, Optional, Tuple

from clusterkit_node.contract import compat
from clusterkit_node.contract import profiles as node_profiles
from clusterkit_node.contract.bundle_files import RULES_NAME, load_rules
from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, UsageError, error, log, now_utc, warn
from clusterkit_node.contract.layout import FINGERPRINT_TMP_RE, NODES_DIR, TMP_DIR, nodes_dir, tmp_dir
from clusterkit_node.contract.lock import LockedImage, load_lock
from clusterkit_node.image import nvidia_hook as hook
from clusterkit_node.image.image_env import read_nvidia_settings
from clusterkit_node.image.versions import parse_efa_packages
from clusterkit_node.node.facts import (
    EFA_PACKAGES,
    GpuFacts,
    find_tool,
    gpu_facts,
    imds_facts,
    libfabric_version,
    node_identity,
    pyxis_version,
    read_host_text,
    tool_version,
)
from clusterkit_node.node.squashfuse_reader import serving
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


def image_nvidia(img: LockedImage, manifest: Dict[str, Any], store: str) -> Tuple[Optional[Dict[str, str]], str]:
    """(the image's NVIDIA_* settings, where they come from): the store's truth first (the manifest entry's record of
    the image's /etc/environment, else that file read from the .sqsh), else the lock's record; None: unknown."""
    entry = manifest["images"].get(img.name)
    if entry and entry.get("digest") == img.digest and isinstance(entry.get("nvidia"), dict):
        return dict(entry["nvidia"]), "the store's manifest (the image's /etc/environment, read at import)"
    path = os.path.join(store, img.rel_file)
    why = f"{path} not in the store"
    if os.path.isfile(path):
        found = read_nvidia_settings(path)
        if found.settings is not None:
            return found.settings, found.source
        why = found.source
    if img.nvidia_from and not img.nvidia_from.startswith("not read"):
        return dict(img.nvidia), f"the lock ({img.nvidia_from})"
    return None, f"{why}; the lock did not read them ({img.nvidia_from or 'not recorded'})"


def hook_verdicts(images: List[LockedImage], manifest: Dict[str, Any], store: str,
                  gpus: GpuFacts) -> List[Dict[str, Any]]:
    """What enroot's NVIDIA hook does with each locked image on this node's GPUs; none without a GPU."""
    if gpus.driver is None:
        return []
    found = []
    for img in images:
        settings, source = image_nvidia(img, manifest, store)
        if settings is None:
            found.append({"image": img.name, "outcome": "not-judged", "level": "", "settings_from": source,
                          "reason": "NVIDIA_* settings unknown", "variable": "", "hint": ""})
            continue
        verdict = hook.on_gpus(settings, gpus.hook_drivers())
        found.append({"image": img.name, "outcome": verdict.outcome, "level": hook.NODE_LEVELS[verdict.outcome],
                      "reason": verdict.reason, "variable": verdict.variable, "settings_from": source,
                      "hint": hook.node_hint(verdict, hook.Driver(gpus.driver, gpus.cuda))})
    return found


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
    gpus = gpu_facts(env)
    driver, cuda_api, no_driver = gpus.driver, gpus.cuda, gpus.why
    imds, no_imds = imds_facts(env)
    efa = parse_efa_packages(read_host_text(env, EFA_PACKAGES))
    enroot_exe = find_tool("enroot", env, "/usr/bin/enroot")
    sinfo = find_tool("sinfo", env, "/opt/slurm/bin/sinfo")
    reader = serving(env)
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
        "gpus": [{"name": name, "compute_cap": arch} for name, arch in gpus.kinds()],
        "efa_installer": efa.get("efa_installer"),
        "libfabric": libfabric_version(env, efa.get("libfabric")),
        "enroot": tool_version(env, [enroot_exe, "version"], r"^\s*(\d\S*)") if enroot_exe else None,
        "pyxis": pyxis_version(env),
        "squashfuse_reader": reader.summary() if reader else None,  # what enroot runs for in-place starts
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
    doc["nvidia_hook"] = hook_verdicts(images, manifest, store, gpus)
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
    if driver is not None and gpus.why:
        log(f"fingerprint: {gpus.why}: NVIDIA_REQUIRE_* terms on arch are not judged here")
    fatal = []
    for f, origin in findings:
        if f.kind == "driver_for_cuda" and f.level == "error":
            fatal.append(f.image)
            error(f"fingerprint: {f.text()}")
        elif f.level == "error":
            # Image-level: every node would fail the same way, so replacing this one cannot help.
            warn(f"fingerprint: {f.text()} (versions {origin}; an image problem, not this node's: fix "
                 f"the image)")
        else:
            warn(f"fingerprint: {f.text()} (versions {origin})")
    for item in doc["nvidia_hook"]:
        line = (f"fingerprint: image {item['image']}: {item['reason']} (NVIDIA_* settings from "
                f"{item['settings_from']})" + (f"; {item['hint']}" if item["hint"] else ""))
        if item["level"] == "error":
            fatal.append(item["image"])
            error(line)
        elif item["level"] == "warning":
            warn(line)
        elif item["outcome"] == "not-judged":
            log(f"fingerprint: image {item['image']}: what enroot's NVIDIA hook does with it is not judged: "
                f"{item['settings_from']} (the head node's image sync reads them when it imports the image)")
    for _pairing, text in pairings:
        warn(f"fingerprint: {text}")
    if fatal:
        error(f"fingerprint: this node cannot run {len(set(fatal))} locked image(s); failing its bootstrap so "
              f"ParallelCluster replaces it (use an AMI whose NVIDIA driver runs them, or images built for "
              f"its CUDA)")
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
