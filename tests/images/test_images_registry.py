"""registry.py against the loopback OCI registry in conftest.py (a real HTTP server, a stand-in registry).

Every expected digest is computed here from the bytes the fake registry serves, never taken from the
code under test.
"""

from __future__ import annotations

import base64
import socket

import pytest
from images_fakes import DOCKER_LIST, DOCKER_MANIFEST, OCI_MANIFEST, sha256

from clusterkit.images.ref import parse_image_ref
from clusterkit.images.registry import RegistryClient, RegistryError, credentials_from_env, parse_platform

AMD64 = parse_platform("linux/amd64")
ARM64 = parse_platform("linux/arm64")


def client(registry, **kwargs) -> RegistryClient:
    return RegistryClient(allow_loopback_http=True, timeout=5, **kwargs)


def test_tag_resolves_to_amd64_manifest_through_bearer_flow(fake_registry):
    built = fake_registry.add_image("team/app", "v1")
    ref = parse_image_ref(f"{fake_registry.host}/team/app:v1")

    resolved = client(fake_registry).resolve(ref, AMD64)

    assert resolved.digest == built.platform_digests["linux/amd64"]
    assert resolved.index_digest == built.index_digest
    assert resolved.media_type == OCI_MANIFEST
    assert resolved.compressed_size == built.sizes["linux/amd64"]
    log = fake_registry.log
    # 401 without credentials, anonymous token, retry with the token, child fetched with the cached token
    assert log[0] == ("GET", "/v2/team/app/manifests/v1", None)
    assert log[1] == ("GET", "/token", None)
    assert log[2] == ("GET", "/v2/team/app/manifests/v1", f"Bearer {fake_registry.token}")
    assert log[3] == ("GET", f"/v2/team/app/manifests/{resolved.digest}", f"Bearer {fake_registry.token}")
    # then the chosen manifest's config blob (small): its Env declares the versions the lock records
    assert log[4] == ("GET", f"/v2/team/app/blobs/{built.config_digests['linux/amd64']}",
                      f"Bearer {fake_registry.token}")
    assert len(log) == 5


def test_arm64_choice_and_size_sum(fake_registry):
    built = fake_registry.add_image("team/app", "v1", layer_sizes=(10, 20, 30))
    ref = parse_image_ref(f"{fake_registry.host}/team/app:v1")

    resolved = client(fake_registry).resolve(ref, ARM64)

    assert resolved.digest == built.platform_digests["linux/arm64"]
    assert resolved.digest != built.platform_digests["linux/amd64"]
    config_size = len(fake_registry.blobs[("team/app", built.config_digests["linux/arm64"])])
    assert resolved.compressed_size == config_size + (10 + 1) + (20 + 1) + (30 + 1)


def test_docker_manifest_list_types(fake_registry):
    built = fake_registry.add_image("lib/x", "1", list_type=DOCKER_LIST, manifest_type=DOCKER_MANIFEST)
    resolved = client(fake_registry).resolve(parse_image_ref(f"{fake_registry.host}/lib/x:1"), AMD64)
    assert (resolved.digest, resolved.media_type) == (built.platform_digests["linux/amd64"], DOCKER_MANIFEST)


def test_missing_platform_lists_what_is_available(fake_registry):
    fake_registry.add_image("team/app", "amd-only", platforms=("linux/amd64",))
    with pytest.raises(RegistryError) as err:
        client(fake_registry).resolve(parse_image_ref(f"{fake_registry.host}/team/app:amd-only"), ARM64)
    assert str(err.value) == (
        f"{fake_registry.host}/team/app:amd-only: no linux/arm64 image in the manifest list (available: "
        "linux/amd64; choose another image or change the cluster's architecture)"
    )


def test_404_message_names_the_image_as_written(fake_registry):
    registry = RegistryClient(allow_loopback_http=True, base_urls={"nvcr.io": fake_registry.url})
    with pytest.raises(RegistryError) as err:
        registry.resolve(parse_image_ref("nvcr.io/nvidia/pytorch:25.01-py3"), AMD64)
    assert str(err.value) == "nvcr.io/nvidia/pytorch:25.01-py3: manifest unknown (HTTP 404)"


def test_token_endpoint_refusal_is_a_clear_error(fake_registry):
    fake_registry.add_image("team/app", "v1")
    fake_registry.refuse_tokens = True
    with pytest.raises(RegistryError) as err:
        client(fake_registry).resolve(parse_image_ref(f"{fake_registry.host}/team/app:v1"), AMD64)
    assert str(err.value) == (
        f"{fake_registry.host}/team/app:v1: token endpoint {fake_registry.host} refused anonymous pull access "
        "(requested access to the resource is denied, HTTP 403) (the image may be private or misspelled; "
        "logins go in CK_REGISTRY_CREDENTIALS)"
    )


def test_docker_content_digest_mismatch_is_refused(fake_registry):
    fake_registry.add_image("team/app", "v1")
    lie = "sha256:" + "0" * 64
    fake_registry.wrong_digest_header[("team/app", "v1")] = lie
    with pytest.raises(RegistryError) as err:
        client(fake_registry).resolve(parse_image_ref(f"{fake_registry.host}/team/app:v1"), AMD64)
    body = fake_registry.manifests[("team/app", "v1")][0]
    assert str(err.value) == (
        f"{fake_registry.host}/team/app:v1: Docker-Content-Digest {lie} does not match the manifest bytes "
        f"({sha256(body)}) (the registry or a proxy altered the manifest)"
    )


def test_bytes_served_under_a_digest_must_hash_to_it(fake_registry):
    built = fake_registry.add_image("team/app", "v1")
    amd = built.platform_digests["linux/amd64"]
    # The registry serves the arm64 manifest when asked for the amd64 digest.
    fake_registry.manifests[("team/app", amd)] = fake_registry.manifests[
        ("team/app", built.platform_digests["linux/arm64"])]
    fake_registry.wrong_digest_header[("team/app", amd)] = amd
    with pytest.raises(RegistryError, match="manifest bytes hash to sha256:[0-9a-f]{64}, not the requested digest"):
        client(fake_registry).resolve(parse_image_ref(f"{fake_registry.host}/team/app:v1"), AMD64)


def test_pinned_single_manifest_checks_config_platform(fake_registry):
    built = fake_registry.add_image("team/app", "v1")
    arm = built.platform_digests["linux/arm64"]
    registry = client(fake_registry)

    resolved = registry.resolve(parse_image_ref(f"{fake_registry.host}/team/app@{arm}"), ARM64)
    assert (resolved.digest, resolved.index_digest) == (arm, None)
    assert resolved.compressed_size == built.sizes["linux/arm64"]
    assert ("GET", f"/v2/team/app/blobs/{built.config_digests['linux/arm64']}",
            f"Bearer {fake_registry.token}") in fake_registry.log

    with pytest.raises(RegistryError) as err:
        registry.resolve(parse_image_ref(f"{fake_registry.host}/team/app@{arm}"), AMD64)
    assert str(err.value) == (
        f"{fake_registry.host}/team/app@{arm}: image is linux/arm64/v8, not linux/amd64 (choose a linux/amd64 "
        "image or change the cluster's architecture)"
    )


def test_single_manifest_tag(fake_registry):
    built = fake_registry.add_image("solo", "1.0", platforms=("linux/amd64",), as_list=False)
    resolved = client(fake_registry).resolve(parse_image_ref(f"{fake_registry.host}/solo:1.0"), AMD64)
    assert (resolved.digest, resolved.compressed_size) == (built.platform_digests["linux/amd64"],
                                                           built.sizes["linux/amd64"])


def test_pinned_index_digest_locks_platform_child(fake_registry):
    built = fake_registry.add_image("team/app", "v1")
    ref = parse_image_ref(f"{fake_registry.host}/team/app@{built.index_digest}")
    resolved = client(fake_registry).resolve(ref, AMD64)
    assert (resolved.digest, resolved.index_digest) == (built.platform_digests["linux/amd64"], built.index_digest)


def test_blob_redirect_does_not_forward_the_token(fake_registry):
    built = fake_registry.add_image("solo", "1.0", platforms=("linux/amd64",), as_list=False)
    fake_registry.redirect_blobs = True
    client(fake_registry).resolve(parse_image_ref(f"{fake_registry.host}/solo:1.0"), AMD64)
    cdn = [entry for entry in fake_registry.log if entry[1].startswith("/cdn/")]
    assert cdn == [("GET", f"/cdn/{built.config_digests['linux/amd64']}", None)]


def test_head_manifest(fake_registry):
    built = fake_registry.add_image("team/app", "v1")
    digest, media_type = client(fake_registry).head_manifest(
        parse_image_ref(f"{fake_registry.host}/team/app:v1"), "v1")
    assert (digest, media_type) == (built.index_digest, "application/vnd.oci.image.index.v1+json")


def test_plain_http_only_for_loopback_when_allowed(fake_registry):
    with pytest.raises(RegistryError, match="refusing URL 'http://example.com'"):
        RegistryClient(allow_loopback_http=True, base_urls={"nvcr.io": "http://example.com"})
    with pytest.raises(RegistryError, match="only https"):
        RegistryClient(base_urls={"nvcr.io": fake_registry.url})
    # Without the test switch a loopback registry is still contacted over https (and fails to handshake).
    fake_registry.add_image("team/app", "v1")
    with pytest.raises(RegistryError, match=r"^127\.0\.0\.1:\d+/team/app:v1: (cannot reach|connection to)"):
        RegistryClient(timeout=5).resolve(parse_image_ref(f"{fake_registry.host}/team/app:v1"), AMD64)


def test_timeout_is_reported():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # the kernel completes the handshake; nobody ever answers
    try:
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(RegistryError) as err:
            RegistryClient(allow_loopback_http=True, timeout=0.3).resolve(
                parse_image_ref(f"{host}/a:1"), AMD64)
        assert str(err.value) == (f"{host}/a:1: no answer from {host} within 0.3 s (is the registry up and "
                                  "reachable? retry, or wait longer: clusterkit lock --timeout SECONDS)")
    finally:
        silent.close()


def test_basic_credentials_go_to_the_token_endpoint(fake_registry):
    built = fake_registry.add_image("private/app", "v1")
    fake_registry.token_requires = "Basic " + base64.b64encode(b"$oauthtoken:s3cret").decode()
    ref = parse_image_ref(f"{fake_registry.host}/private/app:v1")
    refused = r"refused anonymous pull access \(incorrect username or password, HTTP 401\)"
    with pytest.raises(RegistryError, match=refused):
        client(fake_registry).resolve(ref, AMD64)
    wrong = client(fake_registry, credentials={fake_registry.host: ("$oauthtoken", "nope")})
    with pytest.raises(RegistryError, match=f"refused the credentials for {fake_registry.host}"):
        wrong.resolve(ref, AMD64)
    good = client(fake_registry, credentials={fake_registry.host: ("$oauthtoken", "s3cret")})
    assert good.resolve(ref, AMD64).digest == built.platform_digests["linux/amd64"]
    # the password goes to the token endpoint only, never to the manifest URLs
    assert {auth for _, path, auth in fake_registry.log if path.startswith("/v2/")} <= {
        None, f"Bearer {fake_registry.token}"}


def test_token_that_does_not_open_the_repository(fake_registry):
    fake_registry.add_image("private/app", "v1")
    fake_registry.accept_tokens = False
    with pytest.raises(RegistryError) as err:
        client(fake_registry).resolve(parse_image_ref(f"{fake_registry.host}/private/app:v1"), AMD64)
    assert str(err.value) == (
        f"{fake_registry.host}/private/app:v1: authentication required (HTTP 401 after authenticating; the "
        "repository may not exist or may be private: check the name, or set CK_REGISTRY_CREDENTIALS)"
    )


def test_credentials_from_env():
    assert credentials_from_env({}) == {}
    assert credentials_from_env({"CK_REGISTRY_CREDENTIALS": '{"nvcr.io": {"username": "$oauthtoken", '
                                                            '"password": "k"}}'}) == {"nvcr.io": ("$oauthtoken", "k")}
    with pytest.raises(RegistryError, match="entry 'nvcr.io' needs string 'username' and 'password'"):
        credentials_from_env({"CK_REGISTRY_CREDENTIALS": '{"nvcr.io": {"user": "x"}}'})
