"""cdk-nag 3.x glue: turn on the AwsSolutions checks and acknowledge findings with reasons.

cdk-nag 3 is a CDK policy-validation plugin, not an Aspect: any unacknowledged finding fails
``app.synth()`` and every finding, acknowledged or not, lands in ``<outdir>/validation-report.json``.
Acknowledgements are CDK ``Validations`` on a construct (they cover its children) and must name the
pack: ``AwsSolutions::AwsSolutions-S1``. Rules that report several findings per resource need the
finding in brackets (``AwsSolutions-IAM5[Resource::*]``); acknowledging the bare rule id does not
cover them (no prefix matching in cdk-nag 3.0). ``clusterkit.artifacts.nag_report`` reads the report back
(stacks do no file I/O).
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

PACK = "AwsSolutions"
MIN_REASON_CHARS = 30  # long enough that "not needed" cannot pass as a reason


def add_checks(app: cdk.App) -> None:
    """Run the AwsSolutions pack on every stack of ``app`` at synth."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(verbose=True))


def acknowledge(construct: IConstruct, rule: str, reason: str, *, applies_to: Sequence[str] = ()) -> None:
    """Accept an AwsSolutions finding on ``construct`` and its children, saying why it is right here.

    ``rule`` is the rule id as cdk-nag prints it (``AwsSolutions-S1``); the pack prefix is added unless
    present. Granular rules (IAM4, IAM5, ...) report one finding per action or resource; name each in
    ``applies_to`` (``["Resource::arn:aws:s3:::bucket/*"]``, as printed after the rule id) or pass the
    bracketed id as ``rule``. The bare id does not cover them.
    """
    text = " ".join(reason.split())
    if len(text) < MIN_REASON_CHARS:
        raise ValueError(f"acknowledgement of {rule} needs a specific reason (got {reason!r})")
    base = rule if "::" in rule else f"{PACK}::{rule}"
    for ack_id in [f"{base}[{finding}]" for finding in applies_to] or [base]:
        cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=ack_id, reason=text))


def finding_text(stack: cdk.Stack, value: str) -> str:
    """``value`` (a string that may hold tokens) as cdk-nag prints it in a finding: ``Ref`` and ``${}``
    in ``Fn::Sub`` -> ``<Name>``.

    For ``applies_to`` entries naming a resource whose ARN is built from pseudo parameters.
    """
    resolved = stack.resolve(value)
    if isinstance(resolved, str):
        return resolved
    parts = resolved.get("Fn::Join", [None, None])[1] if isinstance(resolved, dict) else None
    if not isinstance(parts, list):
        raise ValueError(f"cannot name {resolved!r} as a cdk-nag finding")
    out = ""
    for part in parts:
        if isinstance(part, str):
            out += part
        elif isinstance(part, dict) and "Ref" in part:
            out += f"<{part['Ref']}>"
        elif isinstance(part, dict) and isinstance(part.get("Fn::Sub"), str):
            out += re.sub(r"\$\{([^}]+)\}", r"<\1>", part["Fn::Sub"])
        else:
            raise ValueError(f"cannot name {resolved!r} as a cdk-nag finding")
    return out
