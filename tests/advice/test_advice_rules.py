"""Sizing advice: each check with a case that passes and a case that warns, exact text asserted.

Real: the loader (spec file, rules, the lock file next to the spec), the offline instance catalog, the
arithmetic. The expected numbers below are worked by hand in the comments. Nothing talks to AWS: the
throughputs are FSx's documented baselines, not measurements.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from clusterkit.pipeline.loader import load
from clusterkit.rules import advice
from clusterkit.spec.errors import SpecError
from clusterkit_node.contract import sizing

GIB = 1024 ** 3
DIGEST = "sha256:" + "ab" * 32


def _spec(tmp_path: Path, *, nodes: int = 8, fsx: str = "", head: str = "", images: dict[str, int | None] | None = None,
          squash: str = "", extra: str = "", pyxis: str = "", os: str = "ubuntu2404") -> list:
    """Write t.yaml (+ t.images.lock when images are given) and return the loaded warnings. The OS defaults to
    ubuntu2404, whose AMI starts images in place: the start-path warning has its own tests below."""
    text = textwrap.dedent(f"""\
        name: t
        region: us-east-1
        availability_zone: us-east-1a
        os: {os}
        queues:
          - name: gpu
            compute_resources:
              - name: p5
                instance_type: p5.48xlarge
                max: {nodes}
        """)
    text += head + fsx + extra
    images = images or {}
    if images or squash or pyxis:
        text += "containers:\n"
        if squash:
            text += f"  enroot:\n    squash_options: {squash}\n"
        if pyxis:
            text += f"  pyxis:\n    {pyxis}\n"
        if images:
            text += "  images:\n" + "".join(
                f"    - name: {n}\n      uri: example.com/{n}@{DIGEST}\n" for n in images)
    (tmp_path / "t.yaml").write_text(text)
    if images:
        entries = [{"compressed_size": size, "digest": DIGEST, "enroot_uri": f"docker://example.com#{n}@{DIGEST}",
                    "expect": {}, "name": n, "platform": "linux/amd64", "registry": "example.com", "repository": n,
                    "source": f"example.com/{n}@{DIGEST}"} for n, size in sorted(images.items())]
        (tmp_path / "t.images.lock").write_text(json.dumps({"cluster": "t", "images": entries, "lock_version": 1}))
    return load(str(tmp_path / "t.yaml"), check_lock=False).warnings


def _texts(warnings) -> list[tuple[str, str, str]]:
    return [(w.path, w.message, w.hint) for w in warnings]


P2_125 = "storage:\n  fsx_lustre:\n    new:\n      capacity_gib: 1200\n      throughput_mb_per_tib: 125\n"


# -- FSx fan-out ---------------------------------------------------------------------------------------

def test_fan_out_under_ten_minutes_is_quiet(tmp_path):
    # 4 nodes x 1.2 x 10 GiB = 51.5 GB at 1200/1024 x 125 = 146.5 MB/s: 351.8 s
    assert _spec(tmp_path, nodes=4, fsx=P2_125, images={"a": 10 * GIB}) == []


def test_fan_out_warns_with_the_tier_that_fixes_it(tmp_path):
    # 8 nodes x 12,884,901,888 B = 103.1 GB at 146.48 MB/s = 703.7 s = 11.7 min; 250 MB/s/TiB: 293 MB/s, 5.9 min;
    # squashfuse, default -b 128K -no-fragments: 34.9 % of it, 245.6 s = 4.1 min
    assert _texts(_spec(tmp_path, nodes=8, fsx=P2_125, images={"a": 10 * GIB})) == [(
        "storage.fsx_lustre.new.throughput_mb_per_tib",
        "image fan-out: 8 nodes x 1 images (12.9 GB of .sqsh per node) = 103.1 GB at 146 MB/s takes 11.7 min "
        "(over 10 min) where pyxis extracts (pyxis < 0.24); squashfuse starts (pyxis >= 0.24) read about 35% of it "
        "for jobs reading 25% of their image: 4.1 min",
        "throughput_mb_per_tib: 250 takes 5.9 min")]


def test_fan_out_points_at_the_spec_line(tmp_path):
    (warning,) = _spec(tmp_path, nodes=8, fsx=P2_125, images={"a": 10 * GIB})
    assert warning.render().startswith(
        f"{tmp_path}/t.yaml:15:30: warning[image-fanout-slow]: storage.fsx_lustre.new.throughput_mb_per_tib:")


def test_fan_out_says_when_sizes_are_assumed(tmp_path):
    # no size in the lock: 20 GiB assumed -> 8 x 25,769,803,776 B = 206.2 GB: 1407.4 s = 23.5 min;
    # needed 343.6 MB/s -> 500 MB/s/TiB: 585.9 MB/s, 5.9 min; squashfuse: 0.349 x 1407.4 s = 491.2 s = 8.2 min
    assert _texts(_spec(tmp_path, nodes=8, fsx=P2_125, images={"a": None})) == [(
        "storage.fsx_lustre.new.throughput_mb_per_tib",
        "image fan-out: 8 nodes x 1 images (25.8 GB of .sqsh per node) = 206.2 GB at 146 MB/s takes 23.5 min "
        "(over 10 min) where pyxis extracts (pyxis < 0.24); squashfuse starts (pyxis >= 0.24) read about 35% of it "
        "for jobs reading 25% of their image: 8.2 min",
        "throughput_mb_per_tib: 500 takes 5.9 min; 1 of 1 image sizes assumed 20 GiB, none in the lock: "
        f"`clusterkit lock {tmp_path}/t.yaml` with registry access records them")]


def test_scratch_fan_out_suggests_capacity(tmp_path):
    # SCRATCH_2: 1200/1024 x 200 = 234.4 MB/s; 16 x 12.9 GB = 206.2 GB: 879.6 s = 14.7 min;
    # needed 343.6 MB/s -> 1.72 TiB -> the next valid size, 2400 GiB: 468.8 MB/s, 7.3 min;
    # squashfuse: 0.349 x 879.6 s = 307.0 s = 5.1 min
    scratch = "storage:\n  fsx_lustre:\n    new:\n      deployment_type: SCRATCH_2\n      throughput_mb_per_tib: null\n"
    assert _texts(_spec(tmp_path, nodes=16, fsx=scratch, images={"a": 10 * GIB})) == [(
        "storage.fsx_lustre.new.capacity_gib",
        "image fan-out: 16 nodes x 1 images (12.9 GB of .sqsh per node) = 206.2 GB at 234 MB/s takes 14.7 min "
        "(over 10 min) where pyxis extracts (pyxis < 0.24); squashfuse starts (pyxis >= 0.24) read about 35% of it "
        "for jobs reading 25% of their image: 5.1 min",
        "capacity_gib: 2400 takes 7.3 min")]


def test_uncompressed_squash_options_are_named(tmp_path):
    # -noD: 3 x 10 GiB = 32.2 GB per node, 4 nodes = 128.8 GB: 879.6 s = 14.7 min; 250 MB/s/TiB: 7.3 min;
    # squashfuse: mksquashfs' default 128 KiB blocks with fragments, 0.354 x 879.6 s = 311.4 s = 5.2 min
    warnings = _spec(tmp_path, nodes=4, fsx=P2_125, images={"a": 10 * GIB}, squash="-noI -noD -noF -noX -no-duplicates")
    assert _texts(warnings) == [(
        "storage.fsx_lustre.new.throughput_mb_per_tib",
        "image fan-out: 4 nodes x 1 images (32.2 GB of .sqsh per node) = 128.8 GB at 146 MB/s takes 14.7 min "
        "(over 10 min) where pyxis extracts (pyxis < 0.24); squashfuse starts (pyxis >= 0.24) read about 35% of it "
        "for jobs reading 25% of their image: 5.2 min",
        "throughput_mb_per_tib: 250 takes 7.3 min; squash options store data uncompressed (3x the layers); "
        "compressed ones (-comp zstd) read about 1.2x")]


def test_fan_out_squashfuse_figure_follows_the_block_size_and_the_setting(tmp_path):
    # 8 nodes, 10 GiB: 703.7 s extracting; 1 MiB blocks with fragments read 43.8 %: 308.2 s = 5.1 min
    (one,) = _spec(tmp_path, nodes=8, fsx=P2_125, images={"a": 10 * GIB}, squash="-comp zstd -b 1M")
    assert one.message.endswith("read about 44% of it for jobs reading 25% of their image: 5.1 min")
    (off,) = _spec(tmp_path, nodes=8, fsx=P2_125, images={"a": 10 * GIB}, pyxis="use_squashfuse: false")
    assert off.message.endswith("takes 11.7 min (over 10 min)")


# -- start path (node profiles) ------------------------------------------------------------------------

def test_an_os_without_squashfuse_warns_that_containers_extract_and_the_fan_out_says_no_squashfuse_figure(tmp_path):
    """alinux2023's AMI has no squashfuse (node_profiles.json, from the cookbook): every start extracts, so the
    fan-out warning must not promise the squashfuse figure."""
    start, fan = _spec(tmp_path, nodes=8, fsx=P2_125, images={"a": 10 * GIB}, os="alinux2023")
    assert (start.id, start.path) == ("container-start-extracts", "os")
    assert start.message == ("containers on alinux2023 nodes start by extraction, not in place: ParallelCluster's "
                             "alinux2023 AMI has no squashfuse, so every job start unpacks its whole image onto "
                             "node-local disk")
    assert "ubuntu2404" in start.hint and "custom AMI" in start.hint
    assert fan.id == "image-fanout-slow" and fan.message.endswith("takes 11.7 min (over 10 min)")


def test_an_os_with_a_multi_threaded_squashfuse_ll_starts_in_place_quietly(tmp_path):
    assert _spec(tmp_path, nodes=2, fsx=P2_125, images={"a": GIB}, os="ubuntu2404") == []


@pytest.mark.parametrize("os_name, reader", [
    ("ubuntu2204", "squashfuse, single-threaded; its squashfuse_ll 0.1.103 is older than 0.3.0"),
    ("rhel9", "squashfuse, single-threaded; its squashfuse_ll 0.1.104 is older than 0.3.0")])
def test_an_os_whose_squashfuse_reads_on_one_thread_extracts_and_says_each_image(tmp_path, os_name, reader):
    warnings = _spec(tmp_path, nodes=2, fsx=P2_125, images={"a": GIB, "b": 3 * GIB}, os=os_name)
    assert [(w.id, w.path) for w in warnings] == [("container-start-extracts-slow-reader", "os")]
    message = warnings[0].message
    assert f"containers on {os_name} nodes start by extraction, not in place: the AMI's {reader}" in message
    assert message.endswith("(a 1.1 GB, b 3.2 GB)"), message
    assert "os: ubuntu2404 (its squashfuse_ll 0.5.0 is multi-threaded)" in warnings[0].hint
    # accepted with a reason: in place, quiet
    assert _spec(tmp_path, nodes=2, fsx=P2_125, images={"a": GIB}, os=os_name,
                 pyxis="single_threaded_in_place: true\n    single_threaded_reason: big images, small reads") == []


def test_no_start_path_warning_without_images_or_with_squashfuse_off(tmp_path):
    assert _spec(tmp_path, nodes=2, os="alinux2023") == []
    assert _spec(tmp_path, nodes=2, fsx=P2_125, images={"a": GIB}, os="alinux2023",
                 pyxis="use_squashfuse: false") == []


@pytest.mark.parametrize("options, block, share", [
    ("", 128 * 1024, 0.354), ("-b 128K -no-fragments", 128 * 1024, 0.349), ("-b 1M", 1024 ** 2, 0.438),
    ("-b 1M -no-fragments", 1024 ** 2, 0.363), ("-b 65536", 65536, 0.354), ("-b 256K", 256 * 1024, 0.438),
    ("-b 4M", 4 * 1024 ** 2, 0.438), ("-b", 128 * 1024, 0.354)])
def test_block_size_and_measured_share(options, block, share):
    assert advice.block_size(options) == block
    assert advice.squashfuse_share(options) == share


def test_existing_file_system_is_not_judged(tmp_path):
    existing = "storage:\n  fsx_lustre:\n    existing:\n      file_system_id: fs-0123456789abcdef0\n"
    assert _spec(tmp_path, nodes=64, fsx=existing, images={"a": 10 * GIB}) == []


# -- head node root volume -----------------------------------------------------------------------------

def test_root_volume_big_enough_is_quiet(tmp_path):
    # 40 + 3 x 20 + 1 x 20 = 120 GiB
    assert _spec(tmp_path, nodes=1, head="head_node:\n  root_volume_gib: 120\n", images={"a": 20 * GIB}) == []


def test_root_volume_too_small_warns(tmp_path):
    # 40 + 3 x 20 (largest, a) + 1 x (20 + 10) cached = 130 GiB > 100
    warnings = _spec(tmp_path, nodes=1, head="head_node:\n  root_volume_gib: 100\n",
                     images={"a": 20 * GIB, "b": 10 * GIB})
    assert _texts(warnings) == [(
        "head_node.root_volume_gib",
        "importing the images needs 130 GiB on the root volume but it has 100 GiB",
        "40 GiB for the AMI + 3x the largest image (a, 20.0 GiB) unpacking + 1x all layers cached (30.0 GiB); "
        "set root_volume_gib: 130 or use a head node with local NVMe")]


def test_head_node_with_nvme_imports_there(tmp_path):
    head = "head_node:\n  instance_type: c6id.2xlarge\n  root_volume_gib: 60\n"  # 474 GiB instance store
    assert _spec(tmp_path, nodes=1, head=head, images={"a": 20 * GIB}) == []


# -- capacity blocks -----------------------------------------------------------------------------------

def _block(count: int) -> str:
    return textwrap.dedent(f"""\
          - name: block
            capacity_type: capacity_block
            compute_resources:
              - name: p5b
                instance_type: p5.48xlarge
                min: 4
                max: 4
                capacity_reservation_id: cr-0123456789abcdef0
                reservation_instance_count: {count}
        """)


def _block_spec(tmp_path: Path, count: int) -> list:
    (tmp_path / "t.yaml").write_text(textwrap.dedent("""\
        name: t
        region: us-east-1
        availability_zone: us-east-1a
        queues:
        """) + _block(count))
    return load(str(tmp_path / "t.yaml"), check_lock=False).warnings


def test_block_matching_its_count_is_quiet(tmp_path):
    assert _block_spec(tmp_path, 4) == []


def test_block_bigger_than_the_queue_warns(tmp_path):
    assert _texts(_block_spec(tmp_path, 8)) == [(
        "queues[0].compute_resources[0].reservation_instance_count",
        "min/max 4 use 4 of the capacity block's 8 instances", "the whole block is paid for; set min and max to 8")]


def test_queue_bigger_than_the_block_warns(tmp_path):
    (warning,) = _block_spec(tmp_path, 2)
    assert warning.level == "warning" and warning.line == 13
    assert (warning.message, warning.hint) == (
        "min/max 4 exceed the capacity block's 2 instances",
        "nodes beyond the block never launch; set min and max to 2")


# -- where advice runs ---------------------------------------------------------------------------------

def test_a_spec_with_errors_gets_no_advice(tmp_path):
    (tmp_path / "t.yaml").write_text(textwrap.dedent("""\
        name: t
        region: us-eats-1
        availability_zone: us-east-1a
        queues:
        """) + _block(8))
    with pytest.raises(SpecError) as info:
        load(str(tmp_path / "t.yaml"), check_lock=False)
    assert [p.level for p in info.value.problems] == ["error"]


def test_shipped_specs():
    """demo fans 2 images out to 12 nodes through 293 MB/s (squashfuse: 0.349 x 2111 s = 736.8 s = 12.3 min);
    the other two specs are sized fine."""
    assert _texts(load("demo").warnings) == [(
        "storage.fsx_lustre.new.throughput_mb_per_tib",
        "image fan-out: 12 nodes x 2 images (51.5 GB of .sqsh per node) = 618.5 GB at 293 MB/s takes 35.2 min "
        "(over 10 min) where pyxis extracts (pyxis < 0.24); squashfuse starts (pyxis >= 0.24) read about 35% of it "
        "for jobs reading 25% of their image: 12.3 min",
        "throughput_mb_per_tib: 1000 takes 8.8 min; 2 of 2 image sizes assumed 20 GiB, none in the lock: "
        "`make lock CLUSTER=demo` with registry access records them")]
    assert load("p4d-existing").warnings == [] and load("p5-capacity-block").warnings == []


# -- one set of numbers --------------------------------------------------------------------------------

FACTORS = ("TEMP_FACTOR", "CACHE_FACTOR", "STORE_FACTOR_COMPRESSED", "STORE_FACTOR_UNCOMPRESSED_DATA")


def test_disk_factors_are_the_nodes():
    """advice.py sizes with the factors the head node's disk preflight refuses imports with
    (clusterkit_node/contract/sizing.py, which both import): one set of numbers."""
    assert {name: getattr(advice, name) for name in FACTORS} == {name: getattr(sizing, name) for name in FACTORS}
    from clusterkit_node.store import disk_preflight
    assert ({name: getattr(disk_preflight, name) for name in FACTORS}
            == {name: getattr(sizing, name) for name in FACTORS})


@pytest.mark.parametrize("options", ["-comp zstd -Xcompression-level 3 -b 1M", "-comp lzo -noD", "-noI -noData",
                                     "-no-compression", "-comp lz4"])
def test_uncompressed_test_is_the_nodes(options):
    assert advice.data_uncompressed(options) == sizing.data_uncompressed(options)


def test_compute_queue_without_nvme_needs_a_root_volume_for_the_largest_image(tmp_path):
    """Pyxis unpacks the job's image into ENROOT_DATA_PATH; without NVMe that is the root volume,
    which ParallelCluster sizes like the AMI unless the queue says otherwise."""
    from clusterkit.rules.advice import compute_root_need_gib

    text = textwrap.dedent("""\
        name: t
        region: us-east-1
        availability_zone: us-east-1a
        queues:
          - name: cpu
            compute_resources:
              - name: c6i
                instance_type: c6i.2xlarge
                max: 2
        containers:
          images:
            - name: a
              uri: nvcr.io/nvidia/a:1@sha256:{a}
        """).format(a="a" * 64)
    (tmp_path / "t.yaml").write_text(text)
    lock = {"cluster": "t", "lock_version": 1, "images": [{
        "name": "a", "source": f"nvcr.io/nvidia/a:1@sha256:{'a' * 64}", "registry": "nvcr.io",
        "repository": "nvidia/a", "digest": "sha256:" + "a" * 64, "platform": "linux/amd64",
        "enroot_uri": f"docker://nvcr.io#nvidia/a@sha256:{'a' * 64}", "compressed_size": 10 * GIB, "expect": {}}]}
    (tmp_path / "t.images.lock").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    (warning,) = [w for w in load(str(tmp_path / "t.yaml")).warnings if "NVMe" in w.message]
    assert warning.path == "queues[0].name"
    assert warning.message == ("queue cpu has no instance-store NVMe: containers unpack onto a root volume of the "
                               "AMI's size (about 40 GiB), and the largest image needs 70 GiB")
    assert warning.hint.endswith("set queues[0].root_volume_gib: 70")
    assert compute_root_need_gib([]) == 40
    (tmp_path / "t.yaml").write_text(text.replace("  - name: cpu\n", "  - name: cpu\n    root_volume_gib: 70\n"))
    assert not [w for w in load(str(tmp_path / "t.yaml")).warnings if "NVMe" in w.message]
