"""The committed image lock file: read it with a position for every problem, write it deterministically.

The model and the rules its values obey live in ``clusterkit_node.contract.lock``, which is what the nodes read
the same file with. The file is JSON because the nodes parse it with ``json``; JSON is YAML, so the
spec's positioned reader builds the same dataclasses here and every problem gets file:line:col. The text
must first pass the nodes' own JSON decoder, so nothing only YAML allows (a comment, a bare string) or
reads differently (``1e5`` is a string in YAML) passes here and then fails on every node.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from clusterkit.atomic import write_text
from clusterkit.spec.errors import Problem, SpecError
from clusterkit.spec.files import LOCK_SUFFIX, lock_command, spec_of_lock
from clusterkit.spec.yaml_reader import Reader
from clusterkit_node.contract.lock import LOCK_VERSION, ImageLock, LockedImage, LockSyntaxError, decode, lock_problems

__all__ = ["LOCK_SUFFIX", "LOCK_VERSION", "ImageLock", "LockError", "LockedImage", "empty_lock", "lock_text",
           "parse_lock_text", "read_lock", "write_lock"]


class LockError(SpecError):
    """A lock file that cannot be used: every problem, each with its file, line and column."""


def fix_hint(path: Path) -> str:
    """The command that rewrites the lock at ``path`` (``make lock CLUSTER=x`` in the checkout)."""
    return f"run `{lock_command(spec_of_lock(path))}`"


def read_lock(path: str | Path) -> ImageLock:
    """The lock at ``path``; LockError with every problem when it is missing, unreadable or broken."""
    path = Path(path)
    hint = fix_hint(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError([Problem(str(path), 0, 0, "", "file does not exist", hint)]) from None
    except (OSError, UnicodeDecodeError) as err:
        raise LockError([Problem(str(path), 0, 0, "", f"cannot read the lock ({err})", hint)]) from None
    lock, problems = parse_lock_text(text, str(path), hint=hint)
    if lock is None or problems:
        raise LockError(problems)
    return lock


def parse_lock_text(text: str, file: str, *, hint: str = "") -> tuple[ImageLock | None, list[Problem]]:
    """(lock, []) for a good lock; otherwise every problem found, positioned in ``file``."""
    try:
        decode(text, allow_duplicates=True)  # the typed reader reports those, with their position
    except LockSyntaxError as err:
        return None, [Problem(file, err.line, err.col, "", err.message, hint)]
    reader = Reader(file)
    # In valid JSON a tab can only be whitespace (inside a string it must be escaped), which PyYAML
    # refuses where a token starts; a space in its place keeps every column.
    lock = reader.read_text(text.replace("\t", " "), ImageLock)
    problems = [dataclasses.replace(p, hint=p.hint or hint) for p in reader.problems]
    if lock is None:
        return None, problems or [Problem(file, 1, 1, "", "not an image lock", hint)]
    problems += [reader.marks.problem(where, message, hint) for where, message in lock_problems(lock)]
    return lock, problems


def lock_text(lock: ImageLock) -> str:
    """The one way a lock is written: sorted keys, 2-space indent, images by name, trailing newline.

    Refuses (ValueError) a lock that breaks the rules, so no command can commit one a node refuses."""
    broken = lock_problems(lock)
    if broken:
        raise ValueError("; ".join(f"{where}: {problem}" for where, problem in broken))
    ordered = dataclasses.replace(lock, images=tuple(sorted(lock.images, key=lambda image: image.name)))
    doc = dataclasses.asdict(ordered)
    for image in doc["images"]:  # optional keys: written only when the lock read something (or says why not)
        for key in ("declared", "declared_from", "nvidia", "nvidia_from"):
            if not image[key]:
                del image[key]
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def write_lock(path: str | Path, lock: ImageLock) -> None:
    """Write ``lock`` to ``path`` atomically (a reader sees the old file or the new, never half)."""
    write_text(Path(path), lock_text(lock))


def empty_lock(cluster: str) -> ImageLock:
    """The lock of a cluster without images (what its nodes get when no lock file is committed)."""
    return ImageLock(cluster=cluster, images=(), lock_version=LOCK_VERSION)
