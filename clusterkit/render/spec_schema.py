"""The spec's JSON Schema (draft 2020-12), generated from the spec dataclasses for editors.

``make render`` writes it to ``cluster_configs/clusterkit-spec.schema.json`` (committed; ``render --check``
reports it stale), and every shipped spec names it on its first line for yaml-language-server. It walks the
dataclasses the way ``clusterkit.render.spec_reference`` does and reads them the way
``clusterkit.spec.yaml_reader`` does: the types, the required keys (no default), no unknown keys, the choices
of each ``Literal``, the defaults and the ``doc`` strings. Value limits come only from rules that are data:
the constants of ``clusterkit.rules.limits``, the nodes' settings contract (``clusterkit_node.contract.settings``,
via the spec fields of ``clusterkit.effective.node_settings.SETTING_FIELDS``), and the warning ids a spec may
acknowledge (``clusterkit.spec.warning_ids``). Limits written only as code stay with ``clusterkit validate``,
as do cross-field rules and the catalog (instance types, regions, zones): the schema may accept a spec that
validate refuses, never the other way round.
"""
from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from typing import Any, Literal, Union

from clusterkit.effective.node_settings import SETTING_FIELDS
from clusterkit.rules import limits
from clusterkit.spec import warning_ids
from clusterkit.spec.model import ClusterSpec, PlatformSpec
from clusterkit_node.contract import settings as node

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "urn:clusterkit:cluster-spec"  # clusterkit/__init__.py defines no ClusterKit version to add
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}  # what typed_yaml reads


def _pattern(regex: str | re.Pattern[str]) -> str:
    """A fullmatch pattern as JSON Schema's (ECMA-262, unanchored search) ``pattern``."""
    return f"^(?:{regex.pattern if isinstance(regex, re.Pattern) else regex})$"


def _name(regex: re.Pattern[str]) -> dict[str, Any]:
    return {"pattern": _pattern(regex), "not": {"enum": sorted(limits.RESERVED_NAMES)}}


def _rule_limits() -> dict[str, dict[str, Any]]:
    """Keywords per spec path (``[]`` marks list items), each from a constant of clusterkit/rules/limits.py."""
    ids = limits.IDS
    throughputs = sorted({value for allowed in limits.FSX_THROUGHPUT.values() for value in allowed})
    return {
        "name": {"pattern": _pattern(limits.CLUSTER_NAME)},
        "account": {"pattern": _pattern(ids["account"])},
        "network.new.flow_logs_retention_days": {"enum": sorted(limits.LOG_RETENTION_DAYS)},
        "network.existing.vpc_id": {"pattern": _pattern(ids["vpc"])},
        "network.existing.head_node_subnet_id": {"pattern": _pattern(ids["subnet"])},
        "network.existing.compute_subnet_id": {"pattern": _pattern(ids["subnet"])},
        **{f"network.security_groups.{role}{items}": limit
           for role in ("head_node", "compute", "fsx")
           for items, limit in (("", {"maxItems": limits.MAX_SECURITY_GROUPS_PER_INTERFACE, "uniqueItems": True}),
                                ("[]", {"pattern": _pattern(ids["sg"])}))},
        "head_node.root_volume_gib": {"minimum": limits.MIN_HEAD_ROOT_GIB},
        # any deployment type's values: which one applies is a cross-field rule
        "storage.fsx_lustre.new.throughput_mb_per_tib": {"enum": throughputs},
        "storage.fsx_lustre.existing.file_system_id": {"pattern": _pattern(ids["fs"])},
        "queues": {"maxItems": limits.MAX_QUEUES},
        "queues[].name": _name(limits.QUEUE_NAME),
        "queues[].root_volume_gib": {"minimum": limits.MIN_HEAD_ROOT_GIB, "maximum": limits.MAX_EBS_GIB},
        # the limit is per cluster, so no one queue can have more
        "queues[].compute_resources": {"maxItems": limits.MAX_COMPUTE_RESOURCES},
        "queues[].compute_resources[].name": _name(limits.RESOURCE_NAME),
        "queues[].compute_resources[].capacity_reservation_id": {"pattern": _pattern(ids["cr"])},
        "login_nodes": {"maxItems": limits.MAX_LOGIN_POOLS},
        "login_nodes[].name": _name(limits.LOGIN_POOL_NAME),
        "login_nodes[].count": {"minimum": limits.MIN_LOGIN_COUNT},
        "login_nodes[].gracetime_minutes": {"minimum": limits.LOGIN_GRACETIME_MINUTES[0],
                                            "maximum": limits.LOGIN_GRACETIME_MINUTES[1]},
        "containers.images[].name": {"pattern": _pattern(limits.IMAGE_NAME)},
        "monitoring.log_retention_days": {"enum": sorted(limits.PC_LOG_RETENTION_DAYS)},
        "lifecycle.ttl_hours": {"minimum": limits.TTL_MIN_HOURS, "maximum": limits.TTL_MAX_HOURS},
        "lifecycle.notify_email": {"pattern": _pattern(limits.NOTIFY_EMAIL), "maxLength": limits.EMAIL_MAX},
        "acknowledge[].id": {"enum": warning_ids.acknowledgeable()},
        "acknowledge[].reason": {"pattern": limits.ACK_REASON.pattern},  # searched: some visible text
        **{path: {"minimum": low, "maximum": high} for path, (low, high) in limits.HEALTH_LIMITS.items()},
    }


def _setting_limits(path: str, hint: Any) -> dict[str, Any]:
    """What the nodes' settings contract accepts for the spec field that becomes a node setting verbatim."""
    key = next((k for k, p in SETTING_FIELDS.items() if p == path), None)
    if key is None:
        return {}
    setting = node.BY_KEY[key]
    if typing.get_origin(hint) is Literal:
        return {"enum": [c for c in typing.get_args(hint) if setting.problem(c) is None]}
    if hint is str:
        return {"pattern": _pattern(setting.pattern)}
    if hint is int:
        try:
            high = node.max_digits(key)
        except ValueError:
            return {}
        return {"minimum": 0, "maximum": high}  # max_digits reads only [0-9]{1,N}: unsigned, so 0 and up
    return {}  # flags become yes/no or 1/0, lists several values: their settings never see the spec's text


def _default(f: dataclasses.Field[Any]) -> tuple[bool, Any]:
    """(whether to show a default, its JSON value); nested mappings document their own defaults."""
    if f.default_factory is not dataclasses.MISSING:
        return True, f.default_factory()
    if f.default is dataclasses.MISSING or dataclasses.is_dataclass(f.default):
        return False, None
    return True, list(f.default) if isinstance(f.default, tuple) else f.default


class _Walk:
    def __init__(self) -> None:
        self.limits = _rule_limits()
        self.unused = set(self.limits)

    def node(self, hint: Any, path: str) -> dict[str, Any]:
        origin = typing.get_origin(hint)
        if origin in (Union, types.UnionType):
            (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
            schema = self.node(inner, path)
            schema["type"] = [schema["type"], "null"]
            if "enum" in schema:
                schema["enum"] = [*schema["enum"], None]
            return schema
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # hints are classes, not instances
            schema = self.mapping(hint, path)
        elif origin is tuple:
            schema = {"type": "array", "items": self.node(typing.get_args(hint)[0], path + "[]")}
        elif origin is dict:
            schema = {"type": "object", "additionalProperties": self.node(typing.get_args(hint)[1], path + ".*")}
        elif origin is Literal:
            schema = {"type": "string", "enum": list(typing.get_args(hint))}  # typed_yaml reads only strings
        else:
            schema = {"type": _JSON_TYPES[hint]}
        schema.update(_setting_limits(path, hint))
        if path in self.limits:
            self.unused.discard(path)
            schema.update(self.limits[path])
        return schema

    def mapping(self, cls: type, path: str) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for f in dataclasses.fields(cls):
            prop = self.node(hints[f.name], f"{path}.{f.name}" if path else f.name)
            prop["description"] = f.metadata.get("doc", "")
            shown, value = _default(f)
            if shown:
                prop["default"] = value
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            properties[f.name] = prop
        schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            schema["required"] = required
        return schema


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of a cluster spec (``cluster_configs/<name>.yaml``)."""
    walk = _Walk()
    schema = walk.mapping(ClusterSpec, "")
    if walk.unused:
        raise AssertionError(f"rule limits name no spec field: {sorted(walk.unused)}")
    return {
        "$schema": DRAFT,
        "$id": SCHEMA_ID,
        "$comment": ("Generated by `make render` from clusterkit/spec/model.py (clusterkit/render/spec_schema.py). "
                     "Do not edit."),
        "title": "ClusterKit cluster spec",
        "description": "A cluster spec, cluster_configs/<name>.yaml. `clusterkit validate` also checks the "
                       "rules this schema cannot state (the catalog, and fields that depend on each other).",
        **schema,
    }


def platform_schema() -> dict[str, Any]:
    """The JSON Schema of a platform file (``cluster_configs/platforms/<name>.yaml``): the same field types and
    limits as a cluster's network and storage (the rules that bound other fields go unused here)."""
    schema = _Walk().mapping(PlatformSpec, "")
    return {
        "$schema": DRAFT,
        "$id": "urn:clusterkit:platform-spec",
        "$comment": ("Generated by `make render` from clusterkit/spec/model.py (clusterkit/render/spec_schema.py). "
                     "Do not edit."),
        "title": "ClusterKit platform",
        "description": "A platform, cluster_configs/platforms/<name>.yaml: the network and FSx image store that the "
                       "cluster specs naming it share. `clusterkit validate` on any of them checks it.",
        **schema,
    }


def platform_schema_text() -> str:
    return json.dumps(platform_schema(), sort_keys=True, indent=2) + "\n"


def schema_text() -> str:
    """The committed schema file's exact text (``clusterkit schema`` prints it)."""
    return json.dumps(spec_schema(), sort_keys=True, indent=2) + "\n"
