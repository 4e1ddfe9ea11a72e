"""The whole container path with the REAL enroot and pyxis, once per generation (3.4.1/0.20.0 and
4.1.2/0.24.0): registry -> lock -> head-node sync -> compute checks -> jobs as root and as users.

Real here: enroot, pyxis, Debian's Slurm + munge, squashfs-tools, the bootstrap scripts and
the node zipapp as shipped in the bundle, ClusterKit's lock and bundle code. Stand-ins: the loopback
registry (tests/images/images_fakes.py), S3/ECR token/systemd (standins/), FSx (a local directory).
See cluster_flow.py for the order of the flow and node_root.py for the node's paths.
"""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from cluster_flow import (
    ECR_HOST,
    IMAGE_ENV,
    IMAGE_NAME,
    OS_RELEASE,
    REPO,
    SHARED,
    STORE,
    Cluster,
    ecr_like_registry,
    pyxis_version_logged,
    rootfs,
    srun_container,
    unlocked_images,
)
from images_fakes import add_rootfs_image
from node_root import starts_in_place

PRETTY = "ClusterKit test image (busybox)"


# ------------------------------------------------------------------------------------ head node side

def test_lock_pins_the_digest_the_registry_serves(cluster: Cluster) -> None:
    (entry,) = cluster.lock.images
    assert entry.digest == cluster.digest
    assert entry.enroot_uri == f"docker://{cluster.registry.host}#ck/pytorch@{cluster.digest}"
    assert entry.compressed_size is not None and entry.compressed_size > 0


def test_sync_imported_with_the_real_enroot_in_the_uri_form_it_parses(cluster: Cluster, generation) -> None:
    entry = cluster.manifest()["images"][IMAGE_NAME]
    assert entry["status"] == "ok" and entry["digest"] == cluster.digest
    assert entry["enroot_version"] == generation.enroot_version
    assert entry["versions"]["cuda"] == "12.8.1"
    hexdigest = cluster.digest.split(":", 1)[1]
    # the registry was asked for exactly the locked manifest, by digest, whatever the URI form
    manifest_gets = [path for method, path, _ in cluster.registry.log
                     if method == "GET" and "/manifests/" in path]
    assert f"/v2/ck/pytorch/manifests/sha256:{hexdigest}" in manifest_gets
    assert not [p for p in manifest_gets if p.endswith("/manifests/25.01")]
    expected_uri = (f"docker://{cluster.registry.host}#ck/pytorch@{cluster.digest}"
                    if generation.enroot_version >= "4" else
                    f"docker://{cluster.registry.host}#ck/pytorch:{cluster.digest}")
    assert f"importing {expected_uri} (enroot {generation.enroot_version};" in cluster.bootstrap_log


def test_store_file_has_our_squash_options(cluster: Cluster) -> None:
    sqsh = cluster.node.host_path(f"{STORE}/{IMAGE_NAME}.sqsh")
    out = cluster.node.run(["unsquashfs", "-s", f"{STORE}/{IMAGE_NAME}.sqsh"]).stdout
    assert "Compression zstd" in out and "Block size 131072" in out and "Fragments are not stored" in out, out
    assert re.search(r"compression-level 3\b", out), out
    assert sqsh.resolve().stat().st_mode & 0o004, "store files must be world-readable"


def test_slurm_loads_the_exact_plugstack_line_the_head_node_wrote(cluster: Cluster, generation) -> None:
    node = cluster.node
    line = [ln for ln in node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf").splitlines()
            if not ln.startswith("#")]
    new = _version(generation.pyxis_version) >= (0, 24, 0)
    newer = " importer=/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz" if new else ""
    if new and starts_in_place(node.profile):  # the node starts .sqsh files in place (a multi-threaded reader)
        newer += " use_squashfuse=1"
    assert line == ["required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis container_scope=job "
                    "sbatch_support=1 execute_entrypoint=0" + newer]
    assert node.read("/opt/slurm/etc/plugstack.conf").strip().endswith("include /opt/slurm/etc/plugstack.conf.d/*")
    assert pyxis_version_logged(node) == generation.pyxis_version
    assert "--container-image" in node.run(["srun", "--help"]).stdout
    assert f"pyxis {generation.pyxis_version} at /usr/local/lib/slurm/spank_pyxis.so" in cluster.bootstrap_log


def test_compute_node_checks_passed_on_the_real_store(cluster: Cluster, generation) -> None:
    log = cluster.bootstrap_log
    assert "verify: 1/1 locked images present in /fsx/containers" in log
    # the boot self-test started a real container as an unprivileged user, by the path pyxis will take
    in_place = "use_squashfuse=1" in cluster.node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf")
    path = "squashfuse" if in_place else "extract"
    assert f"selftest: {path} start works: " in log, log
    assert ("enroot start <file>.sqsh as nobody: container ran" if in_place
            else "enroot create + start as nobody: container ran") in log
    assert "compute_node_configured.sh INFO done: node ready for container jobs" in log
    # the node's fingerprint names the enroot and pyxis really installed
    (fingerprint,) = (cluster.node.fsx / ".containers.clusterkit" / "nodes").glob("*/*.json")
    doc = json.loads(fingerprint.read_text())
    assert (doc["enroot"], doc["pyxis"]) == (generation.enroot_version, generation.pyxis_version)
    # pyxis 0.24.0 + enroot 4.1.2 fails --container-unshare (node_profiles.json "pairings"); 0.20.0 has no such option
    assert [w["id"] for w in doc["pairing_warnings"]] == (
        ["pyxis-unshare-fails-without-enroot-unshare"] if generation.pyxis_version == "0.24.0" else [])


# ------------------------------------------------------------------------------------------ jobs

@pytest.mark.parametrize("user", [None, "ckuser1", "ckuser2"])
def test_srun_store_image_as_root_and_as_users(cluster: Cluster, user: str | None) -> None:
    out = srun_container(cluster, "sh", "-c", "id -u; cat /etc/os-release", user=user).stdout
    uid, _, rest = out.partition("\n")
    assert uid == {None: "0", "ckuser1": "27001", "ckuser2": "27002"}[user]
    assert rest == OS_RELEASE


def test_container_mounts(cluster: Cluster) -> None:
    out = srun_container(cluster, "ls", "/fsx/containers", user="ckuser1",
                         extra=("--container-mounts=/fsx:/fsx:ro",)).stdout.split()
    assert f"{IMAGE_NAME}.sqsh" in out and "manifest.json" in out


def test_sbatch_directive_runs_the_batch_script_inside_the_container(cluster: Cluster) -> None:
    # With sbatch_support=1 the batch script itself runs in the container: its interpreter must exist
    # there (the image has busybox sh, no bash).
    state, out = cluster.node.sbatch(
        f"#!/bin/sh\n#SBATCH --container-image={cluster.sqsh}\n#SBATCH --container-mounts=/fsx:/fsx\n"
        "grep PRETTY_NAME /etc/os-release\nid -u\n", user="ckuser2")
    assert state == "COMPLETED", out
    assert out.splitlines() == [f'PRETTY_NAME="{PRETTY}"', "27002"], out


def test_shipped_hello_container_job_unchanged(cluster: Cluster) -> None:
    script = (REPO / "jobs" / "hello-container.sbatch").read_text()
    state, out = cluster.node.sbatch(script, user="ckuser1")
    assert state == "COMPLETED", out
    assert "hello from job" in out and f'PRETTY_NAME="{PRETTY}"' in out, out


def test_named_container_is_reused_across_steps_of_one_job(cluster: Cluster) -> None:
    state, out = cluster.node.sbatch(
        "#!/bin/bash\nset -euo pipefail\n"
        f"srun --container-image={cluster.sqsh} --container-name=ckstate sh -c 'echo kept > /ck-marker'\n"
        "srun --container-name=ckstate cat /ck-marker\n", user="ckuser1")
    assert state == "COMPLETED", out
    assert out.strip().splitlines()[-1] == "kept", out


def test_two_users_of_one_group_pull_from_the_registry(cluster: Cluster) -> None:
    """The shared-group cache defect: the first user's enroot created .../group-<gid> 0700, so the
    second user of the same primary group could not pull at all. The tag is not in the lock: pyxis 0.20
    imports it itself, pyxis 0.24 through ClusterKit's importer once unlocked images may be imported."""
    add_rootfs_image(cluster.registry, "ck/pytorch", "unlocked", [rootfs()], env=IMAGE_ENV)
    with unlocked_images(cluster, "import"):
        for user in ("ckuser1", "ckuser2"):
            proc = srun_container(cluster, "cat", "/etc/os-release", image=cluster.registry_uri(tag="unlocked"),
                                  user=user, check=False)
            assert proc.returncode == 0, f"{user}: {proc.stderr}"
            assert proc.stdout == OS_RELEASE


# ------------------------------------------------------------------------------------ registry auth



def test_ecr_credentials_setup_against_a_basic_auth_registry(cluster: Cluster, tmp_path: Path) -> None:
    """The ECR credentials (enroot-files) + the enroot.conf credentials link, used by the real enroot as an
    unprivileged user: enroot evaluates the `$(aws ecr get-login-password ...)` password (aws is the
    stand-in here) and answers the registry's Basic challenge with it."""
    node = cluster.node
    password = base64.b64encode(b"ecr-token-for-test").decode()
    with ecr_like_registry(node, password) as (ecr, port):
        node.run(["bash", f"{SHARED}/compute_node_configured.sh", "CK_CLUSTER=demo", "CK_OS=alinux2023",
                  "CK_REGION=us-east-1", f"CK_ECR_REGISTRIES={ECR_HOST}"])
        creds = node.read("/etc/enroot/credentials")
        assert creds == (f"machine {ECR_HOST} login AWS password "
                         "$(aws ecr get-login-password --region us-east-1)\n")
        out = f"/tmp/{tmp_path.name}-private.sqsh"
        # in a job, as users run enroot on compute nodes (the prolog made the user's enroot dirs)
        proc = node.run(["srun", "--chdir=/tmp", "enroot", "import", "-o", out,
                         f"docker://{ECR_HOST}:{port}#team/private:v1"], user="ckuser1", check=False, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        basic = [auth for _, _, auth in ecr.log if auth and auth.startswith("Basic ")]
        assert basic, ecr.log
        # the user's own config dir got the link to the system-wide file, nothing else
        link = node.run(["readlink", "/home/ckuser1/.config/enroot/.credentials"]).stdout.strip()
        assert link == "/etc/enroot/credentials"
        node.run(["rm", "-f", out])
        # and without the ECR setting the same pull is refused: the credentials are what made it work
        node.run(["bash", f"{SHARED}/compute_node_configured.sh", "CK_CLUSTER=demo", "CK_OS=alinux2023",
                  "CK_REGION=us-east-1"])
        proc = node.run(["srun", "--chdir=/tmp", "enroot", "import", "-o", out,
                         f"docker://{ECR_HOST}:{port}#team/private:v1"], user="ckuser2", check=False, timeout=120)
        assert proc.returncode != 0 and "user: <anonymous>" in proc.stderr, proc.stdout + proc.stderr
        node.run(["rm", "-f", out])


def test_slurmd_never_saw_an_unknown_pyxis_option(cluster: Cluster) -> None:
    """Sanity: nothing in this flow used a pyxis option the installed pyxis does not know."""
    assert "unknown configuration option" not in cluster.node.read("/var/log/slurmd.log")
    assert json.loads((cluster.node.host_path(f"{STORE}/manifest.json")).read_text())["images"]


# ------------------------------------------------------------------------------- pyxis options

PYXIS_CONF = "/opt/slurm/etc/plugstack.conf.d/pyxis.conf"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def test_pyxis_options_are_filtered_for_the_installed_pyxis(cluster: Cluster, generation) -> None:
    """PYXIS_USE_ENROOT_LOAD=1 through the head node's own function: written only for a pyxis that
    knows it, and slurmd starts and runs containers either way."""
    node = cluster.node
    original = node.read(PYXIS_CONF)
    knows = _version(generation.pyxis_version) >= (0, 21, 0)
    try:
        out = node.run(["bash", "-c", 'set -euo pipefail; source "$1"; shift; ck_parse_args compute "$@"; '
                        'ck_install_plugstack /opt/slurm/etc /usr/local/lib/slurm/spank_pyxis.so', "gen",
                        f"{SHARED}/enroot.sh", "CK_CLUSTER=demo", "CK_OS=alinux2023", "PYXIS_USE_ENROOT_LOAD=1"])
        assert ("use_enroot_load=1" in node.read(PYXIS_CONF)) == knows
        if not knows:
            assert (f"pyxis {generation.pyxis_version} does not know use_enroot_load (ClusterKit writes it for "
                    "pyxis >= 0.21.0): not written, so slurmd still starts") in out.stdout
        node.restart_slurmd()
        assert srun_container(cluster, "true", user="ckuser1").returncode == 0
        # (with importer= configured, as for pyxis 0.24, pyxis asks the importer and never `enroot load`s)
        got = srun_container(cluster, "cat", "/etc/os-release", image=cluster.registry_uri(), user="ckuser2")
        assert got.stdout == OS_RELEASE
    finally:
        node.write(PYXIS_CONF, original)
        node.restart_slurmd()


def test_real_pyxis_refuses_an_option_it_does_not_know_by_stopping_slurmd(cluster: Cluster, generation) -> None:
    """Why the filter exists, pinned against the real plugins (real-runtime.md): pyxis 0.20.0 stops
    slurmd on use_enroot_load=1; pyxis 0.24.0 starts with it."""
    node = cluster.node
    original = node.read(PYXIS_CONF)
    try:
        node.write(PYXIS_CONF, original.rstrip("\n") + " use_enroot_load=1\n")
        if _version(generation.pyxis_version) >= (0, 21, 0):
            node.restart_slurmd()
            assert srun_container(cluster, "true").returncode == 0
        else:
            with pytest.raises(RuntimeError, match="slurmd exited"):
                node.restart_slurmd()
            assert "pyxis: unknown configuration option: use_enroot_load=1" in node.read("/var/log/slurmd.log")
    finally:
        node.write(PYXIS_CONF, original)
        node.restart_slurmd()
