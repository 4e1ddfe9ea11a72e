"""Which deployed cluster stacks use a platform: the stacks importing its exports, asked of CloudFormation.

``make destroy-platform`` runs this first and stops with one line naming them: CloudFormation would refuse the
deletion anyway ("you can't delete a stack if another stack references one of its outputs", User Guide,
"Get exported outputs from a deployed CloudFormation stack"), but only after ``cdk destroy`` has asked, and with
an export name rather than the clusters and the command that removes them. ``ListImports`` is the same record
CloudFormation checks, so this answer and its refusal cannot disagree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusterkit.spec.errors import ClusterKitError
from clusterkit.spec.naming import export_name, stack_names

NOT_IMPORTED = "is not imported by any stack"  # ListImports' ValidationError for an export nobody imports
CLUSTER_TAG = "clusterkit:cluster"  # on every stack of a cluster (clusterkit.effective.expand)


@dataclass(frozen=True)
class User:
    stack: str  # the importing stack
    cluster: str | None  # its clusterkit:cluster tag, when it has one
    exports: tuple[str, ...]  # the platform's exports it imports


def platform_exports(cfn: Any, platform: str) -> list[str]:
    """The platform's exports that exist (ListExports, every page): ``<Platform>-Network-*`` and ``-Storage-*``."""
    prefixes = tuple(export_name(stack, "") for stack in (stack_names(platform)["network"],
                                                           stack_names(platform)["storage"]))
    found = []
    for page in cfn.get_paginator("list_exports").paginate():
        found += [e["Name"] for e in page.get("Exports", []) if e["Name"].startswith(prefixes)]
    return sorted(found)


def importers(cfn: Any, export: str) -> list[str]:
    """Stacks importing ``export`` (ListImports, every page); none when CloudFormation says nobody imports it."""
    from botocore.exceptions import ClientError

    stacks: list[str] = []
    try:
        for page in cfn.get_paginator("list_imports").paginate(ExportName=export):
            stacks += page.get("Imports", [])
    except ClientError as exc:
        if NOT_IMPORTED in str(exc):
            return []
        raise
    return stacks


def users(cfn: Any, platform: str) -> list[User]:
    """Every stack that imports one of the platform's exports, with the cluster it belongs to."""
    by_stack: dict[str, list[str]] = {}
    for export in platform_exports(cfn, platform):
        for stack in importers(cfn, export):
            by_stack.setdefault(stack, []).append(export)
    return [User(stack, _cluster_tag(cfn, stack), tuple(exports)) for stack, exports in sorted(by_stack.items())]


def _cluster_tag(cfn: Any, stack: str) -> str | None:
    from botocore.exceptions import ClientError

    try:
        found = cfn.describe_stacks(StackName=stack).get("Stacks", [])
    except ClientError:
        return None
    tags = {t["Key"]: t["Value"] for t in (found[0].get("Tags", []) if found else [])}
    return tags.get(CLUSTER_TAG)


def refusal(platform: str, found: list[User]) -> str:
    """The one line ``make destroy-platform`` stops with."""
    named = ", ".join(f"{u.cluster} ({u.stack})" if u.cluster else u.stack for u in found)
    first = next((u.cluster for u in found if u.cluster), None)
    how = f"make destroy-cluster CLUSTER={first}" if first else f"delete stack {found[0].stack}"
    return (f"platform {platform} is in use by {named}: destroy those clusters first ({how}, for each), then "
            f"`make destroy-platform PLATFORM={platform}`")


def read_users(cfn: Any, platform: str) -> list[User]:
    """``users`` with AWS errors as one line (no credentials, no permission, throttled beyond retries)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return users(cfn, platform)
    except (BotoCoreError, ClientError) as exc:
        raise ClusterKitError(f"platform {platform}: cannot read CloudFormation's exports and imports: {exc} "
                              "(check the credentials and region; cloudformation:ListExports, ListImports and "
                              "DescribeStacks are needed)") from None
