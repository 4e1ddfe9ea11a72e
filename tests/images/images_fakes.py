"""A loopback OCI registry for the image-lock tests (stand-in for nvcr.io / Docker Hub / public.ecr.aws).

A real HTTP server on 127.0.0.1 speaking the parts of the OCI distribution API the lock uses: manifests
and blobs by tag or digest, Accept negotiation, the anonymous bearer-token flow (401 + WWW-Authenticate
-> token endpoint -> retry), the registry error JSON, blob redirects to a "CDN" path. It proves our HTTP
client against that protocol; it does not prove any particular real registry's quirks.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


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

        def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
            body = json.dumps({"errors": [{"code": code, "message": message, "detail": None}]}).encode()
            self._send(status, body, {"Content-Type": "application/json", **(headers or {})})

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            auth = self.headers.get("Authorization")
            registry.log.append((self.command, parts.path, auth))
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
            if auth != f"Bearer {registry.token}" or not registry.accept_tokens:
                challenge = (f'Bearer realm="{registry.url}/token",service="fake-registry",'
                             f'scope="repository:{repo}:pull"')
                return self._error(401, "UNAUTHORIZED", "authentication required", {"WWW-Authenticate": challenge})
            if kind == "blobs":
                body = registry.blobs.get((repo, ref))
                if body is None:
                    return self._error(404, "BLOB_UNKNOWN", "blob unknown to registry")
                if registry.redirect_blobs:
                    return self._send(307, b"", {"Location": f"{registry.url}/cdn/{ref}"})
                return self._send(200, body, {"Content-Type": "application/octet-stream",
                                              "Docker-Content-Digest": ref})
            stored = registry.manifests.get((repo, ref))
            accepted = [a.strip().split(";")[0] for a in self.headers.get("Accept", "").split(",")]
            if stored is None or stored[1] not in accepted:  # registries answer 404 for unaccepted types
                return self._error(404, "MANIFEST_UNKNOWN", "manifest unknown")
            body, media_type = stored
            digest = registry.wrong_digest_header.get((repo, ref), sha256(body))
            self._send(200, body, {"Content-Type": media_type, "Docker-Content-Digest": digest})

    return Handler



@contextmanager
def serve() -> Iterator[FakeRegistry]:
    registry = FakeRegistry()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(registry))
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
