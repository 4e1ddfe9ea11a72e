"""The node settings contract: every KEY=VALUE the node scripts accept, its default, pattern and hint.

Why one table: the values end up in files other programs evaluate (enroot runs ``eval echo`` on every
enroot.conf value; systemd parses the image-sync unit's ``Environment=`` lines; mksquashfs gets the
squash options word-split), so the nodes check each one strictly, and the CLI must never accept a value
a node would refuse at boot. ``clusterkit.rules`` checks every setting the spec produces against this
table, ``clusterkit.spec.model`` takes its defaults from it, and the nodes parse their Args with it
(``args.py``, the zipapp's ``node-args``, which the node scripts call before anything else): one table,
no copy in bash.

Patterns are matched with ``re.fullmatch`` (ASCII classes only, so the nodes and the CLI agree whatever
the locale). A store path is absolute, and no part of it starts with a dot, so ``..`` and hidden
directories cannot reach the S3 data-repository path or a systemd unit.

Stdlib only, Python 3.9 (the oldest python3 on supported AMIs).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from clusterkit_node.contract.layout import STORE_PATTERN


@dataclass(frozen=True)
class Setting:
    key: str
    default: str
    pattern: str
    hint: str
    head_only: bool = False
    required_on: Tuple[str, ...] = ()  # the roles ("head", "compute") whose Args must set it (non-empty)
    # The spec field the CLI derives the value from ("" when no spec field sets it): the CLI emits the settings
    # that have one, in this table's order, reading the field's resolved value (a bool as yes/no or 1/0, as
    # the pattern wants), and names the field in its errors.
    spec_field: str = ""

    def problem(self, value: str) -> Optional[str]:
        """None when ``value`` is one the nodes accept, else why not (one line)."""
        if re.fullmatch(self.pattern, value):
            return None
        return f"{show(value)} is refused by the nodes' check of {self.key}"


DEFAULT_SQUASH_OPTIONS = "-comp zstd -Xcompression-level 3 -b 128K -no-fragments"

SETTINGS: Tuple[Setting, ...] = (
    Setting("CK_CLUSTER", "", r"[A-Za-z][A-Za-z0-9-]{0,59}",
            "a ParallelCluster cluster name: letter first, then letters, digits, hyphens (max 60)",
            required_on=("head", "compute"), spec_field="name"),
    Setting("CK_OS", "", r"(alinux2023|ubuntu2204|ubuntu2404|rhel9)",
            "one of alinux2023, ubuntu2204, ubuntu2404, rhel9 (rhel8's python3 is too old)",
            required_on=("head", "compute"), spec_field="os"),
    Setting("CK_REGION", "", r"[a-z]{2}(-[a-z]+)+-[0-9]+", "an AWS region such as us-east-1",
            required_on=("head",), spec_field="region"),
    Setting("CK_STORE", "/fsx/containers", STORE_PATTERN,
            "an absolute path whose parts are letters, digits, . _ - and do not start with a dot, "
            "e.g. /fsx/containers", spec_field="storage.fsx_lustre.image_store"),
    Setting("CK_BUNDLE", "", r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/([A-Za-z0-9._-]+/)*[A-Za-z0-9._-]+\.zip",
            "s3://<bucket>/<sha256>.zip", head_only=True, required_on=("head",)),
    # Which node the compute scripts set up: login nodes run them too (login_node.sh adds CK_NODE_ROLE=login) and skip
    # what only a node that runs jobs needs (slurmd's PATH, the container self-test, the driver fingerprint).
    Setting("CK_NODE_ROLE", "compute", r"(compute|login)", "compute or login (login_node.sh passes login)"),
    # GPU queues' nodes (the render adds CK_GPU=1 to their Args, from the instance catalog): they install
    # nvidia-container-cli when the AMI lacks it and run the self-test the way CUDA images start (node/gpu_runtime.py).
    Setting("CK_GPU", "0", r"[01]", "0 or 1 (1 on queues whose instance types have GPUs)"),
    Setting("CK_NVIDIA_CLI", "", r"(off|[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})?",
            "a libnvidia-container version such as 1.18.2, or off (empty: the version node_profiles.json pins)",
            spec_field="containers.nvidia_container_cli"),
    # The deep GPU check at boot (node/gpu_health.py): render adds these to a GPU queue's Args where the check runs
    # there (clusterkit/effective/gpu_check_place.py), so the Args of other queues, and their nodes, stay as they were.
    Setting("CK_GPU_HEALTH", "off", r"(boot|off)", "boot or off (dcgmi diag at boot, before slurmd starts)"),
    Setting("CK_GPU_HEALTH_BUDGET", "900", r"[1-9][0-9]{0,4}", "seconds dcgmi diag may take at boot, e.g. 900"),
    # Who on a compute node may reach IMDS (node/imds_lock.py; ParallelCluster locks it on head and login nodes only).
    Setting("CK_COMPUTE_IMDS", "root_only", r"(root_only|all_users)",
            "root_only or all_users (who on a compute node may reach the instance metadata service)",
            spec_field="security.compute_imds"),
    Setting("CK_UNLOCKED_IMAGES", "refuse", r"(refuse|import)",
            "refuse or import (what a job's --container-image that is not in the image lock gets)",
            spec_field="containers.pyxis.unlocked_images"),
    Setting("ENROOT_SQUASH_OPTIONS", DEFAULT_SQUASH_OPTIONS, r"-[A-Za-z0-9._=, -]*",
            f"mksquashfs options such as {DEFAULT_SQUASH_OPTIONS}", spec_field="containers.enroot.squash_options"),
    Setting("ENROOT_MOUNT_HOME", "yes", r"(yes|no)", "yes or no", spec_field="containers.enroot.mount_home"),
    Setting("ENROOT_ROOTFS_WRITABLE", "yes", r"(yes|no)", "yes or no", spec_field="containers.enroot.rootfs_writable"),
    Setting("ENROOT_TRANSFER_RETRIES", "5", r"[0-9]{1,3}", "a whole number of retries, e.g. 5",
            spec_field="containers.enroot.transfer_retries"),
    Setting("ENROOT_CONNECT_TIMEOUT", "30", r"[0-9]{1,5}", "seconds, e.g. 30",
            spec_field="containers.enroot.connect_timeout_s"),
    Setting("ENROOT_TRANSFER_TIMEOUT", "600", r"[0-9]{1,6}", "seconds, e.g. 600 (0 = no limit)",
            spec_field="containers.enroot.transfer_timeout_s"),
    Setting("ENROOT_MAX_PROCESSORS", "", r"([1-9][0-9]{0,3})?", "empty (all CPUs) or a positive number"),
    Setting("PYXIS_CONTAINER_SCOPE", "job", r"(job|global)", "job or global",
            spec_field="containers.pyxis.container_scope"),
    Setting("PYXIS_SBATCH_SUPPORT", "1", r"[01]", "0 or 1", spec_field="containers.pyxis.sbatch_support"),
    Setting("PYXIS_EXECUTE_ENTRYPOINT", "0", r"[01]", "0 or 1", spec_field="containers.pyxis.execute_entrypoint"),
    Setting("PYXIS_USE_ENROOT_LOAD", "0", r"[01]", "0 or 1", spec_field="containers.pyxis.use_enroot_load"),
    Setting("PYXIS_USE_SQUASHFUSE", "1", r"[01]", "0 or 1", spec_field="containers.pyxis.use_squashfuse"),
    Setting("PYXIS_SINGLE_THREADED_IN_PLACE", "0", r"[01]", "0 or 1",
            spec_field="containers.pyxis.single_threaded_in_place"),
    Setting("CK_ECR_REGISTRIES", "",
            r"([0-9]{12}\.dkr\.ecr(-fips)?\.[a-z]{2}(-[a-z]+)+-[0-9]+\.amazonaws\.com(\.cn)?( +|$))*",
            "space-separated <12-digit account>.dkr.ecr.<region>.amazonaws.com hosts", spec_field="containers.images"),
    # Image gc on the head node (gc.py, cluster_records.py): head-only, so compute nodes' Args (and with them the
    # compute fleet) do not change when a platform's gc settings do.
    Setting("CK_STORE_GC_TIMER", "0", r"[01]", "0 or 1 (a daily `gc --apply` timer on the head node)",
            head_only=True, spec_field="containers.store_gc.timer"),
    Setting("CK_STORE_GC_GRACE_HOURS", "72", r"[0-9]{1,5}", "hours, e.g. 72",
            head_only=True, spec_field="containers.store_gc.grace_hours"),
    Setting("CK_STORE_GC_STALE_DAYS", "7", r"[1-9][0-9]{0,3}", "days, at least 1, e.g. 7",
            head_only=True, spec_field="containers.store_gc.stale_days"),
)
BY_KEY: Dict[str, Setting] = {s.key: s for s in SETTINGS}


def default(key: str) -> str:
    return BY_KEY[key].default


def max_digits(key: str) -> int:
    """The largest whole number a ``[0-9]{1,N}`` setting accepts (for the spec's range checks)."""
    found = re.fullmatch(r"\[0-9\]\{1,([0-9]+)\}", BY_KEY[key].pattern)
    if found is None:
        raise ValueError(f"{key} is not a whole-number setting")
    limit: int = 10 ** int(found.group(1))  # int ** int is typed Any (a negative power is a float)
    return limit - 1


def show(value: str) -> str:
    """A value quoted for a one-line message: escapes when it holds a line break or other control character."""
    return repr(value) if any(not c.isprintable() for c in value) else f"'{value}'"


# --- mksquashfs options --------------------------------------------------------------------------------
# A subset of mksquashfs's grammar (squashfs-tools 4.5/4.6, `mksquashfs -help`): the compression and layout
# options that make sense for container images. enroot runs `mksquashfs rootfs FILE -all-root -no-progress
# -processors N ${ENROOT_SQUASH_OPTIONS}`, so anything that excludes files, appends, sorts or changes
# ownership is refused. tests/node_package/test_settings.py runs the real mksquashfs on every accepted
# example (it must accept) and every refused example mksquashfs also rejects.
COMPRESSORS = ("gzip", "lzo", "lz4", "xz", "zstd")
DEFAULT_COMPRESSOR = "gzip"  # mksquashfs's own default
LEVELS = {"zstd": (1, 22), "gzip": (1, 9)}  # -Xcompression-level ranges mksquashfs accepts
SQUASH_FLAGS = frozenset((
    "-all-root", "-no-fragments", "-always-use-fragments", "-no-duplicates", "-no-xattrs", "-xattrs",
    "-no-exports", "-exports", "-no-sparse", "-noI", "-noInodeCompression", "-noD", "-noDataCompression",
    "-noF", "-noFragmentCompression", "-noX", "-noXattrCompression",
))
XZ_FILTERS = ("x86", "powerpc", "ia64", "arm", "armthumb", "sparc")
MIN_BLOCK, MAX_BLOCK = 4096, 1024 * 1024


def block_bytes(text: str) -> Optional[int]:
    """``-b`` value in bytes (``128K``, ``1M``, ``131072``), None when unreadable."""
    found = re.fullmatch(r"([0-9]{1,7})([KkMm]?)", text)
    if found is None:
        return None
    return int(found.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[found.group(2).lower()]


def squash_options_problem(text: str) -> Optional[str]:
    """None when enroot's mksquashfs call accepts these options and ClusterKit allows them, else why not."""
    setting = BY_KEY["ENROOT_SQUASH_OPTIONS"]
    if setting.problem(text) is not None:
        return f"{show(text)} is not a list of mksquashfs options on one line (letters, digits, . _ = , - and spaces)"
    words: List[str] = text.split()
    comp: Optional[str] = None
    level: Optional[Tuple[str, int]] = None
    comp_options: List[Tuple[str, str]] = []  # (option, compressor it needs)
    i = 0
    while i < len(words):
        word = words[i]
        takes = word in ("-comp", "-b", "-Xcompression-level", "-Xbcj")
        arg = words[i + 1] if takes and i + 1 < len(words) else None
        if takes and arg is None:
            return f"{word} needs a value"
        if word == "-comp":
            if arg not in COMPRESSORS:
                return f"unknown compressor '{arg}' (one of {', '.join(COMPRESSORS)})"
            if comp is not None and comp != arg:
                return f"two compressors, {comp} and {arg}"
            comp = arg
        elif word == "-b":
            size = block_bytes(str(arg))
            if size is None or size & (size - 1) or not MIN_BLOCK <= size <= MAX_BLOCK:
                return f"-b {arg} is not a power of two between 4K and 1M"
        elif word == "-Xcompression-level":
            if not str(arg).isdigit():
                return f"-Xcompression-level {arg} is not a whole number"
            level = (word, int(str(arg)))
        elif word == "-Xhc":
            comp_options.append((word, "lz4"))
        elif word == "-Xbcj":
            if any(f not in XZ_FILTERS for f in str(arg).split(",")):
                return f"-Xbcj {arg}: filters are {', '.join(XZ_FILTERS)}"
            comp_options.append((word, "xz"))
        elif word not in SQUASH_FLAGS:
            return (f"'{word}' is not a mksquashfs option ClusterKit passes "
                    "(use -comp, -b, -X<compressor option> or a flag)")
        i += 2 if takes else 1
    chosen = comp or DEFAULT_COMPRESSOR
    if level is not None:
        low, high = LEVELS.get(chosen, (0, -1))
        if high < 0:
            return f"-Xcompression-level does not apply to {chosen} (only {', '.join(LEVELS)})"
        if not low <= level[1] <= high:
            return f"-Xcompression-level {level[1]} is outside {low}..{high} for {chosen}"
    for option, needs in comp_options:
        if chosen != needs:
            return f"{option} applies to -comp {needs}, not {chosen}"
    return None
