"""Checkov acknowledgements: a failing Checkov check accepted on the resource itself, with the reason why.

Checkov (the IaC scanner a security team runs over the synthesized templates; tests/stacks/test_checkov.py)
skips a check on a CloudFormation resource whose ``Metadata`` holds ``checkov: {skip: [{id, comment}]}`` and
reports it as skipped with that comment. The reason therefore travels in the template, next to the
resource, and docs/security.md's table is generated from the templates. cdk-nag findings are acknowledged
separately, through ``stacks.nag``.
"""
from __future__ import annotations

import re

import aws_cdk as cdk
from constructs import IConstruct

METADATA_KEY = "checkov"
MIN_REASON_CHARS = 40  # long enough that "not needed" or "accepted" cannot pass as a reason
CHECK_ID = re.compile(r"CKV2?_AWS_\d+")


def acknowledge(construct: IConstruct, check_id: str, reason: str) -> None:
    """Make Checkov skip ``check_id`` (``CKV_AWS_158``) on ``construct``'s CloudFormation resource (an L1, or
    an L2's default child), saying in ``reason`` why the check does not apply or which risk is accepted."""
    if not CHECK_ID.fullmatch(check_id):
        raise ValueError(f"not a Checkov AWS check id: {check_id!r}")
    text = " ".join(reason.split())
    if len(text) < MIN_REASON_CHARS:
        raise ValueError(f"acknowledgement of {check_id} needs a specific reason (got {reason!r})")
    resource = construct if isinstance(construct, cdk.CfnResource) else construct.node.default_child
    if not isinstance(resource, cdk.CfnResource):
        raise ValueError(f"{construct.node.path} has no CloudFormation resource to acknowledge {check_id} on")
    entry = resource.get_metadata(METADATA_KEY) or {"skip": []}
    if any(skip["id"] == check_id for skip in entry["skip"]):
        raise ValueError(f"{check_id} is already acknowledged on {construct.node.path}")
    entry["skip"].append({"id": check_id, "comment": text})
    resource.add_metadata(METADATA_KEY, entry)
