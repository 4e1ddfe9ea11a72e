"""The TTL clock and override: context parsing, one-line errors, the Makefile wiring, the schedule name.

Real: the parsing code (``clusterkit.pipeline.deploy_context``, outside the stacks), the spec rule shared with
``validate``, app.py run as a process (as the CDK CLI runs it), GNU make's dry run of the deploy recipe, a
CDK stack with another synthesizer.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clusterkit.effective.expand import expand, expiry, lifecycle
from clusterkit.pipeline.deploy_context import TtlError, effective_for_deploy, parse_deploy_time, with_ttl_override
from clusterkit.pipeline.loader import load
from clusterkit.spec.naming import (
    SCHEDULE_GROUP_NAME_MAX,
    SCHEDULE_NAME_MAX,
    ttl_schedule_group_name,
    ttl_schedule_name,
)
from stacks.ttl import TtlTeardown

REPO = Path(__file__).resolve().parents[2]

HINT = ("at least 2: the clock starts at the deploy and creating the cluster may take up to an hour "
        "(ParallelCluster's custom resource timeout); unset it to keep the cluster")


def test_deploy_time_parses_utc():
    assert parse_deploy_time("2026-12-01T08:00:00Z") == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert parse_deploy_time("2026-12-01T10:00:00+02:00") == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def test_no_deploy_time_means_now_to_the_minute():
    before = datetime.now(UTC).replace(second=0, microsecond=0)
    got = parse_deploy_time(None)
    assert got.second == 0 and got.microsecond == 0 and got.tzinfo is not None
    assert before <= got <= datetime.now(UTC)


@pytest.mark.parametrize("value,message", [
    ("tomorrow", "-c deploy_time=tomorrow: not an ISO 8601 time (like 2026-12-01T08:00:00Z)"),
    ("2026-12-01T08:00:00", "-c deploy_time=2026-12-01T08:00:00: give a UTC time ending in Z or +00:00"),
])
def test_bad_deploy_time_is_one_line(value, message):
    with pytest.raises(TtlError) as info:
        parse_deploy_time(value)
    assert info.value.lines() == [message]


def test_expiry_is_to_the_minute():
    start = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert expiry(start, 72) == datetime(2026, 12, 4, 8, 0, tzinfo=UTC)
    assert expiry(start, 0.2501) == datetime(2026, 12, 1, 8, 15, tzinfo=UTC)  # 15 min 0.36 s, cut to the minute


@pytest.mark.parametrize("value,message", [
    ("5000", "-c ttl_hours=5000: 5000 is outside 2..2160 hours (" + HINT + ")"),
    ("0.1", "-c ttl_hours=0.1: 0.1 is outside 2..2160 hours (" + HINT + ")"),
    ("soon", "-c ttl_hours=soon: not a number of hours (or 'none' to keep the cluster)"),
    ("nan", "-c ttl_hours=nan: not a number of hours (or 'none' to keep the cluster)"),
])
def test_bad_ttl_override_uses_the_spec_rule(value, message):
    with pytest.raises(TtlError) as info:
        with_ttl_override(load("demo"), value)
    assert info.value.lines() == [message]


def test_ttl_override_values():
    demo = load("demo")
    assert with_ttl_override(demo, None) is demo
    assert with_ttl_override(demo, "72") is demo  # same value: nothing to change
    assert with_ttl_override(demo, "off").spec.lifecycle.ttl_hours is None
    assert with_ttl_override(demo, " 6 ").spec.lifecycle.ttl_hours == 6.0
    assert with_ttl_override(demo, 6).spec.name == "demo"


def test_teardown_refuses_a_stack_without_a_service_role():
    import aws_cdk as cdk

    app = cdk.App()
    stack = cdk.Stack(app, "Plain-Cluster", synthesizer=cdk.CliCredentialsStackSynthesizer())
    with pytest.raises(ValueError, match="needs the stack deployed with a CloudFormation service role"):
        TtlTeardown(stack, "Ttl", cluster_name="plain", lifecycle=lifecycle(1, None, datetime(2026, 12, 1, tzinfo=UTC)))


def test_teardown_refuses_a_lifecycle_without_a_deploy_time():
    """expand() outside a deploy has no clock: the stack must not silently build a cluster without its TTL."""
    import aws_cdk as cdk

    app = cdk.App()
    stack = cdk.Stack(app, "Plain-Cluster")
    with pytest.raises(ValueError, match="needs the lifecycle of a deploy"):
        TtlTeardown(stack, "Ttl", cluster_name="plain", lifecycle=expand(load("demo")).lifecycle)


def test_the_effective_spec_of_a_deploy_carries_the_clock():
    demo = load("demo")
    plain = expand(demo)
    assert (plain.lifecycle.ttl_hours, plain.lifecycle.deploy_time, plain.lifecycle.expires_at) == (72.0, None, None)
    deploy = effective_for_deploy(demo, ttl_hours="6", deploy_time="2026-12-01T10:00:00+02:00")
    assert deploy.lifecycle.ttl_hours == 6.0
    assert deploy.lifecycle.deploy_time == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert deploy.lifecycle.expires_at == datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    assert effective_for_deploy(demo, ttl_hours="off", deploy_time="2026-12-01T08:00:00Z").lifecycle.expires_at is None
    assert dataclasses.replace(deploy, lifecycle=plain.lifecycle) == plain  # nothing else moves


def test_schedule_names_fit_and_stay_unique():
    assert ttl_schedule_name("demo") == "ClusterKit-demo-ttl"
    long_a, long_b = "a" * 59 + "b", "a" * 59 + "c"
    names = {ttl_schedule_name(long_a), ttl_schedule_name(long_b)}
    assert len(names) == 2 and all(len(n) <= SCHEDULE_NAME_MAX for n in names)
    assert all(n.startswith("ClusterKit-aaaa") and n.endswith("-ttl") for n in names)


def test_schedule_group_names_fit_and_stay_unique():
    assert ttl_schedule_group_name("demo") == "clusterkit-demo"
    long_a, long_b = "a" * 59 + "b", "a" * 59 + "c"
    names = {ttl_schedule_group_name(long_a), ttl_schedule_group_name(long_b)}
    assert len(names) == 2 and all(len(n) == SCHEDULE_GROUP_NAME_MAX for n in names)
    assert all(re.fullmatch(r"clusterkit-a+-[0-9a-f]{8}", n) for n in names)  # Scheduler: [0-9a-zA-Z-_.]{1,64}


def test_ttl_override_keeps_the_rest_of_lifecycle():
    demo = load("demo")
    spec = dataclasses.replace(demo.spec, lifecycle=dataclasses.replace(demo.spec.lifecycle,
                                                                        notify_email="ops@example.com"))
    changed = with_ttl_override(dataclasses.replace(demo, spec=spec), "6").spec.lifecycle
    assert (changed.ttl_hours, changed.notify_email) == (6.0, "ops@example.com")


def test_bad_ttl_context_fails_the_app_with_one_line():
    """app.py as the CDK CLI runs it: exit 2, one line, no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["CDK_CONTEXT_JSON"] = json.dumps({"cluster": "demo", "ttl_hours": "999999"})
    result = subprocess.run([sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "-c ttl_hours=999999: 999999 is outside 2..2160 hours (" + HINT + ")")


def _deploy_recipe(*args: str) -> str:
    out = subprocess.run(["make", "-n", "--no-print-directory", "deploy", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=60).stdout
    return out[out.index("deploy --all"):]


def test_make_deploy_passes_the_clock_and_the_override():
    recipe = _deploy_recipe("CLUSTER=demo", "TTL=48")
    assert "-c cluster=demo -c deploy_time=$(date -u +%Y-%m-%dT%H:%M:00Z)" in recipe
    assert "-c ttl_hours=48" in recipe
    assert "ttl_hours" not in _deploy_recipe("CLUSTER=demo")
