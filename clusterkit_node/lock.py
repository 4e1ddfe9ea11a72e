"""The image lock (cluster_configs/<name>.images.lock) as the nodes read it.

The lock is written by ``python -m clusterkit lock``; the nodes cannot import clusterkit, so this reads
only the fields the node tools need and reports every problem at once (exit 2) rather than the first.
Image names must fit the store's layout (layout.py), which this module depends on, never the reverse.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .console import UsageError
from .enroot_uri import ImageRequest, import_uri, locked_location
from .layout import IMAGE_NAME_RE, image_file, image_name_problem

NAME_RE = IMAGE_NAME_RE
DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class LockedImage:
    """One entry of cluster_configs/<name>.images.lock (only the fields image_sync needs)."""

    name: str
    digest: str
    enroot_uri: str
    source: str
    compressed_size: Optional[int]  # None: unknown (an offline lock); the disk preflight says so
    expect: Dict[str, str] = field(default_factory=dict)

    @property
    def hex(self) -> str:
        return self.digest.split(":", 1)[1]

    @property
    def short(self) -> str:
        return self.hex[:12]

    @property
    def rel_file(self) -> str:
        return image_file(self.name, self.hex)

    @property
    def location(self) -> Tuple[str, str]:
        """(registry, repository) the image was locked from."""
        return locked_location(self.enroot_uri)

    @property
    def tag(self) -> Optional[str]:
        """The tag the spec named (``source``: ``[docker://]NAME[:TAG][@DIGEST]``), if any."""
        name = self.source.split("://", 1)[-1].split("@", 1)[0]
        last = re.split(r"[/#]", name)[-1]
        return last.split(":", 1)[1] if ":" in last else None

    def answers(self, request: ImageRequest) -> bool:
        """Does a job's ``--container-image`` (as enroot would fetch it) name this locked image? Same
        registry and repository, and the locked digest or the tag the lock was made from."""
        if (request.registry, request.repository) != self.location:
            return False
        return request.reference == (self.digest if request.digest else self.tag)


def find_locked(images: List[LockedImage], request: ImageRequest) -> Optional[LockedImage]:
    """The locked image a request names, or None (first match: names are unique, locations may repeat)."""
    return next((img for img in images if img.answers(request)), None)


def load_lock(path: str) -> List[LockedImage]:
    """Parse and validate the lock; every problem is reported at once (UsageError)."""
    hint = "regenerate it with `python -m clusterkit lock NAME`"
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError([f"{path}: cannot read image lock: {exc.strerror} (is --lock right?)"])
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError([f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg} ({hint})"])
    problems: List[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise UsageError([f"{path}: images: missing or not a list ({hint})"])
    images: List[LockedImage] = []
    seen = set()
    for i, raw in enumerate(doc["images"]):
        where = f"{path}: images[{i}]"
        if not isinstance(raw, dict):
            problems.append(f"{where}: not an object ({hint})")
            continue
        name, digest, uri = raw.get("name"), raw.get("digest"), raw.get("enroot_uri")
        size, expect = raw.get("compressed_size"), raw.get("expect", {})
        ok = True
        name_problem = image_name_problem(name) if isinstance(name, str) else \
            f"{name!r} is not a store name (letters, digits, . _ -; no leading dot)"
        if name_problem:
            problems.append(f"{where}.name: {name_problem}")
            ok = False
        elif name in seen:
            problems.append(f"{where}.name: duplicate image name {name!r}")
            ok = False
        if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
            problems.append(f"{where}.digest: {digest!r} is not sha256:<64 hex> ({hint})")
            ok = False
        if not isinstance(uri, str) or not uri.startswith("docker://"):
            problems.append(f"{where}.enroot_uri: {uri!r} is not a docker:// URI ({hint})")
            ok = False
        elif isinstance(digest, str) and not uri.endswith("@" + digest):
            problems.append(f"{where}.enroot_uri: {uri!r} does not pin digest {digest} ({hint})")
            ok = False
        else:
            try:
                import_uri(uri, "")
            except ValueError as exc:
                problems.append(f"{where}.enroot_uri: {exc} ({hint})")
                ok = False
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            problems.append(f"{where}.compressed_size: {size!r} is not a byte count or null ({hint})")
            ok = False
        if not isinstance(expect, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in expect.items()):
            problems.append(f"{where}.expect: must map version names to strings, got {expect!r}")
            ok = False
        if ok:
            seen.add(name)
            images.append(LockedImage(name=name, digest=digest, enroot_uri=uri,
                                      source=str(raw.get("source", "")), compressed_size=size,
                                      expect=dict(expect)))
    if problems:
        raise UsageError(problems)
    return sorted(images, key=lambda im: im.name)
