"""User-facing problems: one line each, pointing at the spec file, line and column.

A user mistake is never a traceback. Everything that reads a spec collects ``Problem``s and raises one
``SpecError`` holding all of them, so a user fixes every mistake in one round trip.
"""
from __future__ import annotations

from dataclasses import dataclass

from clusterkit.spec.warning_ids import WARNINGS

EXIT_USER_ERROR = 2


@dataclass(frozen=True)
class Problem:
    """One mistake (or, with ``level='warning'``, one piece of advice) at one place in one file.

    A warning has an ``id`` from ``clusterkit.spec.warning_ids`` (a spec acknowledges warnings by it); it stays when
    ``validate --strict`` makes the warning an error, so that error still says which id to acknowledge.
    """

    file: str
    line: int  # 1-based; 0 when the problem has no position (e.g. a missing file)
    col: int  # 1-based
    path: str  # spec path such as ``queues[0].compute_resources[1].max``; "" for the whole file
    message: str
    hint: str = ""
    level: str = "error"
    id: str = ""  # a key of warning_ids.WARNINGS, or ""

    def __post_init__(self) -> None:
        if self.id and self.id not in WARNINGS:
            raise ValueError(f"warning id {self.id!r} is not in clusterkit/spec/warning_ids.py")

    def render(self) -> str:
        """``file:line:col: [warning[id]: ]path: message (hint)``; a warning made an error shows ``error[id]: ``."""
        where = f"{self.file}:{self.line}:{self.col}" if self.line else self.file
        what = f"{self.path}: {self.message}" if self.path else self.message
        if self.id:
            prefix = f"{self.level}[{self.id}]: "
        else:
            prefix = "warning: " if self.level == "warning" else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}: {prefix}{what}{hint}"


class ClusterKitError(Exception):
    """Base class for errors a user can cause; the CLI prints them without a traceback (exit 2)."""

    def lines(self) -> list[str]:
        return [str(self)]


class SpecError(ClusterKitError):
    """All the problems found in one or more specs, sorted by file and position."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=lambda p: (p.file, p.line, p.col, p.path, p.message))
        super().__init__("\n".join(p.render() for p in self.problems))

    def lines(self) -> list[str]:
        return [p.render() for p in self.problems]


@dataclass(frozen=True)
class Acknowledged:
    """A warning the spec accepted (its ``acknowledge`` entry names the id), with the reason it gives."""

    problem: Problem
    reason: str
