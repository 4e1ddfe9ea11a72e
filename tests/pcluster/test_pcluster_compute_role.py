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


def _constants() -> dict[str, str]:
    tree = ast.parse((TEMPLATES.parent / "constants.py").read_text(encoding="utf-8"))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out[node.targets[0].id] = node.value.value
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.JoinedStr):  # f"{PCLUSTER_PREFIX}..."
            out[node.targets[0].id] = "".join(
                out[v.value.id] if isinstance(v, ast.FormattedValue) else v.value for v in node.value.values)
    return out


def test_the_names_the_job_user_guard_keys_on_are_parallelclusters():
    """clusterkit/render/job_user_guard.py narrows PC's grants by PC's own names: the log group (prefix + cluster name +
    '-' + a %Y%m%d%H%M stamp at create), the fleet table, the instance tags; the compute role is made in the
    nested queues stack (so PC's DescribeStackResource grant, Resource AWS::StackId, is that stack's)."""
    from clusterkit.render import job_user_guard as guard

    constants = _constants()
    assert constants["CW_LOG_GROUP_NAME_PREFIX"] == "/aws/parallelcluster/"
    assert constants["PCLUSTER_DYNAMODB_PREFIX"] == guard.FLEET_TABLE_PREFIX
    assert constants["PCLUSTER_CLUSTER_NAME_TAG"] == guard.CLUSTER_NAME_TAG
    assert constants["PCLUSTER_NODE_TYPE_TAG"] == guard.NODE_TYPE_TAG
    stack = (TEMPLATES / "cluster_stack.py").read_text(encoding="utf-8")
    assert ('timestamp = f"{datetime.now(timezone.utc).strftime(\'%Y%m%d%H%M\')}"\n'
            '                self.log_group_name = f"{CW_LOG_GROUP_NAME_PREFIX}{self.stack.stack_name}-{timestamp}"'
            ) in stack
    assert len("202612061200") == guard.LOG_GROUP_SUFFIX.count("?")
    queues = ast.parse((TEMPLATES / "queues_stack.py").read_text(encoding="utf-8"))
    (klass,) = [n for n in queues.body if isinstance(n, ast.ClassDef) and n.name == "QueuesStack"]
    assert [b.id for b in klass.bases] == ["NestedStack"]
    assert "ComputeNodeIamResources(" in ast.unparse(klass)
