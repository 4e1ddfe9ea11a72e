"""``clusterkit status NAME``: what is deployed, when the cluster expires, and how to get a shell.

Reads the three stacks with CloudFormation ``DescribeStacks`` (boto3, the spec's region): each stack's
status, the cluster stack's ``ExpiresAt`` output (``lifecycle.ttl_hours``), the head node and the SSM
command. A stack that does not exist is reported as not deployed, not as an error.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .errors import ClusterKitError
from .naming import stack_names
from .spec import ClusterSpec


@dataclass(frozen=True)
class StackState:
    name: str
    status: str | None  # None: not deployed
    outputs: dict[str, str]


def describe(cfn: Any, stack_name: str) -> StackState:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stacks = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        message = exc.response.get("Error", {}).get("Message", "")
        if "does not exist" in message:
            return StackState(stack_name, None, {})
        raise ClusterKitError(f"stack {stack_name}: {message or exc}") from None
    except BotoCoreError as exc:
        raise ClusterKitError(f"stack {stack_name}: {exc} (check AWS credentials and region)") from None
    stack = stacks[0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return StackState(stack_name, stack["StackStatus"], outputs)


def time_left(expires: datetime, now: datetime) -> str:
    """``2d 3h 10m`` until ``expires``, or ``expired 5m ago``."""
    seconds = int((expires - now).total_seconds())
    past = seconds < 0
    minutes = abs(seconds) // 60
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    text = " ".join(f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (mins, "m")) if n) or "0m"
    return f"expired {text} ago" if past else f"in {text}"


def parse_expiry(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def status_lines(spec: ClusterSpec, cfn: Any, now: datetime | None = None) -> list[str]:
    """The report for ``spec``'s stacks; ``now`` is injectable so tests need no clock."""
    now = now or datetime.now(UTC)
    names = stack_names(spec.name)
    states = {kind: describe(cfn, stack) for kind, stack in names.items()}
    lines = [f"{spec.name} ({spec.region})"]
    for kind, state in states.items():
        lines.append(f"  {state.name:<34} {state.status or 'not deployed'}")
    cluster = states["cluster"]
    if cluster.status is None or cluster.status == "DELETE_COMPLETE":
        lines.append(f"  no cluster: `make deploy CLUSTER={spec.name}` creates it (network and storage are reused)")
        return lines
    lines.append(f"  {'expires':<34} {_expiry_text(spec, cluster, now)}")
    head = cluster.outputs.get("HeadNodeInstanceId")
    if head:
        lines.append(f"  {'head node':<34} {head}")
    shell = cluster.outputs.get("SsmSession")
    if shell:
        lines.append(f"  {'shell':<34} {shell}")
    return lines


def _expiry_text(spec: ClusterSpec, cluster: StackState, now: datetime) -> str:
    raw = cluster.outputs.get("ExpiresAt")
    if raw is None:
        return "never (no lifecycle.ttl_hours)"
    expires = parse_expiry(raw)
    if expires is None:
        return f"{raw} (not a time)"
    left = time_left(expires, now)
    if expires <= now:
        return f"{raw}, {left}: the teardown should be under way (see the stack's events)"
    return f"{raw}, {left}; extend: make deploy CLUSTER={spec.name} TTL=<hours from now>"


def cloudformation_client(region: str) -> Any:
    """A client from a fresh session, so credentials are looked up now, not cached from an earlier call."""
    import boto3

    return boto3.session.Session().client("cloudformation", region_name=region)
