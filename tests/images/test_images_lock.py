"""The lock: deterministic text, strict positioned reading, staleness against the spec, end-to-end resolve.

The end-to-end test resolves through the loopback registry stand-in (see conftest.py); the rest is pure.
Both readers of the same broken locks: tests/contracts/test_lock_contract.py.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from images_fakes import add_rootfs_image

from clusterkit.images.lock_file import ImageLock, LockedImage, LockError, lock_text, read_lock, write_lock
from clusterkit.images.registry import RegistryClient
from clusterkit.images.resolve import (
    NVIDIA_NOT_READ,
    OFFLINE_NOT_READ,
    ImageSpec,
    LockResolveError,
    offline_lock,
    resolve_lock,
    staleness,
)

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
FIX = "(run `make lock CLUSTER=demo`)"


def entry(name: str, source: str, registry: str, repository: str, digest: str, enroot: str, **over) -> LockedImage:
    data = {"name": name, "source": source, "registry": registry, "repository": repository, "digest": digest,
            "enroot_uri": enroot, "platform": "linux/amd64", "compressed_size": 123, "expect": {}}
    data.update(over)
    return LockedImage(**data)


def sample_lock() -> ImageLock:
    return ImageLock(
        lock_version=1,
        images=(
            entry("ubuntu", f"ubuntu@{D2}", "registry-1.docker.io", "library/ubuntu", D2,
                  f"docker://library/ubuntu@{D2}"),
            entry("pytorch", "nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io", "nvidia/pytorch", D1,
                  f"docker://nvcr.io#nvidia/pytorch@{D1}", expect={"nccl": "2.25.1", "cuda": "12.8"}),
        ),
        cluster="demo",
    )


def changed(lock: ImageLock, index: int, **changes) -> ImageLock:
    """``lock`` with image ``index`` changed (the model is frozen: a hand edit is a new lock)."""
    images = list(lock.images)
    images[index] = dataclasses.replace(images[index], **changes)
    return dataclasses.replace(lock, images=tuple(images))


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


def test_lock_text_is_deterministic_and_sorted():
    lock = sample_lock()
    text = lock_text(lock)
    assert text == EXPECTED_TEXT
    assert lock_text(sample_lock()).encode() == text.encode()
    assert lock_text(dataclasses.replace(lock, images=tuple(reversed(lock.images)))) == text


def test_lock_text_refuses_a_lock_a_node_would_refuse():
    lock = changed(sample_lock(), 0, digest="sha256:short")
    with pytest.raises(ValueError, match=r"images\[0\]\.digest: 'sha256:short' is not sha256:<64 lowercase hex>"):
        lock_text(lock)


def test_read_lock_round_trip(tmp_path):
    path = tmp_path / "demo.images.lock"
    write_lock(path, sample_lock())
    assert lock_text(read_lock(path)) == path.read_text() == EXPECTED_TEXT
    assert [p.name for p in tmp_path.iterdir()] == ["demo.images.lock"]  # no temporary file left


def test_write_lock_leaves_the_old_file_when_the_lock_is_refused(tmp_path):
    path = tmp_path / "demo.images.lock"
    write_lock(path, sample_lock())
    with pytest.raises(ValueError):
        write_lock(path, changed(sample_lock(), 1, platform="linux/s390x"))
    assert path.read_text() == EXPECTED_TEXT
    assert [p.name for p in tmp_path.iterdir()] == ["demo.images.lock"]


def test_offline_lock_pins_only_digests_and_leaves_sizes_unknown():
    lock = offline_lock("demo", [ImageSpec("ubuntu", f"ubuntu@{D2}", {})], "linux/amd64",
                        online="make lock CLUSTER=demo")
    assert lock == ImageLock(cluster="demo", lock_version=1, images=(
        LockedImage(name="ubuntu", source=f"ubuntu@{D2}", registry="registry-1.docker.io",
                    repository="library/ubuntu", digest=D2, enroot_uri=f"docker://library/ubuntu@{D2}",
                    platform="linux/amd64", compressed_size=None, expect={}, declared={},
                    declared_from=OFFLINE_NOT_READ, nvidia_from=NVIDIA_NOT_READ),))
    assert OFFLINE_NOT_READ.startswith("not read: an offline lock asks no registry for the image config")
    assert staleness(lock, "demo", [ImageSpec("ubuntu", f"ubuntu@{D2}", {})], "linux/amd64") == []


def test_read_lock_errors(tmp_path):
    """A lock outside the checkout: the hint names the command that rewrites that very lock."""
    missing = tmp_path / "demo.images.lock"
    with pytest.raises(LockError) as err:
        read_lock(missing)
    assert err.value.lines() == [f"{missing}: file does not exist (run `clusterkit lock {tmp_path / 'demo.yaml'}`)"]

    bad_json = tmp_path / "demo.images.lock"
    bad_json.write_text('{\n  "cluster": "demo",\n<<<<<<< HEAD\n}\n')
    with pytest.raises(LockError) as err:
        read_lock(bad_json)
    assert str(err.value) == (f"{bad_json}:3:1: not valid JSON: Expecting property name enclosed in double quotes "
                              f"(run `clusterkit lock {tmp_path / 'demo.yaml'}`)")

    shaped = tmp_path / "other.images.lock"
    shaped.write_text(lock_text(sample_lock()).replace(f'"digest": "{D2}"', '"digest": "sha256:XYZ"')
                      .replace('"lock_version": 1', '"lock_version": 2'))
    with pytest.raises(LockError) as err:
        read_lock(shaped)
    assert err.value.lines() == [
        f"{shaped}:20:17: images[1].digest: 'sha256:XYZ' is not sha256:<64 lowercase hex> "
        f"(run `clusterkit lock {tmp_path / 'other.yaml'}`)",
        f"{shaped}:30:19: lock_version: 2 is not supported (this ClusterKit reads 1) "
        f"(run `clusterkit lock {tmp_path / 'other.yaml'}`)",
    ]

    not_object = tmp_path / "x.images.lock"
    not_object.write_text("[]\n")
    with pytest.raises(LockError, match=r"x.images.lock:1:1: expected a mapping, got a list"):
        read_lock(not_object)


def test_read_lock_refuses_what_only_yaml_allows(tmp_path):
    """JSON is YAML, not the reverse: the nodes parse the lock with json, so a YAML-only edit is refused."""
    path = tmp_path / "demo.images.lock"
    path.write_text("# hand edit\n" + EXPECTED_TEXT)
    with pytest.raises(LockError, match=r"demo.images.lock:1:1: not valid JSON: Expecting value"):
        read_lock(path)


def test_read_lock_reports_missing_unknown_and_repeated_keys(tmp_path):
    path = tmp_path / "demo.images.lock"
    lock = json.loads(lock_text(sample_lock()))
    del lock["images"][0]["platform"]
    lock["images"][0]["note"] = "hand edit"
    text = json.dumps(lock, indent=2).replace('"nccl": "2.25.1"', '"nccl": "2.25.1", "cuda": "12.9"')
    path.write_text(text)
    with pytest.raises(LockError) as err:
        read_lock(path)
    assert [line.split(": ", 1)[1] for line in err.value.lines()] == [
        f"images[0]: missing required key 'platform' (run `clusterkit lock {tmp_path / 'demo.yaml'}`)",
        "images[0].expect.cuda: key given twice (remove one)",
        "images[0].note: unknown key (allowed keys: compressed_size, declared, declared_from, digest, enroot_uri, "
        "expect, name, nvidia, nvidia_from, platform, "
        "registry, repository, source)",
    ]


def test_staleness_all_good():
    assert staleness(sample_lock(), "demo", sample_specs(), "linux/amd64") == []


def test_staleness_missing_lock():
    assert staleness(None, "demo", sample_specs(), "linux/amd64") == [f"no image lock for cluster 'demo' {FIX}"]


def test_staleness_image_added_and_removed():
    specs = sample_specs()[:1] + [ImageSpec("nccl", "public.ecr.aws/hpc-cloud/nccl-tests:latest", {})]
    assert staleness(sample_lock(), "demo", specs, "linux/amd64") == [
        f"image 'nccl' is in the spec but not in the lock {FIX}",
        f"image 'ubuntu' is in the lock but not in the spec {FIX}",
    ]


def test_staleness_uri_changed():
    specs = [ImageSpec("pytorch", "nvcr.io/nvidia/pytorch:25.02-py3", {"cuda": "12.8", "nccl": "2.25.1"}),
             sample_specs()[1]]
    assert staleness(sample_lock(), "demo", specs, "linux/amd64") == [
        f"image 'pytorch': uri 'nvcr.io/nvidia/pytorch:25.02-py3' differs from the locked source "
        f"'nvcr.io/nvidia/pytorch:25.01-py3' {FIX}"
    ]


def test_staleness_pinned_digest_differs():
    d3 = "sha256:" + "3" * 64
    specs = [sample_specs()[0], ImageSpec("ubuntu", f"ubuntu@{d3}", {})]
    assert staleness(sample_lock(), "demo", specs, "linux/amd64") == [
        f"image 'ubuntu': pinned digest {d3} is not the locked digest {D2} {FIX}"
    ]


def test_staleness_pin_to_a_manifest_list_is_not_stale():
    # `source` is the user's text pinned to a list; `digest` is the platform manifest chosen from it.
    lock = changed(sample_lock(), 0, digest=D1, enroot_uri=f"docker://library/ubuntu@{D1}")
    assert staleness(lock, "demo", sample_specs(), "linux/amd64") == []


def test_staleness_expect_changed():
    specs = [ImageSpec("pytorch", "nvcr.io/nvidia/pytorch:25.01-py3", {"cuda": "12.9"}), sample_specs()[1]]
    assert staleness(sample_lock(), "demo", specs, "linux/amd64") == [
        f'image \'pytorch\': expect {{"cuda":"12.9"}} differs from the locked {{"cuda":"12.8","nccl":"2.25.1"}} {FIX}'
    ]


def test_staleness_platform_and_cluster_changed():
    assert staleness(sample_lock(), "demo", sample_specs(), "linux/arm64") == [  # one cause (the fleet's): one line
        f"images 'pytorch', 'ubuntu' locked for linux/amd64, the cluster runs linux/arm64 {FIX}",
    ]
    assert staleness(sample_lock(), "prod", sample_specs(), "linux/amd64") == [
        "image lock is for cluster 'demo', not 'prod' (run `make lock CLUSTER=prod`)"
    ]


def test_staleness_hand_edits():
    lock = changed(sample_lock(), 1, enroot_uri=f"docker://nvcr.io#nvidia/pytorch@{D2}")
    assert staleness(lock, "demo", sample_specs(), "linux/amd64") == [
        f"image 'pytorch': locked enroot_uri docker://nvcr.io#nvidia/pytorch@{D2} does not match the source and "
        f"digest {FIX}"
    ]


def test_resolve_lock_end_to_end(fake_registry, tmp_path):
    """Two images through the loopback registry; a dumped + loaded lock has no problems against the spec."""
    built_a = fake_registry.add_image("team/a", "v1")
    built_b = fake_registry.add_image("team/b", "v2", platforms=("linux/amd64",), as_list=False)
    specs = [ImageSpec("b", f"{fake_registry.host}/team/b:v2", {}),
             ImageSpec("a", f"docker://{fake_registry.host}#team/a:v1", {"cuda": "12.8"})]
    client = RegistryClient(allow_loopback_http=True, timeout=5)

    said: list[str] = []
    lock = resolve_lock("demo", specs, "linux/amd64", registry_client=client, progress=said.append)

    a, b = lock.images
    assert said == [f"demo: {i.name} {s.uri} -> {i.digest} ({i.compressed_size / 1e9:.2f} GB)"
                    for i, s in ((a, specs[1]), (b, specs[0]))]  # one line per image, as each resolves
    assert (a.name, a.digest, a.compressed_size) == (
        "a", built_a.platform_digests["linux/amd64"], built_a.sizes["linux/amd64"])
    assert a.enroot_uri == f"docker://{fake_registry.host}#team/a@{a.digest}"
    assert a.source == f"docker://{fake_registry.host}#team/a:v1"
    assert (b.name, b.digest) == ("b", built_b.platform_digests["linux/amd64"])
    path = tmp_path / "demo.images.lock"
    write_lock(path, lock)
    assert staleness(read_lock(path), "demo", specs, "linux/amd64") == []

    with pytest.raises(LockResolveError) as err:
        resolve_lock("demo", specs + [ImageSpec("c", f"{fake_registry.host}/team/c:v1", {}),
                                      ImageSpec("d", "Bad:1", {})], "linux/amd64", registry_client=client)
    assert err.value.lines() == [
        f"image 'c': {fake_registry.host}/team/c:v1: manifest unknown (HTTP 404)",
        "image 'd': repository 'Bad' has uppercase letters (repository names are lowercase)",
    ]


def test_resolve_lock_records_the_nvidia_settings_of_the_image_config(fake_registry, tmp_path):
    """The loopback registry serves a config whose Env sets NVIDIA_*: the lock records them as the hook reads them
    (quotes dropped, the last of a key winning); an image without any records that the config was read."""
    add_rootfs_image(fake_registry, "team/gpu", "v1", [{"etc/hostname": "x"}], env=(
        "NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=all", 'NVIDIA_DRIVER_CAPABILITIES="compute,utility"',
        "NVIDIA_REQUIRE_CUDA=cuda>=13.2", "CUDA_VERSION=13.2.0", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"))
    add_rootfs_image(fake_registry, "team/cpu", "v1", [{"etc/hostname": "x"}])
    specs = [ImageSpec("gpu", f"{fake_registry.host}/team/gpu:v1", {}),
             ImageSpec("cpu", f"{fake_registry.host}/team/cpu:v1", {})]
    lock = resolve_lock("demo", specs, "linux/amd64", registry_client=RegistryClient(allow_loopback_http=True,
                                                                                       timeout=5))
    cpu, gpu = lock.images
    assert gpu.nvidia == {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility", "NVIDIA_REQUIRE_CUDA": "cuda>=13.2",
                          "NVIDIA_VISIBLE_DEVICES": "all"}
    assert (gpu.nvidia_from, cpu.nvidia, cpu.nvidia_from) == ("image config Env", {}, "image config Env")
    path = tmp_path / "demo.images.lock"
    write_lock(path, lock)
    doc = json.loads(path.read_text())
    assert doc["images"][1]["nvidia"]["NVIDIA_REQUIRE_CUDA"] == "cuda>=13.2"
    assert "nvidia" not in doc["images"][0] and doc["images"][0]["nvidia_from"] == "image config Env"
    assert read_lock(path) == lock


def test_a_lock_without_the_nvidia_keys_still_reads_and_a_bad_name_is_refused(tmp_path):
    """Locks written before the settings were recorded read as "not read"; a key outside NVIDIA_* is refused."""
    old = json.loads(lock_text(sample_lock()))
    for image in old["images"]:
        image.pop("nvidia", None), image.pop("nvidia_from", None)
    path = tmp_path / "demo.images.lock"
    path.write_text(json.dumps(old))
    assert all((i.nvidia, i.nvidia_from) == ({}, "") for i in read_lock(path).images)
    old["images"][0]["nvidia"] = {"PATH": "/bin"}
    old["images"][0]["nvidia_from"] = "image config Env"
    path.write_text(json.dumps(old, indent=2))
    with pytest.raises(LockError) as err:
        read_lock(path)
    assert any("images[0].nvidia.PATH: 'PATH' is not an NVIDIA_* variable name" in line for line in err.value.lines())
