"""A small OCI distribution API client: resolve a tag or digest to one platform's manifest digest and size.

Why not a library: the lock needs three facts (platform manifest digest, its media type, compressed size)
and stdlib urllib gets them with anonymous bearer tokens the same way docker and enroot do. Every manifest
byte string is hashed here, so a registry (or a proxy) serving different bytes than it names is an error,
not a silently wrong lock.

The resolution logic (index -> platform manifest -> size, config platform check) is shared with the ECR
path in images.py through `resolve_image`, which only needs two fetch functions.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import os
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clusterkit.images.ref import ImageRef, is_sha256_digest

MEDIA_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_MEDIA_TYPES = (MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST)
IMAGE_MEDIA_TYPES = (MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST)
ACCEPTED_MEDIA_TYPES = INDEX_MEDIA_TYPES + IMAGE_MEDIA_TYPES
_SCHEMA1_MEDIA_TYPES = frozenset({
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
})
_GENERIC_CONTENT_TYPES = frozenset({"", "application/json", "text/plain", "application/octet-stream"})
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # the distribution spec's manifest limit
MAX_CONFIG_BYTES = 16 * 1024 * 1024
_MAX_TOKEN_BYTES = 1024 * 1024
CREDENTIALS_ENV = "CK_REGISTRY_CREDENTIALS"
_CHALLENGE_PARAM_RE = re.compile(r'([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))')


class RegistryError(Exception):
    """Resolving an image failed; the message is one line naming the image, the problem and a hint."""


class RegistryUnreachable(RegistryError):
    """No answer: the registry timed out, refused or dropped the connection. The spec may be right; retry later."""


DEFAULT_TIMEOUT_S = 30.0
WAIT_NOTICE_S = 5.0  # a request still unanswered after this long says so on stderr (a silent wait looks hung)


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}"

    def rank(self, os_name: object, architecture: object, variant: object) -> int | None:
        """How well an (os, architecture, variant) triple serves this platform: 0 best, None unusable.

        arm64 nodes (Graviton) run arm64/v8 images; an index may list the variant or omit it. amd64
        prefers the baseline image over microarchitecture levels (v2/v3) when an index offers both.
        """
        if os_name != self.os or architecture != self.architecture:
            return None
        if self.architecture == "arm64":
            arm64: dict[object, int] = {"v8": 0, None: 1, "": 1}
            return arm64.get(variant)
        amd64: dict[object, int] = {None: 0, "": 0, "v1": 1, "v2": 2, "v3": 3}
        return amd64.get(variant)


_PLATFORMS = {
    "linux/amd64": Platform("linux", "amd64"),
    "linux/arm64": Platform("linux", "arm64"),
    "linux/arm64/v8": Platform("linux", "arm64"),
}


def parse_platform(text: str) -> Platform:
    """The platforms ParallelCluster nodes run; `str()` of the result is the lock's normalized form."""
    try:
        return _PLATFORMS[text]
    except (KeyError, TypeError):
        raise ValueError(f"platform {text!r} is not supported (use linux/amd64 or linux/arm64)") from None


@dataclass(frozen=True)
class Manifest:
    """One manifest or index document, with the digest of its exact bytes."""

    label: str
    digest: str
    media_type: str
    body: bytes
    document: dict[str, Any]

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_MEDIA_TYPES


@dataclass(frozen=True)
class ResolvedImage:
    digest: str                 # the platform manifest's digest (what enroot imports)
    media_type: str
    compressed_size: int        # config.size + sum(layers[].size)
    index_digest: str | None    # the manifest list / index the platform manifest was chosen from
    env: tuple[str, ...] = ()   # the image config's Env ("KEY=VALUE"), where the makers declare versions


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def parse_manifest(
    label: str,
    body: bytes,
    *,
    content_type: str | None = None,
    header_digest: str | None = None,
    expected_digest: str | None = None,
) -> Manifest:
    """Check a fetched manifest's bytes against the digests around it and classify it."""
    computed = sha256_digest(body)
    if expected_digest is not None and computed != expected_digest:
        raise RegistryError(
            f"{label}: manifest bytes hash to {computed}, not the requested digest (the registry served "
            "different content; do not trust this registry or proxy)"
        )
    if header_digest:
        if not is_sha256_digest(header_digest):
            raise RegistryError(f"{label}: registry sent digest {header_digest!r} (expected sha256:<64 hex>)")
        if header_digest != computed:
            raise RegistryError(
                f"{label}: Docker-Content-Digest {header_digest} does not match the manifest bytes "
                f"({computed}) (the registry or a proxy altered the manifest)"
            )
    document = _json_object(body, f"{label}: manifest")
    media_type = document.get("mediaType")
    header_type = (content_type or "").split(";")[0].strip().lower()
    if not isinstance(media_type, str) or not media_type:
        media_type = header_type if header_type not in _GENERIC_CONTENT_TYPES else ""
    if not media_type and isinstance(document.get("manifests"), list):
        media_type = MEDIA_OCI_INDEX  # OCI allows an index without mediaType
    elif not media_type and "layers" in document:
        media_type = MEDIA_OCI_MANIFEST
    if media_type in _SCHEMA1_MEDIA_TYPES or document.get("schemaVersion") == 1:
        raise RegistryError(
            f"{label}: Docker schema 1 manifest (not supported; push the image again with a current docker or "
            "OCI tool)"
        )
    if media_type not in ACCEPTED_MEDIA_TYPES:
        raise RegistryError(
            f"{label}: unsupported manifest media type {media_type!r} (expected an OCI or Docker v2 image "
            "manifest or index)"
        )
    return Manifest(label=label, digest=computed, media_type=media_type, body=body, document=document)


def select_platform(index: Manifest, platform: Platform) -> str:
    """The digest of the best entry for `platform` in a manifest list / OCI index."""
    entries = index.document.get("manifests")
    if not isinstance(entries, list):
        raise RegistryError(f"{index.label}: manifest list has no 'manifests' array")
    candidates: list[tuple[int, int, dict[str, Any]]] = []
    available: set[str] = set()
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        given = entry.get("platform")
        plat = given if isinstance(given, dict) else {}
        os_name, arch, variant = plat.get("os"), plat.get("architecture"), plat.get("variant")
        if isinstance(os_name, str) and isinstance(arch, str) and os_name != "unknown":
            available.add("/".join(x for x in (os_name, arch, variant) if isinstance(x, str) and x))
        rank = platform.rank(os_name, arch, variant)
        if rank is not None:
            candidates.append((rank, position, entry))
    if not candidates:
        listed = ", ".join(sorted(available)) or "none"
        raise RegistryError(
            f"{index.label}: no {platform} image in the manifest list (available: {listed}; choose another "
            "image or change the cluster's architecture)"
        )
    best = min(candidates, key=lambda c: (c[0], c[1]))[2]
    digest = best.get("digest")
    if not is_sha256_digest(digest):
        raise RegistryError(f"{index.label}: {platform} entry has digest {digest!r} (expected sha256:<64 hex>)")
    return digest  # type: ignore[return-value]


def _descriptor_size(label: str, where: str, descriptor: object) -> int:
    size = descriptor.get("size") if isinstance(descriptor, dict) else None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise RegistryError(f"{label}: manifest {where} has no valid size ({size!r})")
    return size


def compressed_size(manifest: Manifest) -> int:
    """Bytes a node downloads for this image: config blob plus every layer as stored (compressed)."""
    layers = manifest.document.get("layers")
    if not isinstance(layers, list):
        raise RegistryError(f"{manifest.label}: image manifest has no 'layers' array")
    total = _descriptor_size(manifest.label, "config", manifest.document.get("config"))
    for position, layer in enumerate(layers):
        total += _descriptor_size(manifest.label, f"layers[{position}]", layer)
    return total


def config_digest(manifest: Manifest) -> str:
    config = manifest.document.get("config")
    digest = config.get("digest") if isinstance(config, dict) else None
    if not is_sha256_digest(digest):
        raise RegistryError(f"{manifest.label}: manifest config has digest {digest!r} (expected sha256:<64 hex>)")
    return digest  # type: ignore[return-value]


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    """``body`` parsed as a JSON object, or a one-line RegistryError saying ``what`` it should have been."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RegistryError(f"{what} is not valid JSON ({err})") from None
    if not isinstance(document, dict):
        raise RegistryError(f"{what} is not a JSON object")
    return document


def check_config_platform(label: str, config_body: bytes, platform: Platform) -> None:
    """A single-platform manifest names its platform only in the config blob; refuse the wrong one."""
    config = _json_object(config_body, f"{label}: image config")
    os_name, arch, variant = config.get("os"), config.get("architecture"), config.get("variant")
    if platform.rank(os_name, arch, variant) is None:
        found = "/".join(str(x) for x in (os_name, arch, variant) if x)
        raise RegistryError(
            f"{label}: image is {found or 'of unknown platform'}, not {platform} (choose a {platform} image "
            "or change the cluster's architecture)"
        )


def resolve_image(
    ref: ImageRef,
    platform: Platform,
    fetch_manifest: Callable[[str], Manifest],
    fetch_config: Callable[[str], bytes],
) -> ResolvedImage:
    """Tag or digest -> the platform manifest, following one manifest list / index if there is one.

    `fetch_manifest(reference)` must verify a digest reference against the bytes (parse_manifest does);
    `fetch_config(digest)` returns the config blob's bytes, checked here.
    """
    top = fetch_manifest(ref.reference)
    index_digest = None
    if top.is_index:
        child = fetch_manifest(select_platform(top, platform))
        if child.is_index:
            raise RegistryError(f"{child.label}: manifest list points to another list (nested lists are not supported)")
        top, index_digest = child, top.digest
    size = compressed_size(top)
    digest = config_digest(top)
    config = fetch_config(digest)
    if sha256_digest(config) != digest:
        raise RegistryError(f"{top.label}: config blob does not match its digest {digest} (corrupt download)")
    check_config_platform(top.label, config, platform)
    inner = _json_object(config, f"{top.label}: image config").get("config")
    env = inner.get("Env") if isinstance(inner, dict) else None
    return ResolvedImage(top.digest, top.media_type, size, index_digest=index_digest,
                         env=tuple(e for e in env if isinstance(e, str)) if isinstance(env, list) else ())


def credentials_from_env(environ: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Optional logins: CK_REGISTRY_CREDENTIALS='{"nvcr.io": {"username": "$oauthtoken", "password": "..."}}'."""
    raw = (os.environ if environ is None else environ).get(CREDENTIALS_ENV, "")
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise RegistryError(f"{CREDENTIALS_ENV} is not valid JSON ({err.msg})") from None
    creds: dict[str, tuple[str, str]] = {}
    if isinstance(data, dict):
        for host, entry in data.items():
            if not (isinstance(entry, dict) and isinstance(entry.get("username"), str)
                    and isinstance(entry.get("password"), str)):
                raise RegistryError(
                    f"{CREDENTIALS_ENV}: entry {host!r} needs string 'username' and 'password' "
                    '(format {"HOST": {"username": "...", "password": "..."}})'
                )
            creds[host] = (entry["username"], entry["password"])
        return creds
    raise RegistryError(
        f'{CREDENTIALS_ENV} must be a JSON object (format {{"HOST": {{"username": ..., "password": ...}}}})'
    )


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class _Response:
    status: int
    headers: Mapping[str, str]
    body: bytes


class _RedirectRefused(Exception):
    def __init__(self, url: str):
        super().__init__(url)
        self.url = url


class _NoDowngradeRedirect(urllib.request.HTTPRedirectHandler):
    """Follow redirects (blobs live on CDNs / S3) but never onto a URL our scheme policy refuses."""

    def __init__(self, url_allowed: Callable[[str], bool]):
        super().__init__()
        self._url_allowed = url_allowed

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if not self._url_allowed(newurl):
            raise _RedirectRefused(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class RegistryClient:
    """Anonymous (or CK_REGISTRY_CREDENTIALS) pulls of manifests and config blobs over https.

    Tests pass `allow_loopback_http=True` to talk plain http to a registry on 127.0.0.1, and may map a
    registry host to a loopback base URL with `base_urls` so messages keep real-looking names.
    Authorization headers are sent "unredirected": a redirect to a CDN or S3 never carries our token.
    """

    def __init__(
        self,
        *,
        opener: urllib.request.OpenerDirector | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        base_urls: Mapping[str, str] | None = None,
        allow_loopback_http: bool = False,
        credentials: Mapping[str, tuple[str, str]] | None = None,
        user_agent: str = "clusterkit-lock",
        on_wait: Callable[[str], None] | None = None,
        wait_notice_s: float = WAIT_NOTICE_S,
    ):
        self._allow_loopback_http = allow_loopback_http
        self._opener = opener or urllib.request.build_opener(_NoDowngradeRedirect(self._url_allowed))
        self._timeout = timeout
        self._base_urls = dict(base_urls or {})
        self._credentials = dict(credentials or {})
        self._user_agent = user_agent
        self._auth: dict[tuple[str, str], str] = {}
        self._on_wait = on_wait
        self._wait_notice_s = wait_notice_s
        for url in self._base_urls.values():
            self._check_url(url, "base URL")

    # -- public API -------------------------------------------------------------------------------

    def get_manifest(self, ref: ImageRef, reference: str) -> Manifest:
        label = ref.with_reference(reference)
        resp = self._registry_request(
            ref, "GET", f"/v2/{ref.repository}/manifests/{reference}", label,
            accept=", ".join(ACCEPTED_MEDIA_TYPES), max_bytes=MAX_MANIFEST_BYTES,
        )
        return parse_manifest(
            label, resp.body,
            content_type=resp.headers.get("Content-Type"),
            header_digest=resp.headers.get("Docker-Content-Digest"),
            expected_digest=reference if reference.startswith("sha256:") else None,
        )

    def head_manifest(self, ref: ImageRef, reference: str) -> tuple[str | None, str | None]:
        """(Docker-Content-Digest, Content-Type) without the body: a cheap 'has the tag moved?' check."""
        label = ref.with_reference(reference)
        resp = self._registry_request(
            ref, "HEAD", f"/v2/{ref.repository}/manifests/{reference}", label,
            accept=", ".join(ACCEPTED_MEDIA_TYPES), max_bytes=0,
        )
        digest = resp.headers.get("Docker-Content-Digest")
        if digest is not None and not is_sha256_digest(digest):
            raise RegistryError(f"{label}: registry sent digest {digest!r} (expected sha256:<64 hex>)")
        content_type = resp.headers.get("Content-Type")
        return digest, (content_type.split(";")[0].strip() if content_type else None)

    def get_blob(self, ref: ImageRef, digest: str, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
        label = ref.with_reference(digest)
        resp = self._registry_request(
            ref, "GET", f"/v2/{ref.repository}/blobs/{digest}", label, accept="*/*", max_bytes=max_bytes,
        )
        if sha256_digest(resp.body) != digest:
            raise RegistryError(f"{label}: blob bytes do not match their digest (corrupt download)")
        return resp.body

    def get_url(self, url: str, label: str, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
        """Plain GET without credentials, e.g. an ECR presigned layer URL."""
        resp = self._send("GET", url, label, {"Accept": "*/*"}, None, max_bytes)
        if resp.status != 200:
            raise RegistryError(f"{label}: {_error_detail(resp)} (HTTP {resp.status} from {_host(url)})")
        return resp.body

    def resolve(self, ref: ImageRef, platform: Platform) -> ResolvedImage:
        return resolve_image(
            ref, platform,
            lambda reference: self.get_manifest(ref, reference),
            lambda digest: self.get_blob(ref, digest),
        )

    # -- HTTP -------------------------------------------------------------------------------------

    def _base_url(self, registry: str) -> str:
        if registry in self._base_urls:
            return self._base_urls[registry].rstrip("/")
        host = urllib.parse.urlsplit(f"//{registry}").hostname
        scheme = "http" if self._allow_loopback_http and _is_loopback(host) else "https"
        return f"{scheme}://{registry}"

    def _url_allowed(self, url: str) -> bool:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "https":
            return True
        return parts.scheme == "http" and self._allow_loopback_http and _is_loopback(parts.hostname)

    def _check_url(self, url: str, label: str) -> None:
        if self._url_allowed(url):
            return
        raise RegistryError(
            f"{label}: refusing URL {url!r} (only https; plain http only for loopback test registries)"
        )

    def _registry_request(
        self, ref: ImageRef, method: str, path: str, label: str, *, accept: str, max_bytes: int
    ) -> _Response:
        url = self._base_url(ref.registry) + path
        scope = f"repository:{ref.repository}:pull"
        key = (ref.registry, scope)
        resp = self._send(method, url, label, {"Accept": accept}, self._auth.get(key), max_bytes)
        if resp.status == 401:
            self._auth[key] = self._authorize(ref.registry, resp, scope, label)
            resp = self._send(method, url, label, {"Accept": accept}, self._auth[key], max_bytes)
            if resp.status == 401:
                raise RegistryError(
                    f"{label}: {_error_detail(resp)} (HTTP 401 after authenticating; the repository may not "
                    f"exist or may be private: check the name, or set {CREDENTIALS_ENV})"
                )
        if resp.status != 200:
            raise RegistryError(f"{label}: {_error_detail(resp)} (HTTP {resp.status})")
        return resp

    def _authorize(self, registry: str, challenge_resp: _Response, scope: str, label: str) -> str:
        challenge = challenge_resp.headers.get("WWW-Authenticate", "")
        scheme, _, rest = challenge.strip().partition(" ")
        params = {
            key.lower(): re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare
            for key, quoted, bare in _CHALLENGE_PARAM_RE.findall(rest)
        }
        creds = self._credentials.get(registry)
        basic = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode() if creds else None
        if scheme.lower() == "basic":
            if basic is None:
                raise RegistryError(f"{label}: {registry} requires a login (HTTP 401) (set {CREDENTIALS_ENV})")
            return basic
        if scheme.lower() != "bearer" or not params.get("realm"):
            raise RegistryError(
                f"{label}: registry answered HTTP 401 with challenge {challenge!r} (expected "
                "'Bearer realm=...'; is this an OCI registry?)"
            )
        realm = params["realm"]
        query = {"service": params.get("service"), "scope": params.get("scope") or scope}
        encoded = urllib.parse.urlencode({k: v for k, v in query.items() if v})
        token_url = realm + ("&" if "?" in realm else "?") + encoded
        resp = self._send("GET", token_url, label, {"Accept": "application/json"}, basic, _MAX_TOKEN_BYTES)
        if resp.status != 200:
            raise RegistryError(
                f"{label}: token endpoint {_host(realm)} refused anonymous pull access ({_error_detail(resp)}, "
                f"HTTP {resp.status}) (the image may be private or misspelled; logins go in {CREDENTIALS_ENV})"
                if basic is None else
                f"{label}: token endpoint {_host(realm)} refused the credentials for {registry} "
                f"({_error_detail(resp)}, HTTP {resp.status}) (check {CREDENTIALS_ENV})"
            )
        try:
            document = json.loads(resp.body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            document = None
        token = (document.get("token") or document.get("access_token")) if isinstance(document, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError(
                f"{label}: token endpoint {_host(realm)} returned no token (expected JSON with 'token')"
            )
        return f"Bearer {token}"

    def _timeout_message(self, label: str, host: str) -> str:
        return (f"{label}: no answer from {host} within {self._timeout:g} s (is the registry up and reachable? "
                "retry, or wait longer: clusterkit lock --timeout SECONDS)")

    def _wait_notice(self, label: str, host: str) -> threading.Timer | None:
        """A timer that says, once, that ``host`` has not answered yet (cancelled when it does)."""
        if self._on_wait is None or self._wait_notice_s >= self._timeout:
            return None
        line = (f"waiting for {host} ({label}): no answer after {self._wait_notice_s:g} s; gives up at "
                f"{self._timeout:g} s (Ctrl-C stops)")
        timer = threading.Timer(self._wait_notice_s, self._on_wait, args=(line,))
        timer.daemon = True
        timer.start()
        return timer

    def _send(
        self, method: str, url: str, label: str, headers: dict[str, str], auth: str | None, max_bytes: int
    ) -> _Response:
        self._check_url(url, label)
        request = urllib.request.Request(url, method=method, headers={"User-Agent": self._user_agent, **headers})
        if auth:
            request.add_unredirected_header("Authorization", auth)
        host = _host(url)
        notice = self._wait_notice(label, host)
        try:
            try:
                response = self._opener.open(request, timeout=self._timeout)
            except urllib.error.HTTPError as err:
                response = err
            with response:
                body = response.read(max_bytes + 1) if method != "HEAD" else b""
                status = response.status if response.status is not None else response.code
                resp_headers = response.headers  # case-insensitive lookups
        except _RedirectRefused as err:
            raise RegistryError(
                f"{label}: {host} redirected to {err.url!r}, refused (only https; plain http only for loopback "
                "test registries)"
            ) from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, (TimeoutError, socket.timeout)):
                raise RegistryUnreachable(self._timeout_message(label, host)) from None
            raise RegistryUnreachable(
                f"{label}: cannot reach {host} ({err.reason}) (check network access to the registry)"
            ) from None
        except (TimeoutError, socket.timeout):
            raise RegistryUnreachable(self._timeout_message(label, host)) from None
        except (OSError, http.client.HTTPException) as err:
            raise RegistryUnreachable(
                f"{label}: connection to {host} failed ({err}) (retry; check network access)") from None
        finally:
            if notice is not None:
                notice.cancel()
        if len(body) > max_bytes:
            raise RegistryError(f"{label}: response from {host} exceeds {max_bytes} bytes (not a manifest?)")
        return _Response(status=status, headers=resp_headers, body=body)


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc or url


def _error_detail(resp: _Response) -> str:
    """The registry's own words when it sent the spec's error JSON, else the HTTP reason."""
    try:
        document = json.loads(resp.body) if resp.body else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        document = None
    messages: list[str] = []
    if isinstance(document, dict):
        errors = document.get("errors")
        for error in errors if isinstance(errors, list) else []:
            if isinstance(error, dict):
                text = error.get("message") or str(error.get("code") or "").replace("_", " ").lower()
                if isinstance(text, str) and text:
                    messages.append(text)
        for key in ("details", "error_description", "error", "message"):
            if not messages and isinstance(document.get(key), str) and document[key]:
                messages.append(document[key])
    if messages:
        return "; ".join(dict.fromkeys(messages))
    return http.client.responses.get(resp.status, "error").lower()
