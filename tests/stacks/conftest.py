"""Synthesized Network and Storage stacks, shared by the stack tests (one synth per spec variant per session).

Real: aws-cdk-lib synthesis of the stacks exactly as app.py wires them (same stack names, env and
tags), with cdk-nag AwsSolutions enabled, so any unacknowledged finding fails the synth that builds a
fixture. Not real: nothing is deployed; no AWS call is made (dummy credentials, explicit AZs).

Variants are the shipped specs plus small YAML edits of them, loaded through ``clusterkit.pipeline.loader`` so
every variant is a spec the loader accepts. They are built lazily and cached: the first synth in a
process costs about 5 s, later ones well under a second.
"""
from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
for _key, _value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
    os.environ.setdefault(_key, _value)

import aws_cdk as cdk  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402

from clusterkit.artifacts.nag_report import Finding, findings  # noqa: E402
from clusterkit.effective.expand import EffectiveSpec, expand  # noqa: E402
from clusterkit.pipeline.loader import CONFIG_DIR, load  # noqa: E402
from stacks import nag  # noqa: E402
from stacks.network import NetworkStack  # noqa: E402
from stacks.storage import StorageStack  # noqa: E402

ACCOUNT = "123456789012"
SHIPPED = ("demo", "p4d-existing", "p5-capacity-block")
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """A YAML edit: set ``a.b.c`` (creating mappings on the way)."""
    def edit(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return edit


def _new_fsx_in_existing_vpc(doc: dict) -> None:
    doc["storage"]["fsx_lustre"] = {"new": {"capacity_gib": 2400, "throughput_mb_per_tib": 125}}


def _own_groups(doc: dict) -> None:
    """p4d-existing without its existing security groups: ClusterKit makes them in the existing VPC."""
    del doc["network"]["security_groups"]


# name -> (base spec, YAML edits, account). Only what a test uses gets synthesized.
VARIANTS: dict[str, tuple[str, list[Callable[[dict], None]], str | None]] = {
    **{name: (name, [], ACCOUNT) for name in SHIPPED},
    "demo-no-account": ("demo", [], None),
    "demo-endpoints": ("demo", [_set("network.new.interface_endpoints", True)], ACCOUNT),
    "demo-head-public": ("demo", [_set("network.head_node_public", True)], ACCOUNT),
    "demo-flow-logs-30": ("demo", [_set("network.new.flow_logs_retention_days", 30)], ACCOUNT),
    "demo-throughput-500": ("demo", [_set("storage.fsx_lustre.new.throughput_mb_per_tib", 500)], ACCOUNT),
    "demo-destroy": ("demo", [_set("storage.fsx_lustre.new.retain_on_delete", False)], ACCOUNT),
    "demo-no-bucket": ("demo", [_set("storage.fsx_lustre.new.image_store_bucket", False)], ACCOUNT),
    "demo-kms": ("demo", [_set("storage.fsx_lustre.new.kms_key_arn", KMS_KEY)], ACCOUNT),
    "demo-scratch": ("demo", [_set("storage.fsx_lustre.new.deployment_type", "SCRATCH_2"),
                              _set("storage.fsx_lustre.new.throughput_mb_per_tib", None)], ACCOUNT),
    "existing-vpc-new-fsx": ("p4d-existing", [_own_groups, _new_fsx_in_existing_vpc], None),
    "p4d-existing-own-groups": ("p4d-existing", [_own_groups], ACCOUNT),
    "existing-groups-new-fsx": ("p4d-existing", [_new_fsx_in_existing_vpc], None),
}


def stack_prefix(name: str) -> str:
    """Same naming as app.py (``p5-capacity-block`` -> ``P5-Capacity-Block``), kept here so these tests
    do not import app.py and with it the cluster stack."""
    return "-".join(part[:1].upper() + part[1:] for part in name.split("-"))


@dataclass
class Synth:
    """One synthesized Network + Storage pair and what the tests read from it."""

    name: str
    effective: EffectiveSpec
    network: NetworkStack
    storage: StorageStack
    templates: dict[str, dict]  # "network" / "storage" -> CloudFormation template
    findings: list[Finding]
    _assertions: dict[str, Template] = field(default_factory=dict)

    def template(self, kind: str) -> Template:
        if kind not in self._assertions:
            self._assertions[kind] = Template.from_json(self.templates[kind])
        return self._assertions[kind]

    def resources(self, kind: str, type_name: str) -> dict[str, dict]:
        return {k: v for k, v in self.templates[kind]["Resources"].items() if v["Type"] == type_name}

    def ref(self, kind: str, value: str) -> Any:
        """What a token of this stack (e.g. a security group id) looks like in its template."""
        stack = self.network if kind == "network" else self.storage
        return stack.resolve(value)


def load_variant(name: str, tmp_dir: Path) -> tuple[EffectiveSpec, str | None]:
    base, edits, account = VARIANTS[name]
    if not edits:
        return expand(load(base, check_lock=False)), account
    doc = yaml.safe_load((CONFIG_DIR / f"{base}.yaml").read_text(encoding="utf-8"))
    doc = copy.deepcopy(doc)
    for edit in edits:
        edit(doc)
    path = tmp_dir / name / f"{doc['name']}.yaml"  # a spec's file is named for its cluster, in every directory
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return expand(load(str(path), check_lock=False)), account


def synthesize(effective: EffectiveSpec, account: str | None, outdir: Path, name: str) -> Synth:
    """Build the two stacks the way app.py does, with cdk-nag on, and synthesize them into ``outdir``."""
    context = json.loads((REPO / "cdk.json").read_text(encoding="utf-8")).get("context", {})
    app = cdk.App(outdir=str(outdir), context=context)
    nag.add_checks(app)
    env = cdk.Environment(account=account, region=effective.region)
    prefix = stack_prefix(effective.name)
    tags = effective.tag_dict()
    network = NetworkStack(app, f"{prefix}-Network", effective=effective, env=env, tags=tags)
    storage = StorageStack(app, f"{prefix}-Storage", effective=effective, vpc=network.vpc,
                           subnet_id=network.compute_subnet_id, security_group=network.fsx_security_group, env=env,
                           tags=tags)
    assembly = app.synth()
    templates = {kind: assembly.get_stack_artifact(stack.artifact_id).template
                 for kind, stack in (("network", network), ("storage", storage))}
    return Synth(name, effective, network, storage, templates, findings(outdir))


@pytest.fixture(scope="session")
def synths(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Synth]:
    """``synths(name)``: the cached synth of a variant from ``VARIANTS``."""
    cache: dict[str, Synth] = {}
    root = tmp_path_factory.mktemp("stacks")

    def get(name: str) -> Synth:
        if name not in cache:
            effective, account = load_variant(name, root)
            cache[name] = synthesize(effective, account, root / f"cdk.out-{name}", name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def variant_names() -> list[str]:
    return list(VARIANTS)
