"""A loopback OCI registry for the image-lock tests (stand-in for nvcr.io / Docker Hub / public.ecr.aws).

A real HTTP server on 127.0.0.1 speaking the parts of the OCI distribution API the lock uses: manifests
and blobs by tag or digest, Accept negotiation, the anonymous bearer-token flow (401 + WWW-Authenticate
-> token endpoint -> retry), the registry error JSON, blob redirects to a "CDN" path. It proves our HTTP
client against that protocol; it does not prove any particular real registry's quirks.

The real-runtime tier (tests/real_runtime) also serves images REAL enroot imports: ``add_rootfs_image``
builds a genuine gzip tar layer and Docker image config (diff_ids included, as enroot checks layer
digests), and ``basic_auth`` makes the registry demand HTTP Basic credentials the way ECR does (``401``
with ``WWW-Authenticate: Basic realm=...``; enroot's docker.sh then retries with the netrc credentials).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import re
import secrets
import tarfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def to_bytes(document: dict) -> bytes:
    # Registries hash exact bytes; an unusual layout makes sure nothing re-serializes before hashing.
    return json.dumps(document, indent=3).encode()


@dataclass
class BuiltImage:
    """What the test knows independently of the code under test: digests computed from served bytes."""

    index_digest: str | None
    platform_digests: dict[str, str]   # "linux/amd64" -> manifest digest
    sizes: dict[str, int]              # "linux/amd64" -> config size + layer sizes
    config_digests: dict[str, str]


@dataclass
class FakeRegistry:
    host: str = ""
    manifests: dict[tuple[str, str], tuple[bytes, str]] = field(default_factory=dict)
    blobs: dict[tuple[str, str], bytes] = field(default_factory=dict)
    cdn: dict[str, bytes] = field(default_factory=dict)
    token: str = field(default_factory=lambda: "tok-" + secrets.token_hex(8))
    refuse_tokens: bool = False
    token_requires: str | None = None     # an exact Authorization header the token endpoint demands
    accept_tokens: bool = True            # False: issued tokens never work (a private repository)
    wrong_digest_header: dict[tuple[str, str], str] = field(default_factory=dict)
    redirect_blobs: bool = False
    basic_auth: tuple[str, str] | None = None  # (user, password): demand Basic auth like ECR does
    # hook(repo, "manifests"|"blobs") -> an HTTP status to answer instead, or None (fault injection)
    hook: Callable[[str, str], int | None] | None = None
    # blob_rate(repo) -> bytes per second to trickle a blob's body at, or None (a slow registry)
    blob_rate: Callable[[str], float | None] | None = None
    log: list[tuple[str, str, str | None]] = field(default_factory=list)   # (method, path, Authorization)

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def put_manifest(self, repo: str, document: dict, media_type: str, tag: str | None = None) -> str:
        body = to_bytes(document)
        digest = sha256(body)
        self.manifests[(repo, digest)] = (body, media_type)
        if tag:
            self.manifests[(repo, tag)] = (body, media_type)
        return digest

    def put_blob(self, repo: str, body: bytes) -> str:
        digest = sha256(body)
        self.blobs[(repo, digest)] = body
        self.cdn[digest] = body
        return digest

    def add_image(
        self,
        repo: str,
        tag: str,
        platforms: tuple[str, ...] = ("linux/amd64", "linux/arm64/v8"),
        *,
        as_list: bool = True,
        list_type: str = OCI_INDEX,
        manifest_type: str = OCI_MANIFEST,
        layer_sizes: tuple[int, ...] = (1_000_000, 2_500_000, 37),
    ) -> BuiltImage:
        digests, sizes, configs, entries = {}, {}, {}, []
        for number, plat in enumerate(platforms):
            os_name, arch, *variant = plat.split("/")
            config_doc = {"architecture": arch, "os": os_name, "rootfs": {"type": "layers", "diff_ids": []}}
            if variant:
                config_doc["variant"] = variant[0]
            config = json.dumps(config_doc).encode()
            config_digest = self.put_blob(repo, config)
            layers = [
                {"mediaType": OCI_LAYER, "size": size + number, "digest": sha256(f"{plat}{i}".encode())}
                for i, size in enumerate(layer_sizes)
            ]
            manifest = {
                "schemaVersion": 2,
                "mediaType": manifest_type,
                "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": config_digest},
                "layers": layers,
            }
            key = "/".join(plat.split("/")[:2])
            digests[key] = self.put_manifest(repo, manifest, manifest_type, tag=None if as_list else tag)
            sizes[key] = len(config) + sum(layer["size"] for layer in layers)
            configs[key] = config_digest
            platform = {"architecture": arch, "os": os_name, **({"variant": variant[0]} if variant else {})}
            entries.append({"mediaType": manifest_type, "size": len(to_bytes(manifest)),
                            "digest": digests[key], "platform": platform})
        index_digest = None
        if as_list:
            # An attestation entry like buildx writes: must never be chosen as a platform image.
            entries.append({"mediaType": OCI_MANIFEST, "size": 10, "digest": sha256(b"attestation"),
                            "platform": {"architecture": "unknown", "os": "unknown"},
                            "annotations": {"vnd.docker.reference.type": "attestation-manifest"}})
            index = {"schemaVersion": 2, "mediaType": list_type, "manifests": entries}
            index_digest = self.put_manifest(repo, index, list_type, tag=tag)
        return BuiltImage(index_digest, digests, sizes, configs)


def layer_tar(files: dict[str, bytes | str | tuple[bytes, int]]) -> bytes:
    """An uncompressed tar layer: path -> bytes (0644), (bytes, mode), or "->target" (a symlink).
    Parent directories are added as 0755 entries; fixed owner and mtime keep the digest stable."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        dirs: set[str] = set()
        for path in sorted(files):
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
                    tf.addfile(info)
            value = files[path]
            info = tarfile.TarInfo(path.strip("/"))
            info.mtime = 1_700_000_000
            if isinstance(value, str) and value.startswith("->"):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, value[2:], 0o777
                tf.addfile(info)
                continue
            data, mode = value if isinstance(value, tuple) else (value, 0o644)
            data = data.encode() if isinstance(data, str) else data
            info.size, info.mode = len(data), mode
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


def add_rootfs_image(registry: FakeRegistry, repo: str, tag: str,
                     layers: list[dict[str, bytes | str | tuple[bytes, int]]], env: tuple[str, ...] = ()) -> str:
    """Serve a runnable linux/amd64 image (Docker schema 2 manifest, gzip layers, config Env += env);
    returns its digest."""
    blobs, diff_ids = [], []
    for files in layers:
        raw = layer_tar(files)
        diff_ids.append(sha256(raw))
        blobs.append(gzip.compress(raw, mtime=0))
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *env],
                   "Cmd": ["/bin/sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG, "size": len(config), "digest": registry.put_blob(repo, config)},
        "layers": [{"mediaType": DOCKER_LAYER, "size": len(b), "digest": registry.put_blob(repo, b)}
                   for b in blobs],
    }
    return registry.put_manifest(repo, manifest, DOCKER_MANIFEST, tag=tag)


def _make_handler(registry: FakeRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _send_paced(self, body: bytes, rate: float, headers: dict[str, str]) -> None:
            """200 with body written in chunks of ~50 ms each at ``rate`` bytes/s (a slow link)."""
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "HEAD":
                return
            chunk = max(1, int(rate / 20))
            for start in range(0, len(body), chunk):
                self.wfile.write(body[start:start + chunk])
                self.wfile.flush()
                time.sleep(chunk / rate)

        def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
            body = json.dumps({"errors": [{"code": code, "message": message, "detail": None}]}).encode()
            self._send(status, body, {"Content-Type": "application/json", **(headers or {})})

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            auth = self.headers.get("Authorization")
            # A request through it as an http proxy carries the full URL: log that (host included).
            shown = self.path.split("?", 1)[0] if self.path.startswith("http://") else parts.path
            registry.log.append((self.command, shown, auth))
            if parts.path == "/token":
                query = urllib.parse.parse_qs(parts.query)
                if registry.refuse_tokens:
                    return self._error(403, "DENIED", "requested access to the resource is denied")
                if registry.token_requires and auth != registry.token_requires:
                    return self._error(401, "UNAUTHORIZED", "incorrect username or password")
                if query.get("service") != ["fake-registry"] or not re.fullmatch(
                    r"repository:[a-z0-9._/-]+:pull", (query.get("scope") or [""])[0]
                ):
                    return self._error(400, "BAD_REQUEST", "bad service or scope")
                body = json.dumps({"token": registry.token, "expires_in": 300}).encode()
                return self._send(200, body, {"Content-Type": "application/json"})
            if parts.path.startswith("/cdn/"):
                body = registry.cdn.get(parts.path[len("/cdn/"):])
                return self._send(200, body) if body is not None else self._send(404)
            match = re.fullmatch(r"/v2/(.+)/(manifests|blobs)/([^/]+)", parts.path)
            if not match:
                return self._error(404, "NOT_FOUND", "no route")
            repo, kind, ref = match.groups()
            if registry.hook is not None:
                status = registry.hook(repo, kind)
                if status is not None:
                    return self._error(status, "UNAVAILABLE", "injected fault")
            if registry.basic_auth is not None:
                expected = "Basic " + base64.b64encode(":".join(registry.basic_auth).encode()).decode()
                if auth != expected:
                    return self._error(401, "UNAUTHORIZED", "authentication required",
                                       {"WWW-Authenticate": 'Basic realm="fake-registry"'})
            elif auth != f"Bearer {registry.token}" or not registry.accept_tokens:
                challenge = (f'Bearer realm="{registry.url}/token",service="fake-registry",'
                             f'scope="repository:{repo}:pull"')
                return self._error(401, "UNAUTHORIZED", "authentication required", {"WWW-Authenticate": challenge})
            if kind == "blobs":
                body = registry.blobs.get((repo, ref))
                if body is None:
                    return self._error(404, "BLOB_UNKNOWN", "blob unknown to registry")
                if registry.redirect_blobs:
                    return self._send(307, b"", {"Location": f"{registry.url}/cdn/{ref}"})
                headers = {"Content-Type": "application/octet-stream", "Docker-Content-Digest": ref}
                rate = registry.blob_rate(repo) if registry.blob_rate is not None else None
                if rate:
                    return self._send_paced(body, rate, headers)
                return self._send(200, body, headers)
            stored = registry.manifests.get((repo, ref))
            accepted = [a.strip().split(";")[0] for a in self.headers.get("Accept", "").split(",")]
            # Registries answer 404 for a type the client does not accept; with no Accept header or
            # curl's default "*/*" they serve the manifest as stored (enroot's Basic-auth probe).
            if stored is None or ("*/*" not in accepted and self.headers.get("Accept")
                                  and stored[1] not in accepted):
                return self._error(404, "MANIFEST_UNKNOWN", "manifest unknown")
            body, media_type = stored
            digest = registry.wrong_digest_header.get((repo, ref), sha256(body))
            self._send(200, body, {"Content-Type": media_type, "Docker-Content-Digest": digest})

    return Handler



class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        pass  # a client killed mid-transfer (crash tests) is expected, not a test failure


@contextmanager
def serve() -> Iterator[FakeRegistry]:
    registry = FakeRegistry()
    server = _QuietServer(("127.0.0.1", 0), _make_handler(registry))
    server.daemon_threads = True
    registry.host = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
