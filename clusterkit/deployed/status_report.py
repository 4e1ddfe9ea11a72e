"""``clusterkit status NAME``: what is deployed, when the cluster expires, whether its teardown is stuck, and how
to get a shell.

Reads the three stacks with CloudFormation ``DescribeStacks`` (boto3, the spec's region): each stack's
status, the cluster stack's ``ExpiresAt`` output (``lifecycle.ttl_hours``), the head node and the SSM
command. A stack that does not exist is reported as not deployed, not as an error.

The teardown, one line per fact (stacks/ttl.py retries DeleteStack every 15 minutes from the expiry on):

- **overdue**: the expiry has passed and the stack still exists (and is not being deleted right now);
- **deletion failed**: for a stack in ``DELETE_FAILED``, the first resource that failed in the latest
  deletion attempt, from ``DescribeStackEvents`` (newest first; the attempt starts at the stack's own
  ``DELETE_IN_PROGRESS`` event), and the command that retries it;
- **alarms**: the TTL alarms by the names ``clusterkit.spec.naming.teardown_alarm_names`` gives them
  (CloudWatch ``DescribeAlarms``).

AWS errors never print a traceback: reading the stacks fails with one line (exit 2); failing to read events
or alarms, which only add detail, becomes that line's value.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from clusterkit import clock
from clusterkit.spec.errors import ClusterKitError
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.naming import TTL_RETRY_MINUTES, cluster_stacks, teardown_alarm_names

EVENT_PAGES = 10  # DescribeStackEvents pages read back to the start of the latest deletion
LABEL = 34


@dataclass(frozen=True)
class StackState:
    name: str
    status: str | None  # None: not deployed
    outputs: dict[str, str]


@dataclass(frozen=True)
class DeleteFailure:
    """The first resource that failed in the latest deletion attempt (or the stack's own reason)."""

    logical_id: str
    reason: str


@dataclass(frozen=True)
class AlarmState:
    name: str
    state: str | None  # OK | ALARM | INSUFFICIENT_DATA; None: no such alarm


def _aws_error(exc: Exception) -> str:
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'Error')}: {error.get('Message', '') or exc}"
    return str(exc)


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


def first_delete_failure(cfn: Any, stack_name: str) -> DeleteFailure | None:
    """The earliest ``DELETE_FAILED`` resource event since the stack's latest ``DELETE_IN_PROGRESS``.

    Resource failures come first in time and name the cause; the stack's own event only lists them
    ("The following resource(s) failed to delete: [...]"), so it is the fallback.
    """
    failures: list[dict[str, Any]] = []
    stack_failure: dict[str, Any] | None = None
    paginator = cfn.get_paginator("describe_stack_events")
    for page_number, page in enumerate(paginator.paginate(StackName=stack_name)):
        for event in page.get("StackEvents", []):  # newest first
            own = event.get("ResourceType") == "AWS::CloudFormation::Stack" and event.get(
                "LogicalResourceId") == stack_name
            status = event.get("ResourceStatus")
            if own and status == "DELETE_IN_PROGRESS":
                return _failure(failures, stack_failure)
            if status == "DELETE_FAILED":
                if own:
                    stack_failure = stack_failure or event
                else:
                    failures.append(event)
        if page_number + 1 >= EVENT_PAGES:
            break
    return _failure(failures, stack_failure)


def _failure(failures: list[dict[str, Any]], stack_failure: dict[str, Any] | None) -> DeleteFailure | None:
    event = failures[-1] if failures else stack_failure
    if event is None:
        return None
    reason = " ".join(str(event.get("ResourceStatusReason") or "no reason given").split())
    return DeleteFailure(event.get("LogicalResourceId", "?"), reason)


def alarm_states(cloudwatch: Any, names: list[str]) -> list[AlarmState]:
    """The alarms called ``names``, in that order; a missing alarm has ``state`` None."""
    found = {a["AlarmName"]: a for a in cloudwatch.describe_alarms(AlarmNames=names).get("MetricAlarms", [])}
    return [AlarmState(name, found[name].get("StateValue") if name in found else None) for name in names]


def span(expires: datetime, now: datetime) -> str:
    """``2d 3h 10m`` between ``now`` and ``expires``, either way round, to the minute."""
    minutes = abs(int((expires - now).total_seconds())) // 60
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return " ".join(f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (mins, "m")) if n) or "0m"


def time_left(expires: datetime, now: datetime) -> str:
    """``in 2d 3h 10m`` until ``expires``, or ``expired 5m ago``."""
    return f"expired {span(expires, now)} ago" if expires < now else f"in {span(expires, now)}"


def parse_expiry(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def _line(label: str, value: str) -> str:
    return f"  {label:<{LABEL}} {value}"


@dataclass(frozen=True)
class Teardown:
    """What the TTL teardown is doing: one of these facts may be set, with the failure details."""

    deleting: bool = False  # DELETE_IN_PROGRESS
    overdue_minutes: int | None = None  # the expiry has passed and the stack exists (not being deleted)
    refused_while: str | None = None  # overdue and *_IN_PROGRESS: CloudFormation refuses DeleteStack now
    failed: DeleteFailure | None = None  # DELETE_FAILED: the first failed resource
    failed_unread: str | None = None  # DELETE_FAILED, but events unreadable (or no failed resource): why
    retry: str | None = None  # the command that retries a failed deletion


@dataclass(frozen=True)
class StatusReport:
    """Everything `clusterkit status` knows about one cluster; text and JSON are views of it."""

    cluster: str
    region: str
    stacks: tuple[StackState, ...]  # network, storage, cluster
    deployed: bool  # the cluster stack exists
    expires_at: str | None = None  # the ExpiresAt output as written; None: no TTL
    expires: datetime | None = None  # parsed; None when absent or not a time
    teardown: Teardown = Teardown()
    alarms: tuple[tuple[str, AlarmState], ...] = ()  # (kind, state) of the TTL alarms
    alarms_unread: str | None = None  # why the alarms could not be read
    head_node: str | None = None
    shell: str | None = None


def status_report(spec: ClusterSpec, cfn: Any, now: datetime | None = None, *,
                  cloudwatch: Any = None) -> StatusReport:
    """Read ``spec``'s stacks, teardown and alarms; ``now`` is injectable so tests need no clock.
    ``cloudwatch`` defaults to a client for the spec's region, created only when the cluster stack exists."""
    now = now or clock.utc_now()
    states = {kind: describe(cfn, stack) for kind, stack in cluster_stacks(spec.name, spec.platform).items()}
    cluster = states["cluster"]
    base = StatusReport(spec.name, spec.region, tuple(states.values()), deployed=False)
    if cluster.status is None or cluster.status == "DELETE_COMPLETE":
        return base
    raw = cluster.outputs.get("ExpiresAt")
    expires = parse_expiry(raw) if raw is not None else None
    alarms, alarms_unread = _alarms(spec, cloudwatch, ttl=raw is not None)
    return dataclasses.replace(
        base, deployed=True, expires_at=raw, expires=expires, teardown=_teardown(spec, cfn, cluster, expires, now),
        alarms=alarms, alarms_unread=alarms_unread, head_node=cluster.outputs.get("HeadNodeInstanceId"),
        shell=cluster.outputs.get("SsmSession"))


def _teardown(spec: ClusterSpec, cfn: Any, cluster: StackState, expires: datetime | None, now: datetime) -> Teardown:
    from botocore.exceptions import BotoCoreError, ClientError

    status = cluster.status or ""
    found = Teardown()
    if status == "DELETE_IN_PROGRESS":
        found = Teardown(deleting=True)
    elif expires is not None and expires <= now:
        found = Teardown(overdue_minutes=int((now - expires).total_seconds()) // 60,
                         refused_while=status if status.endswith("_IN_PROGRESS") else None)
    if status == "DELETE_FAILED":
        failure, unread = None, None
        try:
            failure = first_delete_failure(cfn, cluster.name)
            unread = None if failure else "no failed resource in the stack's events"
        except (ClientError, BotoCoreError) as exc:
            unread = f"cannot read the stack's events ({_aws_error(exc)})"
        found = dataclasses.replace(found, failed=failure, failed_unread=unread,
                                    retry=f"aws cloudformation delete-stack --region {spec.region} "
                                          f"--stack-name {cluster.name}")
    return found


def _alarms(spec: ClusterSpec, cloudwatch: Any, *, ttl: bool) -> tuple[tuple[tuple[str, AlarmState], ...], str | None]:
    """The TTL alarms; none for a cluster without a TTL and without such alarms."""
    from botocore.exceptions import BotoCoreError, ClientError

    names = teardown_alarm_names(spec.name)
    try:
        states = alarm_states(cloudwatch or cloudwatch_client(spec.region), list(names.values()))
    except (ClientError, BotoCoreError) as exc:
        return (), (f"cannot read ({_aws_error(exc)})" if ttl else None)
    if not ttl and all(a.state is None for a in states):
        return (), None
    return tuple(zip(names, states, strict=True)), None


# -- text ------------------------------------------------------------------------------------------------


def status_lines(spec: ClusterSpec, cfn: Any, now: datetime | None = None, *, cloudwatch: Any = None,
                 deploy: str | None = None) -> list[str]:
    """The text report (``clusterkit status``); ``deploy``: the command that deploys this spec's file
    (spec.files.deploy_command: a spec outside the checkout is deployed by its path)."""
    now = now or clock.utc_now()
    return report_lines(status_report(spec, cfn, now, cloudwatch=cloudwatch), now, deploy=deploy)


def report_lines(report: StatusReport, now: datetime, *, deploy: str | None = None) -> list[str]:
    deploy = deploy or f"make deploy CLUSTER={report.cluster}"
    lines = [f"{report.cluster} ({report.region})"]
    lines += [_line(state.name, state.status or "not deployed") for state in report.stacks]
    if not report.deployed:
        lines.append(f"  no cluster: `{deploy}` creates it (network and storage are reused)")
        return lines
    lines.append(_line("expires", _expiry_text(report, now, deploy)))
    lines += _teardown_lines(report.teardown, report.expires, now)
    if report.alarms_unread:
        lines.append(_line("alarms", report.alarms_unread))
    for kind, alarm in report.alarms:
        value = (f"missing ({alarm.name}; a deploy with lifecycle.ttl_hours creates it)" if alarm.state is None
                 else f"{alarm.state} ({alarm.name})")
        lines.append(_line(f"alarm teardown-{kind}", value))
    if report.head_node:
        lines.append(_line("head node", report.head_node))
    if report.shell:
        lines.append(_line("shell", report.shell))
    return lines


def _expiry_text(report: StatusReport, now: datetime, deploy: str) -> str:
    raw = report.expires_at
    if raw is None:
        return "never (no lifecycle.ttl_hours)"
    if report.expires is None:
        return f"{raw} (not a time)"
    if report.expires <= now:
        return f"{raw}, {time_left(report.expires, now)}"
    return f"{raw}, {time_left(report.expires, now)}; extend: {deploy} TTL=<hours from now>"


def _teardown_lines(teardown: Teardown, expires: datetime | None, now: datetime) -> list[str]:
    lines = []
    if teardown.deleting:
        lines.append(_line("deletion", "under way (DELETE_IN_PROGRESS)"))
    elif teardown.overdue_minutes is not None and expires is not None:
        busy = f"; CloudFormation refuses it while {teardown.refused_while}" if teardown.refused_while else ""
        lines.append(_line("overdue", f"yes, by {span(expires, now)}: the stack still exists; the TTL schedule "
                                      f"retries DeleteStack every {TTL_RETRY_MINUTES} minutes{busy}"))
    if teardown.retry:
        failed = teardown.failed
        lines.append(_line("deletion failed", f"{failed.logical_id}: {failed.reason}" if failed
                           else teardown.failed_unread or ""))
        lines.append(_line("retry", teardown.retry))
    return lines


# -- JSON ------------------------------------------------------------------------------------------------


def report_json(report: StatusReport) -> str:
    """``clusterkit.status/v1`` (docs/cli-output.md): the report as data, times in UTC ISO 8601."""
    from clusterkit.jsondoc import dumps

    teardown = report.teardown
    data = {
        "schema": "clusterkit.status/v1", "cluster": report.cluster, "region": report.region,
        "stacks": [{"name": s.name, "status": s.status} for s in report.stacks],
        "deployed": report.deployed, "expires_at": report.expires_at,
        "teardown": {
            "deleting": teardown.deleting, "overdue_minutes": teardown.overdue_minutes,
            "refused_while": teardown.refused_while,
            "failed": ({"logical_id": teardown.failed.logical_id, "reason": teardown.failed.reason}
                       if teardown.failed else None),
            "failed_unread": teardown.failed_unread, "retry": teardown.retry,
        },
        "alarms": [{"kind": kind, "name": alarm.name, "state": alarm.state} for kind, alarm in report.alarms],
        "alarms_unread": report.alarms_unread, "head_node": report.head_node, "shell": report.shell,
    }
    return dumps(data)


def cloudformation_client(region: str) -> Any:
    """A client from a fresh session, so credentials are looked up now, not cached from an earlier call."""
    import boto3

    return boto3.session.Session().client("cloudformation", region_name=region)


def cloudwatch_client(region: str) -> Any:
    """Like ``cloudformation_client``: the TTL alarms live in the cluster's region."""
    import boto3

    return boto3.session.Session().client("cloudwatch", region_name=region)
