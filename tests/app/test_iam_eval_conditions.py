"""The evaluator's condition semantics that the compute-role tests rely on, each with the case that would make
a Deny look stronger than IAM makes it (IAM User Guide, "Condition operators", "Multivalued context keys")."""
from __future__ import annotations

import pytest

from tests.iam_eval import UNRESOLVED, Decision, Request, decide, parse

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/parallelcluster-demo"


def _role(condition: dict) -> list:
    return parse({"Statement": [
        {"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": TABLE},
        {"Effect": "Deny", "Action": "dynamodb:PutItem", "Resource": TABLE, "Condition": condition},
    ]}, "t", {})


def _put(keys) -> Decision:
    context = None if keys is None else {} if keys == () else {"dynamodb:LeadingKeys": keys}
    return decide(_role({"ForAnyValue:StringNotLike": {"dynamodb:LeadingKeys": ["CLUSTER_CONFIG.i-*"]}}),
                  Request("dynamodb:PutItem", TABLE, context=context))


@pytest.mark.parametrize("keys, decision", [
    ("CLUSTER_CONFIG.i-0123456789abcdef0", Decision.ALLOW),
    ("COMPUTE_FLEET", Decision.EXPLICIT_DENY),
    (("CLUSTER_CONFIG.i-1", "COMPUTE_FLEET"), Decision.EXPLICIT_DENY),  # any value outside: denied
    ((), Decision.ALLOW),  # no key at all: ForAnyValue is false, so the Deny does not apply
    (None, Decision.ALLOW),  # unknown context: a Deny's condition is not relied on
])
def test_for_any_value_not_like_denies_any_key_outside(keys, decision):
    assert _put(keys) is decision


def test_for_all_values_is_true_on_a_missing_key():
    """The trap ForAllValues sets in a Deny's opposite: in an Allow it holds with no key at all."""
    allow = parse({"Statement": [{"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": TABLE, "Condition": {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["CLUSTER_CONFIG.i-*"]}}}]}, "t", {})
    assert decide(allow, Request("dynamodb:PutItem", TABLE, context={})) is Decision.ALLOW
    assert decide(allow, Request("dynamodb:PutItem", TABLE, context={"dynamodb:LeadingKeys": ("COMPUTE_FLEET",)})
                  ) is Decision.IMPLICIT_DENY


def test_an_unresolved_value_never_makes_a_deny_hold():
    role = _role({"ForAnyValue:StringNotLike": {"dynamodb:LeadingKeys": [UNRESOLVED]}})
    assert decide(role, Request("dynamodb:PutItem", TABLE, context={"dynamodb:LeadingKeys": "COMPUTE_FLEET"})
                  ) is Decision.ALLOW


def test_plain_operators_unchanged():
    role = parse({"Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"},
        {"Effect": "Deny", "Action": "s3:GetObject", "Resource": "*",
         "Condition": {"StringNotEquals": {"aws:SourceVpce": "vpce-1"}}}]}, "t", {})
    assert decide(role, Request("s3:GetObject", "arn:aws:s3:::b/k", context={"aws:SourceVpce": "vpce-1"})
                  ) is Decision.ALLOW
    assert decide(role, Request("s3:GetObject", "arn:aws:s3:::b/k", context={"aws:SourceVpce": "vpce-2"})
                  ) is Decision.EXPLICIT_DENY
    assert decide(role, Request("s3:GetObject", "arn:aws:s3:::b/k", context={})) is Decision.EXPLICIT_DENY
