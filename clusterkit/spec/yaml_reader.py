"""Read YAML into frozen dataclasses by their type hints, remembering where every value was written.

Why not ``yaml.safe_load`` + manual checks: errors must name the file, line and column, and every
unknown key, wrong type and missing field in the file must be reported in one pass. Walking PyYAML's
node tree with the dataclass type hints gives all of that from one description of the spec (the
dataclasses in ``spec.py``), which also documents it.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Literal, Union

import yaml

from clusterkit.spec.errors import Problem

_TAG = "tag:yaml.org,2002:"
_SCALAR_KIND = {
    _TAG + "str": "string",
    _TAG + "int": "integer",
    _TAG + "float": "number",
    _TAG + "bool": "boolean",
    _TAG + "null": "null",
    _TAG + "timestamp": "date",
}


@dataclass
class Marks:
    """Where each spec path was written: ``path -> (line, col)`` (1-based) of its value and key."""

    file: str
    values: dict[str, tuple[int, int]] = field(default_factory=dict)
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)

    def at(self, path: str) -> tuple[int, int]:
        """Position of ``path``, or of its nearest written ancestor (defaults are not written)."""
        probe = path
        while probe:
            if probe in self.values:
                return self.values[probe]
            probe = _parent(probe)
        return self.values.get("", (1, 1))

    def key_at(self, path: str) -> tuple[int, int]:
        return self.keys.get(path) or self.at(path)

    def problem(self, path: str, message: str, hint: str = "", *, level: str = "error", id: str = "",
                on_key: bool = False) -> Problem:
        """A problem at ``path``; a warning names its id (``clusterkit.spec.warning_ids``)."""
        line, col = self.key_at(path) if on_key else self.at(path)
        return Problem(self.file, line, col, path, message, hint, level, id)


def _parent(path: str) -> str:
    if path.endswith("]"):
        return path[: path.rindex("[")]
    return path.rpartition(".")[0]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _pos(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


class Reader:
    """Turns one YAML document into an instance of a dataclass, collecting problems as it goes."""

    def __init__(self, file: str):
        self.marks = Marks(file)
        self.problems: list[Problem] = []
        self._constructor = yaml.constructor.SafeConstructor()

    # -- entry point -----------------------------------------------------------------------------
    def read_text(self, text: str, cls: type) -> Any:
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
            self.problems.append(Problem(self.marks.file, line, col, "", f"not valid YAML: {exc.problem}"))
            return None
        except yaml.YAMLError as exc:  # e.g. ReaderError: a NUL byte or other unprintable character
            line, col = _reader_position(text, exc)
            self.problems.append(Problem(self.marks.file, line, col, "", f"not valid YAML: {_reader_reason(exc)}",
                                         "a spec is plain UTF-8 text"))
            return None
        if root is None:
            self.problems.append(Problem(self.marks.file, 1, 1, "", "the file is empty",
                                         "see cluster_configs/demo.yaml for a complete spec"))
            return None
        self.marks.values[""] = _pos(root)
        return self.read(root, cls, "")

    # -- dispatch on the type hint -----------------------------------------------------------------
    def read(self, node: yaml.Node, hint: Any, path: str, refused: typing.Mapping[str, str] | None = None) -> Any:
        """``refused``: values of a ``Literal`` field the spec names as not supported, with the reason."""
        self.marks.values[path] = _pos(node)
        origin = typing.get_origin(hint)
        if origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            if self._is_null(node):
                return None
            return self.read(node, args[0], path, refused) if len(args) == 1 else self._bad(node, path, hint)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # hints are classes, not instances
            return self._read_dataclass(node, hint, path)
        if origin is tuple:
            return self._read_sequence(node, typing.get_args(hint)[0], path)
        if origin is dict:
            return self._read_mapping(node, typing.get_args(hint)[1], path)
        if origin is Literal:
            return self._read_choice(node, typing.get_args(hint), path, refused or {})
        return self._read_scalar(node, hint, path)

    def _is_null(self, node: yaml.Node) -> bool:
        return isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "null"

    def _kind(self, node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        kind = _SCALAR_KIND.get(node.tag, "a value")
        return f"{kind} {node.value!r}" if kind not in ("null",) else "nothing (null)"

    def _bad(self, node: yaml.Node, path: str, want: str, hint: str = "") -> None:
        self.problems.append(self.marks.problem(path, f"expected {want}, got {self._kind(node)}", hint))
        return None

    def _twice(self, key_node: yaml.Node, path: str) -> Problem:
        """A key written a second time, pointing at the second one (the first stays in the marks)."""
        return Problem(self.marks.file, *_pos(key_node), path, "key given twice", "remove one")

    # -- structures --------------------------------------------------------------------------------
    def _pairs(self, node: yaml.MappingNode, path: str, within: frozenset[int] = frozenset()) -> list[
            tuple[yaml.Node, yaml.Node]]:
        """The mapping's key/value nodes with YAML 1.1 merge keys (``<<: *anchor``, ``<<: [*a, *b]``) resolved
        as PyYAML's safe loader resolves them (``SafeConstructor.flatten_mapping``): a key written in the mapping
        wins over a merged one, an earlier merged mapping over a later one. Merged nodes are the anchor's own, so
        every value keeps the line and column where it is written."""
        written: list[tuple[yaml.Node, yaml.Node]] = []
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _TAG + "merge":
                written.append((key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    self.problems.append(Problem(self.marks.file, *_pos(source), _join(path, "<<"),
                                                 f"a merge key takes a mapping or a list of mappings, got "
                                                 f"{self._kind(source)}", "like <<: *defaults"))
                elif id(source) in within or source is node:
                    self.problems.append(Problem(self.marks.file, *_pos(key_node), _join(path, "<<"),
                                                 "the merged mapping contains this merge key itself",
                                                 "merge another anchor"))
                else:
                    merged += self._pairs(source, path, within | {id(node)})
        keys = {k.value for k, _ in written if isinstance(k, yaml.ScalarNode)}
        for key_node, value_node in merged:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in keys:
                keys.add(key)
                written.append((key_node, value_node))
        return written

    def _read_dataclass(self, node: yaml.Node, cls: type, path: str) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return self._bad(node, path, "a mapping")
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        seen: set[str] = set()
        for key_node, value_node in self._pairs(node, path):
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            key_path = _join(path, str(key))
            self.marks.keys[key_path] = _pos(key_node)
            if key is None or key not in fields:
                self.marks.values[key_path] = _pos(key_node)
                hint = did_you_mean(str(key), fields) or f"allowed keys: {', '.join(sorted(fields))}"
                self.problems.append(self.marks.problem(key_path, "unknown key", hint, on_key=True))
                continue
            if key in seen:
                self.problems.append(self._twice(key_node, key_path))
                continue
            seen.add(key)
            values[key] = self.read(value_node, hints[key], key_path, fields[key].metadata.get("refused"))
        missing = [name for name, f in fields.items()
                   if name not in seen and f.default is MISSING and f.default_factory is MISSING]
        for name in missing:
            self.problems.append(self.marks.problem(path, f"missing required key '{name}'", _doc_hint(fields[name])))
        if missing or any(v is None and not _optional(hints[k]) for k, v in values.items()):
            return None  # the caller already has the problems; a partial object would mislead rules
        return cls(**values)

    def _read_sequence(self, node: yaml.Node, item: Any, path: str) -> Any:
        if not isinstance(node, yaml.SequenceNode):
            return self._bad(node, path, "a list")
        items = [self.read(child, item, f"{path}[{i}]") for i, child in enumerate(node.value)]
        return None if any(i is None for i in items) else tuple(items)

    def _read_mapping(self, node: yaml.Node, value_type: Any, path: str) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return self._bad(node, path, "a mapping")
        out: dict[str, Any] = {}
        for key_node, value_node in self._pairs(node, path):
            key = self._read_scalar(key_node, str, path)
            if key is None:
                continue
            key_path = _join(path, key)
            if key_path in self.marks.keys:
                self.problems.append(self._twice(key_node, key_path))
                continue
            self.marks.keys[key_path] = _pos(key_node)
            value = self.read(value_node, value_type, key_path)
            if value is not None:
                out[key] = value
        return out

    def _read_choice(self, node: yaml.Node, choices: tuple[Any, ...], path: str,
                     refused: typing.Mapping[str, str]) -> Any:
        if isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "str" and node.value in refused:
            self.problems.append(self.marks.problem(path, f"{node.value} is not supported: {refused[node.value]}",
                                                    f"use {_one_of(choices)}"))
            return None
        if not isinstance(node, yaml.ScalarNode) or node.tag != _TAG + "str" or node.value not in choices:
            shown = " | ".join(map(str, choices))
            hint = (did_you_mean(str(getattr(node, "value", "")), map(str, choices))
                    if isinstance(node, yaml.ScalarNode) else "")
            self.problems.append(self.marks.problem(path, f"must be one of {shown}, got {self._kind(node)}", hint))
            return None
        return node.value

    def _read_scalar(self, node: yaml.Node, want: type, path: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return self._bad(node, path, _NAMES.get(want, want.__name__))
        try:
            value = self._constructor.construct_object(node)
        except yaml.constructor.ConstructorError as exc:
            self.problems.append(self.marks.problem(path, f"cannot read value: {exc.problem}",
                                                    "write a plain value without a YAML tag"))
            return None
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if want is str and isinstance(value, (int, float)) and not isinstance(value, bool):
            return self._bad(node, path, "a string", f'quote it: "{node.value}"')
        if type(value) is not want:
            hint = _number_hint(node.value, want) if want in (int, float) and isinstance(value, str) else ""
            return self._bad(node, path, _NAMES.get(want, want.__name__), hint)
        return value


def _reader_position(text: str, exc: yaml.YAMLError) -> tuple[int, int]:
    offset = getattr(exc, "position", 0) or 0
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _reader_reason(exc: yaml.YAMLError) -> str:
    character = getattr(exc, "character", None)
    if isinstance(character, int):
        character = f"\\x{character:02x}"
    return f"unacceptable character {character}" if character is not None else str(exc).splitlines()[0]


# A number as YAML 1.1 (PyYAML) would not read it: an exponent without a dot in the mantissa or without a sign
# (1e308, 2.5e3). ASCII digits only: Python's \d and int() also take Arabic-Indic and other digits.
_LOOSE_NUMBER = re.compile(r"([-+]?)([0-9]+)(?:\.([0-9]*))?[eE]([-+]?)([0-9]+)", re.ASCII)


def _number_hint(text: str, want: type) -> str:
    """How to write ``text`` so YAML 1.1 reads it as the number it looks like; "" when it does not look like one."""
    found = _LOOSE_NUMBER.fullmatch(text)
    if found is None:
        return ""
    sign, whole, fraction, exp_sign, exponent = found.groups()
    written = f"{sign}{whole}.{fraction or '0'}e{exp_sign or '+'}{exponent}"
    if want is int:
        value = float(text)
        example = f", e.g. {int(value)}" if math.isfinite(value) and value == int(value) and value < 1e18 else ""
        return f"YAML 1.1 reads {text} as a string, not a number: write the whole number in digits{example}"
    return f"YAML 1.1 reads {text} as a string, not a number: write {written} (a dot before the e, a sign after it)"


def _one_of(choices: typing.Iterable[Any]) -> str:
    shown = [str(c) for c in choices]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType) and type(None) in typing.get_args(hint)


def _doc_hint(f: dataclasses.Field[Any]) -> str:
    doc: str = f.metadata.get("doc", "")
    return doc


def doc(text: str, default: Any = MISSING, *, refused: typing.Mapping[str, str] | None = None, **kwargs: Any) -> Any:
    """A dataclass field carrying its one-line documentation (shown in hints and the spec reference).

    ``refused``: for a ``Literal`` field, values a reader of the field's consumer might expect (ParallelCluster
    accepts them) that the spec refuses, each with the reason; the reader says it, the spec reference lists it.
    """
    if default is not MISSING:
        kwargs["default"] = default
    metadata: dict[str, Any] = {"doc": text}
    if refused:
        metadata["refused"] = dict(refused)
    return field(metadata=metadata, **kwargs)
