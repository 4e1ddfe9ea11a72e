"""NVIDIA's repository index for packages-fetch (package_fetch.py): what to fetch, read from what the repository lists.

Why a module of its own: the index is untrusted text from the network; parsing it, refusing names that could leave
the repository or the set's directory, and picking the pinned version are pure functions, testable without a
server or a store.

- deb: ``<repo>/deb/<amd64|arm64>/Packages`` (RFC 822 stanzas; Filename relative to that directory, a flat
  repository); rpm: ``<repo>/rpm/<x86_64|aarch64>/repodata/repomd.xml`` -> its ``primary`` file (checked against
  repomd's sha256; gzip, bzip2, xz or plain) -> each package's name, arch, version ver/rel, sha256, size, href.
- Untrusted names: a file reaches the file system only under a plain name (package_set.file_name_ok); an href is
  used only as a relative URL path without ``..``, ``%``, a scheme or a host.

Stdlib only, Python 3.9.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from clusterkit_node.contract.console import UsageError
from clusterkit_node.contract.layout import package_set_dir
from clusterkit_node.store import package_set
from clusterkit_node.store.package_set import FORMAT_ARCH

COMPONENT = "nvidia-container-cli"
REPOSITORY_ENV = "CK_NVIDIA_REPOSITORY"
INDEX_LIMIT = 64 << 20    # an index larger than this is not NVIDIA's (theirs is well under 1 MB)
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_REPO_NS = "{http://linux.duke.edu/metadata/repo}"
_COMMON_NS = "{http://linux.duke.edu/metadata/common}"


class FetchError(Exception):
    """Something the network or the repository caused: one line (what failed, and a hint)."""


@dataclass(frozen=True)
class IndexEntry:
    package: str
    version: str   # the full version as the package manager writes it: 1.18.2-1
    upstream: str  # 1.18.2
    revision: str  # 1
    arch: str
    href: str      # relative to the index's base URL
    size: int
    sha256: str


@dataclass(frozen=True)
class Request:
    store: str
    os_name: str
    fmt: str         # rpm | deb
    arch: str        # x86_64 | aarch64
    version: str     # upstream, 1.18.2
    packages: Tuple[str, ...]  # install order
    repository: str  # root, no trailing slash

    @property
    def repo_arch(self) -> str:
        return FORMAT_ARCH[(self.fmt, self.arch)]

    @property
    def base(self) -> str:
        """The directory the index's hrefs are relative to."""
        return f"{self.repository}/{self.fmt}/{self.repo_arch}/"

    @property
    def index_url(self) -> str:
        return self.base + ("Packages" if self.fmt == "deb" else "repodata/repomd.xml")

    @property
    def directory(self) -> str:
        return package_set_dir(self.store, COMPONENT, self.version, self.os_name, self.arch)


# --- URLs and names from the index ----------------------------------------------------------------------------------

def repository_url(flag: Optional[str], env: Dict[str, str], profile_value: str) -> str:
    """The repository root: --repository, else $CK_NVIDIA_REPOSITORY, else the profile's; https, or http on loopback."""
    url = (flag or env.get(REPOSITORY_ENV) or profile_value).rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in _LOOPBACK:
        return url
    raise UsageError([f"repository {url!r}: expected an https:// URL (http:// only on a loopback address, for tests)"])


def safe_href(href: str, fmt: str, where: str) -> Tuple[str, str]:
    """(relative URL path, plain file name) of an index's href; FetchError for anything that could leave the
    repository or the set's directory (absolute, a scheme or host, ``..``, percent-escapes, an odd file name)."""
    parts = urllib.parse.urlsplit(href)
    path = href[2:] if href.startswith("./") else href
    segments = path.split("/")
    name = segments[-1]
    if (parts.scheme or parts.netloc or path.startswith("/") or "\\" in path or "%" in path or "?" in path
            or "#" in path or any(s in ("", ".", "..") for s in segments)
            or not package_set.file_name_ok(name, fmt)):
        raise FetchError(f"{where}: refused the file name {href!r} (a relative path to a plain .{fmt} name, "
                         f"no '..'): not a repository ClusterKit can trust; check the repository URL")
    return path, name


def primary_href_path(href: str, where: str) -> Tuple[str, str]:
    """repomd's primary href: the same rules as a package's, any plain name."""
    parts = urllib.parse.urlsplit(href)
    segments = href.split("/")
    if (parts.scheme or parts.netloc or href.startswith("/") or "\\" in href or "%" in href
            or any(s in ("", ".", "..") for s in segments)):
        raise FetchError(f"{where}: refused the primary location {href!r} (a relative path without '..')")
    return href, segments[-1]


def _version_key(text: str) -> Tuple[Tuple[int, object], ...]:
    """Order revisions like 1 < 2 < 10 (digits as numbers, the rest as text)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.findall(r"\d+|[^\d]+", text))


# --- indexes --------------------------------------------------------------------------------------------------------

def parse_packages(text: str, where: str) -> List[IndexEntry]:
    """A deb Packages file's stanzas (only those with every field this needs)."""
    out = []
    for stanza in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        fields: Dict[str, str] = {}
        for line in stanza.split("\n"):
            if not line or line[0] in " \t" or ":" not in line:
                continue  # continuation lines (Description) and junk
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        try:
            full = fields["version"]
            size = int(fields["size"])
            entry = (fields["package"], full, fields["architecture"], fields["filename"], fields["sha256"].lower())
        except (KeyError, ValueError):
            continue
        bare = full.split(":", 1)[1] if re.match(r"^\d+:", full) else full  # no epoch
        upstream, _, revision = bare.rpartition("-") if "-" in bare else (bare, "", "")
        out.append(IndexEntry(entry[0], full, upstream, revision, entry[2], entry[3], size, entry[4]))
    if not out:
        raise FetchError(f"{where}: no package stanzas (not a Debian Packages index?); check the repository URL")
    return out


def primary_location(data: bytes, where: str) -> Tuple[str, str]:
    """(href, sha256) of repomd.xml's primary data file."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise FetchError(f"{where}: not XML ({exc}); check the repository URL") from None
    for node in root.iter(f"{_REPO_NS}data"):
        if node.get("type") != "primary":
            continue
        loc, checksum = node.find(f"{_REPO_NS}location"), node.find(f"{_REPO_NS}checksum")
        if loc is None or not loc.get("href"):
            break
        digest = (checksum.text or "").strip().lower() if checksum is not None and checksum.get("type") == "sha256" \
            else ""
        return str(loc.get("href")), digest
    raise FetchError(f"{where}: names no primary data file (not an rpm repository's repomd.xml?)")


def decompress(data: bytes, where: str) -> bytes:
    """gzip, bzip2, xz or plain, by magic bytes (the extension is the repository's word only)."""
    try:
        if data[:2] == b"\x1f\x8b":
            return _bounded(gzip.GzipFile(fileobj=io.BytesIO(data)).read(INDEX_LIMIT + 1), where)
        if data[:3] == b"BZh":
            return _bounded(bz2.BZ2Decompressor().decompress(data, INDEX_LIMIT + 1), where)
        if data[:6] == b"\xfd7zXZ\x00":
            return _bounded(lzma.LZMADecompressor().decompress(data, INDEX_LIMIT + 1), where)
    except (OSError, EOFError, lzma.LZMAError, ValueError) as exc:
        raise FetchError(f"{where}: cannot decompress it ({exc}); check the repository") from None
    if data[:4] == b"\x28\xb5\x2f\xfd":
        raise FetchError(f"{where}: zstd-compressed, which this Python cannot read (a repository built with "
                         "createrepo_c --general-compress-type=gz serves gzip)")
    return data


def _bounded(data: bytes, where: str) -> bytes:
    if len(data) > INDEX_LIMIT:
        raise FetchError(f"{where}: larger than {INDEX_LIMIT >> 20} MB uncompressed: not an index ClusterKit reads")
    return data


def parse_primary(data: bytes, where: str) -> List[IndexEntry]:
    """primary.xml's packages (only those with a sha256 checksum)."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise FetchError(f"{where}: not XML ({exc}); check the repository") from None
    out = []
    for pkg in root.iter(f"{_COMMON_NS}package"):
        entry = _primary_entry(pkg)
        if entry is not None:
            out.append(entry)
    if not out:
        raise FetchError(f"{where}: lists no packages with a sha256 checksum; check the repository")
    return out


def _primary_entry(pkg: ET.Element) -> Optional[IndexEntry]:
    name, arch = pkg.findtext(f"{_COMMON_NS}name"), pkg.findtext(f"{_COMMON_NS}arch")
    version, checksum = pkg.find(f"{_COMMON_NS}version"), pkg.find(f"{_COMMON_NS}checksum")
    size, location = pkg.find(f"{_COMMON_NS}size"), pkg.find(f"{_COMMON_NS}location")
    if name is None or arch is None or version is None or checksum is None or size is None or location is None \
            or checksum.get("type") != "sha256":
        return None
    ver, rel = version.get("ver") or "", version.get("rel") or ""
    try:
        nbytes = int(size.get("package") or "")
    except ValueError:
        return None
    return IndexEntry(name.strip(), f"{ver}-{rel}", ver, rel, arch.strip(), location.get("href") or "", nbytes,
                      (checksum.text or "").strip().lower())


def select(entries: Sequence[IndexEntry], req: Request, where: str) -> List[IndexEntry]:
    """Each package of the profile's list at the pinned upstream version (the highest revision), in install order;
    FetchError naming the version and the index when one is missing."""
    arches = (req.repo_arch, "all" if req.fmt == "deb" else "noarch")
    out = []
    for name in req.packages:
        mine = [e for e in entries if e.package == name and e.arch in arches]
        pinned = [e for e in mine if e.upstream == req.version]
        if not pinned:
            listed = sorted({e.version for e in mine}, key=_version_key)[-5:]
            raise FetchError(f"{name} {req.version} ({req.repo_arch}) is not in {where} (it lists "
                             f"{', '.join(listed) or 'no version of it'}): pin a version NVIDIA publishes for "
                             f"{req.os_name} (containers.nvidia_container_cli.version), or check the repository URL")
        out.append(max(pinned, key=lambda e: _version_key(e.revision)))
    return out
