"""/etc/enroot/enroot.conf: the node's enroot settings (Args) and working dirs, as enroot reads them.

Why rendered here: the file is the node settings table put into enroot's words, so it is written from the
same parsed Args (args.py) as node.env. enroot reads each "KEY value" line and runs ``eval echo value`` as
the calling user, which is what makes the per-user ``$(id -u)`` paths work: every ``$`` below is literal.
Where the dirs are (NVMe at /scratch or the root volume) is the node script's to measure (mounts), so it
passes the layout in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

CREDENTIALS = "/etc/enroot/credentials"  # system-wide ECR credentials (credentials() below)
PLAIN_CONFIG_PATH = '${HOME:-$(echo ~)}/.config/enroot'
# enroot only reads $ENROOT_CONFIG_PATH/.credentials: link the system-wide file there the first time a user runs
# enroot, unless the user already has their own credentials file.
ECR_CONFIG_PATH = ('$(d="${HOME:-$(echo ~)}/.config/enroot"; if [ ! -e "$d/.credentials" ] && [ ! -L '
                   '"$d/.credentials" ]; then mkdir -p "$d" && ln -s ' + CREDENTIALS + ' "$d/.credentials"; fi '
                   '>/dev/null 2>&1; echo "$d")')
# Written as "KEY value" when set (ENROOT_MAX_PROCESSORS may be empty: all CPUs), in this order.
PASSED_THROUGH = ("ENROOT_SQUASH_OPTIONS", "ENROOT_MAX_PROCESSORS", "ENROOT_CONNECT_TIMEOUT",
                  "ENROOT_TRANSFER_TIMEOUT", "ENROOT_TRANSFER_RETRIES", "ENROOT_MOUNT_HOME", "ENROOT_ROOTFS_WRITABLE")


@dataclass(frozen=True)
class Layout:
    """enroot's node-local working dirs (never FSx or NFS: enroot#154), chosen by the node script."""

    medium: str
    runtime: str
    data: str
    cache: str
    temp: str


def render(values: Dict[str, str], layout: Layout) -> str:
    lines: List[str] = [
        "# Managed by ClusterKit (bootstrap_scripts/enroot.sh) from the node's CustomActions Args; edits are",
        f"# overwritten on the next run. Working dirs: {layout.medium}; never FSx or NFS (enroot#154).",
        "# Runtime, data and the layer cache are per user (user-$(id -u)), under parents only root may write:",
        "# root makes each user's (0700, theirs) in the Slurm prolog before a job's steps run (user-dirs).",
        f"ENROOT_RUNTIME_PATH {layout.runtime}/user-$(id -u)",
        f"ENROOT_DATA_PATH {layout.data}/user-$(id -u)",
        f"ENROOT_CACHE_PATH {layout.cache}/user-$(id -u)",
        f"ENROOT_TEMP_PATH {layout.temp}",
        "# Per-user config (hooks.d, mounts.d, environ.d, .credentials) in the home directory.",
    ]
    config_path = PLAIN_CONFIG_PATH
    if values["CK_ECR_REGISTRIES"]:
        lines.append(f"# ECR: {CREDENTIALS} (system-wide, see enroot.sh) is linked as the user's .credentials "
                     "if absent.")
        config_path = ECR_CONFIG_PATH
    lines.append(f"ENROOT_CONFIG_PATH {config_path}")
    lines += [f"{key} {values[key]}" for key in PASSED_THROUGH if values[key]]
    return "\n".join(lines) + "\n"


def credentials(values: Dict[str, str]) -> str:
    """/etc/enroot/credentials for CK_ECR_REGISTRIES ("" when there are none: the node removes the file).

    Mode 0644 root:root on purpose (the node scripts write it): the file holds no secret, only a
    ``$(aws ecr get-login-password ...)`` command that enroot evaluates at pull time as the calling user, with
    that user's AWS identity (the instance profile). A 0600 root file would be unreadable for every user but
    root. It must never be user-writable because every user's enroot executes its password field. No comments
    in it: enroot evaluates it line by line and curl reads the result as a netrc file. The hosts are the
    settings table's ECR pattern, so the region is the part between ``.dkr.ecr[-fips].`` and
    ``.amazonaws.com``."""
    lines = []
    for host in values["CK_ECR_REGISTRIES"].split():
        region = host.split(".dkr.ecr", 1)[1].removeprefix("-fips").removeprefix(".").split(".amazonaws.com")[0]
        lines.append(f"machine {host} login AWS password $(aws ecr get-login-password --region {region})\n")
    return "".join(lines)
