"""What one deploy adds to a spec: the ``-c deploy_time`` and ``-c ttl_hours`` context values, checked here.

``make deploy`` passes the UTC minute it starts as ``deploy_time`` (without one, "now" to the minute), which
starts the clock of ``lifecycle.ttl_hours``: every deploy moves the expiry (stacks/ttl.py says why that is
the way a cluster is kept longer). ``ttl_hours`` (``make deploy TTL=...``) replaces the spec's value for
one deploy and goes through the same rule as the spec's own value. Each problem is one line (exit 2).

app.py hands the raw context values to ``effective_for_deploy``; the stacks receive the resulting
``EffectiveSpec`` and never parse or validate anything themselves.
"""
from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime

from clusterkit import clock
from clusterkit.effective.expand import EffectiveSpec, expand
from clusterkit.pipeline.loader import Loaded
from clusterkit.rules import check as rules
from clusterkit.spec.errors import ClusterKitError
from clusterkit.spec.yaml_reader import Marks

OFF_WORDS = ("none", "off", "never", "")


class TtlError(ClusterKitError):
    """A ``deploy_time`` or ``ttl_hours`` context value that cannot be used (one line, exit 2)."""


def now_to_the_minute() -> datetime:
    return clock.utc_now().replace(second=0, microsecond=0)


def parse_deploy_time(value: object) -> datetime:
    """The ``deploy_time`` context (ISO 8601, UTC) or, without one, the current minute."""
    if value is None or str(value).strip() == "":
        return now_to_the_minute()
    text = str(value).strip()
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise TtlError(f"-c deploy_time={text}: not an ISO 8601 time (like 2026-12-01T08:00:00Z)") from None
    if when.tzinfo is None:
        raise TtlError(f"-c deploy_time={text}: give a UTC time ending in Z or +00:00")
    return when.astimezone(UTC)


def parse_ttl_override(value: object, spec_ttl: float | None) -> float | None:
    """``-c ttl_hours=...`` (``make deploy TTL=...``) replaces ``lifecycle.ttl_hours`` for one deploy.

    ``none``/``off`` removes the teardown; a number goes through the same rule as the spec's value.
    Without the context the spec's value stands.
    """
    if value is None:
        return spec_ttl
    text = str(value).strip()
    if text.lower() in OFF_WORDS:
        return None
    try:
        hours = float(text)
    except ValueError:
        raise TtlError(f"-c ttl_hours={text}: not a number of hours (or 'none' to keep the cluster)") from None
    if not math.isfinite(hours):
        raise TtlError(f"-c ttl_hours={text}: not a number of hours (or 'none' to keep the cluster)")
    return hours


def with_ttl_override(loaded: Loaded, value: object) -> Loaded:
    """``loaded`` with ``-c ttl_hours`` applied, checked by the same rule as the spec's own value."""
    hours = parse_ttl_override(value, loaded.spec.lifecycle.ttl_hours)
    if hours == loaded.spec.lifecycle.ttl_hours:
        return loaded
    spec = dataclasses.replace(loaded.spec, lifecycle=dataclasses.replace(loaded.spec.lifecycle, ttl_hours=hours))
    for problem in rules.check(spec, Marks(file="-c ttl_hours")):
        if problem.path == "lifecycle.ttl_hours":
            hint = f" ({problem.hint})" if problem.hint else ""
            raise TtlError(f"-c ttl_hours={value}: {problem.message}{hint}")
    return dataclasses.replace(loaded, spec=spec)


def effective_for_deploy(loaded: Loaded, *, ttl_hours: object = None, deploy_time: object = None) -> EffectiveSpec:
    """The effective spec one deploy builds: the raw ``ttl_hours`` and ``deploy_time`` context values
    (None when not given) checked and applied, in that order."""
    loaded = with_ttl_override(loaded, ttl_hours)
    return expand(loaded, deploy_time=parse_deploy_time(deploy_time))
