"""The CLI never accepts an image lock a node refuses, and never refuses one a node would use.

Two readers build the one model (clusterkit_node.contract.lock): the CLI's positioned YAML reader
(clusterkit/images/lock_file.py) and the node's ``json`` reader (clusterkit_node/contract/lock.py, what every node runs
at boot). This feeds both the same text: every committed lock, then several hundred broken ones made
from it (each value replaced by values of every JSON type and by the ones the rules single out, each key
dropped, a key added, text-level edits only YAML or only JSON allows) and asserts they agree on every
one. A disagreement names the mutation and what each reader said.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from clusterkit.images.lock_file import lock_text, parse_lock_text
from clusterkit_node.contract.lock import parse_lock
from tests import shipped

LOCKS = shipped.lock_paths()
BASE = LOCKS[0].read_text(encoding="utf-8")
DIGEST = "sha256:" + "d" * 64
SOURCE = json.dumps(json.loads(BASE)["images"][0]["source"])  # a field any non-empty string suits

# Values every leaf is replaced with: every JSON type, and the edges the rules single out.
REPLACEMENTS: tuple[Any, ...] = (
    None, True, False, 0, -1, 2, 10**30, "", " ", "x", "tab\there", "new\nline", "del\x7f", "é", [], {},
    {"k": 1}, ["x"], "linux/s390x", "linux/arm64", "../evil", ".hidden", "a.sqsh", "manifest.json",
    "sha256:" + "A" * 64, "sha256:abc", DIGEST, "docker://x#y@" + DIGEST, "docker://Bad#y@" + DIGEST,
)

# Text-level edits: (name, old, new) applied to BASE's first occurrence of ``old``.
TEXT_EDITS = (
    ("yaml comment", "{", "# a note\n{"),
    ("trailing comma", '"lock_version": 1', '"lock_version": 1,'),
    ("single quotes", '"cluster"', "'cluster'"),
    ("bare string", '"linux/amd64"', "linux/amd64"),
    ("exponent number", '"lock_version": 1', '"lock_version": 1e0'),
    ("exponent in a string field", SOURCE, "1e5"),
    ("NaN", SOURCE, "NaN"),
    ("Infinity", SOURCE, "-Infinity"),
    ("bare word", SOURCE, "yes_a_word"),
    ("fraction", '"lock_version": 1', '"lock_version": 1.0'),
    ("leading zero", '"lock_version": 1', '"lock_version": 01'),
    ("duplicate top key", '"lock_version": 1', '"lock_version": 1, "lock_version": 1'),
    ("duplicate image key", '"platform": "linux/amd64"', '"platform": "linux/amd64", "platform": "linux/amd64"'),
    ("duplicate expect key", '"expect": {', '"expect": {"cuda": "1", "cuda": "1", '),
    ("escaped slash", '"linux/amd64"', '"linux\\/amd64"'),
    ("unicode escape", '"linux/amd64"', '"linux\\u002famd64"'),
    ("surrogate pair", '"source": "', '"source": "\\ud83d\\ude00'),
    ("second document", "\n}\n", "\n}\n---\n{}\n"),
    ("trailing data", "\n}\n", "\n}\n[]\n"),
    ("tab indent", '\n  "cluster"', '\n\t"cluster"'),
    ("BOM", "{", "\ufeff{"),
    ("empty", BASE, ""),
    ("list", BASE, "[]"),
    ("null", BASE, "null"),
)


def _leaves(doc: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _leaves(value, path + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _leaves(value, path + (index,))


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(doc)
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return out


def _drop(doc: Any, path: tuple) -> Any:
    out = copy.deepcopy(doc)
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return out


def mutations() -> Iterator[tuple[str, str]]:
    doc = json.loads(BASE)
    for path in _leaves(doc):
        for value in REPLACEMENTS:
            yield f"{path} = {value!r}", json.dumps(_set(doc, path, value), indent=2)
        if path and isinstance(path[-1], str):
            yield f"drop {path}", json.dumps(_drop(doc, path), indent=2)
    for path in _leaves(doc):
        target = doc
        for part in path:
            target = target[part]
        if isinstance(target, dict):
            yield f"extra key in {path}", json.dumps(_set(doc, path, {**target, "note": "x"}), indent=2)
    images = doc["images"]
    yield "duplicate image", json.dumps({**doc, "images": images + images[:1]}, indent=2)
    yield "no images", json.dumps({**doc, "images": []}, indent=2)
    for name, old, new in TEXT_EDITS:
        assert old in BASE, name
        yield name, BASE.replace(old, new, 1)


def cli_accepts(text: str) -> tuple[bool, list[str]]:
    lock, problems = parse_lock_text(text, "x.images.lock")
    return lock is not None and not problems, [p.render() for p in problems]


def node_accepts(text: str) -> tuple[bool, list[str]]:
    lock, problems = parse_lock(text, "x.images.lock")
    return lock is not None and not problems, problems


def test_every_committed_lock_is_accepted_by_both_readers_and_is_what_the_writer_writes():
    assert LOCKS, "no committed lock to check"
    for path in LOCKS:
        text = path.read_text(encoding="utf-8")
        assert cli_accepts(text)[0] and node_accepts(text)[0], path
        lock, _ = parse_lock_text(text, str(path))
        assert lock is not None and lock_text(lock) == text, f"{path} is not the writer's text: run `make lock`"


def test_the_readers_agree_on_every_mutation():
    cases = list(mutations())
    disagreements = []
    refused = 0
    for name, text in cases:
        cli, cli_said = cli_accepts(text)
        node, node_said = node_accepts(text)
        refused += not node
        if cli != node:
            disagreements.append(f"{name}: cli {'accepts' if cli else cli_said}, "
                                 f"node {'accepts' if node else node_said}")
    assert not disagreements, "\n".join(disagreements)
    # the corpus is not vacuous: most mutations break the lock, and a few (a valid other value) do not
    assert len(cases) > 500 and len(cases) * 0.6 < refused < len(cases)


@pytest.mark.parametrize("name, text", [c for c in mutations() if c[0] in {"yaml comment", "exponent in a string field",
                                                                            "NaN", "duplicate expect key"}])
def test_what_only_yaml_reads_is_refused_with_a_line_by_the_cli(name: str, text: str):
    """The cases that made the CLI accept what a node refuses before the shared decoder existed."""
    accepted, said = cli_accepts(text)
    assert not accepted and said and all(line.startswith("x.images.lock") for line in said), said
