"""Small helpers the rule modules share: version parsing and formatting, duplicate names, nearest allowed value.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from clusterkit.rules.limits import PC_VERSION
from clusterkit.spec.errors import Problem
from clusterkit.spec.yaml_reader import Marks


def parse_version(text: str) -> tuple[int, ...] | None:
    """(3, 16, 1) of "3.16.1"; None unless three parts of ASCII digits (int() alone also reads "٣")."""
    return tuple(int(p) for p in text.split(".")) if PC_VERSION.fullmatch(text) else None


def dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in version)


def duplicates(m: Marks, named: list[tuple[str, str]], what: str) -> Iterator[Problem]:
    counts = Counter(name for _, name in named)
    seen: set[str] = set()
    for path, name in named:
        if counts[name] > 1 and name in seen:
            yield m.problem(path, f"duplicate {what} name '{name}'", "names must be unique")
        seen.add(name)


def nearest(value: int, allowed: set[int]) -> str:
    return f"nearest allowed: {min(allowed, key=lambda a: abs(a - value))}"
