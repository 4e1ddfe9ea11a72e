"""``validate --aws``: read what the spec's existing security groups really allow, then check their rules.

The ids under ``network.security_groups`` name groups in an account; offline they are only patterns. This reads
them read-only with the user's credentials (the usual boto3 chain, the spec's region): ``DescribeSecurityGroups``
one id at a time, so an id the account does not know is one line, not a failed batch, and ``DescribeSubnets`` for
the two subnets' CIDRs (CIDR rules count where they cover them, as in ParallelCluster's validators). The rules are
``clusterkit.rules.security_groups.check``'s; nothing here decides what a group needs.
"""
from __future__ import annotations

from typing import Any

from clusterkit.rules.security_groups import Described, check, ids_of
from clusterkit.spec.errors import ClusterKitError, Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks

NOT_FOUND = {"InvalidGroup.NotFound", "InvalidGroupId.Malformed", "InvalidGroupId.NotFound"}


def check_account(spec: ClusterSpec, marks: Marks) -> tuple[list[Problem], int]:
    """The problems of the spec's existing groups, and how many groups were read (0: the spec names none)."""
    ids = ids_of(spec)
    if not ids:
        return [], 0
    described = describe(spec, marks, ids)
    return check(spec, marks, described), len(described.groups)


def describe(spec: ClusterSpec, marks: Marks, ids: list[str]) -> Described:
    """The groups the account has and the ids it does not; any other failure is one line (ClusterKitError)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    line, col = marks.key_at("network.security_groups")
    where = f"{marks.file}:{line}:{col}: network.security_groups"
    try:
        ec2 = boto3.client("ec2", region_name=spec.region)
        groups: dict[str, Any] = {}
        missing: dict[str, str] = {}
        for group_id in ids:
            try:
                found = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
            except ClientError as exc:
                error = exc.response.get("Error", {})
                if error.get("Code") not in NOT_FOUND:
                    raise
                missing[group_id] = str(error.get("Code"))
                continue
            groups.update({group["GroupId"]: group for group in found})
        return Described(groups=groups, missing=missing, subnet_cidrs=_subnet_cidrs(ec2, spec))
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ClusterKitError(
            f"{where}: cannot read the security groups in {spec.region}: {error.get('Code', 'Error')}: "
            f"{error.get('Message', '') or exc} (validate --aws needs ec2:DescribeSecurityGroups and "
            "ec2:DescribeSubnets; or run validate without --aws)") from None
    except BotoCoreError as exc:
        raise ClusterKitError(
            f"{where}: cannot read the security groups in {spec.region}: {exc} (set AWS credentials: aws configure, "
            "or AWS_PROFILE; or run validate without --aws)") from None


def _subnet_cidrs(ec2: Any, spec: ClusterSpec) -> tuple[str, ...]:
    """The head and compute subnets' CIDRs; none when they cannot be read (then only 0.0.0.0/0 covers them)."""
    from botocore.exceptions import ClientError

    existing = spec.network.existing
    if existing is None:
        return ()
    subnet_ids = list(dict.fromkeys([existing.head_node_subnet_id, existing.compute_subnet_id]))
    try:
        subnets = ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]
    except ClientError:
        return ()
    return tuple(str(subnet["CidrBlock"]) for subnet in subnets)
