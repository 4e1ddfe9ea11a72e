"""The whole CDK app for every shipped spec: synth offline, cdk-nag clean, cfn-lint clean, and the
cluster stack hands CloudFormation exactly the committed rendered config (ids aside)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from aws_cdk.assertions import Match, Template

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.pipeline.loader import load
from clusterkit.render.rendered_files import rendered_path
from tests import shipped

SPECS = sorted(shipped.SPECS)

REPO = Path(__file__).resolve().parents[2]


def _template(synthesized, name, which):
    stacks, _ = synthesized[name]
    return Template.from_stack(stacks[which])


@pytest.mark.parametrize("name", SPECS)
def test_cfn_lint_clean(synthesized, name):
    """cfn-lint (errors AND warnings) over every template of the spec's cloud assembly."""
    from cfnlint.api import ManualArgs, lint

    _, assembly = synthesized[name]
    region = load(name).spec.region
    findings = []
    for stack in assembly.stacks:
        text = Path(assembly.directory, stack.template_file).read_text()
        findings += [f"{stack.stack_name}: {m}" for m in lint(text, config=ManualArgs(regions=[region]))
                     if m.rule.id[0] in "EW"]
    assert findings == []


@pytest.mark.parametrize("name", SPECS)
def test_stack_names_and_cluster_name(synthesized, name):
    stacks, _ = synthesized[name]
    cluster = Template.from_stack(stacks["cluster"])
    (resource,) = cluster.find_resources("Custom::PclusterCluster").values()
    props = resource["Properties"]
    assert props["ClusterName"] == name != stacks["cluster"].stack_name
    assert props["DeletionPolicy"] == "Delete"
    assert stacks["cluster"].stack_name.endswith("-Cluster")


def test_provider_is_the_pinned_nested_stack(synthesized):
    cluster = _template(synthesized, "demo", "cluster")
    (nested,) = cluster.find_resources("AWS::CloudFormation::Stack").values()
    url = json.dumps(nested["Properties"]["TemplateURL"])
    assert "-aws-parallelcluster.s3." in url and "/parallelcluster/3.16.1/templates/custom_resource/cluster.yaml" in url
    assert '"Ref": "AWS::Region"' in url and '"Ref": "AWS::URLSuffix"' in url


def _compare(committed, deployed, path="") -> list[str]:
    """Literal values must match; a ${...} placeholder must meet a CloudFormation intrinsic."""
    if isinstance(committed, str) and "${" in committed:
        return [] if isinstance(deployed, dict) else [f"{path}: placeholder {committed!r} met literal {deployed!r}"]
    if isinstance(committed, dict):
        if not isinstance(deployed, dict) or set(committed) != set(deployed):
            return [f"{path}: keys {sorted(committed)} != "
                    f"{sorted(deployed) if isinstance(deployed, dict) else deployed!r}"]
        return [d for k in committed for d in _compare(committed[k], deployed[k], f"{path}.{k}")]
    if isinstance(committed, list):
        if not isinstance(deployed, list) or len(committed) != len(deployed):
            return [f"{path}: list {committed!r} != {deployed!r}"]
        return [d for i, (a, b) in enumerate(zip(committed, deployed)) for d in _compare(a, b, f"{path}[{i}]")]
    return [] if committed == deployed else [f"{path}: {committed!r} != {deployed!r}"]


@pytest.mark.parametrize("name", SPECS)
def test_cloudformation_gets_the_committed_config(synthesized, name):
    cluster = _template(synthesized, name, "cluster")
    (resource,) = cluster.find_resources("Custom::PclusterCluster").values()
    committed = yaml.safe_load(rendered_path(load(name)).read_text())
    assert _compare(committed, resource["Properties"]["ClusterConfiguration"]) == []


def test_assets_are_uploaded_under_the_rendered_keys(synthesized):
    """The S3 keys in the rendered YAML are the keys CDK's asset manifest publishes."""
    _, assembly = synthesized["demo"]
    manifest = next(Path(assembly.directory).glob("Demo-Cluster.assets.json"))
    keys = {d["objectKey"] for f in json.loads(manifest.read_text())["files"].values()
            for d in f["destinations"].values()}
    artifacts = node_artifacts(load("demo"))
    assert {f"clusterkit/demo/{a.key}" for a in artifacts.all()} <= keys


def test_node_policies_are_least_privilege(synthesized):
    """Read-only: this cluster's artifact prefix and its bundle parameter (no ECR in the demo); the compute
    guard holds only Denies (tests/app/test_node_roles.py evaluates the whole role)."""
    cluster = _template(synthesized, "demo", "cluster")
    policies = cluster.find_resources("AWS::IAM::ManagedPolicy")
    assert len(policies) == 3
    denies = []
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny":
                denies.append((policy["Properties"]["ManagedPolicyName"], statement["Sid"]))
                continue
            assert statement["Action"] in ("s3:GetObject", "ssm:GetParameter")
            wildcard = "*" in json.dumps(statement["Resource"])
            assert not wildcard or json.dumps(statement["Resource"]).endswith('/clusterkit/demo/*"]]}')
    assert denies == [("ClusterKit-demo-us-east-1-job-guard", sid) for sid in (
        "NoParameterReads", "NoLogRetentionChanges", "LogWritesOnlyToThisCluster", "NodeItemsOnly",
        "NodeItemsOnlyKeyed", "NoItemUpdates", "InstanceAttributesOfThisClusterOnly", "NoHeadNodeInstanceAttributes")]


def test_bundle_parameter_points_at_the_bundle(synthesized):
    cluster = _template(synthesized, "demo", "cluster")
    artifacts = node_artifacts(load("demo"))
    cluster.has_resource_properties("AWS::SSM::Parameter", {
        "Name": "/clusterkit/demo/bootstrap-bundle",
        "Value": {"Fn::Sub": Match.string_like_regexp(f"^s3://cdk-[a-z0-9]+-assets-.*/{artifacts.bundle.key}$")},
    })


def test_outputs(synthesized):
    outputs = _template(synthesized, "demo", "cluster").find_outputs("*")
    assert {"ClusterName", "HeadNodeInstanceId", "SsmSession", "ValidationMessages"} <= set(outputs)


def test_cdk_cli_synth_without_credentials(tmp_path):
    """The real CDK CLI (node_modules) synthesizes a non-default spec with no AWS credentials at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", HOME=str(tmp_path))
    cdk = REPO / "node_modules/.bin/cdk"
    result = subprocess.run([str(cdk), "synth", "--quiet", "-c", "cluster=p4d-existing", "-o", str(tmp_path / "out")],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.template.json")) == [
        "P4d-Existing-Cluster.template.json", "P4d-Existing-Network.template.json",
        "P4d-Existing-Storage.template.json"]


def test_bad_spec_fails_synth_with_one_line_errors(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "cluster_configs/demo.yaml").read_text().replace("max: 4", "max: four"))
    result = subprocess.run([str(REPO / ".venv/bin/python"), "app.py"], cwd=REPO, capture_output=True, text=True,
                            env={**env, "CDK_CONTEXT_JSON": json.dumps({"cluster": str(bad)})}, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "queues[0].compute_resources[0].max: expected an integer, got string 'four'" in result.stderr
