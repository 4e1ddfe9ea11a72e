"""``clusterkit expand NAME``: the effective spec as a reviewer reads it (YAML) or a tool does (JSON).

Real: the console entry point's ``main``, the loader and the expansion of the committed demo spec. The
golden copy pins the shape (every field, in order) and the resolved values; when the demo spec, the
catalog or a default changes on purpose, regenerate it with the command in the failure message.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from clusterkit.cli.main import main

GOLDEN = Path(__file__).parent / "golden" / "demo.expanded.yaml"
REGENERATE = f".venv/bin/python -m clusterkit expand demo > {GOLDEN.relative_to(Path(__file__).parents[2])}"
TOP_LEVEL = ["name", "region", "availability_zone", "account", "parallelcluster_version", "os", "network", "head_node",
             "storage", "queues", "scheduling", "containers", "monitoring", "lifecycle", "tags", "names", "node",
             "platform", "health", "login_nodes"]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["expand", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_matches_the_golden_copy(capsys):
    code, out, err = _run(capsys, "demo")
    assert code == 0 and err == ""
    assert out == GOLDEN.read_text(encoding="utf-8"), (
        f"the effective demo spec changed: if intended, run `{REGENERATE}`")


def test_shape_of_the_demo(capsys):
    data = yaml.safe_load(_run(capsys, "demo")[1])
    assert list(data) == TOP_LEVEL
    assert list(data["storage"]) == [
        "mount_dir", "image_store", "image_store_fs_path", "new", "existing_file_system_id"]
    gpu, cpu = data["queues"]
    assert list(gpu) == ["name", "capacity_type", "pc_capacity_type", "allocation_strategy", "efa", "placement_group",
                         "has_gpu", "has_nvme", "job_exclusive", "root_volume_gib", "compute_resources",
                         "gpu_check", "node_args"]
    assert {k: gpu[k] for k in ("efa", "placement_group", "has_gpu", "has_nvme", "job_exclusive")} == dict.fromkeys(
        ("efa", "placement_group", "has_gpu", "has_nvme", "job_exclusive"), True)
    assert (cpu["efa"], cpu["placement_group"], cpu["job_exclusive"], cpu["root_volume_gib"]) == (
        False, False, False, 100)
    assert (gpu["gpu_check"], cpu["gpu_check"], cpu["node_args"]) == ("boot", None, [])
    assert (data["storage"]["new"]["throughput_mb_per_tib"] == 250
            and data["storage"]["image_store"] == "/fsx/containers")
    assert data["lifecycle"] == {"ttl_hours": 72.0, "notify_email": None, "deploy_time": None, "expires_at": None}
    assert data["tags"] == [{"key": "clusterkit:cluster", "value": "demo"},
                            {"key": "project", "value": "clusterkit-demo"}]
    assert data["node"]["head"][-4] == "CK_ECR_REGISTRIES=" and data["node"]["compute"] == data["node"]["head"][:-4]
    assert data["node"]["head"][-3:] == ["CK_STORE_GC_TIMER=0", "CK_STORE_GC_GRACE_HOURS=72",
                                         "CK_STORE_GC_STALE_DAYS=7"]


def test_json_is_the_same_data(capsys):
    code, out, _ = _run(capsys, "demo", "--format", "json")
    assert code == 0
    assert json.loads(out) == yaml.safe_load(GOLDEN.read_text(encoding="utf-8"))


def test_unknown_cluster_is_one_line_and_exit_2(capsys):
    code, out, err = _run(capsys, "no-such-cluster")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no such spec file" in err
