"""The asset manifest CDK publishes against what the node policies grant, for every shipped spec.

Real: the synthesized cloud assembly (``<stack>.assets.json``, the file ``cdk deploy`` publishes from)
and the synthesized ClusterConfiguration and node policies, resolved for one account. Every S3 object a
node fetches (each CustomActions Script, the bundle OnNodeUpdated names by content, and the one the SSM
parameter names) must be published by the manifest and readable by the policy of the role that node runs as;
an object of the previous deploy (same prefix, other content hash) must stay readable while ParallelCluster
replaces the fleet or a rollback re-installs its bundle, and no other cluster's objects may be.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template
from test_provider_contract import ACCOUNT, PARTITION, SPECS, arn_like, resolve

from clusterkit.spec.naming import artifact_prefix

REGION = "us-east-1"


def _cluster(synthesized: dict, name: str) -> tuple[Template, dict[str, Any]]:
    stacks, assembly = synthesized[name]
    stack = stacks["cluster"]
    manifest = json.loads((Path(assembly.directory) / f"{stack.artifact_id}.assets.json").read_text())
    return Template.from_stack(stack), manifest


def _sub(text: str) -> str:
    pseudo = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": PARTITION}
    return re.sub(r"\$\{([^}]+)\}", lambda m: pseudo[m.group(1)], text)


def published(manifest: dict[str, Any]) -> set[str]:
    """s3://bucket/key of every file asset, for ACCOUNT and REGION."""
    return {f"s3://{_sub(d['bucketName'])}/{d['objectKey']}"
            for f in manifest["files"].values() for d in f["destinations"].values()}


def granted(template: Template, policy_id: str, s3_uri: str) -> bool:
    """Whether the managed policy allows s3:GetObject on the object (IAM resource wildcards)."""
    resources = template.to_json()["Resources"]
    arn = f"arn:{PARTITION}:s3:::{s3_uri.removeprefix('s3://')}"
    for statement in resources[policy_id]["Properties"]["PolicyDocument"]["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resource = statement.get("Resource", [])  # the job-user guard's log Deny has NotResource instead
        targets = resource if isinstance(resource, list) else [resource]
        if statement["Effect"] == "Allow" and "s3:GetObject" in actions and any(
                arn_like(resolve(t, resources), arn) for t in targets):
            return True
    return False


def fetched(template: Template) -> list[tuple[str, str, str]]:
    """(who, role policy logical id, s3 URI) for every object a node fetches at boot or update."""
    resources = template.to_json()["Resources"]
    (cluster,) = template.find_resources("Custom::PclusterCluster").values()
    config = cluster["Properties"]["ClusterConfiguration"]
    (head_policy,) = [k for k, r in resources.items() if r["Type"] == "AWS::IAM::ManagedPolicy" and "Head" in k]
    (compute_policy,) = [k for k, r in resources.items() if r["Type"] == "AWS::IAM::ManagedPolicy" and "Compute" in k]
    out = [(f"HeadNode.{action}", head_policy, resolve(spec["Script"], resources))
           for action, spec in config["HeadNode"]["CustomActions"].items()]
    out += [(f"SlurmQueues[{q['Name']}].{action}", compute_policy, resolve(spec["Script"], resources))
            for q in config["Scheduling"]["SlurmQueues"] for action, spec in q["CustomActions"].items()]
    # the bundle OnNodeUpdated names by content (a rollback re-run fetches the previous deploy's one from there)
    bundle_args = [resolve(a, resources) for a in config["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]]
    out += [("HeadNode.OnNodeUpdated bundle", head_policy, a.removeprefix("CK_BUNDLE_URI="))
            for a in bundle_args if a.startswith("CK_BUNDLE_URI=")]
    (parameter,) = template.find_resources("AWS::SSM::Parameter").values()
    out.append(("bundle parameter", head_policy, resolve(parameter["Properties"]["Value"], resources)))
    return out


@pytest.mark.parametrize("name", SPECS)
def test_every_fetched_object_is_published_and_granted(synthesized, name) -> None:
    template, manifest = _cluster(synthesized, name)
    keys = published(manifest)
    objects = fetched(template)
    assert len(objects) >= 4 and "HeadNode.OnNodeUpdated bundle" in {who for who, _, _ in objects}
    missing = [f"{who}: {uri}" for who, _, uri in objects if uri not in keys]
    denied = [f"{who}: {uri}" for who, policy, uri in objects if not granted(template, policy, uri)]
    assert missing == [] and denied == []


@pytest.mark.parametrize("name", SPECS)
def test_node_artifacts_live_under_the_clusters_prefix(synthesized, name) -> None:
    """Every asset of the Cluster stack is a node artifact under clusterkit/<name>/ (so the policy's
    prefix grant covers nothing else), and earlier deploys' keys stay readable; other clusters' do not."""
    _, manifest = _cluster(synthesized, name)
    template, _ = _cluster(synthesized, name)
    prefix = artifact_prefix(name)
    keys = {d["objectKey"] for f in manifest["files"].values() for d in f["destinations"].values()}
    assert keys and all(k.startswith(prefix) for k in keys)
    (bucket,) = {_sub(d["bucketName"]) for f in manifest["files"].values() for d in f["destinations"].values()}
    previous = f"s3://{bucket}/{prefix}{'0' * 64}.sh"  # a script key of another content hash
    other_cluster = f"s3://{bucket}/{artifact_prefix(name + 'x')}{'0' * 64}.sh"
    elsewhere = f"s3://{bucket}/{'0' * 64}.zip"  # e.g. another stack's asset at the bucket root
    resources = template.to_json()["Resources"]
    for policy in (k for k, r in resources.items() if r["Type"] == "AWS::IAM::ManagedPolicy"
                   and not k.startswith("JobUserGuard")):  # the job-user guard grants nothing (Denies only)
        assert granted(template, policy, previous)
        assert not granted(template, policy, other_cluster) and not granted(template, policy, elsewhere)
