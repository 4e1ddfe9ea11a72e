"""compute_node_start.sh and compute_node_configured.sh in a sandbox root with recording stand-ins
(the same scripts run for real in tests/real_runtime).

Real: the scripts and the bundle's enroot.sh (bash), coreutils, the files written. Stand-ins
(node_sandbox.py): enroot, systemctl, sysctl, mountpoint, srun (prints help with or without pyxis's
--container-image), the node zipapp clusterkit_node.pyz (records argv, exit code chosen by the test), the AMI's
pyxis .so and hooks (placeholders). "Zero compiles and zero downloads" is checked against every command the
scripts ran: PATH wrappers plus bash xtrace.
"""
from __future__ import annotations

import re
import time

import pytest
from node_sandbox import COMPUTE_ARGS, FORBIDDEN, Sandbox, changed_paths, snapshot

COMPUTE_FORBIDDEN = set(FORBIDDEN) | {"aws"}
SHARED = "opt/parallelcluster/shared/clusterkit"


def under(snap: dict, *prefixes: str) -> dict:
    return {p: e for p, e in snap.items() if p.startswith(prefixes)}


@pytest.fixture
def compute(sandbox: Sandbox) -> Sandbox:
    """A compute node after the head node's bootstrap: bundle in the shared dir, plugstack installed."""
    sandbox.install_bundle_as_shared()
    sandbox.write("opt/slurm/etc/plugstack.conf", "include /opt/slurm/etc/plugstack.conf.d/*\n")
    sandbox.write("opt/slurm/etc/plugstack.conf.d/pyxis.conf",
                  "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis container_scope=job\n")
    (sandbox.root / "fsx/containers").mkdir(parents=True)
    return sandbox


# --- OnNodeStart ------------------------------------------------------------------------------------

def test_start_writes_only_its_record(compute: Sandbox) -> None:
    """OnNodeStart validates, records and locks IMDS to root (before PC's config phase starts slurmd: the boot unit
    slurmd requires); enroot's layout waits for OnNodeConfigured (the NVMe is not mounted yet at OnNodeStart)."""
    before = snapshot(compute.root)
    r = compute.run("compute_node_start.sh", *COMPUTE_ARGS)
    assert r.returncode == 0, r.stderr
    after = snapshot(compute.root)
    files = {p for p in changed_paths(before, after) if after.get(p) and after[p].kind == "f"}
    assert files == {"etc/clusterkit/node.env", "var/log/clusterkit/bootstrap.log",
                     "etc/systemd/system/clusterkit-imds-lock.service"}
    assert compute.root.joinpath("etc/systemd/system/slurmd.service.requires/clusterkit-imds-lock.service").is_symlink()
    assert [c[0] for c in r.calls("iptables-restore") + r.calls("ip6tables-restore")] == ["--noflush", "--noflush"]
    assert r.calls("systemctl") == [["daemon-reload"]] and r.calls("sysctl") == []


def test_enroot_layout_follows_the_nvme_that_pc_mounts_after_on_node_start(compute: Sandbox) -> None:
    """PC's config phase mounts the instance store at /scratch between OnNodeStart and OnNodeConfigured
    (setup-ephemeral-drives.sh): the layout must be chosen after it, or containers unpack onto the
    root volume while the NVMe sits idle."""
    compute.mounts.discard("/scratch")
    assert compute.run("compute_node_start.sh", *COMPUTE_ARGS).returncode == 0
    compute.mounts.add("/scratch")
    compute.add_srun()
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS)
    assert r.returncode == 0, r.stderr
    conf = compute.read("etc/enroot/enroot.conf")
    assert "ENROOT_DATA_PATH /scratch/enroot/data/user-$(id -u)" in conf
    assert "ENROOT_CACHE_PATH /scratch/enroot/cache/user-$(id -u)" in conf
    assert compute.mode("scratch/enroot/data") == 0o755
    assert "enroot working dirs on local NVMe (/scratch)" in r.stdout


def test_start_never_touches_opt_slurm_or_fsx(compute: Sandbox) -> None:
    """/opt/slurm and /fsx are not mounted at OnNodeStart: not one command may name them."""
    before = snapshot(compute.root)
    r = compute.run("compute_node_start.sh", *COMPUTE_ARGS)
    assert r.returncode == 0, r.stderr
    after = snapshot(compute.root)
    assert under(before, "opt/slurm", "fsx") == under(after, "opt/slurm", "fsx")
    for prefix in ("/opt/slurm", "/fsx"):
        hits = [c for c in r.commands if any(a.startswith(str(compute.root) + prefix) for a in c[1:])]
        assert hits == [], hits
    assert "srun" not in r.command_names and "scontrol" not in r.command_names


def test_start_no_compiles_no_downloads(compute: Sandbox) -> None:
    r = compute.run("compute_node_start.sh", *COMPUTE_ARGS)
    assert r.returncode == 0, r.stderr
    assert r.commands, "the command log must not be empty (wrappers broken?)"
    assert not r.command_names & COMPUTE_FORBIDDEN, r.command_names & COMPUTE_FORBIDDEN


@pytest.mark.parametrize("script", ["compute_node_start.sh", "compute_node_configured.sh"])
def test_scripts_are_idempotent(compute: Sandbox, script: str) -> None:
    assert compute.run(script, *COMPUTE_ARGS).returncode == 0
    before = snapshot(compute.root)
    time.sleep(0.02)
    r = compute.run(script, *COMPUTE_ARGS)
    assert r.returncode == 0, r.stderr
    assert changed_paths(before, snapshot(compute.root)) == {"var/log/clusterkit/bootstrap.log"}
    assert r.calls("systemctl") == []


def test_configured_ubuntu2404_sysctl(compute: Sandbox) -> None:
    args = [a if not a.startswith("CK_OS=") else "CK_OS=ubuntu2404" for a in COMPUTE_ARGS]
    r = compute.run("compute_node_configured.sh", *args)
    assert r.returncode == 0, r.stderr
    path = "etc/sysctl.d/99-clusterkit-enroot.conf"
    assert "kernel.apparmor_restrict_unprivileged_userns = 0" in compute.read(path)
    assert r.calls("sysctl") == [["-q", "-e", "-p", str(compute.root / path)]]


@pytest.mark.parametrize("script", ["compute_node_start.sh", "compute_node_configured.sh"])
def test_without_shared_bundle_both_scripts_fail_clearly(sandbox: Sandbox, script: str) -> None:
    """One line in ck_log's format, on stderr and in the bootstrap log, before enroot.sh exists."""
    r = sandbox.run(script, *COMPUTE_ARGS)
    assert r.returncode == 1
    (line,) = r.stderr.splitlines()
    assert re.fullmatch(rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ {script} ERROR \S*/opt/parallelcluster/shared/clusterkit/"
                        r"enroot.sh not found: the head node's OnNodeConfigured \(head_node.sh\) installs .*", line)
    assert (sandbox.root / "var/log/clusterkit/bootstrap.log").read_text().splitlines()[-1] == line
    assert not (sandbox.root / "etc/enroot").exists()


def test_start_rejects_head_only_and_unknown_keys(compute: Sandbox) -> None:
    r = compute.run("compute_node_start.sh", *COMPUTE_ARGS, "CK_BUNDLE=s3://b/x.zip")
    assert r.returncode == 2 and "CK_BUNDLE is head-node only" in r.stderr
    r = compute.run("compute_node_start.sh", *COMPUTE_ARGS, "ENROOT_MOUNT_HOMES=yes")
    assert r.returncode == 2 and "unknown key ENROOT_MOUNT_HOMES (did you mean ENROOT_MOUNT_HOME?)" in r.stderr
    assert not (compute.root / "etc/clusterkit/node.env").exists()


def test_start_without_enroot_fails(tmp_path) -> None:
    sb = Sandbox(tmp_path, mounts={"/scratch"}).provide_ami(enroot=False)
    sb.install_bundle_as_shared()
    r = sb.run("compute_node_start.sh", *COMPUTE_ARGS)
    assert r.returncode == 1 and "enroot binary" in r.stderr


def test_shared_dir_override(compute: Sandbox, tmp_path) -> None:
    moved = tmp_path / "elsewhere"
    (compute.root / SHARED).rename(moved)
    r = compute.run("compute_node_start.sh", *COMPUTE_ARGS, env={"CK_SHARED_DIR": str(moved)})
    assert r.returncode == 0, r.stderr


# --- OnNodeConfigured -------------------------------------------------------------------------------

def test_configured_checks_pass_and_verify_store(compute: Sandbox) -> None:
    before = snapshot(compute.root)
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS)
    assert r.returncode == 0, r.stderr
    shared = str(compute.root / SHARED)
    store_args = ["--store", str(compute.root / "fsx/containers"), "--lock", f"{shared}/images.lock"]
    # the plugstack line extracts (no use_squashfuse=1), so the self-test starts a container that way
    assert r.calls("clusterkit_node.pyz") == [
        ["selftest", "--path", "extract", "--want-squashfuse", "1", "--single-threaded-in-place", "0",
         "--squash-options", "-comp zstd -Xcompression-level 3 -b 128K -no-fragments"],
        ["verify", *store_args], ["fingerprint", *store_args, "--cluster", "demo"],
        ["health", "check", "--tier", "boot", "--source", "boot", "--store", store_args[1]]]
    assert "srun" not in r.command_names
    assert "selftest: extract start works" in r.stdout
    assert "INFO 2026-01-01T00:00:00Z verify: store reachable; present: pytorch" in r.stdout
    after = snapshot(compute.root)
    assert under(before, "opt/slurm", "fsx") == under(after, "opt/slurm", "fsx")
    assert {p for p in changed_paths(before, after) if after.get(p) and after[p].kind == "f"} == {
        "etc/clusterkit/node.env", "var/log/clusterkit/bootstrap.log", "etc/enroot/enroot.conf",
        "etc/enroot/hooks.d/50-slurm-pmi.sh", "etc/enroot/hooks.d/50-slurm-pytorch.sh",
        "etc/systemd/system/slurmd.service.d/clusterkit-path.conf"}
    assert "ENROOT_RUNTIME_PATH /scratch/enroot/runtime/user-$(id -u)" in compute.read("etc/enroot/enroot.conf")
    assert r.calls("systemctl") == [["daemon-reload"]]
    assert not r.command_names & COMPUTE_FORBIDDEN, r.command_names & COMPUTE_FORBIDDEN


def test_configured_fails_when_the_container_self_test_fails(compute: Sandbox) -> None:
    """A node that cannot start a container fails its boot (ParallelCluster replaces it), one line naming why;
    it never goes on to look ready."""
    compute.selftest_rc = 1
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS)
    assert r.returncode == 1
    errors = [ln for ln in r.stderr.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and "container self-test failed (exit 1)" in errors[0], r.stderr
    assert "this node cannot start containers (stand-in)" in errors[0]
    assert "node ready for container jobs" not in r.stdout
    assert [c[0] for c in r.calls("clusterkit_node.pyz")] == ["selftest"]


def _line_starts_in_place(compute: Sandbox) -> None:
    compute.write("opt/slurm/etc/plugstack.conf.d/pyxis.conf",
                  "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis container_scope=job "
                  "use_squashfuse=1\n")
    compute.write("usr/local/lib/slurm/spank_pyxis.so", "ELF placeholder pyxis: version v0.24.0\n")


def test_configured_tests_the_in_place_path_when_the_line_asks_for_it(compute: Sandbox) -> None:
    _line_starts_in_place(compute)
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS)
    assert r.returncode == 0, r.stderr
    calls = r.calls("clusterkit_node.pyz")
    assert calls[0][:3] == ["selftest", "--path", "squashfuse"]
    assert ["start-path-check", "--line-path", "squashfuse", "--want-squashfuse", "1", "--single-threaded-in-place",
            "0", "--os", "alinux2023"] in \
        r.calls("clusterkit_node.pyz:real")
    assert "this node can start images in place" in r.stdout


def test_configured_fails_when_the_line_starts_in_place_but_this_node_cannot(compute: Sandbox) -> None:
    """The head node's AMI had squashfuse, this queue's does not (a custom AMI): one line, boot fails."""
    _line_starts_in_place(compute)
    compute.start_path = "extract"
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS)
    assert r.returncode == 1
    (line,) = [ln for ln in r.stderr.splitlines() if " ERROR " in ln]
    assert "starts images in place (use_squashfuse=1, chosen on the head node) but this node cannot" in line
    assert "squashfuse not installed (stand-in)" in line and "use_squashfuse: false" in line
    assert "selftest" not in [c[0] for c in r.calls("clusterkit_node.pyz")]


def test_configured_fails_when_plugstack_lacks_pyxis(compute: Sandbox) -> None:
    (compute.root / "opt/slurm/etc/plugstack.conf.d/pyxis.conf").unlink()
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS)
    assert r.returncode == 1
    assert "/opt/slurm/etc/plugstack.conf does not load /usr/local/lib/slurm/spank_pyxis.so" in r.stderr
    assert "clusterkit_node.pyz" not in r.command_names


def test_configured_fails_when_plugin_missing(compute: Sandbox) -> None:
    (compute.root / "usr/local/lib/slurm/spank_pyxis.so").unlink()
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS)
    assert r.returncode == 1 and "spank_pyxis.so missing on this node" in r.stderr


def test_configured_fails_when_store_unreachable(compute: Sandbox) -> None:
    compute.image_sync_rc = 1
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS)
    assert r.returncode == 1
    assert "image store /fsx/containers not usable from this node: store /fsx/containers: not mounted" in r.stderr


def test_configured_uses_custom_store(compute: Sandbox) -> None:
    r = compute.run("compute_node_configured.sh", *COMPUTE_ARGS, "CK_STORE=/fsx/images")
    assert r.returncode == 0, r.stderr
    verify = [c for c in r.calls("clusterkit_node.pyz") if c[0] == "verify"]
    assert verify[0][:3] == ["verify", "--store", str(compute.root / "fsx/images")]
