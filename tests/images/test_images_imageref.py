"""parse_image_ref: a table of references with the exact fields or the exact message they must give."""

from __future__ import annotations

import pytest

from clusterkit.images.ref import ImageRefError, parse_image_ref

D = "sha256:" + "0123456789abcdef" * 4
HUB = "registry-1.docker.io"
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"

GOOD = [
    # text, registry, repository, tag, digest, enroot_uri(D)
    ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io", "nvidia/pytorch", "25.01-py3", None,
     f"docker://nvcr.io#nvidia/pytorch@{D}"),
    ("ubuntu:22.04", HUB, "library/ubuntu", "22.04", None, f"docker://library/ubuntu@{D}"),
    ("public.ecr.aws/hpc-cloud/nccl-tests:latest", "public.ecr.aws", "hpc-cloud/nccl-tests", "latest", None,
     f"docker://public.ecr.aws#hpc-cloud/nccl-tests@{D}"),
    (f"{ECR}/train:v1", ECR, "train", "v1", None, f"docker://{ECR}#train@{D}"),
    (f"nvcr.io/nvidia/pytorch@{D}", "nvcr.io", "nvidia/pytorch", None, D, f"docker://nvcr.io#nvidia/pytorch@{D}"),
    (f"nvcr.io/nvidia/pytorch:25.01-py3@{D}", "nvcr.io", "nvidia/pytorch", "25.01-py3", D,
     f"docker://nvcr.io#nvidia/pytorch@{D}"),
    ("docker://nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io", "nvidia/pytorch", "25.01-py3", None,
     f"docker://nvcr.io#nvidia/pytorch@{D}"),
    ("docker://nvcr.io#nvidia/pytorch:25.01-py3", "nvcr.io", "nvidia/pytorch", "25.01-py3", None,
     f"docker://nvcr.io#nvidia/pytorch@{D}"),
    ("nvcr.io#nvidia/pytorch:25.01-py3", "nvcr.io", "nvidia/pytorch", "25.01-py3", None,
     f"docker://nvcr.io#nvidia/pytorch@{D}"),
    ("docker.io/library/ubuntu:22.04", HUB, "library/ubuntu", "22.04", None, f"docker://library/ubuntu@{D}"),
    ("docker.io/ubuntu:latest", HUB, "library/ubuntu", "latest", None, f"docker://library/ubuntu@{D}"),
    ("index.docker.io/nvidia/cuda:12.8.0-devel-ubuntu22.04", HUB, "nvidia/cuda", "12.8.0-devel-ubuntu22.04", None,
     f"docker://nvidia/cuda@{D}"),
    ("nvidia/cuda:12.8.0", HUB, "nvidia/cuda", "12.8.0", None, f"docker://nvidia/cuda@{D}"),
    ("docker://registry-1.docker.io#ubuntu:22.04", HUB, "library/ubuntu", "22.04", None,
     f"docker://library/ubuntu@{D}"),
    ("localhost:5000/team/app:v1", "localhost:5000", "team/app", "v1", None, f"docker://localhost:5000#team/app@{D}"),
    ("127.0.0.1:5000/app:v1", "127.0.0.1:5000", "app", "v1", None, f"docker://127.0.0.1:5000#app@{D}"),
    ("[::1]:5000/app:v1", "[::1]:5000", "app", "v1", None, f"docker://[::1]:5000#app@{D}"),
    ("my-registry.example.com/a/b/c/d:1.0_rc-1", "my-registry.example.com", "a/b/c/d", "1.0_rc-1", None,
     f"docker://my-registry.example.com#a/b/c/d@{D}"),
    ("ghcr.io/owner/a__b.c---d:_x", "ghcr.io", "owner/a__b.c---d", "_x", None,
     f"docker://ghcr.io#owner/a__b.c---d@{D}"),
    ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/x:1", "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn",
     "x", "1", None, f"docker://123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn#x@{D}"),
    ("nvcr.io/nvidia/pytorch:" + "T" * 128, "nvcr.io", "nvidia/pytorch", "T" * 128, None,
     f"docker://nvcr.io#nvidia/pytorch@{D}"),
]

BAD = [
    ("", "image reference is empty (write e.g. nvcr.io/nvidia/pytorch:25.01-py3)"),
    ("   ", "image reference is empty (write e.g. nvcr.io/nvidia/pytorch:25.01-py3)"),
    ("docker://", "image reference is empty after 'docker://' (write e.g. docker://ubuntu:22.04)"),
    ("ubuntu", "image 'ubuntu' has no tag or digest (write 'ubuntu:latest' to follow latest, "
               "or pin 'ubuntu@sha256:<64 hex>')"),
    ("nvcr.io/nvidia/pytorch", "image 'nvcr.io/nvidia/pytorch' has no tag or digest (write "
     "'nvcr.io/nvidia/pytorch:latest' to follow latest, or pin 'nvcr.io/nvidia/pytorch@sha256:<64 hex>')"),
    ("ubuntu:Latest!", "tag 'Latest!' has invalid characters (tags match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127})"),
    ("nvcr.io/nvidia/pytorch:-dev", "tag '-dev' has invalid characters (tags match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127})"),
    ("nvcr.io/nvidia/pytorch:", "tag is empty (tags match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127})"),
    ("nvcr.io/nvidia/pytorch:" + "a" * 129, "tag is 129 characters long (tags have at most 128)"),
    ("nvcr.io/NVIDIA/pytorch:1", "repository 'NVIDIA/pytorch' has uppercase letters (repository names are lowercase)"),
    ("Ubuntu:22.04", "repository 'Ubuntu' has uppercase letters (repository names are lowercase)"),
    ("nvcr.io/nvidia/-pytorch:1", "repository 'nvidia/-pytorch' has invalid component '-pytorch' (components are "
     "lowercase letters and digits joined by '.', '_', '__' or '-')"),
    ("nvcr.io/nvidia/py___torch:1", "repository 'nvidia/py___torch' has invalid component 'py___torch' (components "
     "are lowercase letters and digits joined by '.', '_', '__' or '-')"),
    ("nvcr.io/nvidia//pytorch:1", "repository 'nvidia//pytorch' has an empty path component (components are "
     "lowercase letters and digits joined by '.', '_', '__' or '-')"),
    ("nvcr.io/:1", "repository is empty (write e.g. nvidia/pytorch after the registry)"),
    ("nvcr.io/nvidia/pytorch@md5:abc", "digest algorithm 'md5' is not supported (only sha256; write "
     "sha256:<64 lowercase hex>)"),
    ("nvcr.io/nvidia/pytorch@sha256:" + "A" * 64, f"digest 'sha256:{'A' * 64}' is not lowercase hex (write "
     "sha256:<64 lowercase hex>)"),
    ("nvcr.io/nvidia/pytorch@sha256:abc", "digest has 3 hex characters (sha256 digests have 64)"),
    ("nvcr.io/nvidia/pytorch@sha256:" + "a" * 65, "digest has 65 hex characters (sha256 digests have 64)"),
    ("nvcr.io/nvidia/pytorch@sha256", "digest 'sha256' is not ALGORITHM:HEX (write sha256:<64 lowercase hex>)"),
    ("nvcr.io/nvidia/pytorch :1", "image reference 'nvcr.io/nvidia/pytorch :1' contains whitespace (remove "
     "spaces, tabs and newlines)"),
    ("ubuntu:22.04\n", "image reference 'ubuntu:22.04\\n' contains whitespace (remove spaces, tabs and newlines)"),
    ("https://nvcr.io/nvidia/pytorch:1", "scheme 'https://' is not supported (write a plain reference or "
     "docker://...)"),
    ("oci://x/y:1", "scheme 'oci://' is not supported (write a plain reference or docker://...)"),
    ("bad_host.io/x:1", "registry 'bad_host.io' is not a valid host[:port] (letters, digits, '-' and '.', e.g. "
     "nvcr.io)"),
    ("localhost:99999/x:1", "registry 'localhost:99999' has port 99999 (ports are 1-65535)"),
    ("user@nvcr.io#nvidia/pytorch:1", "user names in image references are not supported (remove 'USER@'; registry "
     "credentials come from the environment)"),
    ("a#b#c:1", "image reference 'a#b#c:1' has more than one '#' (enroot form is REGISTRY#REPOSITORY)"),
    ("#x:1", "registry before '#' is empty in '#x:1' (write REGISTRY#REPOSITORY or drop '#')"),
]


@pytest.mark.parametrize("text, registry, repository, tag, digest, enroot", GOOD, ids=[g[0][:60] for g in GOOD])
def test_good_references(text, registry, repository, tag, digest, enroot):
    ref = parse_image_ref(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert ref.enroot_uri(D) == enroot


@pytest.mark.parametrize("text, message", BAD, ids=[b[0][:60] or "empty" for b in BAD])
def test_bad_references(text, message):
    with pytest.raises(ImageRefError) as err:
        parse_image_ref(text)
    assert str(err.value) == message


def test_ecr_private_detection():
    assert parse_image_ref(f"{ECR}/train:v1").ecr_account_region == ("123456789012", "us-east-1")
    assert parse_image_ref("999999999999.dkr-ecr.eu-west-1.on.aws/x:1").ecr_account_region == (
        "999999999999", "eu-west-1")
    for text in ("public.ecr.aws/a/b:1", "nvcr.io/a:1", "12345.dkr.ecr.us-east-1.amazonaws.com/a:1", "ubuntu:1"):
        ref = parse_image_ref(text)
        assert (ref.is_ecr_private, ref.ecr_account_region) == (False, None)
    assert parse_image_ref(f"{ECR}/train:v1").is_ecr_private


def test_enroot_uri_refuses_a_bad_digest():
    with pytest.raises(ImageRefError, match="digest has 3 hex characters"):
        parse_image_ref("ubuntu:1").enroot_uri("sha256:abc")


def test_display_forms():
    assert str(parse_image_ref(f"ubuntu:22.04@{D}")) == f"ubuntu:22.04@{D}"
    assert str(parse_image_ref("docker://nvcr.io#nvidia/pytorch:1")) == "nvcr.io/nvidia/pytorch:1"
    assert parse_image_ref(f"nvidia/cuda@{D}").reference == D
