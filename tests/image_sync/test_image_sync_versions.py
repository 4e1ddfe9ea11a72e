"""Reading CUDA/NCCL/aws-ofi-nccl/EFA/libfabric/PyTorch versions out of a .sqsh without mounting it,
and enforcing the lock's `expect`.

Real: mksquashfs-built images read with unsquashfs -lln / -cat (squashfs-tools 4.5.1). The marker
files imitate the layouts of NGC images and the EFA installer (file names and formats taken from
efa_installer.sh's write_package_file, CUDA's version.json, torch/version.py); they are synthetic files,
not the real libraries: tests/image_versions reads images built from the real binaries. The sync tests
serve them from a loopback registry to the real enroot
(real_enroot.py), which imports them.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest


def squash(tmp_path, files: dict, links: dict | None = None, name="img"):
    """Build a real squashfs from {path: content} and {link: target}."""
    root = tmp_path / f"{name}-root"
    for rel, content in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for rel, target in (links or {}).items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
    root.mkdir(exist_ok=True)
    out = tmp_path / f"{name}.sqsh"
    subprocess.run(["mksquashfs", str(root), str(out), "-noappend", "-quiet", "-no-progress",
                    "-all-root"], check=True)
    return str(out)


def test_sync_records_versions_from_efa_installer_layout(sandbox):
    sandbox.set_spec({"nvidia/pytorch": {"versions": sandbox.full_versions}})
    sandbox.write_lock([sandbox.image("pytorch", repository="nvidia/pytorch",
                                      expect={"cuda": "12.8", "nccl": "2.25.1",
                                              "aws_ofi_nccl": "1.13", "efa_installer": "1.38.0"})])
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    assert sandbox.manifest()["images"]["pytorch"]["versions"] == sandbox.full_versions
    status = sandbox.run("status", "--store", str(sandbox.store))
    assert "cuda=12.8.1" in status.stdout and "aws_ofi_nccl=1.13.0" in status.stdout
    assert "pytorch=2.6.0a0+ecf3bae40a.nv25.01" in status.stdout


def test_sync_records_versions_from_source_build_layout(sandbox):
    sandbox.set_spec({"adt/nccl-tests": {"layout": "source-build", "versions": {
        "cuda": "12.9.1", "nccl": "2.29.3", "aws_ofi_nccl": "1.17.2"}}})
    sandbox.write_lock([sandbox.image("nccl-tests", repository="adt/nccl-tests")])
    assert sandbox.sync().returncode == 0
    assert sandbox.manifest()["images"]["nccl-tests"]["versions"] == {
        "cuda": "12.9.1", "nccl": "2.29.3", "aws_ofi_nccl": "1.17.2"}


def test_expect_mismatch_keeps_image_out_of_the_stable_name(sandbox):
    sandbox.set_spec({"nvidia/pytorch": {"versions": {"cuda": "12.4.1", "nccl": "2.25.1"}}})
    img = sandbox.image("pytorch", repository="nvidia/pytorch", expect={"cuda": "12.8", "nccl": "2.25"})
    sandbox.write_lock([img, sandbox.image("ok")])
    proc = sandbox.sync()
    assert proc.returncode == 1
    row = [ln for ln in proc.stdout.splitlines() if ln.startswith("pytorch ")][0]
    assert " failed " in row and "expected cuda 12.8, found 12.4.1" in row
    assert "pytorch: expected cuda 12.8, found 12.4.1" in proc.stderr
    assert not os.path.lexists(sandbox.store / "pytorch.sqsh")
    hexd = img["digest"].split(":")[1]
    assert (sandbox.store / "pytorch" / f"{hexd}.sqsh").is_file(), "the digest file may stay"
    man = sandbox.manifest()
    assert "pytorch" not in man["images"] and "ok" in man["images"]
    assert man["rejected"]["pytorch"]["status"] == "rejected"
    assert man["rejected"]["pytorch"]["reason"] == "expected cuda 12.8, found 12.4.1"

    # re-run: still rejected, without importing again
    again = sandbox.sync()
    assert again.returncode == 1 and "expected cuda 12.8, found 12.4.1" in again.stdout
    assert len(sandbox.imports()) == 2
    status = sandbox.run("status", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert " rejected " in [ln for ln in status.stdout.splitlines() if ln.startswith("pytorch ")][0]
    verify = sandbox.run("verify", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert verify.returncode == 0
    assert "pytorch: " in verify.stderr and "rejected by the head node's sync (expected cuda 12.8" \
        in verify.stderr

    # the lock is corrected: promoted from the recorded versions, still no import
    img["expect"] = {"cuda": "12.4"}
    sandbox.write_lock([img, sandbox.image("ok")])
    fixed = sandbox.sync()
    assert fixed.returncode == 0, fixed.stderr
    assert len(sandbox.imports()) == 2
    assert os.readlink(sandbox.store / "pytorch.sqsh") == f"pytorch/{hexd}.sqsh"
    assert sandbox.manifest()["images"]["pytorch"]["status"] == "ok"
    assert "pytorch" not in sandbox.manifest().get("rejected", {})

    # the lock now expects something the present image lacks: demoted, stable name removed
    img["expect"] = {"cuda": "12.9", "efa_installer": "1.38"}
    sandbox.write_lock([img, sandbox.image("ok")])
    demoted = sandbox.sync()
    assert demoted.returncode == 1
    assert "expected cuda 12.9, found 12.4.1; expected efa_installer 1.38, found none" in demoted.stdout
    assert not os.path.lexists(sandbox.store / "pytorch.sqsh")


def test_mismatch_of_a_new_digest_keeps_the_previous_good_image_live(sandbox):
    sandbox.set_spec({"nvidia/app": {"versions": {"cuda": "12.8.0"}}})
    sandbox.write_lock([sandbox.image("app", repository="nvidia/app", generation=0,
                                      expect={"cuda": "12.8"})])
    assert sandbox.sync().returncode == 0
    good = os.readlink(sandbox.store / "app.sqsh")
    sandbox.set_spec({"nvidia/app": {"versions": {"cuda": "13.0.0"}}})
    sandbox.write_lock([sandbox.image("app", repository="nvidia/app", generation=1,
                                      expect={"cuda": "12.8"})])
    assert sandbox.sync().returncode == 1
    assert os.readlink(sandbox.store / "app.sqsh") == good
    man = sandbox.manifest()
    assert man["images"]["app"]["file"] == good and "app" in man["rejected"]


def test_read_versions_follows_absolute_symlink_chains(tmp_path, image_versions):
    sqsh = squash(tmp_path, {
        "/usr/local/cuda-12.4/version.json": json.dumps({"cuda": {"version": "12.4.1"}}),
        "/usr/local/cuda-12.8/version.json": json.dumps({"cuda": {"version": "12.8.0"}}),
    }, {"/etc/alternatives/cuda": "/usr/local/cuda-12.4", "/usr/local/cuda": "/etc/alternatives/cuda"})
    # the linked toolkit wins over a newer one that is merely installed
    assert image_versions.read_versions(sqsh) == {"cuda": "12.4.1"}


def test_read_versions_fallbacks(tmp_path, image_versions):
    sqsh = squash(tmp_path, {
        "/usr/local/cuda-11.0/version.txt": "CUDA Version 11.0.228\n",
        "/usr/local/cuda-10.2/version.txt": "CUDA Version 10.2.89\n",
        "/opt/nccl/include/nccl.h": "#define NCCL_MAJOR 2\n#define NCCL_MINOR 18\n#define NCCL_PATCH 5\n",
        # the only NCCL library is a pip wheel's: that is what runs, not the version of a header without a library
        "/opt/conda/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2.21.5": b"\0",
        "/opt/conda/lib/python3.11/site-packages/torch/version.py": "__version__ = '2.3.1+cu121'\n",
        "/opt/aws-ofi-nccl/lib/libnccl-net.so": b"\x7fELF...Initializing aws-ofi-nccl 1.9.1-aws\0...",
    }, {"/usr/local/cuda": "cuda"})  # a self-loop must not hang
    assert image_versions.read_versions(sqsh) == {
        "cuda": "11.0.228", "nccl": "2.21.5", "pytorch": "2.3.1+cu121", "aws_ofi_nccl": "1.9.1"}
    # without any library the header is the last word
    header_only = squash(tmp_path, {"/opt/nccl/include/nccl.h": "#define NCCL_MAJOR 2\n#define NCCL_MINOR 18\n"
                                                                 "#define NCCL_PATCH 5\n"}, name="header")
    assert image_versions.read_versions(header_only) == {"nccl": "2.18.5"}


def test_read_versions_pip_only_nccl_and_empty_image(tmp_path, image_versions):
    sqsh = squash(tmp_path, {
        "/usr/lib/python3/dist-packages/nvidia_nccl_cu12-2.21.5.dist-info/METADATA": "Name: x\n",
    }, name="pip")
    assert image_versions.read_versions(sqsh) == {"nccl": "2.21.5"}
    assert image_versions.read_versions(squash(tmp_path, {"/etc/hostname": "x\n"}, name="empty")) == {}


def test_names_with_spaces_and_arrows_do_not_confuse_the_listing(tmp_path, image_versions):
    sqsh = squash(tmp_path, {"/a b/x -> y": "1", "/usr/local/cuda-12.6/version.json":
                             json.dumps({"cuda": {"version": "12.6.3"}})},
                  {"/l n": "/t a", "/usr/local/cuda": "cuda-12.6"})
    entries = image_versions.list_image(sqsh)
    assert entries["/a b/x -> y"].kind == "f"
    assert entries["/l n"] == image_versions.Entry("l", 4, "/t a")
    assert image_versions.resolve(entries, "/usr/local/cuda/version.json") == "/usr/local/cuda-12.6/version.json"
    assert image_versions.read_versions(sqsh) == {"cuda": "12.6.3"}


def test_parse_efa_installed_packages_deb_and_rpm(image_versions):
    deb = ("# EFA installer version: 1.38.0\n# Debug packages installed: no\n# Packages installed:\n"
           "ibacm_50.0-1_amd64 libfabric-aws-bin_1.22.0amzn4.0_amd64 libfabric1-aws_1.22.0amzn4.0_amd64 "
           "libnccl-ofi-ngc-v3_1.13.0-1_amd64 efa-profile_1.7_all\n")
    assert image_versions.parse_efa_packages(deb) == {
        "efa_installer": "1.38.0", "libfabric": "1.22.0amzn4.0", "aws_ofi_nccl": "1.13.0"}
    rpm = ("# EFA installer version: 1.47.0\n# Debug packages installed: no\n# Packages installed:\n"
           "libfabric-aws-devel-2.4.0amzn1.0-1.amzn2023.x86_64 libfabric-aws-2.4.0amzn1.0-1.amzn2023.x86_64"
           " libnccl-ofi-1.18.0-1.amzn2023.x86_64 openmpi40-aws-4.1.7-1.amzn2023.x86_64\n")
    assert image_versions.parse_efa_packages(rpm) == {
        "efa_installer": "1.47.0", "libfabric": "2.4.0amzn1.0", "aws_ofi_nccl": "1.18.0"}


@pytest.mark.parametrize("expect,found,ok", [
    ("12.8", "12.8.1", True), ("12.8", "12.8", True), ("12.8", "12.80.1", False),
    ("12.8", "12.4.1", False), ("2.25.1", "2.25.1-1", True), ("1.22.0", "1.22.0amzn4.0", True),
    ("2.6", "2.6.0a0+ecf3bae40a.nv25.01", True), ("1.13", "1.130.0", False), ("", "1.0", False),
])
def test_version_prefix_match(image_versions, expect, found, ok):
    assert image_versions.version_matches(expect, found) is ok


def test_unknown_expect_key_is_reported(image_versions):
    assert image_versions.expect_problems({"cudnn": "9"}, {"cuda": "12.8"}) == [
        "cannot check expect cudnn (known: aws_ofi_nccl, cuda, efa_installer, libfabric, nccl, pytorch)"]


def test_sync_says_when_the_binaries_contradict_what_the_lock_recorded_from_the_image_config(sandbox):
    """The lock records the versions the image config's Env declares; the import reads the binaries, which count."""
    sandbox.set_spec({"nvidia/pytorch": {"versions": sandbox.full_versions}})
    img = sandbox.image("pytorch", repository="nvidia/pytorch")
    img["declared"] = {"cuda": "12.8", "nccl": "2.21.5"}
    img["declared_from"] = "image config Env"
    sandbox.write_lock([img])
    proc = sandbox.sync()
    assert proc.returncode == 0, proc.stderr
    nccl = sandbox.full_versions["nccl"]
    assert (f"pytorch: the image config declares nccl 2.21.5 (recorded in the lock), its binaries say {nccl}: "
            f"{nccl} counts") in proc.stderr
    assert "declares cuda" not in proc.stderr, "12.8 agrees with 12.8.1"
    assert sandbox.manifest()["images"]["pytorch"]["versions"] == sandbox.full_versions
