"""The structural diff under ``clusterkit diff``: two YAML/JSON documents compared as data.

Lists of named things (queues, compute resources, images, shared storage, tags) are matched by name, so
reordering is no change and a path reads ``Scheduling.SlurmQueues[gpu].ComputeResources[p5].MaxCount``.
Knows nothing of git, ParallelCluster or reports: ``diff_impact`` and ``diff`` build on it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_NAME_KEYS = ("Name", "name", "Key", "key")


class _Missing:
    """Stands for "no such key / element" on one side, so a real ``null`` stays distinguishable."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Item:
    """A list element in a path: its name (``gpu``), or its index when the list has no names."""

    label: str


@dataclass(frozen=True)
class Change:
    """One value that differs; ``old``/``new`` is ``MISSING`` for an added/removed key or element."""

    path: tuple[str | Item, ...]
    old: Any
    new: Any

    @property
    def kind(self) -> str:
        if self.old is MISSING:
            return "added"
        if self.new is MISSING:
            return "removed"
        return "changed"

    @property
    def dotted(self) -> str:
        return show_path(self.path)


def show_path(path: tuple[str | Item, ...]) -> str:
    text = ""
    for segment in path:
        if isinstance(segment, Item):
            text += f"[{segment.label}]"
        else:
            text += f".{segment}" if text else str(segment)
    return text or "(whole file)"


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


def _label_function(old: list[Any], new: list[Any]) -> Callable[[dict[str, Any]], str] | None:
    """How to name the elements of two versions of a list of mappings: by a name key (Name, name,
    Key, key) present and unique in every element, else None."""
    items = old + new
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for key in _NAME_KEYS:
        if all(key in i and _scalar(i[key]) for i in items) and all(
                len({str(i[key]) for i in side}) == len(side) for side in (old, new)):
            def label(element: dict[str, Any], key: str = key) -> str:
                return str(element[key])
            return label
    return None


def _one_key_items(items: list[Any]) -> bool:
    """Lists like ``[{Policy: arn}]``: a set of values in disguise, compared as a whole list."""
    return all(isinstance(i, dict) and len(i) == 1 for i in items)


def diff_values(old: Any, new: Any, path: tuple[str | Item, ...] = ()) -> list[Change]:
    """Every leaf-most difference between two YAML/JSON documents, old document order first.

    Named list elements are matched by name, other lists of mappings by index; lists of plain values
    (Args, SubnetIds) and of one-key mappings change as a whole (the renderer shows the elements that
    differ)."""
    if old is MISSING or new is MISSING:
        return [] if old is new else [Change(path, old, new)]
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[Change] = []
        for key in list(old) + [k for k in new if k not in old]:
            changes += diff_values(old.get(key, MISSING), new.get(key, MISSING), path + (str(key),))
        return changes
    if isinstance(old, list) and isinstance(new, list) and old != new:
        label = _label_function(old, new)
        if label is not None:
            before = {label(e): e for e in old}
            after = {label(e): e for e in new}
            names = list(before) + [n for n in after if n not in before]
            return [change for n in names
                    for change in diff_values(before.get(n, MISSING), after.get(n, MISSING), path + (Item(n),))]
        if old and new and all(isinstance(e, dict) for e in old + new) and not _one_key_items(old + new):
            changes = []
            for index in range(max(len(old), len(new))):
                a = old[index] if index < len(old) else MISSING
                b = new[index] if index < len(new) else MISSING
                changes += diff_values(a, b, path + (Item(str(index)),))
            return changes
    if old == new and type(old) is type(new):
        return []
    return [Change(path, old, new)]


