"""The image store commands: keep the FSx image store in step with the image lock (head node), or check it
(compute nodes).

Commands (stdlib only, Python 3.9+, run as root on the head node; compute nodes run ``verify`` and
``fingerprint``), from the bundle's zipapp (``python3 clusterkit_node.pyz COMMAND``; ``python -m
clusterkit_node COMMAND`` in a checkout):

  sync        --lock LOCK --store DIR [--retries N] [--backoff S] [--verify-all] [--heartbeat S] [--stale-days D]
  heartbeat   --store DIR --cluster NAME   (head node timer: refresh this cluster's record, cluster_records.py)
  gc          --store DIR [--apply] [--grace-hours H] [--stale-days D] [--lease-days D] [--format table|json]
  packages-fetch --store DIR --os OS [--version V|off] [--arch A] [--repository URL]   (head node: NVIDIA's
              nvidia-container-cli packages into the store once, checked by sha256; store/package_fetch.py)
  status      --store DIR [--lock LOCK]
  verify      --store DIR --lock LOCK [--deep]
  fingerprint --store DIR --lock LOCK [--rules FILE] [--node-name NAME]
  drift       --store DIR [--rules FILE] [--format table|json] [--max-age-hours H]
  start-path  [--want-squashfuse 0|1] [--os OS] [--format text|json]   (how pyxis will start containers here)
  selftest    [--want-squashfuse 0|1] [--path squashfuse|extract] [--squash-options O] [--format text|json]
  inspect     IMAGE.sqsh [--rules FILE] [--format text|json]   (versions, their sources, rule findings)
  nccl-check  [--expect ofi|socket|any] [--format text|json] [LOGFILE...]   (stdin without LOGFILE)
  user-dirs   --prolog | --uid UID --gid GID   (root: a user's enroot dirs, theirs and 0700; the Slurm prolog)
  gpu-health  --node NAME --budget S [--level N] [--scontrol P]   (compute boot: dcgmi diag; a failure drains, exit 1)
  health      check --tier quick|boot --source prolog|idle|boot | show [NODE...] | schedule | deep --queue Q
              (the node health loop: a failed check drains the node with a reason and exits 1; fleet/health.py)

Node setup (the node scripts' bash calls these, writes what they print and logs their LEVEL lines):

  node-args       --role head|compute [--script NAME] -- KEY=VALUE...   (node.env; exit 2 + one line: bad Args)
  pyxis-line-check --so PLUGIN --etc SLURM_ETC            (compute: path=squashfuse|extract; exit 1 + one line)
  plugstack-loads --so PLUGIN --etc SLURM_ETC             (compute/login: plugin here, plugstack.conf loads it)
  start-path-check --line-path P [--want-squashfuse 0|1] [--os OS]   (compute: can this node start that way?)
  require-enroot  [--with-pyxis]                          (exit 1 + one line naming every missing piece)
  squashfuse-reader                                       (every node: make the node's multi-threaded squashfuse_ll the
                  squashfuse enroot runs, a wrapper at /usr/local/bin/squashfuse; say which binary serves in place)
  imds-lock       --mode root_only|all_users --role compute|login [--no-unit]   (compute: instance metadata for
                  root only, or open again; the boot unit that keeps it so; exit 1 + one line: no iptables)
  gpu-runtime     --store DIR --os OS [--version V|off]   (GPU nodes: keep the AMI's nvidia-container-cli or install
                  the store's verified packages; exit 1 + one line)
  enroot-files    [--scratch-mounted] [--slurm-service S] --role R -- KEY=VALUE...   (enroot dirs, enroot.conf,
                  hooks, credentials, sysctl, the Slurm PATH drop-in)
  slurm-prolog                                            (head: the prolog that makes each user's enroot dirs)
  pyxis-files     --etc SLURM_ETC --so PLUGIN --role R -- KEY=VALUE...   (head: plugstack.conf + pyxis.conf)
  node-file       write|dir|remove PATH [MODE] [--tmpdir D]   (one file, content on stdin; what head_node.sh writes)
  store-units     --inputs-file FILE --role head -- KEY=VALUE...   (head: the image store's systemd units)
  (these print "LEVEL message" and "@marker" lines in the order they acted: file_set.py)

The work is done by the modules of the five packages, one job each: ``contract`` (what the CLI side shares),
``image`` (reading a .sqsh), ``store`` (the shared store, under store/concurrency.py's rules), ``node`` (configuring
one node), ``fleet`` (what spans nodes). Each ``__init__`` says what its package may import; docs/architecture.md
"The node side" maps every module (a test checks that map against the tree, so it is the one list).

Exit codes: 0 everything present, 1 an image failed (or verify found the store unusable, or a node
cannot run a locked image, or nodes of one queue differ, or the file system refused a write: read-only,
full, something in the way; one line naming the path), 2 usage, lock or preflight error (disk space,
missing tools, missing compat files); ``sync`` also exits 1 when it refused an image name another live
cluster pins to another digest. ``gc``: 0 (dry run, or the removals done), 2 when it cannot know what is used
(an unreadable cluster record, no record at all, or with ``--apply`` processes whose open files it cannot
read), 1 a file-system error.
``packages-fetch``: 0 the set is present or was fetched (or off), 1 the network or the repository failed it (one
line with a hint; nothing published), 2 an unknown OS, a malformed or avoid-listed version, a bad repository URL.
``heartbeat``: 0 (also when the record does not exist yet or the lock is held: the sync refreshes it).
``nccl-check``: 1 a host used TCP sockets (or a non-efa provider)
instead of EFA, 2 the log has no NCCL transport line (NCCL_DEBUG=INFO unset?).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from clusterkit_node.contract import console
from clusterkit_node.contract.bundle_files import ZIPAPP_NAME
from clusterkit_node.contract.console import EXIT_FAILED, EXIT_USAGE, UsageError, error, os_error_line

# The one command table: each module that serves commands, in the order `--help` lists them, with the commands it
# serves and the function that runs each. A module's ``add_parser`` adds its own subcommands. Only the module of
# the command being run is imported (the Slurm prolog runs ``user-dirs`` at every job start, and importing every
# module costs more than the command itself); an unknown command or ``--help`` builds the whole table.
COMMAND_TABLE: Tuple[Tuple[str, Tuple[Tuple[str, str], ...]], ...] = (
    ("store.sync", (("sync", "cmd_sync"),)),
    ("store.status", (("status", "cmd_status"),)),
    ("store.verify", (("verify", "cmd_verify"),)),
    ("fleet.fingerprint", (("fingerprint", "cmd_fingerprint"),)),
    ("fleet.drift", (("drift", "cmd_drift"),)),
    ("fleet.nccl_transport", (("nccl-check", "cmd_nccl_check"),)),
    ("node.image_inspect", (("inspect", "cmd_inspect"),)),
    ("store.cluster_records", (("heartbeat", "cmd_heartbeat"),)),
    ("store.gc", (("gc", "cmd_gc"),)),
    ("store.package_fetch", (("packages-fetch", "cmd_packages_fetch"),)),
    ("node.start_path", (("start-path", "cmd_start_path"),)),
    ("node.selftest", (("selftest", "cmd_selftest"),)),
    ("node.user_dirs", (("user-dirs", "cmd_user_dirs"),)),
    ("node.gpu_health", (("gpu-health", "cmd_gpu_health"),)),
    ("fleet.health", (("health", "cmd_health"),)),
    # What the node scripts run while they set a node up: the renders print what they render; the *-files,
    # node-file, require-enroot, plugstack-loads and store-units commands act on the node and print what they did
    # (file_set.py) for the scripts to log, in order.
    ("node.args", (("node-args", "cmd_node_args"),)),
    ("node.pyxis_conf", (("pyxis-line-check", "cmd_pyxis_line_check"), ("plugstack-loads", "cmd_plugstack_loads"),
                         ("start-path-check", "cmd_start_path_check"))),
    ("node.file_set", (("node-file", "cmd_node_file"),)),
    ("node.preflight", (("require-enroot", "cmd_require_enroot"),)),
    ("node.squashfuse_reader", (("squashfuse-reader", "cmd_squashfuse_reader"),)),
    ("node.imds_lock", (("imds-lock", "cmd_imds_lock"),)),
    ("node.gpu_runtime", (("gpu-runtime", "cmd_gpu_runtime"),)),
    ("node.enroot_files", (("enroot-files", "cmd_enroot_files"),)),
    ("node.slurm_prolog", (("slurm-prolog", "cmd_slurm_prolog"),)),
    ("node.pyxis_files", (("pyxis-files", "cmd_pyxis_files"),)),
    ("node.systemd_units", (("store-units", "cmd_store_units"),)),
)
COMMANDS: Dict[str, Tuple[str, str]] = {
    command: (module, function) for module, served in COMMAND_TABLE for command, function in served}


def _module(name: str):  # type: ignore[no-untyped-def]
    return importlib.import_module(f"clusterkit_node.{name}")


def build_parser(modules: Optional[List[str]] = None) -> argparse.ArgumentParser:
    """The parser of the given modules' commands (all of them by default), in the table's order."""
    p = argparse.ArgumentParser(prog=ZIPAPP_NAME, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for module, _ in COMMAND_TABLE:
        if modules is None or module in modules:
            _module(module).add_parser(sub)
    return p


def main(argv: Optional[Iterable[str]] = None) -> int:
    words = list(argv) if argv is not None else sys.argv[1:]
    first = COMMANDS.get(words[0]) if words else None
    args = build_parser([first[0]] if first else None).parse_args(words)
    module, function = COMMANDS[args.command]
    console.use_name(args.command)
    run: Callable[[argparse.Namespace], int] = getattr(_module(module), function)
    try:
        return run(args)
    except UsageError as exc:
        for line in exc.lines:
            print(f"{console.name()}: {line}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except OSError as exc:  # read-only or full store, something in the way: one line, never a traceback
        error(os_error_line(exc))
        return EXIT_FAILED
