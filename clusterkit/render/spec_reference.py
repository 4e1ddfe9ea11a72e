"""The spec reference, generated from the spec dataclasses so docs/spec-reference.md cannot drift from the code."""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from clusterkit.spec.model import ClusterSpec


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _type_name(args[0]) + " or null"
    if origin is Literal:
        return " \\| ".join(str(a) for a in typing.get_args(hint))
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(hint)[0])}"
    if origin is dict:
        return "mapping"
    if dataclasses.is_dataclass(hint):
        return "mapping"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(hint, str(hint))


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "**required**"
    if f.default_factory is not dataclasses.MISSING or dataclasses.is_dataclass(f.default):
        return ""
    value = f.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`" if value != () else "[]"


def _rows(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    rows: list[str] = []
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        hint = hints[f.name]
        meaning = f.metadata.get("doc", "") + "".join(  # the values the reader refuses, from the same field
            f"; not {value}: {why}" for value, why in f.metadata.get("refused", {}).items())
        rows.append(f"| `{path}` | {_type_name(hint)} | {_default(f)} | {meaning} |")
        inner = hint
        if typing.get_origin(inner) in (Union, types.UnionType):
            inner = next(a for a in typing.get_args(inner) if a is not type(None))
        if typing.get_origin(inner) is tuple:
            inner = typing.get_args(inner)[0]
            path += "[]"
        if isinstance(inner, type) and dataclasses.is_dataclass(inner):  # hints are classes, not instances
            rows += _rows(inner, path + ".")
    return rows


def spec_reference() -> str:
    head = ["| key | type | default | meaning |", "|---|---|---|---|"]
    return "\n".join(head + _rows(ClusterSpec, "")) + "\n"
