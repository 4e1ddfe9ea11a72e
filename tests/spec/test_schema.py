"""The spec's JSON Schema (cluster_configs/clusterkit-spec.schema.json, for editors): committed and current, a
valid draft 2020-12 schema, named by every shipped spec, and agreeing with the real reader: it refuses every
type and shape error the reader refuses, and accepts every spec ``load`` accepts. Cross-field rules, the
catalog and limits written only as code stay with ``clusterkit validate`` (the schema may accept more)."""
from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml
from test_bad_specs import BASE, CASES, _extra, _with

from clusterkit.paths import SPEC_SCHEMA
from clusterkit.pipeline.loader import load
from clusterkit.render.spec_schema import schema_text, spec_schema
from clusterkit.spec.model import parse_spec
from tests import shipped

SPECS = shipped.spec_paths()
MODELINE = f"# yaml-language-server: $schema=./{SPEC_SCHEMA.name}"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(spec_schema())


def _schema_errors(validator: jsonschema.Draft202012Validator, text: str) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(yaml.safe_load(text))]


def test_committed_schema_is_current():
    assert SPEC_SCHEMA.exists() and SPEC_SCHEMA.read_text(encoding="utf-8") == schema_text(), (
        f"{SPEC_SCHEMA.name} is stale: run `make render`")


def test_schema_is_a_valid_draft_2020_12_schema():
    schema = json.loads(schema_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["required"] == ["name", "region", "availability_zone", "queues"]


def _objects(schema: Any) -> list[dict[str, Any]]:
    if isinstance(schema, list):
        return [o for item in schema for o in _objects(item)]
    if not isinstance(schema, dict):
        return []
    own = [schema] if "properties" in schema else []
    return own + [o for value in schema.values() for o in _objects(value)]


def test_every_spec_mapping_refuses_unknown_keys():
    """The reader refuses unknown keys everywhere, so every object of the schema does (tags is a free mapping)."""
    objects = _objects(spec_schema())
    assert len(objects) > 15
    assert all(o["additionalProperties"] is False and o["type"] in ("object", ["object", "null"]) for o in objects)
    assert spec_schema()["properties"]["tags"]["additionalProperties"] == {"type": "string"}


def _patterns(schema: Any) -> list[str]:
    if isinstance(schema, list):
        return [p for item in schema for p in _patterns(item)]
    if not isinstance(schema, dict):
        return []
    own = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
    return own + [p for value in schema.values() for p in _patterns(value)]


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_shipped_spec_names_the_schema_on_its_first_line(path):
    assert path.read_text(encoding="utf-8").splitlines()[0] == MODELINE
    assert (path.parent / SPEC_SCHEMA.name) == SPEC_SCHEMA


# --- agreement with the reader ------------------------------------------------------------------------------------
def _reader_only(text: str) -> list[str]:
    """The reader's own problems (types, keys, required fields; no rules) that a schema can see: YAML parses, and
    a key written twice is invisible once loaded (the last one wins)."""
    try:
        yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    _, _, problems = parse_spec(text, "t.yaml")
    return [p.message for p in problems if p.message != "key given twice"]


SHAPE_CASES = [(name, text) for name, text, _ in CASES if _reader_only(text)]


def test_the_shape_cases_cover_every_kind():
    kinds = {"unknown top-level key", "unknown nested key", "string for integer", "integer for string",
             "missing required", "bad enum"}
    assert kinds <= {name for name, _ in SHAPE_CASES}


@pytest.mark.parametrize("text", [t for _, t in SHAPE_CASES], ids=[n for n, _ in SHAPE_CASES])
def test_schema_refuses_what_the_reader_refuses(validator, text):
    assert _schema_errors(validator, text), _reader_only(text)


VALID = {
    "base": BASE,
    "every optional value null": _extra(
        "account: null\nnetwork:\n  new: null\n  existing: null\nstorage:\n  fsx_lustre:\n    new: null\n"
        "    existing: null\n    image_store: null\nlifecycle:\n  ttl_hours: null\n  notify_email: null\n"),
    "existing network and file system": _extra(
        "account: '123456789012'\nnetwork:\n  existing:\n    vpc_id: vpc-0123456789abcdef0\n"
        "    head_node_subnet_id: subnet-01234567\n    compute_subnet_id: subnet-0123456789abcdef0\n"
        "    compute_subnet_cidr: 10.1.0.0/16\nstorage:\n  fsx_lustre:\n    existing:\n"
        "      file_system_id: fs-0123456789abcdef0\n"),
    "scratch file system, own mount": _extra(
        "storage:\n  fsx_lustre:\n    mount_dir: /lustre\n    image_store: /lustre/images\n    new:\n"
        "      deployment_type: SCRATCH_2\n      capacity_gib: 2400\n      compression: NONE\n"),
    "whole-number ttl, email, tags": _extra(
        "lifecycle:\n  ttl_hours: 24\n  notify_email: o'brien@example.org\ntags:\n  team: ml\n  cost-center: '42'\n"),
    "fractional ttl, capacity block": _with("  - name: gpu\n", "  - name: gpu\n    capacity_type: capacity_block\n")
    .replace("        max: 2\n", "        max: 2\n        min: 2\n        reservation_instance_count: 2\n"
             "        capacity_reservation_id: cr-0123456789abcdef0\n") + "lifecycle:\n  ttl_hours: 2.5\n",
    "containers": _extra(
        "containers:\n  enroot:\n    transfer_retries: 0\n    connect_timeout_s: 99999\n"
        "    squash_options: -comp zstd -Xcompression-level 19 -b 1M\n  pyxis:\n    container_scope: global\n"
        "    unlocked_images: import\n  images:\n    - name: pytorch\n"
        "      uri: nvcr.io/nvidia/pytorch:25.01-py3\n      expect:\n        cuda: '12.8'\n"
        "monitoring:\n  log_retention_days: 30\nscheduling:\n  queue_update_strategy: TERMINATE\n"),
    "acknowledgements": _extra(  # unused here: a warning, not an error
        "acknowledge:\n  - id: image-fanout-slow\n    reason: ' weighed by ml-infra '\n"
        "  - id: capacity-block-size-unlisted\n    reason: x\n"),
}


@pytest.mark.parametrize("text", list(VALID.values()), ids=list(VALID))
def test_schema_and_reader_accept_valid_variants(validator, tmp_path, text):
    path = tmp_path / "t.yaml"
    path.write_text(text, encoding="utf-8")
    load(str(path), check_lock=False)  # raises SpecError on any error
    assert _schema_errors(validator, text) == []


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_shipped_specs_pass_the_schema_and_the_reader(validator, path):
    load(path.stem)
    assert _schema_errors(validator, path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("entry", ["{id: image-fanout-slo, reason: x}", "{id: acknowledgement-unused, reason: x}",
                                   "{id: image-fanout-slow, reason: ''}", "{id: image-fanout-slow, reason: '  '}",
                                   "{id: image-fanout-slow}"])
def test_schema_refuses_acknowledgements_validate_refuses(validator, entry):
    """The ids a spec may acknowledge are an enum from clusterkit/spec/warning_ids.py; a reason needs visible text."""
    assert _schema_errors(validator, _extra(f"acknowledge:\n  - {entry}\n"))
