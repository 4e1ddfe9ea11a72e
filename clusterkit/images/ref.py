"""Container image references: parse strictly, name registries the way enroot and ECR need.

Spec validation calls `parse_image_ref` for every image, so this module is stdlib-only and does no I/O.
The grammar follows the OCI distribution / docker reference grammar (name [":" tag] ["@" digest]),
plus enroot's `REGISTRY#REPOSITORY` form and an optional `docker://` prefix. It is stricter than docker
in three ways, each to catch a mistake before a cluster is built:
  * a reference must carry a tag or a digest (`latest` must be written, so a reviewer sees it);
  * the only digest algorithm is sha256 with 64 lowercase hex characters (what registries serve);
  * a first path component is a registry only if it contains "." or ":" or is "localhost" (docker also
    treats an uppercase first component as a host; here `Nvidia/pytorch` is an uppercase-repository error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterkit_node.contract.lock import DIGEST_RE

DOCKER_HUB = "registry-1.docker.io"
_DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", DOCKER_HUB})

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])"
_REGISTRY_RE = re.compile(rf"{_HOST}(?::[0-9]+)?")
_PATH_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SHA256_HEX_RE = re.compile(r"[0-9a-f]+")
_ECR_PRIVATE_RE = re.compile(
    r"(?P<account>[0-9]{12})\.dkr[.-]ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)"
    r"\.(?:amazonaws\.com(?:\.cn)?|on\.aws)"
)
_MAX_NAME = 255
_PATH_HINT = "components are lowercase letters and digits joined by '.', '_', '__' or '-'"
_TAG_HINT = "tags match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST_HINT = "write sha256:<64 lowercase hex>"


class ImageRefError(ValueError):
    """A reference a user wrote is malformed; the message is one phrase plus a hint in parentheses."""


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def is_docker_hub(self) -> bool:
        return self.registry == DOCKER_HUB

    @property
    def is_ecr_private(self) -> bool:
        return self.ecr_account_region is not None

    @property
    def ecr_account_region(self) -> tuple[str, str] | None:
        match = _ECR_PRIVATE_RE.fullmatch(self.registry)
        return (match["account"], match["region"]) if match else None

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest when pinned (it wins over a tag), else the tag."""
        return self.digest or self.tag  # type: ignore[return-value]  # parse guarantees one of them

    @property
    def name(self) -> str:
        """Human form for messages: Docker Hub images as people write them (`ubuntu`, `nvidia/cuda`)."""
        if self.is_docker_hub:
            return self.repository.removeprefix("library/")
        return f"{self.registry}/{self.repository}"

    def with_reference(self, reference: str) -> str:
        """Message label for a fetch of `reference` (a tag or a digest) in this repository."""
        sep = "@" if ":" in reference else ":"
        return f"{self.name}{sep}{reference}"

    def enroot_uri(self, digest: str) -> str:
        _check_digest(digest)
        if self.is_docker_hub:
            return f"docker://{self.repository}@{digest}"
        return f"docker://{self.registry}#{self.repository}@{digest}"

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_image_ref(text: str) -> ImageRef:
    if not isinstance(text, str) or not text.strip():
        raise ImageRefError("image reference is empty (write e.g. nvcr.io/nvidia/pytorch:25.01-py3)")
    if any(ch.isspace() for ch in text):
        raise ImageRefError(f"image reference {text!r} contains whitespace (remove spaces, tabs and newlines)")
    rest = text
    scheme = _SCHEME_RE.match(rest)
    if scheme:
        if scheme.group(1) != "docker":
            raise ImageRefError(
                f"scheme '{scheme.group(1)}://' is not supported (write a plain reference or docker://...)"
            )
        rest = rest[scheme.end():]
        if not rest:
            raise ImageRefError("image reference is empty after 'docker://' (write e.g. docker://ubuntu:22.04)")

    registry: str | None = None
    if "#" in rest:
        registry, rest = rest.split("#", 1)
        if "#" in rest:
            raise ImageRefError(f"image reference {text!r} has more than one '#' (enroot form is REGISTRY#REPOSITORY)")
        if "@" in registry:
            raise ImageRefError(
                "user names in image references are not supported (remove 'USER@'; registry credentials come "
                "from the environment)"
            )
        if not registry:
            raise ImageRefError(f"registry before '#' is empty in {text!r} (write REGISTRY#REPOSITORY or drop '#')")
        _check_registry(registry)

    name_tag, digest = rest, None
    if "@" in rest:
        name_tag, digest = rest.split("@", 1)
        _check_digest(digest)
    name, tag = name_tag, None
    colon = name_tag.rfind(":")
    if colon > name_tag.rfind("/"):
        name, tag = name_tag[:colon], name_tag[colon + 1:]
        _check_tag(tag)

    if registry is None:
        first, slash, remainder = name.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, name = first, remainder
            _check_registry(registry)
        else:
            registry = DOCKER_HUB
    _check_repository(name)  # as written: messages quote what the user typed, not the library/ form
    if registry in _DOCKER_HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in name:
            name = f"library/{name}"

    if tag is None and digest is None:
        shown = name.removeprefix("library/") if registry == DOCKER_HUB else f"{registry}/{name}"
        raise ImageRefError(
            f"image '{shown}' has no tag or digest (write '{shown}:latest' to follow latest, "
            f"or pin '{shown}@sha256:<64 hex>')"
        )
    return ImageRef(registry=registry, repository=name, tag=tag, digest=digest)


def is_sha256_digest(value: object) -> bool:
    """The digest form the lock and the nodes accept (clusterkit_node.contract.lock.DIGEST_RE)."""
    return isinstance(value, str) and DIGEST_RE.fullmatch(value) is not None


def _check_registry(registry: str) -> None:
    if not _REGISTRY_RE.fullmatch(registry):
        raise ImageRefError(
            f"registry '{registry}' is not a valid host[:port] (letters, digits, '-' and '.', e.g. nvcr.io)"
        )
    port = registry.rpartition(":")[2] if not registry.endswith("]") else ""
    if ":" in registry and not registry.endswith("]") and not 0 < int(port) < 65536:
        raise ImageRefError(f"registry '{registry}' has port {port} (ports are 1-65535)")


def _check_repository(name: str) -> None:
    if not name:
        raise ImageRefError("repository is empty (write e.g. nvidia/pytorch after the registry)")
    if name != name.lower():
        raise ImageRefError(f"repository '{name}' has uppercase letters (repository names are lowercase)")
    for component in name.split("/"):
        if not component:
            raise ImageRefError(f"repository '{name}' has an empty path component ({_PATH_HINT})")
        if not _PATH_COMPONENT_RE.fullmatch(component):
            raise ImageRefError(f"repository '{name}' has invalid component '{component}' ({_PATH_HINT})")
    if len(name) > _MAX_NAME:
        raise ImageRefError(f"repository is {len(name)} characters long (at most {_MAX_NAME})")


def _check_tag(tag: str) -> None:
    if not tag:
        raise ImageRefError(f"tag is empty ({_TAG_HINT})")
    if len(tag) > 128 and re.fullmatch(r"[A-Za-z0-9_.-]+", tag):
        raise ImageRefError(f"tag is {len(tag)} characters long (tags have at most 128)")
    if not _TAG_RE.fullmatch(tag):
        raise ImageRefError(f"tag '{tag}' has invalid characters ({_TAG_HINT})")


def _check_digest(digest: str) -> None:
    algorithm, colon, hexpart = digest.partition(":")
    if not colon or not algorithm:
        raise ImageRefError(f"digest '{digest}' is not ALGORITHM:HEX ({_DIGEST_HINT})")
    if algorithm != "sha256":
        raise ImageRefError(f"digest algorithm '{algorithm}' is not supported (only sha256; {_DIGEST_HINT})")
    if hexpart and not _SHA256_HEX_RE.fullmatch(hexpart):
        raise ImageRefError(f"digest '{digest}' is not lowercase hex ({_DIGEST_HINT})")
    if len(hexpart) != 64:
        raise ImageRefError(f"digest has {len(hexpart)} hex characters (sha256 digests have 64)")
