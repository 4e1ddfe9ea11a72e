"""Names derived from the cluster name, shared by app.py (CDK) and the CLI (boto3), so they never drift."""
from __future__ import annotations


def stack_prefix(name: str) -> str:
    """``p5-capacity-block`` -> ``P5-Capacity-Block``: stack names read like the cluster they hold."""
    return "-".join(part[:1].upper() + part[1:] for part in name.split("-"))


def stack_names(name: str) -> dict[str, str]:
    prefix = stack_prefix(name)
    return {"network": f"{prefix}-Network", "storage": f"{prefix}-Storage", "cluster": f"{prefix}-Cluster"}
