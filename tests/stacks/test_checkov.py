"""Checkov, the IaC scanner a security team runs, over every template of every shipped spec and stack variant.

Real: Checkov (pinned, requirements-checkov.txt) in one offline process over a directory holding each template
as synthesized (``acked/``), the same template with its Checkov skips removed (``raw/``, where it has any), and
a canary stack with known-bad buckets (``canary/``). Every failing check must be acknowledged on its resource
(stacks/scanner_acks.py) with a reason; docs/security.md's table is generated from those reasons.
Templates: the three stacks of each shipped spec as app.py builds them, and the network and storage stacks of
every variant in tests/stacks/conftest.py (interface endpoints, public head node, KMS, scratch, ...).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import checkov_scan as ck  # this folder's harness (pytest puts the folder on sys.path)
import pytest
from aws_cdk import aws_s3 as s3

from clusterkit.pipeline.loader import load
from stacks import scanner_acks
from tests import shipped

CANARY_REASON = "canary: proves a skip in resource Metadata reaches Checkov with its reason"


def _templates(synths: Callable[[str], Any], variants: list[str], tmp: Path) -> dict[str, dict[str, Any]]:
    """``<spec or variant>/<stack name>.template.json`` -> template: every stack of each shipped spec, the
    network and storage stacks of the other variants."""
    import app as cdk_app

    out: dict[str, dict[str, Any]] = {}
    for name in sorted(shipped.SPECS):
        app = cdk.App(outdir=str(tmp / f"cdk-{name}"))
        stacks = cdk_app.build(app, load(name))
        assembly = app.synth()
        for stack in stacks.values():
            out[f"{name}/{stack.stack_name}.template.json"] = assembly.get_stack_artifact(stack.artifact_id).template
    for name in (v for v in variants if v not in shipped.SPECS):
        synth = synths(name)
        out[f"{name}/{synth.network.stack_name}.template.json"] = synth.templates["network"]
        out[f"{name}/{synth.storage.stack_name}.template.json"] = synth.templates["storage"]
    return out


def _canary() -> dict[str, Any]:
    """Two bare buckets (no logging, no versioning): one with CKV_AWS_18 acknowledged through the helper."""
    app = cdk.App()
    stack = cdk.Stack(app, "Canary-Storage")
    s3.CfnBucket(stack, "Unacknowledged")
    scanner_acks.acknowledge(s3.CfnBucket(stack, "Acknowledged"), "CKV_AWS_18", CANARY_REASON)
    return app.synth().get_stack_by_name("Canary-Storage").template  # type: ignore[no-any-return]


class Scan:
    """The templates scanned and Checkov's results over them."""

    def __init__(self, templates: dict[str, dict[str, Any]], version: str, results: list[ck.Result]) -> None:
        self.templates, self.version, self.results = templates, version, results


@pytest.fixture(scope="module")
def scan(synths: Callable[[str], Any], variant_names: list[str], tmp_path_factory: pytest.TempPathFactory) -> Scan:
    checkov = ck.require_checkov()
    tmp = tmp_path_factory.mktemp("checkov")
    templates = _templates(synths, variant_names, tmp / "synth")
    root = tmp / "scan"
    files = {f"acked/{rel}": t for rel, t in templates.items()}
    # Without its skips, a template with none is the one under acked/: only the others are scanned twice.
    files |= {f"raw/{rel}": ck.without_skips(t) for rel, t in templates.items() if ck.metadata_skips(t)}
    files["canary/Canary-Storage.template.json"] = _canary()
    for rel, template in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(template, indent=1), encoding="utf-8")
    version, results = ck.scan(checkov, root)
    return Scan(templates, version, results)


def test_checkov_is_the_pinned_release(scan: Scan) -> None:
    assert scan.version == ck.pinned_version(), "the Checkov venv is stale: run `make checkov-venv`"


def test_every_failing_check_is_acknowledged(scan: Scan) -> None:
    failed = [r.line() for r in ck.under(scan.results, "acked", "FAILED")]
    assert failed == [], ("Checkov checks failing with no acknowledgement: fix the resource, or acknowledge the "
                          "check on it with stacks/scanner_acks.acknowledge and a reason:\n" + "\n".join(failed))


def test_every_acknowledgement_is_of_a_check_that_fails_without_it(scan: Scan) -> None:
    """The skips in the templates are exactly what Checkov fails when they are removed: none stale or mistyped."""
    acked = {(f"raw/{rel}", resource, check_id) for rel, t in scan.templates.items()
             for resource, check_id in ck.metadata_skips(t)}
    failing = {(r.template, r.resource, r.check_id) for r in ck.under(scan.results, "raw", "FAILED")}
    assert sorted(acked - failing) == [], "acknowledged, but Checkov does not fail it: remove the acknowledgement"
    skipped = {(f"raw/{r.template.removeprefix('acked/')}", r.resource, r.check_id)
               for r in ck.under(scan.results, "acked", "SKIPPED")}
    assert skipped == acked, "Checkov did not report every acknowledgement as skipped"


def test_security_doc_table_is_generated_from_the_acknowledgements(scan: Scan) -> None:
    want = ck.table(ck.under(scan.results, "acked", "SKIPPED"))
    text = ck.SECURITY_DOC.read_text(encoding="utf-8")
    if os.environ.get(ck.UPDATE_DOC_ENV) == "1":
        ck.SECURITY_DOC.write_text(ck.with_section(text, want), encoding="utf-8")
        text = ck.SECURITY_DOC.read_text(encoding="utf-8")
    assert ck.doc_section(text) == want, f"docs/security.md's Checkov table is stale: regenerate with {ck.REGENERATE}"


def test_the_scan_reports_an_unacknowledged_bad_resource(scan: Scan) -> None:
    """The canary's bare buckets fail what the stacks' buckets pass: the scan can fail, a skip covers one check."""
    failed = {(r.resource, r.check_id) for r in ck.under(scan.results, "canary", "FAILED")}
    assert {("AWS::S3::Bucket.Unacknowledged", "CKV_AWS_18"), ("AWS::S3::Bucket.Unacknowledged", "CKV_AWS_21"),
            ("AWS::S3::Bucket.Acknowledged", "CKV_AWS_21")} <= failed
    assert ("AWS::S3::Bucket.Acknowledged", "CKV_AWS_18") not in failed
    skipped = [(r.resource, r.check_id, r.comment) for r in ck.under(scan.results, "canary", "SKIPPED")]
    assert skipped == [("AWS::S3::Bucket.Acknowledged", "CKV_AWS_18", CANARY_REASON)]


def test_the_table_names_stack_resource_and_reason() -> None:
    rows = [ck.Result("acked/demo/Demo-Network.template.json", "AWS::Logs::LogGroup.FlowLogs16C1943A", "CKV_AWS_158",
                      "SKIPPED", "a reason | with a pipe")] * 2
    assert ck.table(rows).splitlines()[2:] == [
        "| CKV_AWS_158 | `<Name>-Network` `FlowLogs16C1943A` (AWS::Logs::LogGroup) | a reason / with a pipe |"]


@pytest.mark.parametrize(("check_id", "reason", "error"), [
    ("CKV_AWS_18", "not needed", "needs a specific reason"),
    ("AwsSolutions-S1", CANARY_REASON, "not a Checkov AWS check id"),
])
def test_acknowledge_refuses_vague_reasons_and_foreign_ids(check_id: str, reason: str, error: str) -> None:
    stack = cdk.Stack(cdk.App(), "S")
    with pytest.raises(ValueError, match=error):
        scanner_acks.acknowledge(s3.CfnBucket(stack, "B"), check_id, reason)


def test_acknowledge_finds_an_l2s_resource_and_refuses_a_repeat() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    bucket = s3.Bucket(stack, "B")
    scanner_acks.acknowledge(bucket, "CKV_AWS_18", CANARY_REASON)
    scanner_acks.acknowledge(bucket, "CKV_AWS_21", CANARY_REASON)
    resource = stack.resolve(bucket.node.default_child.get_metadata("checkov"))  # type: ignore[union-attr]
    assert [s["id"] for s in resource["skip"]] == ["CKV_AWS_18", "CKV_AWS_21"]
    with pytest.raises(ValueError, match="already acknowledged"):
        scanner_acks.acknowledge(bucket, "CKV_AWS_18", CANARY_REASON)
