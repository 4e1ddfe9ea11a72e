"""The effective permissions of a compute queue's role, assembled from a synthesized Cluster template.

A compute role holds (ParallelCluster 3.16.1 creates it; pcluster/templates/cdk_builder_utils.py,
NodeIamResourcesBase._add_role_and_policies):
- the queue's ``Iam.AdditionalIamPolicies`` from the rendered ClusterConfiguration: our managed policies
  resolved to the template's AWS::IAM::ManagedPolicy documents, AWS managed ones from ``iam_policies/``;
- CloudWatchAgentServerPolicy when ``Monitoring.Logs.CloudWatch.Enabled`` (PC's default: enabled;
  ``_add_node_role``);
- PC's inline policies (``iam_policies/pcluster_compute_inline.json``, sources in its ``_source``);
- ``Iam.S3Access`` as PC turns it into statements (``_add_s3_access_policies_to_role``: ``s3:Get*`` and
  ``s3:List*``, or ``s3:*`` with write access, on ``bucket/key``).
An AWS managed policy not vendored in ``iam_policies/`` is an error: nothing is assumed harmless.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.iam_eval import Statement, parse, resolve

POLICIES = Path(__file__).resolve().parent / "iam_policies"
AWS_MANAGED = "arn:aws:iam::aws:policy/"


def template_refs(template: Mapping[str, Any], *, account: str, region: str, stack: str) -> dict[str, str]:
    """What Ref answers in this template: pseudo parameters; other logical ids stay unresolved."""
    return {"AWS::Partition": "aws", "AWS::Region": region, "AWS::AccountId": account,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackId": f"arn:aws:cloudformation:{region}:{account}:stack/{stack}/guid"}


def cluster_configuration(template: Mapping[str, Any]) -> dict[str, Any]:
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    return resource["Properties"]["ClusterConfiguration"]


def vendored(name: str) -> dict[str, Any]:
    path = POLICIES / f"{name}.json"
    if not path.exists():
        raise LookupError(f"AWS managed policy {name} is attached but not vendored in {POLICIES}: add its "
                          "document (with _source) so the role can be evaluated")
    return json.loads(path.read_text(encoding="utf-8"))


def _policy_statements(policy: Any, template: Mapping[str, Any], refs: Mapping[str, str],
                       customer: Mapping[str, Mapping[str, Any]]) -> list[Statement]:
    if isinstance(policy, dict) and "Ref" in policy:
        resource = template["Resources"].get(policy["Ref"])
        if resource is not None and resource["Type"] == "AWS::IAM::ManagedPolicy":
            return parse(resource["Properties"]["PolicyDocument"], policy["Ref"], refs)
    arn = resolve(policy, refs)
    if arn in customer:  # a customer managed policy made outside the template (clusterkit export's guard)
        return parse(customer[arn], arn.rsplit("/", 1)[-1], refs)
    if not arn.startswith(AWS_MANAGED):
        raise LookupError(f"cannot evaluate policy {arn!r}: neither ours in the template nor AWS managed")
    name = arn.removeprefix(AWS_MANAGED)
    return parse(vendored(name), name, refs)


def _s3_access(entries: list[dict[str, Any]], refs: Mapping[str, str]) -> list[Statement]:
    out = []
    for entry in entries:
        bucket = resolve(entry["BucketName"], refs)
        keys = [f"{bucket}/{entry['KeyName']}"] if entry.get("KeyName") else [bucket, f"{bucket}/*"]
        actions = ("s3:*",) if entry.get("EnableWriteAccess") else ("s3:Get*", "s3:List*")
        out.append(Statement("Allow", actions, tuple(f"arn:aws:s3:::{k}" for k in keys), source="S3Access"))
    return out


def queues_stack_arn(refs: Mapping[str, str], cluster_stack: str) -> str:
    """PC's nested queues stack (logical id ComputeFleet/Queues): CloudFormation names a nested stack
    <parent>-<logical id>-<random suffix>."""
    return (f"arn:aws:cloudformation:{refs['AWS::Region']}:{refs['AWS::AccountId']}:stack/{cluster_stack}-"
            "ComputeFleetQueuesNestedStackComputeFleetQueuesNestedStackResource-RANDOM/guid")


def parent_stack_arn(refs: Mapping[str, str], cluster_stack: str) -> str:
    """PC's cluster stack, named as the cluster: its HeadNodeLaunchTemplate's metadata holds the head node's
    WaitCondition presigned URL (pcluster/templates/cluster_stack.py, wait_condition_handle.txt)."""
    return f"arn:aws:cloudformation:{refs['AWS::Region']}:{refs['AWS::AccountId']}:stack/{cluster_stack}/guid"


def compute_role(template: Mapping[str, Any], queue: Mapping[str, Any], refs: Mapping[str, str],
                 cluster_stack: str, customer: Mapping[str, Mapping[str, Any]] | None = None) -> list[Statement]:
    """Every statement a compute node of ``queue`` holds; ``customer``: documents of policies named by ARN."""
    config = cluster_configuration(template)
    iam = queue.get("Iam", {})
    statements = [s for p in iam.get("AdditionalIamPolicies", [])
                  for s in _policy_statements(p["Policy"], template, refs, customer or {})]
    if config.get("Monitoring", {}).get("Logs", {}).get("CloudWatch", {}).get("Enabled", True):
        statements += parse(vendored("CloudWatchAgentServerPolicy"), "CloudWatchAgentServerPolicy", refs)
    inline = vendored("pcluster_compute_inline")
    # PC creates compute roles in its nested queues stack (pcluster/templates/queues_stack.py QueuesStack, a
    # NestedStack whose stack_name property answers the parent's): AWS::StackId there is the nested stack's ARN.
    sub_refs = {**refs, "ClusterStack": cluster_stack, "AWS::StackId": queues_stack_arn(refs, cluster_stack)}
    for raw in inline["Statement"]:
        raw["Resource"] = [resolve({"Fn::Sub": r}, sub_refs) for r in
                           (raw["Resource"] if isinstance(raw["Resource"], list) else [raw["Resource"]])]
    statements += parse(inline, "pcluster-inline", refs)
    return statements + _s3_access(iam.get("S3Access", []), refs)
