"""Login nodes: the pools' frozen CustomActions script (login_node_stage0.sh), the bundle's login_node.sh, and the
compute scripts run with CK_NODE_ROLE=login, in the sandbox root of test_node_compute.py.

Real: the three scripts under bash, the bundle's enroot.sh, the demo's real compute.args (what the bundle
holds), the files written. Stand-ins: as in test_node_compute.py (node_sandbox.py), plus real bash, date and tee on
PATH for stage 0.
"""
from __future__ import annotations

import hashlib
import io
import threading
import zipfile

import pytest
from node_sandbox import Sandbox, changed_paths, snapshot

from clusterkit.artifacts.bundle import LOGIN, LOGIN_STAGE0, LOGIN_STAGE0_SHA256, SCRIPTS, node_artifacts
from clusterkit.pipeline.loader import load

SHARED = "opt/parallelcluster/shared/clusterkit"


@pytest.fixture
def login(sandbox: Sandbox) -> Sandbox:
    """A login node after ParallelCluster's init and config phases: the head node's bundle in the NFS-shared dir
    (with login_node.sh and the demo's real compute.args), /opt/slurm mounted with the head node's plugstack line."""
    shared = sandbox.install_bundle_as_shared()
    with zipfile.ZipFile(io.BytesIO(node_artifacts(load("demo")).bundle.data)) as zf:
        (shared / "compute.args").write_bytes(zf.read("compute.args"))
        (shared / LOGIN).write_bytes(zf.read(LOGIN))
    sandbox.write("opt/slurm/etc/plugstack.conf", "include /opt/slurm/etc/plugstack.conf.d/*\n")
    sandbox.write("opt/slurm/etc/plugstack.conf.d/pyxis.conf",
                  "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis container_scope=job\n")
    (sandbox.root / "fsx/containers").mkdir(parents=True)
    sandbox.allow_tools("bash", "date", "tee")
    return sandbox


def test_login_stage0_bytes_are_frozen() -> None:
    """Its S3 key (a content hash) sits in LoginNodes Pools[].CustomActions OnNodeStart/OnNodeConfigured, which PC
    3.16.1 never updates (UNSUPPORTED): a changed byte would make every cluster with login nodes fail its next update.
    Change login_node.sh (it ships in the bundle) instead."""
    actual = hashlib.sha256((SCRIPTS / LOGIN_STAGE0).read_bytes()).hexdigest()
    assert actual == LOGIN_STAGE0_SHA256, (
        f"bootstrap_scripts/{LOGIN_STAGE0} changed (sha256 {actual}): ParallelCluster never updates a login pool's "
        f"OnNodeStart/OnNodeConfigured, so existing clusters could no longer be updated. Put the change in {LOGIN}")


@pytest.mark.parametrize("args", [(), ("start", "configured"), ("CK_CLUSTER=demo",)])
def test_login_stage0_takes_one_event(login: Sandbox, args: tuple[str, ...]) -> None:
    r = login.run(LOGIN_STAGE0, *args)
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert "login_node_stage0.sh ERROR Args must be one word, start or configured" in line


def test_login_stage0_without_the_shared_bundle_fails_clearly(sandbox: Sandbox) -> None:
    sandbox.allow_tools("bash", "date", "tee")
    r = sandbox.run(LOGIN_STAGE0, "start", env={"CK_LOGIN_WAIT_S": "0"})
    assert r.returncode == 1
    (line,) = r.stderr.splitlines()
    assert f"/{SHARED}/login_node.sh not found: the head node's OnNodeConfigured installs" in line
    assert line.endswith("(waited 0 s)")


def test_login_stage0_waits_for_the_head_node_to_install_the_bundle(login: Sandbox) -> None:
    """PC creates login pools once the head node instance exists, not once it bootstrapped: a login node that boots
    first waits for the bundle instead of failing (and being replaced) at once."""
    login.allow_tools("sleep")
    script = login.root / SHARED / LOGIN
    held = script.read_bytes()
    script.unlink()
    timer = threading.Timer(2.0, script.write_bytes, args=(held,))
    timer.start()
    try:
        r = login.run(LOGIN_STAGE0, "start", env={"CK_LOGIN_WAIT_S": "60"})
    finally:
        timer.cancel()
    assert r.returncode == 0, r.stderr
    assert "login_node_stage0.sh INFO waiting up to 60 s for the head node to install the ClusterKit bundle" in r.stderr
    assert "CK_NODE_ROLE='login'" in login.read("etc/clusterkit/node.env")


def test_login_start_is_the_compute_start_with_the_login_role(login: Sandbox) -> None:
    r = login.run(LOGIN_STAGE0, "start")
    assert r.returncode == 0, r.stderr
    env = login.read("etc/clusterkit/node.env")
    assert "CK_NODE_ROLE='login'" in env and "CK_CLUSTER='demo'" in env and "CK_OS='ubuntu2404'" in env
    assert "compute_node_start.sh INFO done: Args valid and enroot present for cluster demo" in r.stdout


def test_login_configured_sets_up_enroot_and_checks_pyxis_but_runs_no_job_checks(login: Sandbox) -> None:
    """Same enroot.conf and pyxis checks as a compute node; no slurmd drop-in (no slurmd here), no container
    self-test and no driver fingerprint (no job runs here; a login node usually has no GPU)."""
    before = snapshot(login.root)
    r = login.run(LOGIN_STAGE0, "configured")
    assert r.returncode == 0, r.stderr
    assert [c[0] for c in r.calls("clusterkit_node.pyz")] == ["verify"]
    assert "plugstack.conf loads /usr/local/lib/slurm/spank_pyxis.so" in r.stdout
    assert "done: login node ready: srun and sbatch --container-image load pyxis here" in r.stdout
    after = snapshot(login.root)
    assert {p for p in changed_paths(before, after) if after.get(p) and after[p].kind == "f"} == {
        "etc/clusterkit/node.env", "var/log/clusterkit/bootstrap.log", "etc/enroot/enroot.conf",
        "etc/enroot/hooks.d/50-slurm-pmi.sh", "etc/enroot/hooks.d/50-slurm-pytorch.sh",
        "etc/sysctl.d/99-clusterkit-enroot.conf"}  # ubuntu2404: unprivileged user namespaces (enroot_files.py)
    assert r.calls("systemctl") == []


def test_login_configured_fails_without_the_pyxis_plugin(login: Sandbox) -> None:
    """srun and sbatch on this node load the shared plugstack line: without the plugin every srun from here would
    fail, so the login node fails its boot instead (one line)."""
    (login.root / "usr/local/lib/slurm/spank_pyxis.so").unlink()
    r = login.run(LOGIN_STAGE0, "configured")
    assert r.returncode == 1
    (line,) = [ln for ln in r.stderr.splitlines() if " ERROR " in ln]
    assert "spank_pyxis.so missing on this node" in line


def test_compute_nodes_keep_their_role(login: Sandbox) -> None:
    r = login.run("compute_node_start.sh", "CK_CLUSTER=demo", "CK_OS=alinux2023")
    assert r.returncode == 0, r.stderr
    assert "CK_NODE_ROLE='compute'" in login.read("etc/clusterkit/node.env")
