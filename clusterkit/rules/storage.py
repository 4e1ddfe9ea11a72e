"""Storage rules: the FSx for Lustre file system a spec creates or names, its mount point and image store.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

from clusterkit.effective.expand import created_fsx, fsx_throughput, image_store
from clusterkit.rules import aws_limits
from clusterkit.rules.limits import FSX_THROUGHPUT, IDS
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks


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
    if (not re.fullmatch(r"/[A-Za-z0-9._/-]*", fsx.mount_dir)
            or fsx.mount_dir.rstrip("/") in ("", "/home", "/opt/slurm")):
        yield m.problem(f"{base}.mount_dir", f"'{fsx.mount_dir}' is not a usable mount point",
                        "an absolute path like /fsx")
    elif not image_store(fsx).startswith(fsx.mount_dir.rstrip("/") + "/"):
        yield m.problem(f"{base}.image_store", f"'{image_store(fsx)}' is not inside mount_dir {fsx.mount_dir}",
                        f"e.g. {fsx.mount_dir.rstrip('/')}/containers")
