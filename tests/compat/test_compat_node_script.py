"""compute_node_configured.sh fails a node whose NVIDIA driver cannot run a locked image, and records
every node's fingerprint in the store.

Real: the bash script, the real node zipapp (compat.py inside) and compat_rules.json taken out of the
bundle zip ClusterKit builds for the demo cluster (so the bundle demonstrably ships them), python3,
the files written. Stand-ins (tests/node/node_sandbox.py): the PC AMI files, enroot, srun, scontrol
and friends; tests/compat/fakes/nvidia-smi for the GPU driver. IMDS is disabled (no instance here).
"""
from __future__ import annotations

import io
import json
import re
import shutil
import socket
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "node"))

from compat_harness import COMPAT_FAKES, COMPAT_PY, RULES  # noqa: E402
from node_sandbox import COMPUTE_ARGS, FORBIDDEN, IMAGES_LOCK, Sandbox, bundle_zip  # noqa: E402

from clusterkit.artifacts.bundle import ZIPAPP, node_artifacts  # noqa: E402
from clusterkit.pipeline.loader import load  # noqa: E402

SHARED = "opt/parallelcluster/shared/clusterkit"
HOST = socket.gethostname().split(".")[0]


@pytest.fixture(scope="module")
def demo_bundle() -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(node_artifacts(load("demo")).bundle.data)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def test_bundle_ships_the_evaluator_and_the_rules(demo_bundle):
    with zipfile.ZipFile(io.BytesIO(demo_bundle[ZIPAPP])) as zipapp:
        assert zipapp.read("clusterkit_node/contract/compat.py") == COMPAT_PY.read_bytes()
    assert demo_bundle["compat_rules.json"] == RULES.read_bytes()


@pytest.fixture
def compute(tmp_path, demo_bundle) -> Sandbox:
    """A compute node after the head node's bootstrap, with the real node zipapp and compat rules,
    and a store whose manifest records a CUDA 13.0.2 image under the locked digest."""
    sb = Sandbox(tmp_path, mounts={"/fsx", "/scratch"}).provide_ami()
    sb.bundle = bundle_zip(tmp_path / "bundle.zip", zipapp=demo_bundle[ZIPAPP])
    shared = sb.install_bundle_as_shared()
    (shared / "compat_rules.json").write_bytes(demo_bundle["compat_rules.json"])
    sb.write("opt/slurm/etc/plugstack.conf", "include /opt/slurm/etc/plugstack.conf.d/*\n")
    sb.write("opt/slurm/etc/plugstack.conf.d/pyxis.conf",
             "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis\n")
    image = IMAGES_LOCK["images"][0]
    hexd = image["digest"].split(":")[1]
    manifest = {"manifest_version": 1, "images": {image["name"]: {
        "digest": image["digest"], "file": f"{image['name']}/{hexd}.sqsh", "size": 4096,
        "versions": {"cuda": "13.0.2", "nccl": "2.30.4"}, "status": "ok"}}}
    store = sb.root / "fsx/containers"
    store.mkdir(parents=True)
    (store / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    # The sandbox's tool wrappers reset PATH, so host tools are found at their AMI paths under CK_ROOT.
    (sb.root / "usr/bin").mkdir(parents=True, exist_ok=True)
    shutil.copy(COMPAT_FAKES / "nvidia-smi", sb.root / "usr/bin/nvidia-smi")
    shutil.copy(sb.bin / "enroot", sb.root / "usr/bin/enroot")
    return sb


def run(sb: Sandbox, driver: str):
    return sb.run("compute_node_configured.sh", *COMPUTE_ARGS,
                  env={"FAKE_NVIDIA_DRIVER": driver, "FAKE_NVIDIA_CUDA": "13.0",
                       "AWS_EC2_METADATA_DISABLED": "true"})


def test_driver_that_cannot_run_a_locked_image_fails_the_bootstrap(compute):
    r = run(compute, "570.86.15")
    assert r.returncode == 1
    assert ("node fingerprint check failed (exit 1): host driver 570.86.15 cannot run image "
            "pytorch (CUDA 13.0.2 needs >= 580)") in r.stderr
    log = compute.read("var/log/clusterkit/bootstrap.log")
    assert "ERROR node fingerprint check failed" in log
    doc = json.loads(compute.read(f"fsx/.containers.clusterkit/nodes/demo/{HOST}.json"))
    assert doc["nvidia_driver"] == "570.86.15" and doc["findings"][0]["rule"] == "cuda-driver-floor"


def test_capable_node_records_its_fingerprint_and_boots(compute):
    r = run(compute, "580.95.05")
    assert r.returncode == 0, r.stderr
    assert "done: node ready for container jobs" in r.stdout
    assert re.search(r"INFO \S+Z fingerprint: ", r.stdout), r.stdout  # the line names its command, not image_sync
    assert "image_sync" not in r.stdout
    assert f"/fsx/.containers.clusterkit/nodes/demo/{HOST}.json: queue=" in r.stdout  # its cluster's directory
    nodes = compute.root / "fsx/.containers.clusterkit/nodes/demo"
    assert sorted(p.name for p in nodes.iterdir()) == [f"{HOST}.json"]
    assert [p.name for p in (compute.root / "fsx/containers").iterdir()] == ["manifest.json"], \
        "the compute node writes nothing under the store FSx exports to S3"
    doc = json.loads((nodes / f"{HOST}.json").read_text())
    assert doc["nvidia_driver"] == "580.95.05" and doc["enroot"] == "3.5.0" and doc["findings"] == []
    assert not r.command_names & (set(FORBIDDEN) | {"aws"}), "no downloads from compute nodes"
