"""Names ClusterKit gives to AWS things, derived from the cluster name only.

app.py (CDK), the Makefile and ``clusterkit status`` (boto3) must agree on these without importing each
other, so they live here: pure functions of the spec's ``name``.
"""
from __future__ import annotations

import hashlib

STACK_KINDS = ("Network", "Storage", "Cluster")
SCHEDULE_NAME_MAX = 64  # EventBridge Scheduler: 1-64 characters of [0-9a-zA-Z-_.]


def stack_prefix(name: str) -> str:
    """``p5-capacity-block`` -> ``P5-Capacity-Block``: stack names read like the cluster they hold."""
    return "-".join(part[:1].upper() + part[1:] for part in name.split("-"))


def stack_names(name: str) -> dict[str, str]:
    """``{"network": "Demo-Network", "storage": "Demo-Storage", "cluster": "Demo-Cluster"}``."""
    prefix = stack_prefix(name)
    return {kind.lower(): f"{prefix}-{kind}" for kind in STACK_KINDS}


def ttl_schedule_name(name: str) -> str:
    """The one-time teardown schedule of cluster ``name`` (a stable name people can find in the console).

    Cluster names run to 60 characters, more than a schedule name leaves room for; long ones are cut
    and made unique again with a short hash of the full name.
    """
    full = f"ClusterKit-{name}-ttl"
    if len(full) <= SCHEDULE_NAME_MAX:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    keep = SCHEDULE_NAME_MAX - len("ClusterKit--ttl") - len(digest) - 1
    return f"ClusterKit-{name[:keep]}-{digest}-ttl"
