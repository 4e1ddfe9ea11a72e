"""Shared helpers of the tests/compat tests (a uniquely named module: every conftest.py imports as
"conftest", so test files import helpers from here, like tests/node does with node_sandbox.py).

Real: clusterkit_node's compat.py and the node zipapp (run as subprocesses, as nodes run it), the rules
data file clusterkit/data/compat_rules.json, squashfs-tools, the file system, a loopback HTTP server
speaking the IMDSv2 token protocol, NVIDIA enroot 4.1.2 importing the images (tests/image_sync/real_enroot.py).
Stand-ins: the loopback registry and the image content (marker files of real stacks, see real_enroot.py)
and tests/compat/fakes/{nvidia-smi,
fi_info,sinfo} (print the real tools' version formats; no GPU, no fabric, no Slurm behind them), a
placeholder pyxis .so carrying the version string real pyxis compiles in, and the EFA installer's
package record. The image_sync harness (Sandbox) of tests/image_sync is reused, loaded by path.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
COMPAT_FAKES = HERE / "fakes"
RULES = REPO / "clusterkit" / "data" / "compat_rules.json"
COMPAT_PY = REPO / "clusterkit_node" / "contract" / "compat.py"


def load_by_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


harness = load_by_path("image_sync_harness", REPO / "tests" / "image_sync" / "conftest.py")
SCRIPT = harness.SCRIPT

PYXIS_SO = b"\x7fELF" + b"\0" * 512 + b"pyxis: version v0.20.0\0" + b"\0" * 512
EFA_PACKAGES = ("# EFA installer version: 1.38.0\n# Debug packages installed: no\n# Packages installed:\n"
                "ibacm_50.0-1_amd64 libfabric-aws_1.22.0amzn4.0_amd64 libnccl-ofi_1.13.2-1_amd64\n")


class Node(harness.Sandbox):
    """An image_sync Sandbox plus a fake host root (CK_ROOT) holding what a PC compute node has."""

    def fingerprint(self, node: str = "gpu-st-p5-1", *extra: str, **env) -> subprocess.CompletedProcess:
        return self.run("fingerprint", "--store", str(self.store), "--lock", str(self.lock),
                        "--rules", str(RULES), "--node-name", node, *extra, env=dict(self.env, **env))

    def drift(self, *extra: str) -> subprocess.CompletedProcess:
        return self.run("drift", "--store", str(self.store), "--rules", str(RULES), *extra)

    def fingerprint_doc(self, node: str = "gpu-st-p5-1") -> dict:
        return json.loads((self.staging / "nodes" / f"{node}.json").read_text())

    def manifest_sha256(self) -> str:
        return hashlib.sha256((self.store / "manifest.json").read_bytes()).hexdigest()


def make_node(tmp_path: Path, registry) -> Node:
    """A store + lock sandbox whose PATH has the real enroot and the fake nvidia-smi and fi_info, and a
    host root (CK_ROOT) with the EFA installer record, a pyxis plugin carrying its version string and
    sinfo. The caller closes registry (a real_enroot.Registry)."""
    host = tmp_path / "host"
    (host / "opt/amazon").mkdir(parents=True)
    (host / "opt/amazon/efa_installed_packages").write_text(EFA_PACKAGES)
    so = host / "usr/local/lib/slurm/spank_pyxis.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(PYXIS_SO)
    sinfo = host / "opt/slurm/bin/sinfo"
    sinfo.parent.mkdir(parents=True)
    sinfo.write_bytes((COMPAT_FAKES / "sinfo").read_bytes())
    sinfo.chmod(0o755)
    env = harness.enroot_env(tmp_path)
    env["PATH"] = env["PATH"].replace(":/usr/sbin:", f":{COMPAT_FAKES}:/usr/sbin:", 1)
    env.update({
        "CK_ROOT": str(host),
        "AWS_EC2_METADATA_DISABLED": "true",
        "FAKE_NVIDIA_DRIVER": "580.95.05",
        "FAKE_NVIDIA_CUDA": "13.0",
        "FAKE_LIBFABRIC": "1.22.0amzn4.0",
    })
    return Node(root=tmp_path, store=tmp_path / "store", lock=tmp_path / "demo.images.lock",
                log=tmp_path / "enroot.log", registry=registry, env=env)


def write_fingerprint(store: Path, host: str, legacy: bool = False, **fields) -> Path:
    """A fingerprint file shaped exactly like `clusterkit_node.pyz fingerprint` writes it, where it writes it
    (the staging dir next to the store; legacy: <store>/.nodes, where the previous version wrote it)."""
    doc = {
        "ami_id": "ami-0aaaaaaaaaaaaaaaa", "cluster": None, "compute_resource": "p5", "cuda_driver_api": "12.8",
        "efa_installer": "1.38.0", "enroot": "3.5.0", "findings": [], "fingerprint_version": 1,
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}], "nvidia_hook": [],
        "hostname": host, "instance_id": "i-0123456789abcdef0", "instance_type": "p5.48xlarge",
        "kernel": "6.1.109-118.189.amzn2023.x86_64", "libfabric": "1.22.0amzn4.0",
        "manifest_sha256": "1" * 64, "nvidia_driver": "570.86.15", "pairing_warnings": [], "pyxis": "0.20.0",
        "queue": "gpu",
        "recorded_at": "2026-11-30T08:00:00Z", "rules_as_of": "2026-11-30", "slurm": "24.05.8",
        "squashfuse_reader": "squashfuse_ll 0.5.0 multi-threaded",
    }
    doc.update(fields)
    store.mkdir(parents=True, exist_ok=True)
    nodes = store / ".nodes" if legacy else harness.staging_of(store) / "nodes"
    nodes.mkdir(parents=True, exist_ok=True)
    path = nodes / f"{host}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path
