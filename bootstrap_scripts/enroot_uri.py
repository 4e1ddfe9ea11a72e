"""The ``enroot import`` URI for a locked image, in the form the node's enroot version accepts.

Why: the lock records the canonical ``docker://[REGISTRY#]REPOSITORY@sha256:HEX``, which only enroot
>= 4.0.0 parses. The grammars, read from the real sources (../shared/vendor):
  - enroot 3.x (src/docker.sh, docker::_download): ``^docker://((USER)@)?((REGISTRY)#)?(IMAGE)(:(TAG))?$``
    with TAG ``[[:alnum:]._:-]+``. ``@sha256:...`` is "Invalid image reference"; without a registry,
    ``REPO@sha256:HEX`` is silently misparsed (the user slot swallows ``REPO``). A digest fits in the
    TAG slot: ``REGISTRY#REPO:sha256:HEX`` makes enroot request ``/v2/REPO/manifests/sha256:HEX``,
    which registries answer by digest (measured: ../shared/reference/real-runtime.md).
  - enroot 4.x (src/docker.sh, docker::_parse_uri): adds ``@sha256:`` digests to both the
    ``REGISTRY/IMAGE`` and the ``REGISTRY#IMAGE`` forms; the 3.x TAG-slot form still parses the same way.
So: 4.x gets the lock's URI unchanged; 3.x, and an enroot whose version cannot be read, get the
TAG-slot form with the registry always written out (``registry-1.docker.io`` for Docker Hub, where
3.x adds ``library/`` to one-component names itself).
"""
from __future__ import annotations

import re
from typing import Optional, Tuple

DOCKER_HUB = "registry-1.docker.io"
_LOCKED_RE = re.compile(r"docker://(?:(?P<registry>[^#/@]+)#)?(?P<repo>[a-z0-9][a-z0-9/._-]*)"
                        r"@(?P<digest>sha256:[0-9a-f]{64})")
_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> Optional[Tuple[int, int, int]]:
    """(major, minor, patch) from ``enroot version`` output such as "3.4.1"; None if unreadable."""
    m = _VERSION_RE.search(text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def supports_digest_uri(enroot_version: str) -> bool:
    version = parse_version(enroot_version)
    return version is not None and version >= (4, 0, 0)


def import_uri(locked_uri: str, enroot_version: str) -> str:
    """The URI to pass to ``enroot import`` for the lock's ``enroot_uri`` on this enroot version.
    Raises ValueError for a URI that is not ``docker://[REGISTRY#]REPO@sha256:<64 hex>``."""
    m = _LOCKED_RE.fullmatch(locked_uri)
    if not m:
        raise ValueError(f"{locked_uri!r} is not docker://[REGISTRY#]REPOSITORY@sha256:<64 hex>")
    if supports_digest_uri(enroot_version):
        return locked_uri
    registry = m.group("registry") or DOCKER_HUB
    return f"docker://{registry}#{m.group('repo')}:{m.group('digest')}"
