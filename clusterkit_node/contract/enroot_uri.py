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
from typing import NamedTuple, Optional, Tuple

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


def locked_location(locked_uri: str) -> Tuple[str, str]:
    """(registry, repository) of a lock's ``enroot_uri`` (Docker Hub's registry written out).
    Raises ValueError like import_uri."""
    m = _LOCKED_RE.fullmatch(locked_uri)
    if not m:
        raise ValueError(f"{locked_uri!r} is not docker://[REGISTRY#]REPOSITORY@sha256:<64 hex>")
    return m.group("registry") or DOCKER_HUB, m.group("repo")


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


class ImageRequest(NamedTuple):
    """What enroot 4.x would fetch for a ``docker://`` URI: the registry host, the repository, and the tag
    or ``sha256:`` digest it asks the registry's manifest endpoint for (``latest`` when none is given)."""

    registry: str
    repository: str
    reference: str

    @property
    def digest(self) -> Optional[str]:
        return self.reference if self.reference.startswith("sha256:") else None


# enroot 4.1.2 src/docker.sh, docker::_parse_uri: the same alternatives, tried in the same order.
# USER is enroot's [[:alnum:]_.!~*\'()%\;:\&=+$,-@]: in a bracket expression the backslashes are literal
# and ",-@" is the range from "," to "@" (which takes in "/", digits, ":" to "?" and "@" itself).
_USER = r"(?:[A-Za-z0-9_.!~*\\'()%;:&=+$,\-./<=>?@]+@)?"
_IMAGE = r"[a-z0-9/._-]+"
_TAG = r"[A-Za-z0-9._:-]+"
_DIGEST = r"sha256:[A-Za-z0-9]+"
_REQUEST_FORMS = [
    (re.compile(rf"docker://{_USER}(?P<reg>[^/#]+)/(?P<img>{_IMAGE}):{_TAG}@(?P<ref>{_DIGEST})"), "slash"),
    (re.compile(rf"docker://{_USER}(?P<reg>[^/#]+)/(?P<img>{_IMAGE})@(?P<ref>{_DIGEST})"), "slash"),
    (re.compile(rf"docker://{_USER}(?P<reg>[^/#]+)/(?P<img>{_IMAGE})(?::(?P<ref>{_TAG}))?"), "slash"),
    (re.compile(rf"docker://{_USER}(?P<img>[^/@#:]+):{_TAG}@(?P<ref>{_DIGEST})"), "hub"),
    (re.compile(rf"docker://{_USER}(?P<img>[^/@#:]+)@(?P<ref>{_DIGEST})"), "hub"),
    (re.compile(rf"docker://{_USER}(?P<img>[^/@#:]+)(?::(?P<ref>{_TAG}))?"), "hub"),
    (re.compile(rf"docker://{_USER}(?P<reg>[^#/@]+)#(?P<img>{_IMAGE}):{_TAG}@(?P<ref>{_DIGEST})"), "hash"),
    (re.compile(rf"docker://{_USER}(?P<reg>[^#/@]+)#(?P<img>{_IMAGE})@(?P<ref>{_DIGEST})"), "hash"),
    (re.compile(rf"docker://{_USER}(?P<reg>[^#/@]+)#(?P<img>{_IMAGE})(?::(?P<ref>{_TAG}))?"), "hash"),
]


def parse_request(uri: str) -> Optional[ImageRequest]:
    """What enroot 4.x's ``docker::_parse_uri`` makes of URI (bash ``=~`` is a search anchored by ^...$,
    i.e. a full match; a leading ``USER@`` is credentials only); None where enroot says "Invalid image
    reference". A first path component without "." or ":" is a Docker Hub namespace, and a
    one-component Docker Hub name gets ``library/``, exactly as enroot does."""
    for pattern, form in _REQUEST_FORMS:
        m = pattern.fullmatch(uri)
        if not m:
            continue
        ref = m.group("ref") or "latest"
        if form == "hub":
            return ImageRequest(DOCKER_HUB, f"library/{m.group('img')}", ref)
        registry = m.group("reg")
        if form == "slash" and not re.search(r"[.:]", registry):
            return ImageRequest(DOCKER_HUB, f"{registry}/{m.group('img')}", ref)
        return ImageRequest(registry, m.group("img"), ref)
    return None
