"""Custom::ClusterKitVersionGuard: refuse a ParallelCluster version change (stdlib only; inline Lambda code).

PC's update_cluster refuses a cluster created by another PC version, so an Update changing
ParallelClusterVersion fails here first, saying what to do, and the stack rolls back. Create and Delete
always succeed. The PhysicalResourceId holds the created version and never changes; the rollback's own
Update (properties swapped) returns to that version and succeeds.
Protocol (AWS CloudFormation User Guide): requests crpg-ref-requesttypes-create/-update/-delete.html,
response fields crpg-ref-responses.html (body <= 4096 bytes), PUT to the presigned ResponseURL with an
empty content-type as in the cfn-response module source (cfn-lambda-function-code-cfnresponsemodule.html).
"""
import json
import urllib.request

TIMEOUT = 10  # seconds for the response PUT: a dead URL is logged, not waited on
PREFIX = "clusterkit-version-guard"
REASON_MAX = 1500


def decide(event: dict) -> tuple[str, str, str]:
    """(status, reason, physical id) for one request; raises on a malformed one."""
    kind = event["RequestType"]
    if kind == "Delete":
        return "SUCCESS", "", event["PhysicalResourceId"]
    props = event["ResourceProperties"]
    name, want = props["ClusterName"], props["ParallelClusterVersion"]
    if kind == "Create":
        return "SUCCESS", "", f"{PREFIX}/{name}/{want}"
    if kind != "Update":
        raise ValueError(f"unknown RequestType {kind!r}")
    pid = event["PhysicalResourceId"]
    had = (event.get("OldResourceProperties") or {}).get("ParallelClusterVersion")
    created = pid.rpartition("/")[2] if pid.startswith(PREFIX + "/") else had
    if want in (had, created):
        return "SUCCESS", "", pid
    return "FAILED", (
        f"ParallelCluster version change {had} -> {want} refused for cluster {name}: ParallelCluster updates "
        f"only clusters created by the same version. Upgrade: make destroy-cluster CLUSTER={name}, then make "
        f"deploy CLUSTER={name} (network and FSx stay); docs/operations.md \"Upgrading ParallelCluster\""), pid


def send(event: dict, status: str, reason: str, physical_id: str) -> bool:
    """PUT the response; True when CloudFormation's URL took it. Failures are logged, never raised."""
    body = json.dumps({
        "Status": status, "Reason": reason, "PhysicalResourceId": physical_id,
        "StackId": event.get("StackId"), "RequestId": event.get("RequestId"),
        "LogicalResourceId": event.get("LogicalResourceId"), "NoEcho": False, "Data": {}}).encode()
    put = urllib.request.Request(event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""})
    try:
        with urllib.request.urlopen(put, timeout=TIMEOUT) as answer:
            print(f"response {status} sent: HTTP {answer.status}")
            return True
    except Exception as exc:  # noqa: BLE001 - only reportable
        print(f"response {status} NOT sent: {type(exc).__name__}: {exc}")
        return False


def handler(event: object, context: object = None) -> dict:
    event = event if isinstance(event, dict) else {}
    kind = event.get("RequestType")
    try:
        status, reason, pid = decide(event)
    except Exception as exc:  # noqa: BLE001 - answer every request; a Delete must never fail
        status = "SUCCESS" if kind == "Delete" else "FAILED"
        reason = f"ClusterKit version guard: malformed {kind} request: {type(exc).__name__}: {exc}"
        pid = event.get("PhysicalResourceId") or f"{PREFIX}/{event.get('RequestId', 'unknown')}"
    reason = reason[:REASON_MAX]  # the whole response body must stay under 4096 bytes
    print(f"{str(kind)[:20]} {event.get('LogicalResourceId')}: {status} {reason}")
    if not event.get("ResponseURL"):
        print("no ResponseURL in the request: nothing to answer")
        return {"Status": status, "Sent": False}
    return {"Status": status, "Sent": send(event, status, reason, pid)}
