"""`clusterkit_node.pyz fingerprint`: what a compute node records at OnNodeConfigured, and when it refuses
to boot.

Real: the node zipapp (compat.py inside) as a subprocess, the committed rules file, stores filled by a real
`clusterkit_node.pyz sync` (squashfs images with the marker files of real stacks), the fingerprint file on
disk, an IMDSv2 token exchange over loopback HTTP. Stand-ins (conftest.py): enroot (builds the
.sqsh), nvidia-smi, fi_info and sinfo (print the real version formats), a placeholder pyxis .so
carrying the version string real pyxis compiles in, the EFA installer's package record.
"""
from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from clusterkit.artifacts.bundle import ZIPAPP

STACK_13 = {"cuda": "13.0.2", "nccl": "2.30.4", "aws_ofi_nccl": "1.19.0", "efa_installer": "1.48.0",
            "libfabric": "2.4.0amzn2.0"}


def synced(node, versions=STACK_13, expect=None, name="nccl-tests"):
    node.set_spec({f"test/{name}": {"versions": versions}})
    node.write_lock([node.image(name, repository=f"test/{name}", expect=expect or {})])
    proc = node.sync()
    assert proc.returncode == 0, proc.stderr
    return node


def test_records_the_node_software(node):
    synced(node)
    node.env["FAKE_LIBFABRIC"] = "1.22.0amzn4.1"  # the loaded library wins over the package record
    proc = node.fingerprint("gpu-st-p5-12")
    assert proc.returncode == 0, proc.stderr
    doc = node.fingerprint_doc("gpu-st-p5-12")
    assert {k: doc[k] for k in ("hostname", "queue", "compute_resource", "nvidia_driver", "cuda_driver_api",
                                "efa_installer", "libfabric", "enroot", "pyxis", "slurm")} == {
        "hostname": "gpu-st-p5-12", "queue": "gpu", "compute_resource": "p5", "nvidia_driver": "580.95.05",
        "cuda_driver_api": "13.0", "efa_installer": "1.38.0", "libfabric": "1.22.0amzn4.1", "enroot": "4.1.2",
        "pyxis": "0.20.0", "slurm": "24.05.8"}
    assert doc["kernel"] == os.uname().release
    assert doc["manifest_sha256"] == node.manifest_sha256()
    assert doc["instance_type"] is None and doc["ami_id"] is None  # IMDS disabled in this test
    assert doc["fingerprint_version"] == 1 and doc["rules_as_of"]
    # AWS's nccl-tests image pairs aws-ofi-nccl 1.19.0 with NCCL 2.30.4; the 1.19 notes name NCCL up to 2.29.7
    assert [(f["rule"], f["level"], f["component"], f["versions"]) for f in doc["findings"]] == [
        ("ofi-notes-1.18.0-to-1.19.2-nccl-tested", "warning", "nccl", "recorded")]
    assert "fingerprint: warning: image nccl-tests: NCCL 2.30.4 is newer than every NCCL aws-ofi-nccl 1.19.0 was " \
           "tested with (2.27.3, 2.28.7, 2.29.2, 2.29.7, aws-ofi-nccl release notes v1.18.0 to v1.19.2): not " \
           "covered [ofi-notes-1.18.0-to-1.19.2-nccl-tested: " in proc.stderr
    assert sorted(os.listdir(node.staging / "nodes")) == ["gpu-st-p5-12.json"]
    assert os.listdir(node.staging / "tmp") == [], "no temp file left"
    assert oct((node.staging / "nodes" / "gpu-st-p5-12.json").stat().st_mode & 0o777) == "0o644"
    assert node.unpublished() == [], "nothing of the node's under the store FSx exports to S3"
    assert "fingerprint: wrote" in proc.stdout and "nvidia_driver=580.95.05" in proc.stdout


def test_driver_too_old_for_a_locked_image_fails_the_node(node):
    synced(node)
    proc = node.fingerprint(FAKE_NVIDIA_DRIVER="570.86.15", FAKE_NVIDIA_CUDA="12.8")
    assert proc.returncode == 1
    assert ("fingerprint: error: host driver 570.86.15 cannot run image nccl-tests (CUDA 13.0.2 needs >= 580) "
            "[cuda-driver-floor: ") in proc.stderr
    assert "failing its bootstrap so ParallelCluster replaces it" in proc.stderr
    # recorded anyway: drift on the head node shows why nodes are being replaced
    doc = node.fingerprint_doc()
    assert [(f["rule"], f["level"], f["versions"]) for f in doc["findings"]] == [
        ("cuda-driver-floor", "error", "recorded"),
        ("ofi-notes-1.18.0-to-1.19.2-nccl-tested", "warning", "recorded")]


def test_minor_version_compatibility_only_warns(node):
    synced(node, versions={"cuda": "12.8.1", "nccl": "2.25.1"})
    proc = node.fingerprint(FAKE_NVIDIA_DRIVER="560.35.03", FAKE_NVIDIA_CUDA="12.6")
    assert proc.returncode == 0, proc.stderr
    assert ("fingerprint: warning: host driver 560.35.03 is older than 570.26, the driver of CUDA 12.8.1: image "
            "nccl-tests runs in CUDA minor version compatibility mode only") in proc.stderr
    assert [f["rule"] for f in node.fingerprint_doc()["findings"]] == ["cuda-toolkit-driver"]


def test_not_yet_imported_image_is_checked_by_its_expected_cuda(node):
    node.write_lock([node.image("later", expect={"cuda": "13.0"})])
    node.store.mkdir()
    proc = node.fingerprint(FAKE_NVIDIA_DRIVER="575.57.08")
    assert proc.returncode == 1
    assert "host driver 575.57.08 cannot run image later (CUDA 13.0 needs >= 580)" in proc.stderr
    assert node.fingerprint_doc()["findings"][0]["versions"] == "expected"
    assert node.fingerprint_doc()["manifest_sha256"] is None  # the head node has not synced yet


def test_each_finding_says_where_its_versions_came_from(node):
    synced(node)
    node.write_lock([node.image("nccl-tests", repository="test/nccl-tests"),
                     node.image("later", expect={"cuda": "13.1"})])  # locked after the last sync
    proc = node.fingerprint(FAKE_NVIDIA_DRIVER="575.57.08")
    assert proc.returncode == 1
    assert [(f["image"], f["versions"]) for f in node.fingerprint_doc()["findings"]] == [
        ("later", "expected"), ("nccl-tests", "recorded"), ("nccl-tests", "recorded")]


def test_image_level_rule_warns_but_does_not_fail_the_node(node):
    synced(node, versions={"cuda": "12.4.1", "nccl": "2.21.5", "efa_installer": "1.28.0"})
    proc = node.fingerprint(FAKE_NVIDIA_DRIVER="570.86.15")
    assert proc.returncode == 0, proc.stderr
    assert "image nccl-tests: NCCL 2.21.5 needs EFA installer >= 1.29 (it has 1.28.0)" in proc.stderr
    assert "an image problem, not this node's: fix the image" in proc.stderr


def test_cpu_node_has_no_driver_and_boots(node):
    synced(node)
    proc = node.fingerprint("cpu-dy-c7i-3", FAKE_NVIDIA_DRIVER="")
    assert proc.returncode == 0, proc.stderr
    doc = node.fingerprint_doc("cpu-dy-c7i-3")
    assert doc["nvidia_driver"] is None and doc["cuda_driver_api"] is None
    assert (doc["queue"], doc["compute_resource"]) == ("cpu", "c7i")
    assert ("no NVIDIA driver answers (nvidia-smi: No devices were found): CUDA images nccl-tests cannot use "
            "GPUs on this node") in proc.stderr


def test_missing_tools_are_recorded_as_unknown(node, tmp_path):
    synced(node)
    shutil.rmtree(node.root / "host")
    (tmp_path / "empty-bin").mkdir()
    proc = node.fingerprint(PATH=str(tmp_path / "empty-bin"))  # no nvidia-smi, fi_info, enroot, sinfo
    assert proc.returncode == 0, proc.stderr
    doc = node.fingerprint_doc()
    assert all(doc[k] is None for k in ("nvidia_driver", "efa_installer", "libfabric", "enroot", "pyxis",
                                         "slurm")), doc


def test_node_name_outside_the_pc_pattern_has_no_queue(node):
    synced(node)
    assert node.fingerprint("ip-10-0-1-17").returncode == 0
    doc = node.fingerprint_doc("ip-10-0-1-17")
    assert doc["queue"] is None and doc["compute_resource"] is None
    assert node.fingerprint("../../etc/passwd").returncode == 2


def test_hyphenated_queue_and_resource_names(node):
    synced(node)
    assert node.fingerprint("train-big-st-p5-en-2").returncode == 0
    doc = node.fingerprint_doc("train-big-st-p5-en-2")
    assert (doc["queue"], doc["compute_resource"]) == ("train-big", "p5-en")


def test_stale_temp_files_of_this_node_are_removed(node):
    synced(node)
    tmp = node.staging / "tmp"  # made by the sync, like the head node's
    dead = 2 ** 22 + 12345  # above pid_max's default: never a live process
    (tmp / f"node.gpu-st-p5-1.json.tmp-{dead}").write_text("{")
    (tmp / f"node.gpu-st-p5-2.json.tmp-{dead}").write_text("{")
    (tmp / f"store.manifest.json.tmp-{dead}").write_text("{")  # the head node's, cleaned under its lock
    assert node.fingerprint().returncode == 0
    assert sorted(os.listdir(tmp)) == [f"node.gpu-st-p5-2.json.tmp-{dead}", f"store.manifest.json.tmp-{dead}"]
    assert sorted(os.listdir(node.staging / "nodes")) == ["gpu-st-p5-1.json"]


def test_store_not_mounted(node):
    node.write_lock([node.image("a")])
    proc = node.fingerprint()
    assert proc.returncode == 1 and "image store" in proc.stderr and "is FSx mounted?" in proc.stderr


def test_compat_rules_missing_next_to_the_zipapp_is_a_clear_usage_error(node, tmp_path):
    synced(node)
    proc = node.run("fingerprint", "--store", str(node.store), "--lock", str(node.lock))
    assert proc.returncode == 0, "the zipapp reads the compat_rules.json shipped next to it"
    lonely = tmp_path / "bundle"
    lonely.mkdir()
    shutil.copy(node.cmd()[1], lonely / ZIPAPP)  # the zipapp alone, without its compat_rules.json
    linked = tmp_path / "live"
    linked.symlink_to(lonely)  # run through a link, as nodes do: the real directory is the bundle's
    proc = subprocess.run([sys.executable, str(linked / ZIPAPP), "fingerprint", "--store",
                           str(node.store), "--lock", str(node.lock)], env=node.env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{lonely}/compat_rules.json: cannot read compatibility rules" in proc.stderr
    assert "ship in the ClusterKit bundle as compat_rules.json" in proc.stderr


# --- IMDSv2 -------------------------------------------------------------------------------------------

class FakeImds(http.server.BaseHTTPRequestHandler):
    """Loopback stand-in for the EC2 instance metadata service: IMDSv2 only (GETs need the token)."""

    TOKEN = "AQAEAFakeTokenForTests=="
    DATA = {"instance-type": "p5.48xlarge", "ami-id": "ami-0123456789abcdef0",
            "instance-id": "i-0fedcba9876543210"}
    seen: list = []

    def do_PUT(self):  # noqa: N802 (http.server API)
        self.seen.append(("PUT", self.path, self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")))
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self.send_error(400)
            return
        self._reply(200, self.TOKEN)

    def do_GET(self):  # noqa: N802
        self.seen.append(("GET", self.path, self.headers.get("X-aws-ec2-metadata-token")))
        if self.headers.get("X-aws-ec2-metadata-token") != self.TOKEN:
            self._reply(401, "")
            return
        key = self.path.removeprefix("/latest/meta-data/")
        if key not in self.DATA:
            self._reply(404, "")
            return
        self._reply(200, self.DATA[key])

    def _reply(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def imds():
    FakeImds.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeImds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", FakeImds.seen
    server.shutdown()
    server.server_close()


def test_instance_type_and_ami_from_imdsv2(node, imds):
    url, seen = imds
    synced(node)
    proc = node.fingerprint(CK_IMDS_ENDPOINT=url, AWS_EC2_METADATA_DISABLED="false")
    assert proc.returncode == 0, proc.stderr
    doc = node.fingerprint_doc()
    assert (doc["instance_type"], doc["ami_id"], doc["instance_id"]) == (
        "p5.48xlarge", "ami-0123456789abcdef0", "i-0fedcba9876543210")
    assert seen[0][:2] == ("PUT", "/latest/api/token") and seen[0][2]
    assert {s[2] for s in seen[1:]} == {FakeImds.TOKEN}, "every GET carries the session token"


def test_unreachable_imds_costs_about_a_second_and_records_null(node):
    synced(node)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the run: connection refused
    started = time.monotonic()
    proc = node.fingerprint(CK_IMDS_ENDPOINT=f"http://127.0.0.1:{port}", AWS_EC2_METADATA_DISABLED="")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 10
    assert node.fingerprint_doc()["instance_type"] is None
    assert "instance type and AMI unknown: no IMDSv2 token" in proc.stdout


def test_imds_override_must_be_loopback(node):
    synced(node)
    proc = node.fingerprint(CK_IMDS_ENDPOINT="http://198.51.100.7", AWS_EC2_METADATA_DISABLED="")
    assert proc.returncode == 0
    assert "CK_IMDS_ENDPOINT http://198.51.100.7 is neither IMDS nor loopback; not queried" in proc.stdout


def test_fingerprint_json_is_deterministic_apart_from_time(node):
    synced(node)
    node.fingerprint()
    first = node.fingerprint_doc()
    node.fingerprint()
    second = node.fingerprint_doc()
    first.pop("recorded_at"), second.pop("recorded_at")
    assert first == second
    text = (node.staging / "nodes" / "gpu-st-p5-1.json").read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_fingerprint_and_drift_run_on_python_3_9(node, python39):
    """clusterkit_node promises stdlib-only Python 3.9+ (the oldest python3 on supported AMIs)."""
    synced(node)
    base = [python39, node.cmd()[1]]
    fp = subprocess.run(base + ["fingerprint", "--store", str(node.store), "--lock", str(node.lock),
                                "--node-name", "gpu-st-p5-1"], env=dict(node.env, FAKE_NVIDIA_DRIVER="570.86.15"),
                        capture_output=True, text=True, timeout=60)
    assert fp.returncode == 1 and "cannot run image nccl-tests (CUDA 13.0.2 needs >= 580)" in fp.stderr
    drift = subprocess.run(base + ["drift", "--store", str(node.store)], env=node.env, capture_output=True,
                           text=True, timeout=60)
    assert drift.returncode == 1 and "node gpu-st-p5-1: host driver 570.86.15 cannot run" in drift.stdout


def test_an_unreadable_manifest_does_not_fail_the_node(node):
    """As with `verify`: the head node rebuilds a corrupt manifest; the booting node records its own
    facts and boots (failing it would only feed Slurm's protected mode)."""
    synced(node)
    (node.store / "manifest.json").write_text('{"manifest_version": 1, "images": {"a": "x"}}')
    proc = node.fingerprint("gpu-st-p5-3")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "images.a: not an object" in proc.stderr
    assert node.fingerprint_doc("gpu-st-p5-3")["manifest_sha256"] is None
