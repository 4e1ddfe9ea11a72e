"""Platforms referenced by name, resolved offline (clusterkit/pipeline/platform.py): every mistake in the
reference, the platform, or the sum of its clusters is one line naming the file, line and field, with a hint.

Each world is a copy of the shipped research-east platform with its two clusters in a temporary directory,
changed in one place; the first test shows the shipped one is clean.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clusterkit.effective.expand import expand
from clusterkit.paths import CONFIG_DIR
from clusterkit.pipeline.loader import load, load_many
from clusterkit.spec.errors import SpecError

CLUSTERS = ("train-a", "train-b")


@pytest.fixture
def world(tmp_path: Path) -> Path:
    (tmp_path / "platforms").mkdir()
    shutil.copy(CONFIG_DIR / "platforms" / "research-east.yaml", tmp_path / "platforms")
    for name in CLUSTERS:
        shutil.copy(CONFIG_DIR / f"{name}.yaml", tmp_path)
        shutil.copy(CONFIG_DIR / f"{name}.images.lock", tmp_path)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _errors(world: Path, *names: str) -> list[str]:
    _, problems = load_many([str(world / f"{n}.yaml") for n in names or CLUSTERS])
    return [p.render().replace(str(world) + "/", "") for p in problems if p.level == "error"]


def test_the_shipped_platform_and_its_clusters_are_clean(world: Path) -> None:
    assert _errors(world) == []
    loaded = load(str(world / "train-a.yaml"))
    effective = expand(loaded)
    assert effective.platform is not None and effective.platform.name == "research-east"
    assert (effective.names.network_stack, effective.names.storage_stack, effective.names.alerts_stack,
            effective.names.cluster_stack) == ("Research-East-Network", "Research-East-Storage", "Train-A-Alerts",
                                               "Train-A-Cluster")
    # the cluster runs on the platform's file system and network: the merged spec
    assert effective.storage.new is not None and effective.storage.new.capacity_gib == 2400
    assert effective.network.new is not None and effective.network.new.cidr == "10.1.0.0/16"
    assert ("clusterkit:platform", "research-east") in {(t.key, t.value) for t in effective.tags}


def test_a_missing_platform_names_the_line_and_the_known_ones(world: Path) -> None:
    _edit(world / "train-b.yaml", "platform: research-east", "platform: research-west")
    assert _errors(world, "train-b") == [
        "train-b.yaml:5:11: platform: no platform 'research-west': platforms/research-west.yaml does not exist "
        "(known platforms: research-east)"]


def test_a_platform_name_never_becomes_a_path(world: Path) -> None:
    _edit(world / "train-b.yaml", "platform: research-east", "platform: ../research-east")
    assert _errors(world, "train-b") == [
        "train-b.yaml:5:11: platform: '../research-east' is not a platform name (start with a letter; letters, "
        "digits and hyphens; at most 60 characters)"]


def test_region_and_az_must_be_the_platform_s(world: Path) -> None:
    _edit(world / "train-a.yaml", "region: us-east-1", "region: us-west-2")
    _edit(world / "train-b.yaml", "availability_zone: us-east-1a", "availability_zone: us-east-1b")
    errors = _errors(world)
    assert errors == [
        "train-a.yaml:7:9: region: 'us-west-2' differs from platform research-east's region us-east-1 "
        "(platforms/research-east.yaml:7) (a cluster runs in its platform's region: region: us-east-1)",
        "train-a.yaml:8:20: availability_zone: 'us-east-1a' is not in us-west-2 (one of us-west-2a, us-west-2b, "
        "us-west-2c, us-west-2d)",
        "train-b.yaml:7:20: availability_zone: 'us-east-1b' differs from platform research-east's us-east-1a "
        "(platforms/research-east.yaml:8) (the platform's compute subnet is in one AZ: "
        "availability_zone: us-east-1a)"]


def test_a_cluster_on_a_platform_has_no_network_or_storage_of_its_own(world: Path) -> None:
    with (world / "train-a.yaml").open("a", encoding="utf-8") as f:
        f.write("storage:\n  fsx_lustre:\n    mount_dir: /lustre\n")
    [error] = _errors(world, "train-a")
    assert error == ("train-a.yaml:44:1: storage: set by platform research-east (platforms/research-east.yaml); a "
                     "cluster on a platform has no storage of its own (remove storage: here, or change it in "
                     "platforms/research-east.yaml)")


def test_a_platform_mistake_is_reported_once_in_the_platform_file(world: Path) -> None:
    _edit(world / "platforms" / "research-east.yaml", "cidr: 10.1.0.0/16", "cidr: 10.1.0.0/33")
    assert _errors(world) == [
        "platforms/research-east.yaml:12:11: network.new.cidr: '10.1.0.0/33' is not an IPv4 CIDR (like 10.0.0.0/16)"]


def test_the_platform_file_name_is_its_name(world: Path) -> None:
    _edit(world / "platforms" / "research-east.yaml", "name: research-east", "name: research")
    assert _errors(world, "train-a") == [
        "platforms/research-east.yaml:6:7: name: 'research' differs from the file name 'research-east' "
        "(rename the file to research.yaml or set name: research-east)"]


def _sizes(lock: Path, gib: int) -> None:
    data = json.loads(lock.read_text(encoding="utf-8"))
    for i, image in enumerate(data["images"]):
        image["compressed_size"] = (gib + i) * 1024 ** 3
    lock.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def test_the_file_system_must_hold_the_union_of_its_clusters_images(world: Path) -> None:
    """The same digests count once (both clusters lock the same two images); a third cluster's own image adds."""
    for name in CLUSTERS:
        _sizes(world / f"{name}.images.lock", 700)
    assert _errors(world) == []  # two distinct images of about 700 GiB each fit in 2400 GiB
    _edit(world / "train-b.yaml", "name: pytorch", "name: pytorch-b")
    _edit(world / "train-b.yaml", "96990c82825613c3bdeebb66675c7c91b0123f64a5895623316dc5b824e0d7a9",
          "1111111111111111111111111111111111111111111111111111111111111111")
    data = json.loads((world / "train-b.images.lock").read_text())
    image, new = data["images"][1], "sha256:" + "1" * 64
    image.update(name="pytorch-b", digest=new, source=image["source"].replace(image["digest"], new),
                 enroot_uri=image["enroot_uri"].replace(image["digest"], new))
    (world / "train-b.images.lock").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    [error] = _errors(world)
    assert error.startswith("platforms/research-east.yaml:19:21: storage.fsx_lustre.new.capacity_gib: 2400 GiB "
                            "cannot hold the 3 distinct images of clusters train-a, train-b: about ")
    assert error.endswith("(capacity_gib: 4800 (room to import a new version beside the old), or fewer images)")


def test_one_image_name_means_one_digest_on_a_platform(world: Path) -> None:
    """The store's stable name <name>.sqsh and its manifest are keyed by name: two digests under one name would
    make one cluster's jobs run the other's image."""
    digest = "96990c82825613c3bdeebb66675c7c91b0123f64a5895623316dc5b824e0d7a9"
    other = "2" * 64
    _edit(world / "train-b.yaml", digest, other)
    lock = world / "train-b.images.lock"
    lock.write_text(lock.read_text().replace(digest, other))
    errors = _errors(world)
    assert len(errors) == 2
    assert errors[0].startswith("train-a.yaml:30:13: containers.images[1].name: 'pytorch' is sha256:96990c828256 "
                                "here but sha256:222222222222 in train-b (")
    assert errors[0].endswith("on the same platform research-east: the store's stable name pytorch.sqsh means one "
                              "image (give one of them another name, e.g. pytorch-96990c82, or pin the same digest)")
    assert errors[1].startswith("train-b.yaml:")


def test_the_compute_subnet_must_hold_every_cluster_s_nodes(world: Path) -> None:
    _edit(world / "platforms" / "research-east.yaml", "compute_subnet_mask: 19", "compute_subnet_mask: 25")
    assert _errors(world) == [
        "platforms/research-east.yaml:14:26: network.new.compute_subnet_mask: compute subnet has 123 usable "
        "addresses but the platform's clusters at max nodes need 134 (train-a 65, train-b 69) (a larger compute "
        "subnet, or lower max in a cluster)"]


def test_a_platform_and_a_cluster_may_not_share_stack_names(world: Path) -> None:
    shutil.copy(CONFIG_DIR / "demo.yaml", world / "research-east.yaml")
    _edit(world / "research-east.yaml", "name: demo", "name: research-east")
    errors = _errors(world, "train-a")
    assert errors == [
        "platforms/research-east.yaml:6:7: name: cluster spec research-east.yaml has the same name: both would make "
        "the stacks of that name (rename the platform or the cluster)"]


def test_a_platform_cannot_be_loaded_as_a_cluster_by_mistake(world: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load(str(world / "platforms" / "research-east.yaml"))
    assert str(caught.value).endswith("platforms/research-east.yaml: a platform file, not a cluster spec (check it "
                                      "through a cluster that names it (clusterkit validate <cluster>), or "
                                      "synthesize it: make synth PLATFORM="
                                      f"{world.resolve()}/platforms/research-east.yaml)")
    # was `make synth PLATFORM=research-east`: the checkout's platform of that name, not this file


def test_one_image_name_means_one_expectation_on_a_platform(world: Path) -> None:
    """The sync demotes an image whose versions miss its lock's expect and takes its stable name away for every
    cluster on the store: two clusters expecting different versions of one file would flip it on each sync."""
    _edit(world / "train-b.yaml", 'cuda: "12.8"', 'cuda: "12.9"')
    lock = world / "train-b.images.lock"
    lock.write_text(lock.read_text().replace('"cuda": "12.8"', '"cuda": "12.9"'))
    errors = _errors(world)
    assert errors[0].startswith("train-a.yaml:33:9: containers.images[1].expect: 'pytorch' expects cuda 12.8 here "
                                "but cuda 12.9 in train-b (")
    assert errors[0].endswith("for the same file on platform research-east: the store keeps one verdict per name "
                              "(state the same expect in both specs (or give one image another name))")
    assert len(errors) == 2 and errors[1].startswith("train-b.yaml:")


def test_a_platform_is_one_trust_domain(world: Path) -> None:
    """Root on any cluster of a platform can rewrite the store every other serves: clusters declaring different
    trust domains (or one declaring none) may not share it; each is told, naming the other."""
    _edit(world / "train-b.yaml", "trust_domain: research-team", "trust_domain: vision-team")
    errors = _errors(world)
    assert len(errors) == 2, errors
    assert errors[0].startswith("train-a.yaml:40:17: security.trust_domain: trust domain 'research-team' here but "
                                "'vision-team' in train-b (")
    assert errors[0].endswith("on the same platform research-east: root on either cluster can rewrite the store the "
                              "other serves (give clusters of another trust domain their own platform, or declare "
                              "the same security.trust_domain in both specs)")
    _edit(world / "train-b.yaml", "security:\n", "")
    _edit(world / "train-b.yaml", "  trust_domain: vision-team\n", "")
    errors = _errors(world)
    assert errors[0].startswith("train-a.yaml:40:17: security.trust_domain: trust domain 'research-team' here but "
                                "none declared in train-b (")
    assert errors[1].startswith("train-b.yaml:5:11: platform: trust domain none declared here but 'research-team' in "
                                "train-a (")
