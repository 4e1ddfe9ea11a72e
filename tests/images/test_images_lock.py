"""The lock document: deterministic text, strict loading, staleness against the spec, end-to-end resolve.

The end-to-end test resolves through the loopback registry stand-in (see conftest.py); the rest is pure.
"""

from __future__ import annotations

import copy
import json

import pytest

from clusterkit.images import ImageSpec, LockError, LockResolveError, dump_lock, load_lock, lock_problems, resolve_lock
from clusterkit.registry import RegistryClient

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
FIX = "(run `make lock CLUSTER=demo`)"


def entry(name: str, source: str, registry: str, repository: str, digest: str, enroot: str, **over) -> dict:
    data = {"name": name, "source": source, "registry": registry, "repository": repository, "digest": digest,
            "enroot_uri": enroot, "platform": "linux/amd64", "compressed_size": 123, "expect": {}}
    data.update(over)
    return data


def sample_lock() -> dict:
    return {
        "lock_version": 1,
        "images": [
            entry("ubuntu", f"ubuntu@{D2}", "registry-1.docker.io", "library/ubuntu", D2,
                  f"docker://library/ubuntu@{D2}"),
            entry("pytorch", "nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io", "nvidia/pytorch", D1,
                  f"docker://nvcr.io#nvidia/pytorch@{D1}", expect={"nccl": "2.25.1", "cuda": "12.8"}),
        ],
        "cluster": "demo",
    }


def sample_specs() -> list[ImageSpec]:
    return [
        ImageSpec("pytorch", "nvcr.io/nvidia/pytorch:25.01-py3", {"cuda": "12.8", "nccl": "2.25.1"}),
        ImageSpec("ubuntu", f"ubuntu@{D2}", {}),
    ]


EXPECTED_TEXT = f"""{{
  "cluster": "demo",
  "images": [
    {{
      "compressed_size": 123,
      "digest": "{D1}",
      "enroot_uri": "docker://nvcr.io#nvidia/pytorch@{D1}",
      "expect": {{
        "cuda": "12.8",
        "nccl": "2.25.1"
      }},
      "name": "pytorch",
      "platform": "linux/amd64",
      "registry": "nvcr.io",
      "repository": "nvidia/pytorch",
      "source": "nvcr.io/nvidia/pytorch:25.01-py3"
    }},
    {{
      "compressed_size": 123,
      "digest": "{D2}",
      "enroot_uri": "docker://library/ubuntu@{D2}",
      "expect": {{}},
      "name": "ubuntu",
      "platform": "linux/amd64",
      "registry": "registry-1.docker.io",
      "repository": "library/ubuntu",
      "source": "ubuntu@{D2}"
    }}
  ],
  "lock_version": 1
}}
"""


def test_dump_lock_is_deterministic_and_sorted():
    lock = sample_lock()
    before = copy.deepcopy(lock)
    text = dump_lock(lock)
    assert text == EXPECTED_TEXT
    assert dump_lock(sample_lock()).encode() == text.encode()
    reordered = {"cluster": "demo", "lock_version": 1, "images": list(reversed(lock["images"]))}
    assert dump_lock(reordered) == text
    assert lock == before  # the caller's document is not re-sorted in place


def test_dump_lock_refuses_a_wrong_shape():
    lock = sample_lock()
    lock["images"][0]["digest"] = "sha256:short"
    with pytest.raises(ValueError, match=r"images\[0\]\.digest: 'sha256:short' is not sha256:<64 lowercase hex>"):
        dump_lock(lock)


def test_load_lock_round_trip(tmp_path):
    path = tmp_path / "demo.images.lock"
    path.write_text(dump_lock(sample_lock()))
    assert dump_lock(load_lock(path)) == path.read_text()


def test_load_lock_errors(tmp_path):
    missing = tmp_path / "demo.images.lock"
    with pytest.raises(LockError) as err:
        load_lock(missing)
    assert err.value.lines() == [f"{missing}: file does not exist (run `make lock CLUSTER=demo`)"]

    bad_json = tmp_path / "demo.images.lock"
    bad_json.write_text('{\n  "cluster": "demo",\n<<<<<<< HEAD\n}\n')
    with pytest.raises(LockError) as err:
        load_lock(bad_json)
    assert str(err.value) == (f"{bad_json}:3:1: invalid JSON: Expecting property name enclosed in double quotes "
                              "(run `make lock CLUSTER=demo`)")

    shaped = tmp_path / "other.images.lock"
    shaped.write_text(dump_lock(sample_lock()).replace(f'"digest": "{D2}"', '"digest": "sha256:XYZ"')
                      .replace('"lock_version": 1', '"lock_version": 2'))
    with pytest.raises(LockError) as err:
        load_lock(shaped)
    assert err.value.lines() == [
        f"{shaped}:30:19: lock_version: 2 is not supported (this ClusterKit reads 1) "
        "(run `make lock CLUSTER=other`)",
        f"{shaped}:20:17: images[1].digest: 'sha256:XYZ' is not sha256:<64 lowercase hex> "
        "(run `make lock CLUSTER=other`)",
    ]

    not_object = tmp_path / "x.images.lock"
    not_object.write_text("[]\n")
    with pytest.raises(LockError, match=r"x.images.lock:1:1: lock: is not a JSON object"):
        load_lock(not_object)


def test_load_lock_reports_missing_and_unknown_keys(tmp_path):
    path = tmp_path / "demo.images.lock"
    lock = json.loads(dump_lock(sample_lock()))
    del lock["images"][0]["platform"]
    lock["images"][0]["note"] = "hand edit"
    path.write_text(json.dumps(lock, indent=2))
    with pytest.raises(LockError) as err:
        load_lock(path)
    assert [line.split(": ", 1)[1] for line in err.value.lines()] == [
        f"images[0]: missing key 'platform' {FIX}",
        f"images[0].note: unknown key 'note' {FIX}",
    ]


def test_lock_problems_all_good():
    assert lock_problems(sample_lock(), "demo", sample_specs(), "linux/amd64") == []


def test_lock_problems_missing_lock():
    assert lock_problems(None, "demo", sample_specs(), "linux/amd64") == [f"no image lock for cluster 'demo' {FIX}"]


def test_lock_problems_image_added_and_removed():
    specs = sample_specs()[:1] + [ImageSpec("nccl", "public.ecr.aws/hpc-cloud/nccl-tests:latest", {})]
    assert lock_problems(sample_lock(), "demo", specs, "linux/amd64") == [
        f"image 'nccl' is in the spec but not in the lock {FIX}",
        f"image 'ubuntu' is in the lock but not in the spec {FIX}",
    ]


def test_lock_problems_uri_changed():
    specs = [ImageSpec("pytorch", "nvcr.io/nvidia/pytorch:25.02-py3", {"cuda": "12.8", "nccl": "2.25.1"}),
             sample_specs()[1]]
    assert lock_problems(sample_lock(), "demo", specs, "linux/amd64") == [
        f"image 'pytorch': uri 'nvcr.io/nvidia/pytorch:25.02-py3' differs from the locked source "
        f"'nvcr.io/nvidia/pytorch:25.01-py3' {FIX}"
    ]


def test_lock_problems_pinned_digest_differs():
    d3 = "sha256:" + "3" * 64
    specs = [sample_specs()[0], ImageSpec("ubuntu", f"ubuntu@{d3}", {})]
    assert lock_problems(sample_lock(), "demo", specs, "linux/amd64") == [
        f"image 'ubuntu': pinned digest {d3} is not the locked digest {D2} {FIX}"
    ]


def test_lock_problems_pin_to_a_manifest_list_is_not_stale():
    # `source` is the user's text pinned to a list; `digest` is the platform manifest chosen from it.
    lock = sample_lock()
    lock["images"][0]["digest"] = D1
    lock["images"][0]["enroot_uri"] = f"docker://library/ubuntu@{D1}"
    assert lock_problems(lock, "demo", sample_specs(), "linux/amd64") == []


def test_lock_problems_expect_changed():
    specs = [ImageSpec("pytorch", "nvcr.io/nvidia/pytorch:25.01-py3", {"cuda": "12.9"}), sample_specs()[1]]
    assert lock_problems(sample_lock(), "demo", specs, "linux/amd64") == [
        f'image \'pytorch\': expect {{"cuda":"12.9"}} differs from the locked {{"cuda":"12.8","nccl":"2.25.1"}} {FIX}'
    ]


def test_lock_problems_platform_and_cluster_changed():
    assert lock_problems(sample_lock(), "demo", sample_specs(), "linux/arm64") == [
        f"image 'pytorch': locked for linux/amd64, the cluster runs linux/arm64 {FIX}",
        f"image 'ubuntu': locked for linux/amd64, the cluster runs linux/arm64 {FIX}",
    ]
    assert lock_problems(sample_lock(), "prod", sample_specs(), "linux/amd64") == [
        "image lock is for cluster 'demo', not 'prod' (run `make lock CLUSTER=prod`)"
    ]


def test_lock_problems_hand_edits_and_bad_shape():
    lock = sample_lock()
    lock["images"][1]["enroot_uri"] = f"docker://nvcr.io#nvidia/pytorch@{D2}"
    assert lock_problems(lock, "demo", sample_specs(), "linux/amd64") == [
        f"image 'pytorch': locked enroot_uri docker://nvcr.io#nvidia/pytorch@{D2} does not match the source and "
        f"digest {FIX}"
    ]
    lock["images"][1]["compressed_size"] = -1
    assert lock_problems(lock, "demo", sample_specs(), "linux/amd64") == [
        f"image lock: images[1].compressed_size: -1 is not a byte count or null {FIX}"
    ]


def test_resolve_lock_end_to_end(fake_registry, tmp_path):
    """Two images through the loopback registry; a dumped + loaded lock has no problems against the spec."""
    built_a = fake_registry.add_image("team/a", "v1")
    built_b = fake_registry.add_image("team/b", "v2", platforms=("linux/amd64",), as_list=False)
    specs = [ImageSpec("b", f"{fake_registry.host}/team/b:v2", {}),
             ImageSpec("a", f"docker://{fake_registry.host}#team/a:v1", {"cuda": "12.8"})]
    client = RegistryClient(allow_loopback_http=True, timeout=5)

    lock = resolve_lock("demo", specs, "linux/amd64", registry_client=client)

    a, b = lock["images"]
    assert (a["name"], a["digest"], a["compressed_size"]) == (
        "a", built_a.platform_digests["linux/amd64"], built_a.sizes["linux/amd64"])
    assert a["enroot_uri"] == f"docker://{fake_registry.host}#team/a@{a['digest']}"
    assert a["source"] == f"docker://{fake_registry.host}#team/a:v1"
    assert (b["name"], b["digest"]) == ("b", built_b.platform_digests["linux/amd64"])
    path = tmp_path / "demo.images.lock"
    path.write_text(dump_lock(lock))
    assert lock_problems(load_lock(path), "demo", specs, "linux/amd64") == []

    with pytest.raises(LockResolveError) as err:
        resolve_lock("demo", specs + [ImageSpec("c", f"{fake_registry.host}/team/c:v1", {}),
                                      ImageSpec("d", "Bad:1", {})], "linux/amd64", registry_client=client)
    assert err.value.lines() == [
        f"image 'c': {fake_registry.host}/team/c:v1: manifest unknown (HTTP 404)",
        "image 'd': repository 'Bad' has uppercase letters (repository names are lowercase)",
    ]
