"""Placeholders and literal AWS ids in a rendered ParallelCluster config.

The committed rendered YAML names deploy-time ids with readable placeholders (``${Network.VpcId}``);
specs that reuse existing resources carry literal ids instead. ParallelCluster's schema rejects the
placeholders (they do not match its id regexes), so both checks swap every placeholder for a stand-in
id first, and map stand-ins back to the original token in messages so users read their own text.
Runs inside the ParallelCluster venv (stdlib + PyYAML).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# Placeholder names are <Stack>.<Output>; the kind of AWS thing they stand for follows from the
# output's suffix, so a new stack output (e.g. Cluster.LoginNodePolicyArn) needs no change here.
# A cluster on a platform names the platform's stacks: ``${Research-East-Network.ComputeSubnetId}``.
PLACEHOLDER_NAME_RE = re.compile(r"^(?:(?:[A-Z][A-Za-z0-9]*-)*(?:Network|Storage)|Assets|Cluster)\.[A-Z][A-Za-z0-9]*$")
SUFFIX_KINDS: tuple[tuple[str, str], ...] = (
    ("VpcId", "vpc"),
    ("SubnetId", "subnet"),
    ("SecurityGroupId", "sg"),
    ("FileSystemId", "fsx"),
    ("PolicyArn", "iam-policy"),
    ("Bucket", "bucket"),
    ("Region", "region"),
)
# The ones the renderer is known to write (documentation, and the hint in the unknown-placeholder error).
PLACEHOLDERS: tuple[str, ...] = (
    "Assets.Bucket",
    "Cluster.ClusterSecurityGroupId",
    "Cluster.ComputeNodePolicyArn",
    "Cluster.HeadNodePolicyArn",
    "Cluster.Region",
    "Network.ClusterSecurityGroupId",
    "Network.ComputeSubnetId",
    "Network.HeadNodeSubnetId",
    "Network.VpcId",
    "Storage.FileSystemId",
)


# CloudFormation pseudo parameters the renderer may leave in strings (``arn:${AWS::Partition}:iam::...``).
AWS_PSEUDO = ("AWS::AccountId", "AWS::Partition", "AWS::Region", "AWS::URLSuffix")
FIXTURE_ACCOUNT_ID = "123456789012"  # moto's default account


def placeholder_kind(name: str) -> str:
    """vpc | subnet | sg | fsx | iam-policy | bucket | region | aws-pseudo, or "unknown"."""
    if name in AWS_PSEUDO:
        return "aws-pseudo"
    if PLACEHOLDER_NAME_RE.fullmatch(name):
        for suffix, kind in SUFFIX_KINDS:
            if name.endswith(suffix):
                return kind
    return "unknown"


PLACEHOLDER_RE = re.compile(r"\$\{([^}]*)\}")

# Literal ids as ParallelCluster's schema accepts them (8 or 17 characters after the prefix; FSx: 17).
LITERAL_RES: dict[str, re.Pattern[str]] = {
    "vpc": re.compile(r"(?<![\w-])vpc-(?:[0-9a-z]{17}|[0-9a-z]{8})(?![\w-])"),
    "subnet": re.compile(r"(?<![\w-])subnet-(?:[0-9a-z]{17}|[0-9a-z]{8})(?![\w-])"),
    "sg": re.compile(r"(?<![\w-])sg-(?:[0-9a-z]{17}|[0-9a-z]{8})(?![\w-])"),
    "fsx": re.compile(r"(?<![\w-])fs-[0-9a-z]{17}(?![\w-])"),
}

S3_URL_RE = re.compile(r"s3://([^/\s\"']+)/([^\s\"']+)")

def partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def pseudo_value(token: str, region: str) -> str:
    """What CloudFormation would put for ``${AWS::...}`` in this region (fixture account)."""
    name = token[2:-1]
    return {
        "AWS::AccountId": FIXTURE_ACCOUNT_ID,
        "AWS::Partition": partition(region),
        "AWS::Region": region,
        "AWS::URLSuffix": "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com",
    }[name]


def is_id_like(token: str) -> bool:
    """Stand-ins that are unique ids can be mapped back in messages; regions and partitions cannot."""
    return placeholder_kind(token[2:-1]) not in ("region", "aws-pseudo") if token.startswith("${") else True


def schema_standin(name: str, kind: str, region: str) -> str:
    """A well-formed, obviously fake id for the offline schema load, stable across runs."""
    if kind == "aws-pseudo":
        return pseudo_value(name, region)
    digest = hashlib.sha256(name.encode()).hexdigest()[:17]
    return {
        "vpc": f"vpc-{digest}",
        "subnet": f"subnet-{digest}",
        "sg": f"sg-{digest}",
        "fsx": f"fs-{digest}",
        "iam-policy": f"arn:aws:iam::123456789012:policy/clusterkit-{digest}",
        "bucket": f"clusterkit-{digest}",
        "region": region,
    }[kind]


@dataclass(frozen=True)
class TokenUse:
    """A placeholder or literal id found in the text, with the first line/column it appears at."""

    token: str  # exactly as written: "${Network.VpcId}" or "subnet-0123456789abcdef0"
    kind: str  # vpc | subnet | sg | fsx | iam-policy | bucket | region | unknown
    line: int
    col: int


def _scalars(text: str) -> list[tuple[str, int, int, bool]]:
    """(value, line, col, exact) of every scalar in the YAML; comments are not scalars.

    ``exact`` is True when positions inside the value map 1:1 onto the line (one-line plain scalar).
    Falls back to the raw non-comment lines when the text is not valid YAML.
    """
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None
    if root is None:
        return [
            (line, number, 1, True)
            for number, line in enumerate(text.splitlines(), 1)
            if not line.lstrip().startswith("#")
        ]
    found: list[tuple[str, int, int, bool]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            exact = node.style is None and node.start_mark.line == node.end_mark.line
            found.append((node.value, node.start_mark.line + 1, node.start_mark.column + 1, exact))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
    return found


def find_tokens(text: str) -> list[TokenUse]:
    """Every distinct placeholder and literal id in the YAML's scalars, in order of first appearance."""
    hits: list[tuple[int, int, str, str]] = []
    for value, line, col, exact in _scalars(text):
        for m in PLACEHOLDER_RE.finditer(value):
            hits.append((line, col + (m.start() if exact else 0), m.group(0), placeholder_kind(m.group(1))))
        for kind, rx in LITERAL_RES.items():
            for m in rx.finditer(value):
                hits.append((line, col + (m.start() if exact else 0), m.group(0), kind))
    seen: dict[str, TokenUse] = {}
    for line, col, token, kind in sorted(hits):
        seen.setdefault(token, TokenUse(token, kind, line, col))
    return list(seen.values())


def placeholder(name: str) -> str:
    return "${" + name + "}"


def substitute(text: str, mapping: dict[str, str]) -> str:
    """Replace each token (longest first, so no token eats part of another) by its stand-in."""
    for token in sorted(mapping, key=len, reverse=True):
        text = text.replace(token, mapping[token])
    return text


def unmap(message: str, mapping: dict[str, str]) -> str:
    """Turn stand-in ids in a message back into the tokens the user wrote."""
    for token, standin in sorted(mapping.items(), key=lambda kv: len(kv[1]), reverse=True):
        if standin != token:
            message = message.replace(standin, token)
    return message


def s3_objects(text: str) -> list[tuple[str, str]]:
    """(bucket, key) of every s3:// URL in the text, sorted and distinct."""
    return sorted({(m.group(1), m.group(2)) for m in S3_URL_RE.finditer(text)})
