"""Private ECR images through boto3, with moto standing in for ECR.

What is real: our boto3 calls (parameter names and shapes are validated by botocore against the ECR
service model), our handling of BatchGetImage answers, failures and errors, and the digest / platform
logic shared with the registry client.
What moto (5.2.5) does NOT do, so these tests cannot prove it of real ECR:
  * it stores a manifest list / OCI index as opaque JSON (no check that its children exist) and ignores
    acceptedMediaTypes;
  * it does not compute digests from the manifest bytes: without an explicit imageDigest it invents one
    (sha256 of the concatenated layer digests; for a manifest list, of a random number). The tests pass
    imageDigest = sha256(manifest text), which is what real ECR computes; one test shows that our
    resolver refuses moto's invented digest;
  * GetDownloadUrlForLayer is not implemented: `EcrWithLayerUrls` adds it by pointing at blobs served by
    the loopback registry fixture, the way real ECR hands out presigned S3 URLs.
"""

from __future__ import annotations

import dataclasses
import json

import boto3
import pytest
from images_fakes import OCI_CONFIG, OCI_INDEX, OCI_LAYER, OCI_MANIFEST, sha256
from moto import mock_aws

from clusterkit.images.registry import ACCEPTED_MEDIA_TYPES, RegistryClient
from clusterkit.images.resolve import ImageSpec, LockResolveError, resolve_lock
from clusterkit_node.image.declared_versions import NOTHING_DECLARED

ACCOUNT = "123456789012"  # moto's default account
HOST = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"


class EcrWithLayerUrls:
    """A moto ECR client plus the GetDownloadUrlForLayer moto lacks; records every call it forwards."""

    def __init__(self, region: str, blob_base_url: str):
        self._client = boto3.client("ecr", region_name=region)
        self._blob_base_url = blob_base_url
        self.calls: list[tuple[str, dict]] = []

    def batch_get_image(self, **kwargs):
        self.calls.append(("batch_get_image", kwargs))
        return self._client.batch_get_image(**kwargs)

    def get_download_url_for_layer(self, *, registryId, repositoryName, layerDigest):
        self.calls.append(("get_download_url_for_layer", {"layerDigest": layerDigest}))
        return {"downloadUrl": f"{self._blob_base_url}/cdn/{layerDigest}", "layerDigest": layerDigest}


def manifest_text(config: bytes, layer_sizes: tuple[int, ...], arch: str) -> str:
    return json.dumps({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": sha256(config)},
        "layers": [{"mediaType": OCI_LAYER, "size": s, "digest": sha256(f"{arch}{i}".encode())}
                   for i, s in enumerate(layer_sizes)],
    }, indent=2)


def push(ecr, repo: str, text: str, media_type: str, tag: str | None = None, *, real_digest: bool = True) -> str:
    kwargs = {"repositoryName": repo, "imageManifest": text, "imageManifestMediaType": media_type}
    if tag:
        kwargs["imageTag"] = tag
    if real_digest:
        kwargs["imageDigest"] = sha256(text.encode())  # what real ECR computes itself
    return ecr.put_image(**kwargs)["image"]["imageId"]["imageDigest"]


@pytest.fixture
def ecr_env(fake_registry):
    with mock_aws():
        ecr = boto3.client("ecr", region_name="us-east-1")
        ecr.create_repository(repositoryName="train")
        made: list[EcrWithLayerUrls] = []

        def factory(region: str) -> EcrWithLayerUrls:
            made.append(EcrWithLayerUrls(region, fake_registry.url))
            return made[-1]

        yield ecr, factory, made, RegistryClient(allow_loopback_http=True, timeout=5)


def test_single_manifest_by_tag(ecr_env, fake_registry):
    ecr, factory, made, http = ecr_env
    config = json.dumps({"architecture": "amd64", "os": "linux"}).encode()
    fake_registry.cdn[sha256(config)] = config
    text = manifest_text(config, (100, 200), "amd64")
    digest = push(ecr, "train", text, OCI_MANIFEST, "v1")
    assert digest == sha256(text.encode())

    lock = resolve_lock("demo", [ImageSpec("train", f"{HOST}/train:v1", {"cuda": "12.8"})], "linux/amd64",
                        ecr_client_factory=factory, registry_client=http)

    assert dataclasses.asdict(lock) == {"cluster": "demo", "lock_version": 1, "images": ({
        "name": "train", "source": f"{HOST}/train:v1", "registry": HOST, "repository": "train",
        "digest": digest, "enroot_uri": f"docker://{HOST}#train@{digest}", "platform": "linux/amd64",
        "compressed_size": len(config) + 300, "expect": {"cuda": "12.8"},
        "declared": {}, "declared_from": NOTHING_DECLARED, "nvidia": {}, "nvidia_from": "image config Env",
    },)}
    calls = made[0].calls
    assert calls[0] == ("batch_get_image", {"registryId": ACCOUNT, "repositoryName": "train",
                                            "imageIds": [{"imageTag": "v1"}],
                                            "acceptedMediaTypes": list(ACCEPTED_MEDIA_TYPES)})
    assert calls[1] == ("get_download_url_for_layer", {"layerDigest": sha256(config)})


def test_manifest_list_picks_platform_and_fetches_it_by_digest(ecr_env, fake_registry):
    ecr, factory, made, http = ecr_env
    children = {}
    for arch, sizes in (("amd64", (5, 6)), ("arm64", (7, 8, 9))):
        config = json.dumps({"architecture": arch, "os": "linux",
                             "config": {"Env": [f"CUDA_VERSION=12.9.{len(sizes)}", "NCCL_VERSION=2.27.3-1"]}}).encode()
        fake_registry.cdn[sha256(config)] = config  # the platform manifest's config: where Env declares versions
        text = manifest_text(config, sizes, arch)
        children[arch] = (push(ecr, "train", text, OCI_MANIFEST), len(config) + sum(sizes))
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": children["amd64"][0], "size": 1,
         "platform": {"architecture": "amd64", "os": "linux"}},
        {"mediaType": OCI_MANIFEST, "digest": children["arm64"][0], "size": 1,
         "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
    ]})
    index_digest = push(ecr, "train", index, OCI_INDEX, "multi")

    for platform, arch in (("linux/amd64", "amd64"), ("linux/arm64", "arm64")):
        lock = resolve_lock("demo", [ImageSpec("train", f"{HOST}/train:multi", {})], platform,
                            ecr_client_factory=factory, registry_client=http)
        entry = lock.images[0]
        assert (entry.digest, entry.compressed_size) == children[arch]
        assert (entry.declared, entry.declared_from) == (
            {"cuda": f"12.9.{2 if arch == 'amd64' else 3}", "nccl": "2.27.3"}, "image config Env")
        calls = made[-1].calls
        assert [c[1].get("imageIds") for c in calls] == [[{"imageTag": "multi"}], [{"imageDigest": children[arch][0]}],
                                                         None]  # then the chosen manifest's config blob

    # Pinned to the list's digest: the lock holds the platform manifest, `source` keeps the user's text.
    pinned = f"{HOST}/train@{index_digest}"
    lock = resolve_lock("demo", [ImageSpec("train", pinned, {})], "linux/amd64",
                        ecr_client_factory=factory, registry_client=http)
    assert (lock.images[0].digest, lock.images[0].source) == (children["amd64"][0], pinned)


def test_motos_invented_digest_is_refused(ecr_env, fake_registry):
    ecr, factory, _, http = ecr_env
    config = json.dumps({"architecture": "amd64", "os": "linux"}).encode()
    text = manifest_text(config, (1,), "amd64")
    moto_digest = push(ecr, "train", text, OCI_MANIFEST, "v1", real_digest=False)
    assert moto_digest != sha256(text.encode())  # the moto gap this test documents
    with pytest.raises(LockResolveError) as err:
        resolve_lock("demo", [ImageSpec("train", f"{HOST}/train:v1", {})], "linux/amd64",
                     ecr_client_factory=factory, registry_client=http)
    assert err.value.problems == [
        f"image 'train': {HOST}/train:v1: Docker-Content-Digest {moto_digest} does not match the manifest bytes "
        f"({sha256(text.encode())}) (the registry or a proxy altered the manifest)"
    ]


def test_errors_are_collected_per_image_with_region(ecr_env):
    _, factory, made, http = ecr_env
    west = f"{ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com"
    with pytest.raises(LockResolveError) as err:
        resolve_lock("demo", [
            ImageSpec("a", f"{HOST}/train:nope", {}),
            ImageSpec("b", f"{HOST}/missing:v1", {}),
            ImageSpec("c", f"{west}/train:v1", {}),
        ], "linux/amd64", ecr_client_factory=factory, registry_client=http)
    assert err.value.problems == [
        f"image 'a': {HOST}/train:nope: Requested image not found (ImageNotFound in ECR us-east-1; check the tag or "
        "digest)",
        f"image 'b': {HOST}/missing:v1: repository 'missing' does not exist in ECR us-east-1 (create it or fix the "
        "name)",
        f"image 'c': {west}/train:v1: repository 'train' does not exist in ECR us-west-2 (create it or fix the name)",
    ]
    assert sorted(client._client.meta.region_name for client in made) == ["us-east-1", "us-west-2"]
