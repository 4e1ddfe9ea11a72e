"""Rules on the cluster as a whole: its name, region, OS and ParallelCluster version, scheduling, monitoring,
lifecycle, and the acknowledgements of warnings.
"""
from __future__ import annotations

from collections.abc import Iterator

from clusterkit import DEFAULT_PC_VERSION
from clusterkit.catalog import lookup as catalog
from clusterkit.rules.common import nearest, parse_version
from clusterkit.rules.limits import (
    ACK_REASON,
    CLUSTER_NAME,
    EMAIL_LOCAL_MAX,
    EMAIL_MAX,
    HEALTH_LIMITS,
    IDS,
    MAX_PC_VERSION,
    MIN_PC_VERSION,
    NOTIFY_EMAIL,
    PC_LOG_RETENTION_DAYS,
    TTL_MAX_HOURS,
    TTL_MIN_HOURS,
)
from clusterkit.spec import warning_ids
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks, did_you_mean


def identity(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    if not CLUSTER_NAME.fullmatch(spec.name):
        yield m.problem("name", f"'{spec.name}' is not a valid ParallelCluster cluster name",
                        "start with a letter; letters, digits and hyphens; at most 60 characters")
    azs = catalog.region_azs(spec.region)
    if azs is None:
        yield m.problem("region", f"unknown region '{spec.region}'", did_you_mean(spec.region, catalog.regions()))
    elif spec.availability_zone not in azs:
        yield m.problem("availability_zone", f"'{spec.availability_zone}' is not in {spec.region}",
                        f"one of {', '.join(azs)}")
    if spec.account is not None and not IDS["account"].fullmatch(spec.account):
        yield m.problem("account", f"'{spec.account}' is not a 12-digit account id")
    version = parse_version(spec.parallelcluster_version)
    if version is None:
        yield m.problem("parallelcluster_version",
                        f"'{spec.parallelcluster_version}' is not a version like {DEFAULT_PC_VERSION}",
                        "three numbers in ASCII digits")
    elif version < MIN_PC_VERSION:
        yield m.problem("parallelcluster_version", f"{spec.parallelcluster_version} is too old",
                        "ParallelCluster 3.11.1 or later ships Enroot and Pyxis on its official AMIs")
    elif version > MAX_PC_VERSION:
        yield m.problem("parallelcluster_version", f"{spec.parallelcluster_version} is newer than ClusterKit supports",
                        f"supported: {'.'.join(map(str, MIN_PC_VERSION))} to {DEFAULT_PC_VERSION}")


def settings(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    if spec.scheduling.scaledown_idletime_minutes < 1:
        yield m.problem("scheduling.scaledown_idletime_minutes", "must be >= 1")
    interval, (low, high) = spec.scheduling.health_check_interval_s, HEALTH_LIMITS["scheduling.health_check_interval_s"]
    if not low <= interval <= high:
        yield m.problem("scheduling.health_check_interval_s", f"{interval} s is outside {low}..{high}",
                        "seconds between quick checks of an idle node (Slurm's HealthCheckInterval); default 300")
    if spec.monitoring.log_retention_days not in PC_LOG_RETENTION_DAYS:
        yield m.problem("monitoring.log_retention_days",
                        f"{spec.monitoring.log_retention_days} is not a retention ParallelCluster accepts",
                        nearest(spec.monitoring.log_retention_days, PC_LOG_RETENTION_DAYS))
    ttl = spec.lifecycle.ttl_hours
    if ttl is not None and not TTL_MIN_HOURS <= ttl <= TTL_MAX_HOURS:
        yield m.problem("lifecycle.ttl_hours", f"{ttl:g} is outside {TTL_MIN_HOURS:g}..{TTL_MAX_HOURS:g} hours",
                        f"at least {TTL_MIN_HOURS:g}: the clock starts at the deploy and creating the cluster may take "
                        f"up to an hour (ParallelCluster's custom resource timeout); unset it to keep the cluster")
    email = spec.lifecycle.notify_email
    if email is not None:
        problem = _email_problem(email)
        if problem:
            yield m.problem("lifecycle.notify_email", problem,
                            "one address like ops@example.com; SNS mails it a confirmation link")


def acknowledge(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """Each entry names a warning id a spec may accept, once, with a reason (the loader applies them)."""
    seen: set[str] = set()
    allowed = warning_ids.acknowledgeable()
    for i, ack in enumerate(spec.acknowledge):
        path = f"acknowledge[{i}]"
        shown = f"'{ack.id}'" if ack.id.isprintable() else repr(ack.id)
        if ack.id in warning_ids.NOT_ACKNOWLEDGEABLE:
            yield m.problem(f"{path}.id", f"{ack.id} cannot be acknowledged", warning_ids.NOT_ACKNOWLEDGEABLE[ack.id])
        elif ack.id not in warning_ids.WARNINGS:
            yield m.problem(f"{path}.id", f"unknown warning id {shown}",
                            did_you_mean(ack.id, allowed) or f"one of {', '.join(allowed)}")
        elif ack.id in seen:
            yield m.problem(f"{path}.id", f"{ack.id} is acknowledged twice", "one entry per id: remove this one")
        seen.add(ack.id)
        if not ACK_REASON.search(ack.reason):
            yield m.problem(f"{path}.reason", "the reason is empty",
                            "say why the warning is accepted, e.g. who decided and until when")


def _email_problem(value: str) -> str | None:
    """Why ``value`` cannot be an SNS email endpoint, shown safely on one line; None when it can."""
    shown = f"'{value}'" if value.isprintable() else repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if not value.isprintable():
        return f"{shown} contains a control or invisible character"
    if len(value) > EMAIL_MAX or len(value.partition("@")[0]) > EMAIL_LOCAL_MAX:
        return f"{shown} is longer than an email address may be ({EMAIL_LOCAL_MAX} before the @, {EMAIL_MAX} in all)"
    if not NOTIFY_EMAIL.fullmatch(value):
        return f"{shown} is not an email address"
    return None
