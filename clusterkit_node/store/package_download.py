"""The network side of packages-fetch (package_fetch.py): NVIDIA's index and package files over HTTPS.

Why a module of its own: everything that can hang or fail transiently is here, bounded: timeouts per operation, a
deadline per file, a bounded retry with backoff for what is transient (timeouts, resets, 5xx, 429), redirects never
from https to anything else, sizes capped. Trust is the index's sha256s, over TLS to the repository (NVIDIA's GPG
signatures are not checked): a package file is checked for size and sha256 against the index as it arrives, an rpm
primary file against repomd's sha256. Failures are one line naming what failed, with a hint (FetchError); never a
traceback.

Stdlib only, Python 3.9.
"""
from __future__ import annotations

import hashlib
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from typing import Callable, List, Tuple

from clusterkit_node.contract.console import log
from clusterkit_node.store.package_index import (
    INDEX_LIMIT,
    FetchError,
    IndexEntry,
    Request,
    decompress,
    parse_packages,
    parse_primary,
    primary_href_path,
    primary_location,
)

FILE_LIMIT = 512 << 20    # the packages are a few MB
CHUNK = 1 << 16
HINT = ("the head node needs HTTPS to nvidia.github.io (a NAT gateway, or https_proxy); on an AMI that bakes "
        "nvidia-container-cli in, set containers.nvidia_container_cli.install: false with a reason")
_RETRY_HTTP = (408, 429, 500, 502, 503, 504)


@dataclass(frozen=True)
class Fetcher:
    """How downloads behave: per-operation timeout, attempts per URL, backoff before the first retry (doubled)."""

    timeout: float = 30.0
    attempts: int = 3
    backoff: float = 5.0
    deadline: float = 600.0  # seconds one file may take in all (a stalled trickle is a failure, not a hang)


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
    path, _ = primary_href_path(href, req.index_url)
    url = req.base + path
    data = get(url, fetcher)
    if digest and hashlib.sha256(data).hexdigest() != digest:
        raise FetchError(f"{url}: sha256 {hashlib.sha256(data).hexdigest()} is not the {digest} {req.index_url} "
                         "gives (a mirror mid-update? the next run tries again)")
    return parse_primary(decompress(data, url), url), url
