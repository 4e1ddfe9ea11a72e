"""Update policy of every ParallelCluster config key, read from the schema's field metadata.

Runs inside the ParallelCluster venv: ``.venv-pcluster/bin/python -m clusterkit.pcluster.policies``
prints one JSON object (sorted keys, 2-space indent) mapping config paths to their policy::

    "Scheduling.SlurmQueues[].ComputeResources[].MaxCount": {
        "description": "...", "kind": "value", "level": 5, "policy": "RESIZE_UPDATE_STRATEGY_ON_REMOVE"}

Paths use ``[]`` for "any element of this list". ``kind`` is ``value`` (a leaf), ``section`` (a nested
mapping) or ``list`` (a list of mappings; ``update_key`` names the key PC matches elements by).
How ParallelCluster applies these (pcluster/config/config_patch.py): a changed value takes its own
policy; a section or list element that is added or removed takes the section's / list's policy
(sections marked IGNORED are walked into instead); keys without metadata default to UNSUPPORTED.
A later PR-diff feature reads this instead of importing pcluster into the main venv.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

# Short, plain descriptions of what each policy lets an update do (from pcluster/config/update_policy.py).
DESCRIPTIONS: dict[str, str] = {
    "IGNORED": "ignored by update-cluster as a whole; changes inside take their own keys' policies",
    "SUPPORTED": "can change on a running cluster",
    "UNSUPPORTED": "cannot change after creation: needs a new cluster",
    "UNKNOWN": "update effect unknown: treated as not supported",
    "COMPUTE_FLEET_STOP": "needs the compute fleet stopped",
    "COMPUTE_FLEET_STOP_ON_REMOVE": "adding is allowed; removing needs the compute fleet stopped",
    "QUEUE_UPDATE_STRATEGY": (
        "needs the compute fleet stopped, or (under SlurmQueues) QueueUpdateStrategy DRAIN or TERMINATE"
    ),
    "RESIZE_UPDATE_STRATEGY_ON_REMOVE": (
        "growing (higher MaxCount, new queue or compute resource) is always allowed; shrinking or removing "
        "needs the compute fleet stopped or QueueUpdateStrategy TERMINATE"
    ),
    "MANAGED_PLACEMENT_GROUP": (
        "like QUEUE_UPDATE_STRATEGY, but removing a managed placement group needs the compute fleet stopped"
    ),
    "MANAGED_FSX": (
        "blocked while the cluster owns a managed FSx for Lustre (it would be replaced); otherwise needs the "
        "compute fleet stopped or QueueUpdateStrategy set, adding subnets is allowed"
    ),
    "SHARED_STORAGE_UPDATE_POLICY": (
        "mounting or unmounting external EFS/FSx is live; other storage changes need the compute fleet stopped "
        "or QueueUpdateStrategy set, and login nodes stopped; /home cannot change"
    ),
    "HEAD_NODE_STOP": "needs the head node stopped",
    "READ_ONLY_RESOURCE_BUCKET": "read-only after creation: a new value is ignored",
    "SUPPORTED_UNLESS_ADC": "can change on a running cluster, except in ADC (us-iso*) regions",
    "EXTRA_CHEF_ATTRIBUTES": "only a few ExtraChefAttributes fields can change",
    "LOGIN_NODES_POOLS_UPDATE_POLICY": "pools can be added any time; removing one needs login nodes stopped",
    "LOGIN_NODES_STOP": "needs all login nodes stopped",
    "LOGIN_NODES_POOL_STOP": "needs the login nodes of that pool stopped",
    "COMPUTE_AND_LOGIN_NODES_STOP": "needs the compute fleet and all login nodes stopped",
}


def _entry(field: Any, kind: str) -> dict[str, Any]:
    from pcluster.config.update_policy import UpdatePolicy

    policy = field.metadata.get("update_policy", UpdatePolicy.UNSUPPORTED)
    entry: dict[str, Any] = {
        "policy": policy.name,
        "level": policy.level,
        "kind": kind,
        "description": DESCRIPTIONS.get(policy.name, ""),
    }
    # Variants built on a base policy carry their own wording (e.g. EBS resize needs OS commands).
    if isinstance(policy.fail_reason, str) and policy.fail_reason not in ("-", ""):
        entry["fail_reason"] = policy.fail_reason
    if isinstance(policy.action_needed, str) and policy.action_needed:
        entry["action_needed"] = policy.action_needed
    if field.metadata.get("update_key"):
        entry["update_key"] = field.metadata["update_key"]
    return entry


def walk(schema: Any, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Path -> policy entry for every field under ``schema``, depth first."""
    from marshmallow import fields

    out: dict[str, dict[str, Any]] = {}
    for name, field in schema.fields.items():
        key = field.data_key or name
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(field, fields.Nested):
            many = bool(field.many)
            out[path] = _entry(field, "list" if many else "section")
            out.update(walk(field.schema, path + ("[]" if many else "")))
        else:
            out[path] = _entry(field, "value")
    return out


def cluster_policies() -> dict[str, dict[str, Any]]:
    from pcluster.schemas.cluster_schema import ClusterSchema

    return dict(sorted(walk(ClusterSchema(cluster_name="policies")).items()))


def main() -> int:
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    json.dump(cluster_policies(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
