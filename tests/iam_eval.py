"""A small IAM evaluator for the security tests: what a principal may do, from policy documents alone.

Why here: the node-role and bucket-policy tests must be able to fail, so they evaluate the policies the
templates really hold instead of comparing them to a copy. It models what those policies use: action and
resource globs (``*``, ``?``), NotAction/NotResource, Principal, a few condition operators (with the
``ForAnyValue:``/``ForAllValues:`` set prefixes over multi-valued keys such as ``dynamodb:LeadingKeys``), and
the rule "an explicit Deny beats any Allow; no Allow is an implicit deny". Not modelled: SCPs, permission
boundaries, session policies, policy variables (``${aws:username}``).

Conservative where it cannot know: a CloudFormation token it cannot resolve (``UNRESOLVED``) makes an
Allow's resource match everything and keeps a Deny from applying; an Allow's condition it cannot evaluate
holds, a Deny's does not. So an unknown can only make these tests report MORE access, never less.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

UNRESOLVED = "\x00unresolved\x00"  # stands in for a CloudFormation value the resolver cannot know
PROBE = "ck-probe"  # what a witness puts where a pattern has a wildcard


class Decision(enum.Enum):
    ALLOW = "allow"
    EXPLICIT_DENY = "explicit deny"
    IMPLICIT_DENY = "implicit deny"


# --- CloudFormation values -------------------------------------------------------------------------------

def resolve(value: Any, refs: Mapping[str, str]) -> str:
    """A template value as text: ``refs`` answers Ref (pseudo parameters, logical ids) and ``Id.Attr``
    for Fn::GetAtt; anything else that cannot be known becomes ``UNRESOLVED`` (Fn::ImportValue, ...)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, bool)):
        return str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return refs.get(arg, UNRESOLVED)
        if fn == "Fn::GetAtt":
            return refs.get(".".join(arg), UNRESOLVED)
        if fn == "Fn::Join":
            separator, parts = arg
            return separator.join(resolve(p, refs) for p in parts)
        if fn == "Fn::Sub" and isinstance(arg, str):
            return re.sub(r"\$\{([^}!]+)\}", lambda m: refs.get(m.group(1), UNRESOLVED), arg)
    return UNRESOLVED


# --- statements ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Condition:
    operator: str  # e.g. ArnNotLike
    key: str       # e.g. aws:PrincipalArn
    values: tuple[str, ...]


@dataclass(frozen=True)
class Statement:
    """One statement, its tokens resolved; ``principals`` is None in identity policies."""

    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    not_actions: bool = False
    not_resources: bool = False
    principals: tuple[str, ...] | None = None  # "*", "AWS:<arn glob>", "Service:<name>"
    conditions: tuple[Condition, ...] = ()
    source: str = ""  # policy name and Sid, for messages


@dataclass(frozen=True)
class Request:
    """One API call. ``context`` None: unknown (Allow conditions hold, Deny conditions do not); a key's value
    is a string, or a tuple for a multi-valued key (``dynamodb:LeadingKeys``)."""

    action: str
    resource: str
    principal: str = ""  # "AWS:<role arn>" or "Service:<name>"
    context: Mapping[str, str | tuple[str, ...]] | None = field(default=None)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _principals(raw: Any) -> tuple[str, ...]:
    if raw == "*":
        return ("*",)
    out = []
    for kind, values in raw.items():
        out += ["*" if v == "*" and kind == "AWS" else f"{kind}:{v}" for v in _listed(values)]
    return tuple(out)


def parse(document: Mapping[str, Any], source: str, refs: Mapping[str, str]) -> list[Statement]:
    """Statements of a policy document (identity or resource policy); keys starting with ``_`` are notes."""
    out = []
    for raw in _listed(document["Statement"]):
        if "NotPrincipal" in raw:
            raise ValueError(f"{source}: NotPrincipal is not modelled")
        action_key = "NotAction" if "NotAction" in raw else "Action"
        resource_key = "NotResource" if "NotResource" in raw else "Resource"
        conditions = tuple(Condition(op, key, tuple(resolve(v, refs) for v in _listed(values)))
                           for op, pairs in raw.get("Condition", {}).items() for key, values in pairs.items())
        out.append(Statement(
            effect=raw["Effect"],
            actions=tuple(resolve(a, refs) for a in _listed(raw[action_key])),
            resources=tuple(resolve(r, refs) for r in _listed(raw[resource_key])),
            not_actions=action_key == "NotAction", not_resources=resource_key == "NotResource",
            principals=_principals(raw["Principal"]) if "Principal" in raw else None,
            conditions=conditions, source=f"{source}/{raw.get('Sid', '?')}"))
    return out


# --- matching --------------------------------------------------------------------------------------------

def glob(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM wildcards: ``*`` any run of characters (``/`` and ``:`` included), ``?`` one character."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


def _pattern_matches(pattern: str, value: str, allow: bool) -> bool:
    if UNRESOLVED in pattern:
        return allow  # an Allow may cover anything; a Deny cannot be relied on
    return glob(pattern, value)


def _any(patterns: Iterable[str], value: str, allow: bool, *, ignore_case: bool = False) -> bool:
    if ignore_case:
        return any(glob(p, value, ignore_case=True) for p in patterns)
    return any(_pattern_matches(p, value, allow) for p in patterns)


def _condition_holds(condition: Condition, context: Mapping[str, str | tuple[str, ...]], allow: bool) -> bool:
    """IAM's condition semantics (IAM User Guide, "Condition operators" and "Multivalued context keys"): a
    plain operator on a missing key is false (true for a negated one, or with IfExists); ``ForAnyValue:``
    holds when some value of the key matches, false when the key is missing or empty; ``ForAllValues:``
    holds when every value matches, true when the key is missing or empty."""
    qualifier, _, op = condition.operator.rpartition(":")
    op = op.removesuffix("IfExists")
    negated = "Not" in op
    base = op.replace("Not", "")
    actual = next((v for k, v in context.items() if k.lower() == condition.key.lower()), None)
    if qualifier in ("ForAnyValue", "ForAllValues"):
        if any(UNRESOLVED in v for v in condition.values):
            return allow
        values = () if actual is None else (actual,) if isinstance(actual, str) else tuple(actual)
        hits = [_matches(base, v, condition.values) for v in values]
        if hits and None in hits:
            return allow
        outcomes = [not h if negated else h for h in hits]
        return any(outcomes) if qualifier == "ForAnyValue" else all(outcomes)
    if base == "Null":  # "true": the key is absent
        return any((v.lower() == "true") == (actual is None) for v in condition.values)
    if actual is None:
        return negated or condition.operator.endswith("IfExists")
    if any(UNRESOLVED in v for v in condition.values):
        return allow
    if not isinstance(actual, str):
        return allow  # a multi-valued key under a single-valued operator: not modelled
    hit = _matches(base, actual, condition.values)
    if hit is None:
        return allow  # an operator this does not model
    return not hit if negated else hit


def _matches(base: str, actual: str, values: tuple[str, ...]) -> bool | None:
    """Whether one context value meets an operator (negation aside); None for an operator not modelled."""
    if base in ("StringEquals", "ArnEquals"):
        return actual in values
    if base in ("StringLike", "ArnLike"):
        return any(glob(v, actual) for v in values)
    if base in ("StringEqualsIgnoreCase", "Bool"):
        return actual.lower() in (v.lower() for v in values)
    if base == "NumericLessThan":
        return any(float(actual) < float(v) for v in values)
    return None


def applies(statement: Statement, request: Request) -> bool:
    """Whether ``statement`` covers ``request`` (its effect aside), conservatively for its effect."""
    allow = statement.effect == "Allow"
    if _any(statement.actions, request.action, allow, ignore_case=True) == statement.not_actions:
        return False
    if _any(statement.resources, request.resource, allow) == statement.not_resources:
        return False
    if statement.principals is not None and "*" not in statement.principals:
        if not any(_principal_matches(p, request.principal, allow) for p in statement.principals):
            return False
    if request.context is None:
        return allow or not statement.conditions
    return all(_condition_holds(c, request.context, allow) for c in statement.conditions)


def _principal_matches(pattern: str, principal: str, allow: bool) -> bool:
    kind, _, value = pattern.partition(":")
    other_kind, _, other = principal.partition(":")
    if kind != other_kind:
        return False
    if kind == "AWS" and re.fullmatch(r"\d{12}|arn:[^:]+:iam::\d{12}:root", value):
        account = value if value.isdigit() else value.split(":")[4]
        return other.split(":")[4:5] == [account]  # the account: every principal in it
    return _pattern_matches(value, other, allow)


def decide(statements: Iterable[Statement], request: Request) -> Decision:
    """Explicit Deny beats Allow; without an Allow it is an implicit deny."""
    matching = [s for s in statements if applies(s, request)]
    if any(s.effect == "Deny" for s in matching):
        return Decision.EXPLICIT_DENY
    return Decision.ALLOW if any(s.effect == "Allow" for s in matching) else Decision.IMPLICIT_DENY


# --- reachability ----------------------------------------------------------------------------------------

def witnesses(pattern: str) -> list[str]:
    """Concrete resources a pattern covers: each wildcard filled with a probe name (and with a path)."""
    if UNRESOLVED in pattern:
        pattern = "*"
    return sorted({pattern.replace("*", fill).replace("?", "x") for fill in (PROBE, f"{PROBE}/{PROBE}")})


@dataclass(frozen=True)
class Leak:
    action: str
    resource: str
    granted_by: str


def reachable_outside(statements: list[Statement], actions: Iterable[str],
                      inside: Callable[[str], bool], extra_probes: Iterable[str] = ()) -> list[Leak]:
    """Allowed (action, resource) pairs outside ``inside``: every Allow pattern's witnesses plus
    ``extra_probes``, each checked against every statement (so an explicit Deny removes it)."""
    leaks = []
    for action in actions:
        candidates = {(w, s.source) for s in statements if s.effect == "Allow"
                      and _any(s.actions, action, True, ignore_case=True) != s.not_actions
                      for r in (("*",) if s.not_resources else s.resources) for w in witnesses(r)}
        candidates |= {(p, "probe") for p in extra_probes}
        for resource, source in sorted(candidates):
            if not inside(resource) and decide(statements, Request(action, resource)) is Decision.ALLOW:
                leaks.append(Leak(action, resource, source))
    return leaks
