"""Storage rules: the FSx for Lustre file system a spec creates or names, its mount point and image store.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

from clusterkit.effective.expand import created_fsx, fsx_throughput, image_store
from clusterkit.rules import aws_limits
from clusterkit.rules.limits import (
    FSX_THROUGHPUT,
    IDS,
    MOUNT_DIR_EXACT,
    MOUNT_DIR_TREES,
    PC_RESERVED_MOUNT_DIRS,
)
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks
from clusterkit_node.contract.layout import STORE_PATTERN
from clusterkit_node.contract.settings import show


def storage(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    fsx = spec.storage.fsx_lustre
    base = "storage.fsx_lustre"
    if fsx.new is not None and fsx.existing is not None:
        yield m.problem(f"{base}.existing", "give either new or existing, not both")
    elif fsx.existing is not None and not IDS["fs"].fullmatch(fsx.existing.file_system_id):
        yield m.problem(f"{base}.existing.file_system_id", f"'{fsx.existing.file_system_id}' is not an FSx id",
                        "fs- followed by 17 lowercase hex characters")
    new = created_fsx(fsx)
    if new is not None and fsx.existing is None:
        nb = f"{base}.new"
        if not (new.capacity_gib == 1200 or (new.capacity_gib > 0 and new.capacity_gib % 2400 == 0)):
            up = max(2400, -(-new.capacity_gib // 2400) * 2400)
            yield m.problem(f"{nb}.capacity_gib", f"{new.capacity_gib} GiB is not a valid Lustre capacity",
                            f"1200 or a multiple of 2400, e.g. {1200 if new.capacity_gib < 1200 else up}")
        allowed = FSX_THROUGHPUT[new.deployment_type]
        if not allowed and new.throughput_mb_per_tib is not None:
            yield m.problem(f"{nb}.throughput_mb_per_tib", f"{new.deployment_type} has no per-unit throughput setting",
                            "set it to null")
        elif allowed and fsx_throughput(new) not in allowed:
            yield m.problem(f"{nb}.throughput_mb_per_tib",
                            f"{fsx_throughput(new)} is not allowed for {new.deployment_type}",
                            f"one of {', '.join(map(str, allowed))}")
        if new.kms_key_arn is not None and aws_limits.kms_key_region(new.kms_key_arn) is None:
            yield m.problem(f"{nb}.kms_key_arn", "not a KMS key ARN", "arn:aws:kms:<region>:<account>:key/<uuid>")
        elif new.kms_key_arn is not None and not new.deployment_type.startswith("PERSISTENT"):
            yield m.problem(f"{nb}.kms_key_arn", f"{new.deployment_type} cannot use a customer-managed KMS key",
                            "scratch file systems are encrypted with an AWS-managed key; use PERSISTENT_2")
    mount = mount_dir_problem(fsx.mount_dir)
    if mount:
        yield m.problem(f"{base}.mount_dir", *mount)
        return
    store = image_store(fsx)
    climbs = _dot_part(store)
    if climbs:
        yield m.problem(f"{base}.image_store", f"{show(store)} has a {_dot_words(climbs)}",
                        f"write the directory it means without . or .. parts, inside mount_dir, e.g. "
                        f"{fsx.mount_dir}/containers")
    elif not store.startswith(fsx.mount_dir + "/"):
        yield m.problem(f"{base}.image_store", f"'{store}' is not inside mount_dir {fsx.mount_dir}",
                        f"e.g. {fsx.mount_dir}/containers")


def _dot_part(path: str) -> str | None:
    """The first '.' or '..' part of ``path``: it names a directory other than the one written (``..`` climbs
    out of it), and ParallelCluster's file_path pattern and the nodes' CK_STORE pattern refuse both."""
    return next((part for part in path.split("/") if part in (".", "..")), None)


def _dot_words(part: str) -> str:
    return "'..' part, which climbs out of the directory before it" if part == ".." else "'.' part"


def mount_dir_problem(path: str) -> tuple[str, str] | None:
    """(message, hint) when the file system cannot be mounted at ``path``: what ParallelCluster refuses (its
    reserved directories and file_path pattern, clusterkit/rules/limits.py) and what the mount would hide on a
    ClusterKit node; None when it can."""
    shown = show(path)
    hint = "use a directory of its own, like /fsx or /mnt/fsx"
    climbs = _dot_part(path)
    if climbs:
        return f"{shown} has a {_dot_words(climbs)}", "write the directory it means without . or .. parts, like /fsx"
    if path != "/" and path.endswith("/"):
        return f"{shown} ends with '/'", f"write {path.rstrip('/') or '/'}: ParallelCluster's MountDir pattern " \
                                         "refuses a trailing slash"
    if path in MOUNT_DIR_EXACT:
        return f"{shown} is {MOUNT_DIR_EXACT[path]}: the file system would hide it", hint
    tree = next((t for t in MOUNT_DIR_TREES if path == t or path.startswith(t + "/")), None)
    if tree:
        inside = "" if path == tree else f"inside {tree}, "
        return f"{shown} is {inside}{MOUNT_DIR_TREES[tree]}: nothing can be mounted there", hint
    if path in PC_RESERVED_MOUNT_DIRS:
        return f"{shown} is a system directory ParallelCluster reserves: the file system would hide it", hint
    if not re.fullmatch(STORE_PATTERN, path, re.ASCII):  # the nodes' own path rule; the store lies below it
        return f"{shown} is not a usable mount point", \
            "an absolute path of letters, digits, . _ - parts, like /fsx"
    return None
