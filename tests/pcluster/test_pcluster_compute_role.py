"""The compute role's inline policies as tests/app/iam_policies/pcluster_compute_inline.json transcribes them,
checked against ParallelCluster 3.16.1's own source (read, not imported: its CDK code needs a whole config).

Real: the Sids and actions in ``ComputeNodeIamResources._build_policy`` (pcluster/templates/cdk_builder_utils.py)
and ``SlurmConstruct._add_policies_to_compute_node_role`` (pcluster/templates/slurm_builder.py) of the installed
package. Not checked here: the resources, which are format_arn calls (the JSON's _source says what they are).
"""
from __future__ import annotations

import ast
import json

from pcluster_helpers import REPO, needs_pcluster_venv

pytestmark = needs_pcluster_venv

TEMPLATES = next((REPO / ".venv-pcluster/lib").glob("python3*/site-packages/pcluster/templates"))


def _statements(file: str, cls: str, method: str) -> dict[str, list[str]]:
    """Sid -> actions of every PolicyStatement(sid=..., actions=[...]) or {"sid": ..., "actions": [...]}."""
    tree = ast.parse((TEMPLATES / file).read_text(encoding="utf-8"))
    (klass,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    (function,) = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method]
    out = {}
    for node in ast.walk(function):
        pairs = []
        if isinstance(node, ast.Call):
            pairs = [(k.arg, k.value) for k in node.keywords]
        elif isinstance(node, ast.Dict):
            pairs = [(k.value if isinstance(k, ast.Constant) else None, v) for k, v in zip(node.keys, node.values)]
        found = dict(pairs)
        if "sid" in found and "actions" in found:
            out[ast.literal_eval(found["sid"])] = ast.literal_eval(found["actions"])
    return out


def test_transcription_matches_parallelcluster_source():
    source = {**_statements("cdk_builder_utils.py", "ComputeNodeIamResources", "_build_policy"),
              **_statements("slurm_builder.py", "SlurmConstruct", "_add_policies_to_compute_node_role")}
    vendored = json.loads((REPO / "tests/app/iam_policies/pcluster_compute_inline.json").read_text(encoding="utf-8"))
    assert {s["Sid"]: s["Action"] for s in vendored["Statement"]} == source
    assert set(source) == {"Ec2", "S3GetObj", "CloudFormation", "DynamoDBTable", "SlurmDynamoDBTableQuery"}
