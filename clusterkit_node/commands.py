"""The image store commands: keep the FSx image store in step with the image lock (head node), or check it
(compute nodes).

Commands (stdlib only, Python 3.9+, run as root on the head node; compute nodes run ``verify`` and
``fingerprint``), from the bundle's zipapp (``python3 clusterkit_node.pyz COMMAND``; ``python -m
clusterkit_node COMMAND`` in a checkout):

  sync        --lock LOCK --store DIR [--retries N] [--backoff S] [--verify-all] [--heartbeat S] [--stale-days D]
  heartbeat   --store DIR --cluster NAME   (head node timer: refresh this cluster's record, cluster_records.py)
  gc          --store DIR [--apply] [--grace-hours H] [--stale-days D] [--lease-days D] [--format table|json]
  status      --store DIR [--lock LOCK]
  verify      --store DIR --lock LOCK [--deep]
  fingerprint --store DIR --lock LOCK [--rules FILE] [--node-name NAME]
  drift       --store DIR [--rules FILE] [--format table|json] [--max-age-hours H]
  start-path  [--want-squashfuse 0|1] [--os OS] [--format text|json]   (how pyxis will start containers here)
  selftest    [--want-squashfuse 0|1] [--path squashfuse|extract] [--squash-options O] [--format text|json]
  inspect     IMAGE.sqsh [--rules FILE] [--format text|json]   (versions, their sources, rule findings)
  nccl-check  [--expect ofi|socket|any] [--format text|json] [LOGFILE...]   (stdin without LOGFILE)
  user-dirs   --prolog | --uid UID --gid GID   (root: a user's enroot dirs, theirs and 0700; the Slurm prolog)

Node setup (the node scripts' bash calls these, writes what they print and logs their LEVEL lines):

  node-args       --role head|compute [--script NAME] -- KEY=VALUE...   (node.env; exit 2 + one line: bad Args)
  enroot-conf     --medium M --runtime-dir D --data-dir D --cache-dir D --temp-dir D --role R -- KEY=VALUE...
  pyxis-conf      --so PLUGIN --role R -- KEY=VALUE...   (log lines, '--', pyxis.conf)
  plugstack-conf  --etc SLURM_ETC                         (plugstack.conf with ClusterKit's include line)
  pyxis-line-check --so PLUGIN --etc SLURM_ETC            (compute: path=squashfuse|extract; exit 1 + one line)
  plugstack-loads --so PLUGIN --etc SLURM_ETC             (compute/login: plugin here, plugstack.conf loads it)
  start-path-check --line-path P [--want-squashfuse 0|1] [--os OS]   (compute: can this node start that way?)
  require-enroot  [--with-pyxis]                          (exit 1 + one line naming every missing piece)
  enroot-files    [--scratch-mounted] [--slurm-service S] --role R -- KEY=VALUE...   (enroot dirs, enroot.conf,
                  hooks, credentials, sysctl, the Slurm PATH drop-in)
  slurm-prolog                                            (head: the prolog that makes each user's enroot dirs)
  pyxis-files     --etc SLURM_ETC --so PLUGIN --role R -- KEY=VALUE...   (head: plugstack.conf + pyxis.conf)
  node-file       write|dir|remove PATH [MODE] [--tmpdir D]   (one file, content on stdin; what head_node.sh writes)
  (these print "LEVEL message" and "@marker" lines in the order they acted: file_set.py)
  store-units     --sync-enroot-config DIR --inputs-file FILE --role head -- KEY=VALUE...
                  (head: the image store's systemd units; @systemd-dirty, @restart-sync, @sync-inputs)

The work is done by the package's modules, one job each:

  console.py          log/warn/error lines, tables, usage errors, exit codes
  lock.py             the image lock as the nodes read it (every problem at once)
  layout.py           the store's names: published files, stable names, manifest, staging entries
  published.py        the sync's private record of published files (size, sha256, lstat identity) and the
                      importer's cheap check against it
  store.py            the store itself (published content only; staging next to it), manifest (atomic
                      writes), sync lock, stable names, crash debris, migration of the old layout
  sync_config.py      sync options; enroot settings resolved as enroot does (env, enroot.conf, defaults)
  sizing.py           the disk factors of an import (the CLI's sizing advice imports them too)
  disk_preflight.py   refuse imports that would fill a filesystem
  squashfs.py         unsquashfs + superblock checks of a .sqsh
  image_files.py      files inside a .sqsh without mounting it (listing, symlinks, bounded reads)
  elf_dynamic.py      a library's DT_NEEDED / DT_RPATH / DT_RUNPATH, from its bytes
  library_search.py   which file the dynamic loader picks inside an image (ld.so(8)'s order)
  versions.py         CUDA/NCCL/EFA/... versions read out of a .sqsh as the loader sees them; ``expect``
  image_inspect.py    ``inspect``: those versions, their sources and the rules' findings
  image_import.py     enroot import with retries and backoff, adoption, publish and record
  progress.py         enroot's output streamed to the log, heartbeat lines, the in-flight record `status` reads
  sync.py             ``sync``;  status.py ``status``;  verify.py ``verify``
  cluster_records.py  each cluster's record of the images it uses (sync writes it, ``heartbeat`` refreshes it),
                      the one-name-one-digest rule across the clusters of one store
  gc.py               ``gc``: remove store files no live cluster record names, no process or lease holds
  compat.py           the compatibility rules evaluator (the CLI's ``validate`` runs the same one)
  bundle_files.py     compat_rules.json and images.lock next to the zipapp
  facts.py            driver, EFA, libfabric, pyxis, Slurm, IMDS facts of this node
  fingerprint.py      ``fingerprint``;  drift.py ``drift``
  profiles.py         node_profiles.json: what each OS's ParallelCluster AMI has for containers
  start_path.py       ``start-path``: squashfuse in place or extraction, from facts measured on the node
  selftest.py         ``selftest``: a real container start as an unprivileged user (selftest_image.py: its image)
  user_dirs.py        ``user-dirs``: each user's enroot dirs made by root (prolog), anything else quarantined
  nccl_transport.py   ``nccl-check``: did NCCL use EFA (NET/OFI) or fall back to sockets? (NCCL_DEBUG=INFO)
  settings.py         the node settings table (keys, defaults, patterns, hints, required roles)
  args.py             ``node-args``: the Args checked against that table (did-you-mean), node.env
  enroot_conf.py      ``enroot-conf``, ``enroot-credentials``: /etc/enroot/enroot.conf and the ECR credentials
  pyxis_conf.py       ``pyxis-conf``, ``plugstack-conf``, ``pyxis-line-check``, ``plugstack-loads``,
                      ``start-path-check``: pyxis' options for the installed pyxis, pyxis.conf, the plugstack
                      include line, the compute nodes' checks
  file_set.py         ``node-file``: atomic, write-only-if-changed files and dirs, and the lines that report them
  preflight.py        ``require-enroot``: what the AMI must ship (enroot, pyxis, PC's examples)
  enroot_files.py     ``enroot-files``: a node's enroot dirs, enroot.conf, hooks, credentials, sysctl, PATH drop-in
  slurm_prolog.py     ``slurm-prolog``: the prolog that runs ``user-dirs``
  pyxis_files.py      ``pyxis-files``: the head node's plugstack.conf and pyxis.conf
  pyxis_conf.py       ``pyxis-conf``, ``plugstack-conf``, ``pyxis-line-check``: pyxis' options for the installed
                      pyxis, pyxis.conf, the plugstack include line, the compute nodes' check of that line
  systemd_units.py    ``store-units``: the head node's image sync, heartbeat and gc units and timers, and whether
                      the sync's inputs changed (written through file_set.py)

Exit codes: 0 everything present, 1 an image failed (or verify found the store unusable, or a node
cannot run a locked image, or nodes of one queue differ, or the file system refused a write: read-only,
full, something in the way; one line naming the path), 2 usage, lock or preflight error (disk space,
missing tools, missing compat files); ``sync`` also exits 1 when it refused an image name another live
cluster pins to another digest. ``gc``: 0 (dry run, or the removals done), 2 when it cannot know what is used
(an unreadable cluster record, no record at all, or with ``--apply`` processes whose open files it cannot
read), 1 a file-system error.
``heartbeat``: 0 (also when the record does not exist yet or the lock is held: the sync refreshes it).
``nccl-check``: 1 a host used TCP sockets (or a non-efa provider)
instead of EFA, 2 the log has no NCCL transport line (NCCL_DEBUG=INFO unset?).
"""
from __future__ import annotations

import argparse
import sys
from typing import Iterable, Optional

from clusterkit_node.contract.bundle_files import RULES_NAME, ZIPAPP_NAME
from clusterkit_node.contract.console import EXIT_FAILED, EXIT_USAGE, PROG, UsageError, error, os_error_line
from clusterkit_node.fleet.drift import cmd_drift
from clusterkit_node.fleet.fingerprint import cmd_fingerprint
from clusterkit_node.fleet.nccl_transport import EXPECTATIONS, cmd_nccl_check
from clusterkit_node.image import image_inspect
from clusterkit_node.node import args as node_args
from clusterkit_node.node import (
    enroot_conf,
    enroot_files,
    file_set,
    preflight,
    pyxis_conf,
    pyxis_files,
    selftest,
    slurm_prolog,
    start_path,
    systemd_units,
    user_dirs,
)
from clusterkit_node.store import cluster_records, gc
from clusterkit_node.store.cluster_records import DEFAULT_STALE_DAYS
from clusterkit_node.store.status import cmd_status
from clusterkit_node.store.sync import cmd_sync
from clusterkit_node.store.sync_config import DEFAULT_HEARTBEAT
from clusterkit_node.store.verify import cmd_verify

# ------------------------------------------------------------------------------------------------- CLI

# What the node scripts run while they set a node up: the renders print what they render; the *-files, node-file,
# require-enroot, plugstack-loads and store-units commands act on the node and print what they did
# (file_set.py) for the scripts to log, in order.
NODE_SETUP = {
    "node-args": node_args.cmd_node_args,
    "enroot-conf": enroot_conf.cmd_enroot_conf,
    "enroot-credentials": enroot_conf.cmd_enroot_credentials,
    "pyxis-conf": pyxis_conf.cmd_pyxis_conf,
    "plugstack-conf": pyxis_conf.cmd_plugstack_conf,
    "pyxis-line-check": pyxis_conf.cmd_pyxis_line_check,
    "plugstack-loads": pyxis_conf.cmd_plugstack_loads,
    "start-path-check": pyxis_conf.cmd_start_path_check,
    "node-file": file_set.cmd_node_file,
    "require-enroot": preflight.cmd_require_enroot,
    "enroot-files": enroot_files.cmd_enroot_files,
    "slurm-prolog": slurm_prolog.cmd_slurm_prolog,
    "pyxis-files": pyxis_files.cmd_pyxis_files,
    "store-units": systemd_units.cmd_store_units,
}

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=ZIPAPP_NAME, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sync", help="import missing locked images into the store (head node)")
    s.add_argument("--lock", required=True, help="cluster_configs/<name>.images.lock")
    s.add_argument("--store", required=True, help="image store directory, e.g. /fsx/containers")
    s.add_argument("--retries", type=int, default=2,
                   help="extra attempts per image after a failed import (default 2)")
    s.add_argument("--backoff", type=float, default=15.0,
                   help="seconds before the first retry, doubled each time (default 15)")
    s.add_argument("--verify-all", action="store_true",
                   help="also check every present image with unsquashfs -s (reads metadata)")
    s.add_argument("--heartbeat", type=float, default=DEFAULT_HEARTBEAT, metavar="SECONDS",
                   help="seconds between progress lines (time, bytes so far, throughput) while an image "
                        f"imports (default {DEFAULT_HEARTBEAT:g}; 0: none)")
    s.add_argument("--stale-days", type=float, default=DEFAULT_STALE_DAYS, metavar="DAYS",
                   help="another cluster's record not refreshed for this long no longer pins its image names "
                        f"(default {DEFAULT_STALE_DAYS:g})")
    st = sub.add_parser("status", help="present / missing / in progress per image")
    st.add_argument("--store", required=True)
    st.add_argument("--lock")
    v = sub.add_parser("verify", help="compute node: store mounted, manifest readable (never imports)")
    v.add_argument("--store", required=True)
    v.add_argument("--lock", required=True)
    v.add_argument("--deep", action="store_true",
                   help="also re-read every present image and compare its sha256 with the one recorded "
                        "at import (catches same-size corruption; reads every byte: run it on the head "
                        "node, not at every compute boot)")
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
    d = sub.add_parser("drift", help="head node: group node fingerprints per queue, show what differs; "
                                     "exit 1 when nodes of one queue differ")
    d.add_argument("--store", required=True)
    d.add_argument("--rules", help=f"compatibility rules (default: {RULES_NAME} next to the zipapp)")
    d.add_argument("--format", choices=("table", "json"), default="table")
    d.add_argument("--max-age-hours", type=float,
                   help="ignore fingerprints recorded longer ago (nodes long gone)")
    d.add_argument("--cluster", help="only this cluster's nodes (on a platform; default: every cluster's, each "
                                     "queue named <cluster>/<queue> when the store has several)")
    n = sub.add_parser("nccl-check", help="read NCCL_DEBUG=INFO output: exit 1 when NCCL fell back to TCP "
                                          "sockets instead of EFA (aws-ofi-nccl), 2 when the log has no "
                                          "transport lines")
    n.add_argument("logfile", nargs="*", metavar="LOGFILE", help="NCCL_DEBUG=INFO output (default: stdin)")
    n.add_argument("--expect", choices=EXPECTATIONS, default="ofi",
                   help="the transport every host must use (default ofi: NET/OFI over the efa provider; "
                        "socket for single-node or non-EFA runs; any: only report)")
    n.add_argument("--format", choices=("text", "json"), default="text")
    image_inspect.add_parser(sub)
    cluster_records.add_parser(sub)
    gc.add_parser(sub)
    start_path.add_parser(sub)
    selftest.add_parser(sub)
    user_dirs.add_parser(sub)
    node_args.add_parser(sub)
    enroot_conf.add_parser(sub)
    pyxis_conf.add_parsers(sub)
    file_set.add_parser(sub)
    preflight.add_parser(sub)
    enroot_files.add_parser(sub)
    slurm_prolog.add_parser(sub)
    pyxis_files.add_parser(sub)
    systemd_units.add_parser(sub)
    return p


def main(argv: Optional[Iterable[str]] = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    try:
        if args.command == "sync":
            return cmd_sync(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "fingerprint":
            return cmd_fingerprint(args)
        if args.command == "drift":
            return cmd_drift(args)
        if args.command == "start-path":
            return start_path.cmd_start_path(args)
        if args.command == "selftest":
            return selftest.cmd_selftest(args)
        if args.command == "user-dirs":
            return user_dirs.cmd_user_dirs(args)
        if args.command == "nccl-check":
            return cmd_nccl_check(args)
        if args.command == "heartbeat":
            return cluster_records.cmd_heartbeat(args)
        if args.command == "gc":
            return gc.cmd_gc(args)
        if args.command == "inspect":
            return image_inspect.cmd_inspect(args)
        if args.command in NODE_SETUP:
            return NODE_SETUP[args.command](args)
        return cmd_verify(args)
    except UsageError as exc:
        for line in exc.lines:
            print(f"{PROG}: {line}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except OSError as exc:  # read-only or full store, something in the way: one line, never a traceback
        error(os_error_line(exc))
        return EXIT_FAILED
