"""``clusterkit_node.pyz packages-fetch``: NVIDIA's nvidia-container-cli packages into the store, once (head node).

Why: enroot's 98-nvidia.sh hook needs ``nvidia-container-cli`` for every image that sets NVIDIA_VISIBLE_DEVICES,
and ParallelCluster's AMIs lack it. Compute nodes must not each reach the internet, and must not install what
changed on the shared file system after it was checked; so the head node reads NVIDIA's repository index for the
cluster's OS (the profile's package_format) and its own architecture (ParallelCluster requires the compute nodes'),
picks each package of node_profiles.json's list at the pinned upstream version (the highest revision), downloads
each over HTTPS with timeouts and a bounded retry, checks size and sha256 against the index, and publishes the set
with its record (package_set.py) where GPU nodes install it from (``layout.package_set_dir``).

- deb: ``<repo>/deb/<amd64|arm64>/Packages`` (RFC 822 stanzas; Filename relative to that directory, a flat
  repository); rpm: ``<repo>/rpm/<x86_64|aarch64>/repodata/repomd.xml`` -> its ``primary`` file (checked against
  repomd's sha256; gzip, bzip2, xz or plain) -> each package's name, arch, version ver/rel, sha256, size, href.
- Trust: the index's sha256s, over TLS to the repository (NVIDIA's GPG signatures are not checked); every file's
  size and sha256 against the index before it is published, and again by every node against the record.
- Untrusted names: a file reaches the file system only under a plain name (package_set.file_name_ok); an href is
  used only as a relative URL path without ``..``, ``%``, a scheme or a host.
- Publishing (docs/store-concurrency.md, package-sets-publish-whole): checked without a lock first (a valid set is
  left alone: no network); else under ``<staging>/packages.lock`` checked again, downloaded into a private temp dir
  ``<staging>/tmp/pkgset.*.tmp-<pid>``, packages.json written last, and the directory renamed into place. A set
  that does not match its record is re-fetched and swapped in the same way.
- Failures the network or the repository can cause are one line naming what failed, with a hint; never a traceback.
- The repository root is the profile's; ``--repository`` or ``CK_NVIDIA_REPOSITORY`` (tests: a loopback server)
  override it on the head node only: http:// is accepted for loopback hosts alone.

Stdlib only, Python 3.9.
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from http.client import HTTPException
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from clusterkit_node.contract import profiles as node_profiles
from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, UsageError, error, log
from clusterkit_node.contract.layout import (
    PACKAGE_SET_NAME,
    PACKAGE_SET_TMP_RE,
    package_set_dir,
    package_set_tmp,
    tmp_dir,
)
from clusterkit_node.store import package_set
from clusterkit_node.store.atomic_files import ensure_dir, fsync_dir
from clusterkit_node.store.concurrency import packages_lock
from clusterkit_node.store.package_set import FORMAT_ARCH, PackageFile, PackageSet, PackageSetError
from clusterkit_node.store.staging import ensure_store

COMPONENT = "nvidia-container-cli"
REPOSITORY_ENV = "CK_NVIDIA_REPOSITORY"
INDEX_LIMIT = 64 << 20    # an index larger than this is not NVIDIA's (theirs is well under 1 MB)
FILE_LIMIT = 512 << 20    # the packages are a few MB
CHUNK = 1 << 16
HINT = ("the head node needs HTTPS to nvidia.github.io (a NAT gateway, or https_proxy); on an AMI that bakes "
        "nvidia-container-cli in, set containers.nvidia_container_cli.install: false with a reason")
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_RETRY_HTTP = (408, 429, 500, 502, 503, 504)
_REPO_NS = "{http://linux.duke.edu/metadata/repo}"
_COMMON_NS = "{http://linux.duke.edu/metadata/common}"


class FetchError(Exception):
    """Something the network or the repository caused: one line (what failed, and a hint)."""


@dataclass(frozen=True)
class Fetcher:
    """How downloads behave: per-operation timeout, attempts per URL, backoff before the first retry (doubled)."""

    timeout: float = 30.0
    attempts: int = 3
    backoff: float = 5.0
    deadline: float = 600.0  # seconds one file may take in all (a stalled trickle is a failure, not a hang)


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


# --- the network ----------------------------------------------------------------------------------------------------

class _NoDowngrade(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never from https to anything else."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if req.full_url.startswith("https://") and not newurl.startswith("https://"):
            raise urllib.error.HTTPError(newurl, code, f"refused redirect from https to {newurl}", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_NoDowngrade)


def _attempts(url: str, fetcher: Fetcher, once: Callable[[], bytes]) -> bytes:
    """once() with the bounded retry: transient failures (timeouts, resets, 5xx, 429) are retried, others not."""
    attempts = max(1, fetcher.attempts)
    for attempt in range(1, attempts + 1):
        try:
            return once()
        except urllib.error.HTTPError as exc:
            why = f"HTTP {exc.code} {exc.reason}"
            if exc.code not in _RETRY_HTTP:
                raise FetchError(f"cannot fetch {url}: {why} ({HINT})") from None
        except FetchError:
            raise
        except (urllib.error.URLError, socket.timeout, OSError, HTTPException) as exc:
            why = str(getattr(exc, "reason", None) or exc) or type(exc).__name__
        if attempt == attempts:
            raise FetchError(f"cannot fetch {url}: {why} ({attempts} attempts; {HINT})")
        delay = fetcher.backoff * (2 ** (attempt - 1))
        log(f"{url}: {why}; retrying in {delay:g} s (attempt {attempt}/{attempts})")
        time.sleep(delay)
    raise AssertionError("not reached")


def get(url: str, fetcher: Fetcher, limit: int = INDEX_LIMIT) -> bytes:
    """A small document (an index) in memory."""
    def once() -> bytes:
        with _OPENER.open(url, timeout=fetcher.timeout) as resp:
            data: bytes = resp.read(limit + 1)
        if len(data) > limit:
            raise FetchError(f"{url}: larger than {limit >> 20} MB: not an index ClusterKit reads")
        return data
    return _attempts(url, fetcher, once)


def download(url: str, path: str, entry: IndexEntry, fetcher: Fetcher) -> None:
    """One package file to path (a new file in the private temp dir), checked against the index's size and sha256."""
    if entry.size > FILE_LIMIT:
        raise FetchError(f"{url}: the index says {entry.size} bytes, more than a package of this kind can be")

    def once() -> bytes:
        digest = hashlib.sha256()
        got = 0
        started = time.monotonic()
        with _OPENER.open(url, timeout=fetcher.timeout) as resp:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                while True:
                    chunk = resp.read(CHUNK)
                    if not chunk:
                        break
                    got += len(chunk)
                    if got > entry.size:
                        raise FetchError(f"{url}: more than the {entry.size} bytes the index gives: refused, "
                                         "nothing published")
                    if time.monotonic() - started > fetcher.deadline:
                        raise socket.timeout(f"not complete after {fetcher.deadline:g} s")
                    digest.update(chunk)
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        if got != entry.size:
            raise FetchError(f"{url}: {got} bytes, the index gives {entry.size}: refused, nothing published")
        if digest.hexdigest() != entry.sha256:
            raise FetchError(f"{url}: sha256 {digest.hexdigest()} is not the {entry.sha256} the index gives: "
                             "refused, nothing published (a corrupted download or a changed file; the next run "
                             "tries again)")
        return b""
    _attempts(url, fetcher, once)


def read_index(req: Request, fetcher: Fetcher) -> Tuple[List[IndexEntry], str]:
    """(entries, the URL their sha256s come from)."""
    if req.fmt == "deb":
        data = get(req.index_url, fetcher)
        return parse_packages(decompress(data, req.index_url).decode("utf-8", "replace"), req.index_url), \
            req.index_url
    href, digest = primary_location(get(req.index_url, fetcher), req.index_url)
    path, _ = _href_path(href, req.index_url)
    url = req.base + path
    data = get(url, fetcher)
    if digest and hashlib.sha256(data).hexdigest() != digest:
        raise FetchError(f"{url}: sha256 {hashlib.sha256(data).hexdigest()} is not the {digest} {req.index_url} "
                         "gives (a mirror mid-update? the next run tries again)")
    return parse_primary(decompress(data, url), url), url


def _href_path(href: str, where: str) -> Tuple[str, str]:
    """repomd's primary href: the same rules as a package's, any plain name."""
    parts = urllib.parse.urlsplit(href)
    segments = href.split("/")
    if (parts.scheme or parts.netloc or href.startswith("/") or "\\" in href or "%" in href
            or any(s in ("", ".", "..") for s in segments)):
        raise FetchError(f"{where}: refused the primary location {href!r} (a relative path without '..')")
    return href, segments[-1]


# --- the store ------------------------------------------------------------------------------------------------------

def published_problem(req: Request) -> Optional[str]:
    """None when a set for this request is published and every file matches its record (sha256 of a few MB: cheap);
    else why it must be fetched ("" when there is none)."""
    try:
        found = package_set.read(req.store, COMPONENT, req.version, req.os_name, req.arch)
        if found is None:
            return ""
        if found.format != req.fmt or tuple(f.package for f in found.files) != req.packages:
            return (f"it holds {found.format} packages {', '.join(f.package for f in found.files)}, not "
                    f"{req.fmt} {', '.join(req.packages)}")
        package_set.verified_paths(req.directory, found)
    except PackageSetError as exc:
        return str(exc)
    return None


def clean_debris(store: str) -> None:
    """Temp dirs of killed fetches (under the packages lock no other fetch runs: all of them are debris)."""
    try:
        names = os.listdir(tmp_dir(store))
    except FileNotFoundError:
        return
    for name in names:
        path = os.path.join(tmp_dir(store), name)
        if PACKAGE_SET_TMP_RE.match(name) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
            log(f"removed {path} (left by an interrupted package fetch)")


def fetch_into(req: Request, work: str, fetcher: Fetcher) -> PackageSet:
    """Download and check every file into work (private, 0700), then its record, written last."""
    entries, verified_against = read_index(req, fetcher)
    chosen = select(entries, req, verified_against)
    files = []
    for entry in chosen:
        path, name = safe_href(entry.href, req.fmt, verified_against)
        url = req.base + path
        log(f"{COMPONENT} {req.version}: downloading {url} ({entry.size} bytes)")
        download(url, os.path.join(work, name), entry, fetcher)
        files.append(PackageFile(name, entry.package, entry.version, entry.sha256, entry.size))
    if len({f.file for f in files}) != len(files):
        raise FetchError(f"{verified_against}: two packages share one file name; check the repository")
    pset = PackageSet(COMPONENT, req.version, req.os_name, req.arch, req.fmt, tuple(files), verified_against, False)
    package_set.parse(package_set.as_dict(pset), verified_against)  # what nodes will accept, checked before publish
    record = os.path.join(work, PACKAGE_SET_NAME)
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, pset.to_json().encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return pset


def publish(req: Request, work: str) -> None:
    """One rename of the checked directory into place; a set it replaces is moved aside first and removed after."""
    final = req.directory
    parent = os.path.dirname(final)
    for d in (os.path.dirname(os.path.dirname(parent)), os.path.dirname(parent), parent):
        ensure_dir(d)
    os.chmod(work, 0o755)
    fsync_dir(work)
    old = ""
    if os.path.lexists(final):
        old = package_set_tmp(req.store, COMPONENT, req.version, req.os_name, req.arch, "old")
        os.rename(final, old)
    os.rename(work, final)
    fsync_dir(parent)
    if old:
        shutil.rmtree(old) if os.path.isdir(old) and not os.path.islink(old) else os.unlink(old)
        fsync_dir(os.path.dirname(old))


def fetch_set(req: Request, fetcher: Fetcher) -> str:
    """Make sure the set is published and valid; "present" (nothing downloaded) or "fetched". FetchError on failure."""
    problem = published_problem(req)
    if problem is None:
        log(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch}: present in {req.directory} (checked against "
            f"its {PACKAGE_SET_NAME})")
        return "present"
    ensure_store(req.store)
    with packages_lock(req.store):
        problem = published_problem(req)  # another head node may have published it meanwhile
        if problem is None:
            log(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch}: published by a concurrent fetch")
            return "present"
        if problem:
            log(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch}: fetching again: {problem}")
        clean_debris(req.store)
        work = package_set_tmp(req.store, COMPONENT, req.version, req.os_name, req.arch)
        os.mkdir(work, 0o700)
        try:
            pset = fetch_into(req, work, fetcher)
            publish(req, work)
        finally:
            if os.path.isdir(work):
                shutil.rmtree(work)
    log(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch}: published "
        f"{', '.join(f'{f.file} ({f.sha256[:12]})' for f in pset.files)} in {req.directory}, checked against "
        f"{pset.verified_against}")
    return "fetched"


# --- the command ----------------------------------------------------------------------------------------------------

def request_for(args: argparse.Namespace, env: Dict[str, str],
                profiles: Optional[node_profiles.Profiles] = None) -> Optional[Request]:
    """The request the flags and the node profiles make, or None when there is nothing to do (off); UsageError for
    what the operator must fix (unknown OS, a malformed or refused version, a bad repository URL)."""
    version = (args.version or "").strip()
    if version == "off":
        return None
    profiles = profiles or node_profiles.load()
    profile = profiles.get(args.os)
    if profile is None:
        raise UsageError([f"--os {args.os}: not a node profile ({', '.join(sorted(profiles.profiles))})"])
    cli = profiles.container_cli
    version = version or str(cli.version.value)
    if not re.fullmatch(node_profiles.CLI_VERSION_RE, version):
        raise UsageError([f"--version {version}: expected a libnvidia-container version such as "
                          f"{cli.version.value}, or off"])
    refused = cli.refused(version)
    if refused:
        raise UsageError([f"{refused}: refused; pin another release, e.g. {cli.version.value} "
                          "(containers.nvidia_container_cli.version)"])
    arch = package_set.normalize_arch(args.arch or os.uname().machine)
    fmt = str(profile.package_format.value)
    if (fmt, arch) not in FORMAT_ARCH:
        raise UsageError([f"--arch {arch}: NVIDIA publishes these packages for x86_64 and aarch64 only"])
    return Request(os.path.abspath(args.store), profile.os, fmt, arch, version, tuple(cli.packages.value),
                   repository_url(args.repository, env, str(cli.repository.value)))


def cmd_packages_fetch(args: argparse.Namespace) -> int:
    req = request_for(args, dict(os.environ))
    if req is None:
        log(f"{COMPONENT}: off (containers.nvidia_container_cli.install: false): nothing to fetch")
        return EXIT_OK
    fetcher = Fetcher(timeout=args.timeout, attempts=max(1, args.attempts), backoff=max(0.0, args.backoff))
    try:
        fetch_set(req, fetcher)
    except FetchError as exc:
        error(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch} not fetched: {exc}")
        return EXIT_FAILED
    return EXIT_OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("packages-fetch", help="head node: fetch NVIDIA's nvidia-container-cli packages for this OS "
                                              "and architecture into the store, checked by sha256 (once)")
    p.add_argument("--store", required=True, help="image store directory, e.g. /fsx/containers")
    p.add_argument("--os", required=True, help="the cluster's OS (a node profile: alinux2023, ubuntu2204, ...)")
    p.add_argument("--version", default="", help="libnvidia-container version (CK_NVIDIA_CLI), or off; default: "
                                                 "the pin in node_profiles.json")
    p.add_argument("--arch", default="", help="x86_64 or aarch64 (default: this node's; PC requires the compute "
                                              "nodes' to match)")
    p.add_argument("--repository", default="", help=f"repository root instead of the profile's (tests; also "
                                                     f"${REPOSITORY_ENV}); https, or http on loopback")
    p.add_argument("--attempts", type=int, default=3, help="tries per URL on a transient failure (default 3)")
    p.add_argument("--backoff", type=float, default=5.0, help="seconds before the first retry, doubled (default 5)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a connection may stall (default 30)")
