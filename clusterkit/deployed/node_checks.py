"""``clusterkit status NAME --nodes``: each compute node's last health checks and Slurm state, read on the head node.

Why through SSM: the history lives on the cluster's FSx store (clusterkit_node/fleet/health_record.py) and the
drain state in slurmctld, neither of which an AWS API shows; the head node has both, and Session Manager is already
how an operator reaches it (the Cluster stack's SsmSession output; ParallelCluster's head node runs the SSM agent).
``AWS-RunShellScript`` runs one fixed command, ``health show --format json`` of the live bundle's zipapp: nothing
from the spec or the operator reaches that shell. The instance id comes from the stack's output and is checked
before it is used. The answer is validated before it is shown (its schema, each node's fields): what the head node
says is data, and a malformed answer is one line, never a traceback. Operators need ``ssm:SendCommand`` on the head
node and ``ssm:GetCommandInvocation`` (docs/operations.md "Node health").
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from clusterkit_node.contract.bundle_files import LIVE_ZIPAPP

SHOW_SCHEMA = "clusterkit.node-health/v1"  # clusterkit_node/fleet/health.py SHOW_SCHEMA
COMMAND = f"python3 -I {LIVE_ZIPAPP} health show --summary --format json"
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")
DONE = {"Success", "Failed", "Cancelled", "TimedOut", "Cancelling"}
OUTPUT_LIMIT = 24000  # SSM returns at most 24,000 characters of standard output inline


@dataclass(frozen=True)
class NodeCheck:
    node: str
    slurm_state: str  # "" when Slurm did not say
    slurm_reason: str
    last_at: str  # "" when never checked
    last_tier: str
    last_ok: bool | None  # None: never checked
    failed: tuple[str, ...]  # "check: detail" of the last check's failures
    last_drain_at: str
    last_drain_boot: str


@dataclass(frozen=True)
class NodeChecks:
    nodes: tuple[NodeCheck, ...] = ()
    unread: str | None = None  # why the head node's answer is missing


def _text(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def parse(output: str) -> NodeChecks:
    """The head node's ``health show --format json`` as rows; NodeChecks(unread=...) when it is not that."""
    try:
        doc = json.loads(output)
    except ValueError:
        return NodeChecks(unread="the head node's answer is not JSON (a bundle from before the health loop?)")
    if not isinstance(doc, dict) or doc.get("schema") != SHOW_SCHEMA or not isinstance(doc.get("nodes"), dict):
        return NodeChecks(unread=f"the head node's answer is not {SHOW_SCHEMA}")
    raw_slurm = doc.get("slurm")
    slurm: dict[str, Any] = raw_slurm if isinstance(raw_slurm, dict) else {}
    rows = []
    for name, raw in sorted(doc["nodes"].items()):
        if not isinstance(name, str) or not isinstance(raw, list):
            return NodeChecks(unread=f"the head node's answer has a malformed node entry: {str(name)[:40]!r}")
        entries: list[dict[str, Any]] = [e for e in raw if isinstance(e, dict)]
        last: dict[str, Any] = entries[-1] if entries else {}
        raw_results = last.get("results")
        results: list[Any] = raw_results if isinstance(raw_results, list) else []
        failed = tuple(f"{_text(r.get('check'))}: {_text(r.get('detail'))}" for r in results
                       if isinstance(r, dict) and r.get("ok") is False)
        drains = [e for e in entries if e.get("drained")]
        raw_state = slurm.get(name)
        state: dict[str, Any] = raw_state if isinstance(raw_state, dict) else {}
        rows.append(NodeCheck(
            node=_text(name), slurm_state=_text(state.get("state")), slurm_reason=_text(state.get("reason")),
            last_at=_text(last.get("at")), last_tier=f"{_text(last.get('tier'))}/{_text(last.get('source'))}"
            if last else "", last_ok=bool(last.get("ok")) if last else None, failed=failed,
            last_drain_at=_text(drains[-1].get("at")) if drains else "",
            last_drain_boot=_text(drains[-1].get("boot_id"))[:8] if drains else ""))
    return NodeChecks(nodes=tuple(rows))


def read(ssm: Any, instance_id: str, *, timeout_s: float = 90, sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic) -> NodeChecks:
    """Run COMMAND on the head node through SSM and wait (at most ``timeout_s``) for its answer."""
    from botocore.exceptions import BotoCoreError, ClientError

    if not INSTANCE_ID.fullmatch(instance_id):
        return NodeChecks(unread=f"the stack's HeadNodeInstanceId {instance_id[:40]!r} is not an instance id")
    try:
        sent = ssm.send_command(InstanceIds=[instance_id], DocumentName="AWS-RunShellScript",
                                Parameters={"commands": [COMMAND]}, TimeoutSeconds=60,
                                Comment="clusterkit status --nodes: health show")
        command_id = sent["Command"]["CommandId"]
        deadline = clock() + timeout_s
        while True:
            sleep(1.0)
            try:
                got = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
            except ClientError as exc:  # the invocation is not registered yet right after send_command
                if exc.response.get("Error", {}).get("Code") != "InvocationDoesNotExist":
                    raise
                got = {"Status": "Pending"}
            if got.get("Status") in DONE:
                break
            if clock() > deadline:
                return NodeChecks(unread=f"the head node did not answer within {timeout_s:g} s (SSM command "
                                         f"{command_id}; is its SSM agent running?)")
    except ClientError as exc:
        error = exc.response.get("Error", {})
        return NodeChecks(unread=f"SSM refused: {error.get('Code', '?')}: {error.get('Message', '')} (needs "
                                 "ssm:SendCommand on the head node and ssm:GetCommandInvocation)")
    except BotoCoreError as exc:
        return NodeChecks(unread=f"SSM: {exc}")
    if got.get("Status") != "Success":
        why = _text(got.get("StandardErrorContent"))[-200:] or _text(got.get("StatusDetails"))
        return NodeChecks(unread=f"health show on the head node ended {got.get('Status')}: {why}")
    output = got.get("StandardOutputContent") or ""
    if len(output) >= OUTPUT_LIMIT:
        return NodeChecks(unread=f"the answer is longer than SSM returns inline ({OUTPUT_LIMIT} characters): "
                                 f"run `{COMMAND.replace(' --format json', '')}` on the head node")
    return parse(output)


def lines(checks: NodeChecks) -> list[str]:
    """The text view: one line per node."""
    if checks.unread:
        return [f"  nodes: {checks.unread}"]
    if not checks.nodes:
        return ["  nodes: no compute node has run a health check yet"]
    out = ["  nodes:"]
    for n in checks.nodes:
        result = ("never checked" if n.last_ok is None else "ok" if n.last_ok
                  else "FAILED " + "; ".join(n.failed))
        state = n.slurm_state or "-"
        reason = f" ({n.slurm_reason})" if n.slurm_reason and "drain" in state else ""
        seen = f", last check {n.last_at} {n.last_tier}" if n.last_at else ""
        drain = f", last drained {n.last_drain_at} (boot {n.last_drain_boot})" if n.last_drain_at else ""
        out.append(f"    {n.node}: {state}{reason}: {result}{seen}{drain}")
    return out


def as_json(checks: NodeChecks) -> dict[str, Any]:
    return {"unread": checks.unread, "nodes": [
        {"node": n.node, "slurm_state": n.slurm_state or None, "slurm_reason": n.slurm_reason or None,
         "last_check": ({"at": n.last_at, "tier": n.last_tier, "ok": n.last_ok, "failed": list(n.failed)}
                        if n.last_ok is not None else None),
         "last_drain": {"at": n.last_drain_at, "boot": n.last_drain_boot} if n.last_drain_at else None}
        for n in checks.nodes]}


def ssm_client(region: str) -> Any:
    import boto3

    return boto3.session.Session().client("ssm", region_name=region)
