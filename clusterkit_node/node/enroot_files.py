"""``enroot-files``: everything node-local that enroot needs on every node kind, as one idempotent file set.

In order: the working dirs, enroot.conf (enroot_conf.py), enroot's Slurm hooks, the ECR credentials (and on the
head node the image sync's own copy), the Ubuntu 24.04 sysctl, the Slurm daemon's PATH drop-in. Why each:

- Working dirs on instance-store NVMe (PC mounts it at /scratch; the script says whether it is mounted) when
  present, else tmpfs /run for runtime and the root volume /var/tmp for data, cache and temp. Never FSx or NFS:
  enroot's locks time out on Lustre/NFS at scale (enroot#154) and squashfs mounts break there. The per-user
  parents are root's and 0755: root makes each user's user-<uid> (0700, theirs) before their job runs (the Slurm
  prolog, user_dirs.py), so no user can make, or swap, another's. The temp dir is shared like /tmp (sticky,
  mktemp names). /run is emptied at every boot, so a tmpfiles.d line recreates its parent.
- Hooks: 50-slurm-pmi.sh passes PMI/PMIx env and mounts into containers, 50-slurm-pytorch.sh sets
  MASTER_ADDR/RANK/WORLD_SIZE; some enroot releases ship a separate 50-slurm-pmix.sh, enabled if present. enroot
  packages put them in /usr/share/enroot/hooks.d (PC's examples dir is the fallback); enroot runs what is in
  /etc/enroot/hooks.d.
- /etc/enroot/credentials is 0644 root and holds no secret (enroot_conf.credentials says why); removed when the
  cluster names no ECR registry. The head node's image sync gets its own enroot config dir (its unit's
  ENROOT_CONFIG_PATH), root's only (0700) with .credentials 0600: whatever the sync authenticates with is never
  readable by a user, and the sync never reads a file a user could change.
- Ubuntu 24.04 restricts unprivileged user namespaces through AppArmor, which enroot needs; the PC tutorial
  relaxes it on every node (the script runs ``sysctl`` on the ``@sysctl`` line).
- enroot's Slurm hooks call scontrol, which PC installs in /opt/slurm/bin, outside systemd's default PATH
  (enroot#136): a drop-in for the node's Slurm daemon (none on a login node: no slurmd there).
"""
from __future__ import annotations

import argparse
import os
import re
from typing import Dict, Optional, Tuple

from clusterkit_node.node import args as node_args
from clusterkit_node.node.enroot_conf import CREDENTIALS, Layout, credentials, render
from clusterkit_node.node.file_set import Changes, NodeProblem, ensure_dir, remove_file, report, root, write_file
from clusterkit_node.node.preflight import MIN_PC_VERSION

NVME = Layout("local NVMe (/scratch)", "/scratch/enroot/runtime", "/scratch/enroot/data", "/scratch/enroot/cache",
              "/scratch/enroot/tmp")
ROOT_VOLUME = Layout("tmpfs (/run) + root volume (/var/tmp)", "/run/enroot", "/var/tmp/enroot/data",
                     "/var/tmp/enroot/cache", "/var/tmp/enroot/tmp")
TMPFILES = "/etc/tmpfiles.d/clusterkit-enroot.conf"
HOOKS = ("50-slurm-pmi.sh", "50-slurm-pytorch.sh")
OPTIONAL_HOOKS = ("50-slurm-pmix.sh",)
HOOK_SOURCES = ("/usr/share/enroot/hooks.d", "/opt/parallelcluster/examples/enroot/hooks.d")
SYNC_ENROOT_CONFIG = "/etc/clusterkit/sync-enroot"
SYSCTL_FILE = "/etc/sysctl.d/99-clusterkit-enroot.conf"
USERNS_PROC = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
SLURM_BIN = "/opt/slurm/bin"
NETWORK_FS = re.compile(r"(nfs|lustre|fuse).*|cifs|smb.*")


def layout(scratch_mounted: bool) -> Tuple[Layout, str]:
    """The working dirs and their base dir."""
    return (NVME, "/scratch/enroot") if scratch_mounted else (ROOT_VOLUME, "/var/tmp/enroot")


def fs_type(path: str) -> str:
    """The file system type of the mount ``path`` is on (the longest mount point that holds it, from
    /proc/self/mountinfo, where field 5 is the mount point and the field after `` - `` the type)."""
    real = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            for line in fh:
                head, _, tail = line.partition(" - ")
                mount = head.split()[4].replace("\\040", " ")
                if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                    best, kind = mount, tail.split()[0]
    except (OSError, IndexError):
        return ""
    return kind


def assert_local(path: str) -> None:
    kind = fs_type(root() + path)
    if NETWORK_FS.fullmatch(kind):
        raise NodeProblem(f"enroot directory {path} is on {kind}; enroot runtime/data/cache must be on local disk "
                          "(NVMe or root volume), never FSx/NFS")


def make_dirs(ch: Changes, scratch_mounted: bool) -> Layout:
    dirs, base = layout(scratch_mounted)
    ensure_dir(ch, base, "0755")
    for path in (dirs.runtime, dirs.data, dirs.cache):
        ensure_dir(ch, path, "0755")
        assert_local(path)
    ensure_dir(ch, dirs.temp, "1777")
    assert_local(dirs.temp)
    ch.log("INFO", f"enroot working dirs on {dirs.medium}")
    if dirs.runtime.startswith("/run/"):
        ch.log("WARN", f"no NVMe at /scratch: container rootfs unpack into {dirs.data} on the root volume; size "
                       "RootVolume for the largest image")
        ensure_dir(ch, "/etc/tmpfiles.d", "0755")
        write_file(ch, TMPFILES, "0644", (
            "# Managed by ClusterKit: enroot per-user runtime dirs live under this tmpfs parent (root's: the Slurm "
            f"prolog makes each user's).\nd {dirs.runtime} 0755 root root -").encode())
    else:
        remove_file(ch, TMPFILES)
    return dirs


def find_hook(name: str) -> Optional[str]:
    return next((f"{d}/{name}" for d in HOOK_SOURCES if os.path.isfile(f"{root()}{d}/{name}")), None)


def install_hooks(ch: Changes) -> None:
    ensure_dir(ch, "/etc/enroot/hooks.d", "0755")
    for hook in HOOKS + OPTIONAL_HOOKS:
        dst = f"/etc/enroot/hooks.d/{hook}"
        src = find_hook(hook)
        if src is not None:
            with open(root() + src, "rb") as fh:
                write_file(ch, dst, "0755", fh.read())
        elif hook in HOOKS and not os.path.isfile(root() + dst):
            raise NodeProblem(f"enroot hook {hook} not found in {' '.join(HOOK_SOURCES)} (shipped with enroot on "
                              f"ParallelCluster AMIs >= {MIN_PC_VERSION})")


def write_credentials(ch: Changes, content: str, head: bool) -> None:
    if head:
        ensure_dir(ch, "/etc/clusterkit", "0755")
        ensure_dir(ch, SYNC_ENROOT_CONFIG, "0700")
        if content:
            write_file(ch, f"{SYNC_ENROOT_CONFIG}/.credentials", "0600", os.fsencode(content))
        else:
            remove_file(ch, f"{SYNC_ENROOT_CONFIG}/.credentials")
    if not content:
        remove_file(ch, CREDENTIALS)
        return
    ensure_dir(ch, "/etc/enroot", "0755")
    write_file(ch, CREDENTIALS, "0644", os.fsencode(content))


def os_tweaks(ch: Changes, os_name: str) -> None:
    if os_name != "ubuntu2404":
        return
    ensure_dir(ch, "/etc/sysctl.d", "0755")
    changed = write_file(ch, SYSCTL_FILE, "0644", (
        "# Managed by ClusterKit: enroot needs unprivileged user namespaces (Ubuntu 24.04 AppArmor default blocks "
        "them).\nkernel.apparmor_restrict_unprivileged_userns = 0").encode())
    proc = root() + USERNS_PROC
    if not changed and os.access(proc, os.R_OK):
        with open(proc, encoding="utf-8") as fh:
            changed = fh.read().rstrip("\n") != "0"
    if changed:
        ch.mark(f"sysctl {SYSCTL_FILE}")
        ch.log("INFO", "applied kernel.apparmor_restrict_unprivileged_userns=0")


def slurm_path_dropin(ch: Changes, service: str) -> None:
    directory = f"/etc/systemd/system/{service}.service.d"
    ensure_dir(ch, directory, "0755")
    if write_file(ch, f"{directory}/clusterkit-path.conf", "0644", (
            f"# Managed by ClusterKit: enroot's Slurm hooks run scontrol from {SLURM_BIN} (enroot#136).\n"
            f"[Service]\nEnvironment=\"PATH={SLURM_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\""
    ).encode()):
        ch.mark("systemd-dirty")
        ch.log("INFO", f"{service}: PATH drop-in takes effect at the service's next (re)start")


def apply(ch: Changes, values: Dict[str, str], role: str, scratch_mounted: bool, service: Optional[str]) -> None:
    dirs = make_dirs(ch, scratch_mounted)
    ensure_dir(ch, "/etc/enroot", "0755")
    write_file(ch, "/etc/enroot/enroot.conf", "0644", os.fsencode(render(values, dirs)))
    install_hooks(ch)
    write_credentials(ch, credentials(values), role == "head")
    os_tweaks(ch, values["CK_OS"])
    if service:
        slurm_path_dropin(ch, service)


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("enroot-files", help="make this node's enroot dirs, enroot.conf, hooks, credentials, sysctl "
                                            "and Slurm PATH drop-in; prints what changed")
    p.add_argument("--scratch-mounted", action="store_true", help="instance-store NVMe is mounted at /scratch")
    p.add_argument("--slurm-service", choices=("slurmd", "slurmctld"), help="the Slurm daemon to give a PATH drop-in")
    node_args.add_role_arguments(p)


def cmd_enroot_files(a: argparse.Namespace) -> int:
    values = node_args.parsed_or_reported(a, "ERROR ")
    if values is None:
        return node_args.EXIT_BAD_ARGS
    return report(lambda ch: apply(ch, values, a.role, a.scratch_mounted, a.slurm_service))
