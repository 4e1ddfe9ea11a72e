"""ParallelCluster 3.16.1's own schema and validators, run on ClusterKit-shaped configs.

Real: the aws-parallelcluster package (its ClusterSchema, its cfg.validate() and validator messages),
run in its own venv through clusterkit.pcluster.runner.
Stand-in: AWS is moto (moto.mock_aws) with fixtures built from each config (clusterkit.pcluster.moto_world):
a VPC/subnets/security groups/bucket/FSx that exist only because the config names them, a fake
official AMI, and two launch-template validators suppressed because moto rejects PC's dry-run request
(see test_moto_gap_*). A pass here means PC accepts the config's shape and its cross-field rules
against moto's instance-type data; it does not prove capacity, quotas or AMI availability in a real
account.
"""
from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pcluster_helpers import (
    REPO,
    SAMPLE_SHOWN,
    SAMPLE_TEXT,
    compute_resource,
    findings,
    mutated,
    needs_pcluster_venv,
    queue,
    types,
)

from clusterkit.pcluster.check import MOTO_GAP_SUPPRESSIONS
from clusterkit.pcluster.runner import format_problems, pcluster_python, run_check

pytestmark = needs_pcluster_venv

LITERAL_SUBNET = "subnet-0123456789abcdef0"
LITERAL_FSX = "fs-0123456789abcdef0"
RESERVATION = "cr-0123456789abcdef0"


def _literal_ids(data: dict[str, Any]) -> None:
    data["HeadNode"]["Networking"]["SubnetId"] = LITERAL_SUBNET
    data["SharedStorage"][0]["FsxLustreSettings"]["FileSystemId"] = LITERAL_FSX


def _no_queue_security_group(data: dict[str, Any]) -> None:
    for each in data["Scheduling"]["SlurmQueues"]:
        each["Networking"].pop("AdditionalSecurityGroups")


def _capacity_block(data: dict[str, Any]) -> None:
    gpu = queue(data)
    gpu["CapacityType"] = "CAPACITY_BLOCK"
    gpu["Networking"]["PlacementGroup"] = {"Enabled": False}
    compute_resource(data).update(MinCount=4, CapacityReservationTarget={"CapacityReservationId": RESERVATION})


def _capacity_block_with_instances(data: dict[str, Any]) -> None:
    _capacity_block(data)
    resource = compute_resource(data)
    resource["Instances"] = [{"InstanceType": resource.pop("InstanceType")}]


def _renderer_style(data: dict[str, Any]) -> None:
    """What the renderer writes today: replacing security groups, stack-made policies, ${AWS::Partition}."""
    ssm = {"Policy": "arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"}
    queues = data["Scheduling"]["SlurmQueues"]
    for networking in [data["HeadNode"]["Networking"]] + [q["Networking"] for q in queues]:
        networking["SecurityGroups"] = networking.pop("AdditionalSecurityGroups")
    data["HeadNode"]["Iam"]["AdditionalIamPolicies"] = [ssm, {"Policy": "${Cluster.HeadNodePolicyArn}"}]
    for each in queues:
        each["Iam"]["AdditionalIamPolicies"] = [ssm, {"Policy": "${Cluster.ComputeNodePolicyArn}"}]


def _gpu_type(instance_type: str):
    return lambda data: compute_resource(data).update(InstanceType=instance_type)


# name -> (cluster name, YAML text): checked in ONE validate run (one process, one moto context each)
VALIDATE_CASES: dict[str, tuple[str, str]] = {
    "sample": ("demo", SAMPLE_TEXT),
    "min-gt-max": ("demo", mutated(lambda d: compute_resource(d).update(MinCount=5, MaxCount=4))),
    "efa-on-c6i": ("demo", mutated(lambda d: compute_resource(d, 1).update(Efa={"Enabled": True}))),
    "bad-cluster-name": ("1_bad_name", SAMPLE_TEXT),
    "capacity-block-no-reservation": (
        "demo",
        mutated(lambda d: (queue(d).update(CapacityType="CAPACITY_BLOCK"), compute_resource(d).update(MinCount=4))),
    ),
    "capacity-block": ("demo", mutated(_capacity_block)),
    "capacity-block-with-instances": ("demo", mutated(_capacity_block_with_instances)),
    "queues-without-cluster-sg": ("demo", mutated(_no_queue_security_group)),
    "unknown-iam-policy": (
        "demo",
        mutated(
            lambda d: d["HeadNode"]["Iam"]["AdditionalIamPolicies"].append(
                {"Policy": "arn:aws:iam::aws:policy/NoSuchClusterKitPolicy"}
            )
        ),
    ),
    "with-key-pair": ("demo", mutated(lambda d: d["HeadNode"]["Ssh"].update(KeyName="clusterkit-admin"))),
    "literal-ids": ("demo", mutated(_literal_ids)),
    "literal-ids-without-cluster-sg": ("demo", mutated(lambda d: (_literal_ids(d), _no_queue_security_group(d)))),
    "renderer-style": ("demo", mutated(_renderer_style)),
    "renderer-style-bad-managed-policy": (
        "demo",
        mutated(_renderer_style).replace("AmazonSSMManagedInstanceCore", "AmazonSSMManagedInstanceCor", 1),
    ),
    "p4d": ("demo", mutated(_gpu_type("p4d.24xlarge"))),
    "p5en": ("demo", mutated(_gpu_type("p5en.48xlarge"))),
    "p6-b200": ("demo", mutated(_gpu_type("p6-b200.48xlarge"))),
}

SCHEMA_CASES: dict[str, tuple[str, str]] = {
    "sample": ("demo", SAMPLE_TEXT),
    "unknown-key": (
        "demo",
        SAMPLE_TEXT.replace("  InstanceType: c6i.2xlarge\n", "  InstanceType: c6i.2xlarge\n  Bogus: 1\n"),
    ),
    "fsx-id-malformed": ("demo", SAMPLE_TEXT.replace("${Storage.FileSystemId}", "fs-123")),
    "min-gt-max": VALIDATE_CASES["min-gt-max"],
    "unknown-placeholder": (
        "demo",
        SAMPLE_TEXT.replace("- CK_STORE=/fsx/containers\n", "- CK_STORE=${Storage.MountDir}\n", 1),
    ),
    "yaml-syntax": ("demo", SAMPLE_TEXT.replace("Scheduling:\n", "Scheduling: [\n", 1)),
    "queue-without-compute-resources": ("demo", mutated(lambda d: queue(d, 1).pop("ComputeResources"))),
}


def _run(cases: dict[str, tuple[str, str]], mode: str, **kwargs: Any) -> dict[str, dict[str, Any]]:
    configs = [(cluster, name, text, "us-east-1") for name, (cluster, text) in cases.items()]
    return {result["path"]: result for result in run_check(configs, mode, **kwargs)}


@pytest.fixture(scope="session")
def validated() -> dict[str, dict[str, Any]]:
    return _run(VALIDATE_CASES, "validate")


@pytest.fixture(scope="session")
def schema_checked() -> dict[str, dict[str, Any]]:
    return _run(SCHEMA_CASES, "schema")


def _messages(result: dict[str, Any], kind: str) -> list[str]:
    return [e["message"] for e in findings(result, "ERROR") if e["type"] == kind]


# ---------------------------------------------------------------- the sample passes


def test_sample_passes_schema(schema_checked):
    result = schema_checked["sample"]
    assert result["ok"], result["errors"]
    assert result["errors"] == [] and result["suppressed"] == []


def test_sample_passes_validate(validated):
    result = validated["sample"]
    assert result["ok"], result["errors"]
    # No key pair in the sample: PC's advice stays a warning and does not fail the check.
    assert [(e["level"], e["type"]) for e in result["errors"]] == [("WARNING", "KeyPairValidator")]
    assert {s["type"] for s in result["suppressed"]} == set(MOTO_GAP_SUPPRESSIONS)


@pytest.mark.parametrize(
    "case", ["p4d", "p5en", "p6-b200", "literal-ids", "with-key-pair", "capacity-block", "renderer-style"]
)
def test_variants_pass_validate(validated, case):
    assert validated[case]["ok"], validated[case]["errors"]


def test_key_pair_validator_runs_for_real(validated):
    """KeyPairValidator needs no suppression: moto serves the key pair the fixture creates."""
    assert not [e for e in validated["with-key-pair"]["errors"] if e["type"] == "KeyPairValidator"]
    assert "KeyPairValidator" not in MOTO_GAP_SUPPRESSIONS


# ---------------------------------------------------------------- validate() rejects


def test_min_count_above_max_count_is_only_caught_by_validate(validated, schema_checked):
    assert schema_checked["min-gt-max"]["ok"]
    assert _messages(validated["min-gt-max"], "ComputeResourceSizeValidator") == [
        "Max count must be greater than or equal to min count."
    ]
    assert not validated["min-gt-max"]["ok"]


def test_efa_on_instance_without_efa(validated):
    assert "Instance type 'c6i.xlarge' does not support EFA." in _messages(validated["efa-on-c6i"], "EfaValidator")


def test_bad_cluster_name(validated):
    (message,) = _messages(validated["bad-cluster-name"], "ClusterNameValidator")
    assert "The cluster name can contain only alphanumeric characters" in message


def test_capacity_block_without_reservation(validated):
    assert _messages(validated["capacity-block-no-reservation"], "CapacityTypeValidator") == [
        "Capacity Reservation id is required when using CAPACITY_BLOCK as capacity type."
    ]


def test_capacity_reservation_rules_run_against_the_fixture_reservation(validated):
    """moto lacks DescribeCapacityReservations; the fixture answers, so PC's config-only rules still run."""
    (message,) = _messages(validated["capacity-block-with-instances"], "CapacityReservationValidator")
    assert message.startswith("CapacityReservationId parameter cannot be used with Instances parameter.")


def test_unknown_managed_policy(validated):
    assert _messages(validated["unknown-iam-policy"], "AdditionalIamPolicyValidator") == [
        "Policy arn:aws:iam::aws:policy/NoSuchClusterKitPolicy not found"
    ]


def test_partition_placeholder_still_checks_the_managed_policy_name(validated):
    # the sample's three Iam sections share one YAML anchor, so all three report it
    messages = _messages(validated["renderer-style-bad-managed-policy"], "AdditionalIamPolicyValidator")
    assert set(messages) == {"Policy arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCor not found"}


def test_fsx_unreachable_from_queues_names_the_placeholder(validated):
    """ExistingFsxNetworkingValidator runs for real on the fixture ENI's security group."""
    (message,) = _messages(validated["queues-without-cluster-sg"], "ExistingFsxNetworkingValidator")
    assert "'${Storage.FileSystemId}'" in message and "Missing ports: [988]" in message


def test_messages_show_literal_ids_not_moto_ids(validated):
    (message,) = _messages(validated["literal-ids-without-cluster-sg"], "ExistingFsxNetworkingValidator")
    assert f"'{LITERAL_FSX}'" in message


# ---------------------------------------------------------------- schema rejects


def test_unknown_key_is_a_schema_error_with_position(schema_checked):
    (error,) = schema_checked["unknown-key"]["errors"]
    lines = SCHEMA_CASES["unknown-key"][1].splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.strip() == "Bogus: 1")
    assert error == {
        "level": "ERROR",
        "type": "ConfigSchemaValidator",
        "message": "HeadNode.Bogus: Unknown field.",
        "line": line,
        "col": 3,
    }


def test_malformed_fsx_id_is_a_schema_error(schema_checked):
    assert _messages(schema_checked["fsx-id-malformed"], "ConfigSchemaValidator") == [
        "SharedStorage[0].FsxLustreSettings.FileSystemId: String does not match expected pattern."
    ]


def test_unknown_placeholder_is_reported(schema_checked):
    (error,) = findings(schema_checked["unknown-placeholder"])
    assert error["type"] == "ClusterKitPlaceholder" and "${Storage.MountDir}" in error["message"]
    assert SCHEMA_CASES["unknown-placeholder"][1].splitlines()[error["line"] - 1].count("${Storage.MountDir}")


def test_yaml_syntax_error_has_a_line(schema_checked):
    (error,) = findings(schema_checked["yaml-syntax"])
    assert error["type"] == "YamlSyntax" and error["line"]


def test_queue_without_compute_resources(schema_checked):
    (message,) = _messages(schema_checked["queue-without-compute-resources"], "ConfigSchemaValidator")
    assert "compute_resources" in message


def test_formatted_lines_point_at_the_file(schema_checked):
    lines = format_problems([schema_checked["unknown-key"]])
    line = schema_checked["unknown-key"]["errors"][0]["line"]
    assert lines == [f"unknown-key:{line}:3: ParallelCluster ConfigSchemaValidator: HeadNode.Bogus: Unknown field."]


# ---------------------------------------------------------------- moto gaps: evidence that suppression is needed


def test_moto_gap_suppressions_still_needed():
    """Unsuppressed, each suppressed validator fails on the sample, and only with moto's complaint."""
    result = _run({"sample": ("demo", SAMPLE_TEXT)}, "validate", suppress_moto_gaps=False)["sample"]
    failing = {e["type"]: e["message"] for e in findings(result, "ERROR")}
    assert set(failing) == set(MOTO_GAP_SUPPRESSIONS), failing
    for message in failing.values():
        assert message.endswith("The request must contain the parameter ebs"), message


RELAXED_MOTO = """
import sys
from moto.ec2.responses.instances import InstanceResponse
strict = InstanceResponse._validate_block_device_mapping
def relaxed(mapping):
    if "VirtualName" in mapping and "Ebs" not in mapping:
        return None  # real EC2 accepts instance-store mappings
    return strict(mapping)
InstanceResponse._validate_block_device_mapping = staticmethod(relaxed)
from clusterkit.pcluster import check
sys.exit(check.main([]))
"""


def test_moto_gap_is_the_only_cause():
    """With moto taught to accept instance-store mappings, the suppressed validators pass unsuppressed."""
    request = {
        "mode": "validate",
        "suppress_moto_gaps": False,
        "configs": [{"name": "demo", "path": SAMPLE_SHOWN, "yaml": SAMPLE_TEXT, "region": "us-east-1"}],
    }
    done = subprocess.run(
        [str(pcluster_python()), "-c", RELAXED_MOTO],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["ok"], result["errors"]
    assert not types(result) & set(MOTO_GAP_SUPPRESSIONS)


# ---------------------------------------------------------------- structure


def test_pcluster_subpackage_imports_nothing_else_from_clusterkit():
    """What runs in the ParallelCluster venv (``check`` and every module it reaches), where the rest of
    clusterkit's dependencies are absent, imports nothing of clusterkit outside ``clusterkit.pcluster``.
    ``runner.py`` is the main venv's side of the bridge: it may import more, and nothing there imports it."""
    todo, seen = ["check"], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        source = REPO / "clusterkit" / "pcluster" / f"{module}.py"
        for node in ast.walk(ast.parse(source.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                if name == "clusterkit" or name.startswith("clusterkit."):
                    assert name.startswith("clusterkit.pcluster"), f"{source.name} imports {name}"
                    local = name.split(".")[2:3]
                    if local and (REPO / "clusterkit" / "pcluster" / f"{local[0]}.py").exists():
                        todo.append(local[0])
    assert "runner" not in seen and {"check", "moto_world", "tokens"} <= seen


def test_region_sessions_only_stand_in_for_region_reads():
    """check.share_region_sessions keeps one boto3 Session per region for ``pcluster.aws.common``: sound only while
    that module uses ``boto3.session`` for nothing but reading ``Session().region_name`` (a ParallelCluster
    upgrade that uses it otherwise fails here first)."""
    found = subprocess.run(
        [str(pcluster_python()), "-c", "import pcluster.aws.common as c; print(c.__file__)"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()
    source = Path(found).read_text(encoding="utf-8")
    uses = source.count("boto3.session")
    assert uses == source.count("boto3.session.Session().region_name") == 2, uses
