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


def cluster_stacks(name: str, platform: str | None) -> dict[str, str]:
    """Every stack a cluster runs on, by kind: its own three, or on a platform the platform's network and storage
    stacks, its own alerts stack and its cluster stack."""
    if platform is None:
        return stack_names(name)
    on = stack_names(platform)
    return {"network": on["network"], "storage": on["storage"], "alerts": alerts_stack_name(name),
            "cluster": stack_names(name)["cluster"]}


def alerts_stack_name(name: str) -> str:
    """``<Name>-Alerts``: the alert topic of a cluster on a platform, in a stack of its own that outlives the
    cluster stack (a standalone cluster's topic lives in its storage stack)."""
    return f"{stack_prefix(name)}-Alerts"


def export_name(stack: str, key: str) -> str:
    """The CloudFormation export of output ``key`` of ``stack``: how a platform's ids reach its clusters."""
    return f"{stack}-{key}"


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


SCHEDULE_GROUP_NAME_MAX = 64  # EventBridge Scheduler: 1-64 characters of [0-9a-zA-Z-_.], like schedule names
TTL_RETRY_MINUTES = 15  # the teardown schedule's rate (stacks/ttl.py), which `clusterkit status` reports too


def ttl_schedule_group_name(name: str) -> str:
    """The per-cluster schedule group holding the TTL teardown schedule: ``clusterkit-<name>``.

    Its own group (not ``default``) gives the teardown its own CloudWatch metrics (Scheduler's only metric
    dimension is the group) and lets the schedule role trust exactly this group. Long names are cut and
    made unique with a short hash of the full name, like ``ttl_schedule_name``.
    """
    full = f"clusterkit-{name}"
    if len(full) <= SCHEDULE_GROUP_NAME_MAX:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    keep = SCHEDULE_GROUP_NAME_MAX - len("clusterkit--") - len(digest)
    return f"clusterkit-{name[:keep]}-{digest}"


def alarm_prefix(name: str) -> str:
    """Every CloudWatch alarm ClusterKit makes for cluster ``name`` starts with this (the alert topic and its
    key let CloudWatch publish for alarms matching ``<prefix>*`` only)."""
    return f"ClusterKit-{name}-"


def teardown_alarm_names(name: str) -> dict[str, str]:
    """The TTL teardown's two alarms: ``refused`` (DeleteStack refused repeatedly) and ``overdue`` (teardown
    attempted for about an hour while the stack still exists). Alarm names allow 255 characters, so the
    60-character cluster names always fit."""
    return {kind: f"{alarm_prefix(name)}teardown-{kind}" for kind in ("refused", "overdue")}


def alert_topic_name(name: str) -> str:
    """The SNS topic of cluster ``name``'s alerts (lives in the storage stack, which outlives clusters)."""
    return f"ClusterKit-{name}-alerts"


def artifact_prefix(name: str) -> str:
    """The S3 key prefix of one cluster's node artifacts (the Cluster stack's assets, or ``export``'s)."""
    return f"clusterkit/{name}/"


def bundle_parameter_name(name: str) -> str:
    """The SSM parameter naming the current bootstrap bundle, which the head node's stage 0 reads."""
    return f"/clusterkit/{name}/bootstrap-bundle"
