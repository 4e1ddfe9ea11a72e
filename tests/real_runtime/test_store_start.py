"""Constant-time starts from the store, with the REAL enroot + pyxis, on nodes as ParallelCluster's AMIs are
(node profiles: alinux2023 has no squashfuse, ubuntu2404 has it and a multi-threaded squashfuse_ll). On pyxis >= 0.24
nodes the head node's
plugstack line adds ClusterKit's importer, and use_squashfuse=1 only where the node can start a .sqsh in place
(squashfuse present, /dev/fuse usable by users: measured on the node). Where it can,

  * a registry name that is in the image lock (`srun --container-image=REG#REPO:TAG`) resolves, through
    the importer, to the store's digest file and starts in place with squashfuse: no registry request,
    no extraction, root and unprivileged users alike (the node has PC's 0666 /dev/fuse);
  * a store path starts in place too; --container-name falls back to extraction, as pyxis does;
  * a name that is not in the lock is refused with one line (default), or imported for the job and
    released afterwards (CK_UNLOCKED_IMAGES=import);

where it cannot (alinux2023), locked names still resolve through the importer to the store file, which pyxis
extracts onto node-local disk (enroot create): jobs work, with one WARN line at boot naming squashfuse and the
fix. On pyxis 0.20 nodes nothing of that is written: store files are extracted, registry names imported by
pyxis itself. What pyxis does is read from its own log lines (pyxis 0.24.0 pyxis_slurmstepd.c:
"using importer squashfs directly", "starting container from squashfs", "creating container filesystem").
"""
from __future__ import annotations

import json
import re

import pytest
from cluster_flow import IMAGE_ENV, OS_RELEASE, STORE, Cluster, rootfs, slurmd_log, srun_container, unlocked_images
from images_fakes import add_rootfs_image
from node_root import starts_in_place

IMPORTER = "/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz"
# Behaviour only pyxis >= 0.24 has (what 0.20 does instead is asserted where it can be run)
NEW_ONLY = pytest.mark.parametrize("generation", ["gen4"], indirect=True)


def is_new(generation) -> bool:
    return tuple(int(p) for p in generation.pyxis_version.split(".")) >= (0, 24, 0)


def in_place(cluster: Cluster, generation) -> bool:
    """Do store starts run in place on this node? pyxis >= 0.24 on an AMI with squashfuse and a multi-threaded
    squashfuse_ll (the profile)."""
    return is_new(generation) and starts_in_place(cluster.node.profile)


def digest_file(cluster: Cluster) -> str:
    return f"{STORE}/pytorch/{cluster.digest.split(':', 1)[1]}.sqsh"


class LogWindow:
    """slurmd log lines written from now on (pyxis logs each step's decisions there)."""

    def __init__(self, cluster: Cluster):
        self.node, self.start = cluster.node, len(slurmd_log(cluster.node))

    def text(self) -> str:
        return slurmd_log(self.node)[self.start:]


def registry_requests(cluster: Cluster, since: int) -> list:
    return cluster.registry.log[since:]


def test_plugstack_has_the_importer_and_squashfuse_only_for_pyxis_0_24(cluster: Cluster, generation) -> None:
    line = cluster.node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf")
    assert (f"importer={IMPORTER}" in line) == is_new(generation)
    assert ("use_squashfuse=1" in line) == in_place(cluster, generation)
    if is_new(generation) and not in_place(cluster, generation):
        warn = [ln for ln in cluster.bootstrap_log.splitlines() if "containers start by extraction" in ln]
        assert len(warn) == 1 and " WARN " in warn[0], cluster.bootstrap_log
        assert "squashfuse not installed" in warn[0] and "pcluster build-image" in warn[0], warn[0]
    if not is_new(generation):
        assert (f"pyxis {generation.pyxis_version} does not know importer (ClusterKit writes it for pyxis >= 0.24.0)"
                in cluster.bootstrap_log)
    assert "unknown configuration option" not in slurmd_log(cluster.node)


@pytest.mark.parametrize("user", [None, "ckuser1"])
def test_a_locked_registry_name_starts_from_the_store_without_the_registry(cluster: Cluster, generation,
                                                                            user: str | None) -> None:
    seen, log = len(cluster.registry.log), LogWindow(cluster)
    names = [cluster.registry_uri()]  # enroot's REGISTRY#REPO form; docker's form only parses on enroot 4.x
    if is_new(generation):
        names.append(f"{cluster.registry.host}/ck/pytorch:25.01")
    for image in names:
        out = srun_container(cluster, "cat", "/etc/os-release", image=image, user=user).stdout
        assert out == OS_RELEASE
    if in_place(cluster, generation):
        assert registry_requests(cluster, seen) == []
        assert log.text().count(f"pyxis: using importer squashfs directly: {digest_file(cluster)}") == 2
        assert f"pyxis: starting container from squashfs: {digest_file(cluster)}" in log.text()
        assert "creating container filesystem" not in log.text()
    elif is_new(generation):  # no squashfuse: the importer still answers with the store file, pyxis extracts it
        assert registry_requests(cluster, seen) == []
        assert log.text().count("pyxis: creating container filesystem") == 2
        assert "starting container from squashfs" not in log.text()
    else:  # pyxis 0.20: pyxis imports from the registry itself, every time
        assert [p for m, p, _ in registry_requests(cluster, seen) if "/manifests/" in p]


def test_a_store_path_starts_in_place_where_the_node_can(cluster: Cluster, generation) -> None:
    log = LogWindow(cluster)
    assert srun_container(cluster, "true", user="ckuser2").returncode == 0
    if in_place(cluster, generation):
        assert f"pyxis: starting container from squashfs: {cluster.sqsh}" in log.text()
        assert "creating container filesystem" not in log.text()
    else:
        assert "pyxis: creating container filesystem" in log.text()


def test_container_options_and_hooks_on_either_path(cluster: Cluster) -> None:
    name = cluster.registry_uri()
    mounts = srun_container(cluster, "ls", STORE, image=name, user="ckuser1",
                            extra=(f"--container-mounts={STORE}:{STORE}:ro",)).stdout.split()
    assert "pytorch.sqsh" in mounts
    writable = srun_container(cluster, "sh", "-c", "echo x > /ck-written && cat /ck-written", image=name,
                              user="ckuser1", extra=("--container-writable",))
    assert writable.stdout.strip() == "x"
    readonly = srun_container(cluster, "sh", "-c", "echo x > /ck-written", image=name, user="ckuser1",
                              extra=("--container-readonly",), check=False)
    assert readonly.returncode != 0 and "Read-only file system" in readonly.stderr
    # enroot's 50-slurm-pytorch.sh hook (the image sets PYTORCH_VERSION, as NGC's do) ran in the container
    env = dict(line.split("=", 1) for line in
               srun_container(cluster, "env", image=name, user="ckuser2").stdout.splitlines() if "=" in line)
    assert IMAGE_ENV[0] in {f"{k}={v}" for k, v in env.items()}
    assert env.get("RANK") == "0" and env.get("WORLD_SIZE") == "1" and env.get("MASTER_ADDR")


@NEW_ONLY
def test_sbatch_directive_with_a_registry_name(cluster: Cluster) -> None:
    """sbatch cuts a #SBATCH line at the next '#' (measured: the importer received `docker://HOST`), so
    enroot's REGISTRY#REPO form cannot be written there; docker's REGISTRY/REPO form can, on enroot 4.x
    (enroot 3.x parses only the '#' form: no registry name in #SBATCH lines on pyxis 0.20 nodes)."""
    seen = len(cluster.registry.log)
    state, out = cluster.node.sbatch(
        f"#!/bin/sh\n#SBATCH --container-image={cluster.registry.host}/ck/pytorch:25.01\nid -u\n"
        "cat /etc/os-release\n", user="ckuser2")
    assert state == "COMPLETED", out
    assert out.endswith("\n27002\n" + OS_RELEASE), out  # after pyxis' "importing/imported" lines
    assert registry_requests(cluster, seen) == []


def test_container_name_falls_back_to_extraction(cluster: Cluster) -> None:
    log = LogWindow(cluster)
    state, out = cluster.node.sbatch(
        "#!/bin/bash\nset -euo pipefail\n"
        f"srun --container-image={cluster.registry_uri()} --container-name=ckname sh -c 'echo kept > /ck-marker'\n"
        "srun --container-name=ckname cat /ck-marker\n", user="ckuser1")
    assert state == "COMPLETED", out
    assert out.strip().splitlines()[-1] == "kept"
    assert "pyxis: creating container filesystem" in log.text()
    assert "starting container from squashfs" not in log.text()


def test_an_unlocked_name_is_refused_in_one_line_without_the_registry(cluster: Cluster, generation) -> None:
    add_rootfs_image(cluster.registry, "ck/pytorch", "not-locked", [rootfs()], env=IMAGE_ENV)
    seen = len(cluster.registry.log)
    uri = cluster.registry_uri(tag="not-locked")
    proc = srun_container(cluster, "true", image=uri, user="ckuser1", check=False)
    if not is_new(generation):  # no importer on pyxis 0.20: pyxis pulls any name itself, the policy cannot apply
        assert proc.returncode == 0 and registry_requests(cluster, seen)
        return
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "clusterkit importer: error:" in ln]
    assert len(lines) == 1, proc.stderr
    assert f"docker://{uri} is not in the image lock of cluster demo" in lines[0]
    assert "`make lock CLUSTER=demo`" in lines[0]
    assert registry_requests(cluster, seen) == []


@NEW_ONLY
def test_import_policy_imports_an_unlocked_name_for_the_job_and_releases_it(cluster: Cluster, generation) -> None:
    add_rootfs_image(cluster.registry, "ck/pytorch", "for-import", [rootfs()], env=IMAGE_ENV)
    seen, log = len(cluster.registry.log), LogWindow(cluster)
    with unlocked_images(cluster, "import"):
        out = srun_container(cluster, "cat", "/etc/os-release", image=cluster.registry_uri(tag="for-import"),
                             user="ckuser1").stdout
    assert out == OS_RELEASE
    assert [p for m, p, _ in registry_requests(cluster, seen) if p.endswith("/manifests/for-import")]
    if in_place(cluster, generation):
        direct = re.findall(r"using importer squashfs directly: (\S+)", log.text())
        assert direct and direct[0].startswith("/run/pyxis/27001/clusterkit.")
    else:
        assert "pyxis: creating container filesystem" in log.text()
    # release ran (at task cleanup): the per-step file is gone, nothing else left behind
    left = cluster.node.run(["sh", "-c", "ls -A /run/pyxis/27001 2>/dev/null || true"]).stdout.split()
    assert [f for f in left if f.startswith("clusterkit.")] == []
    assert "could not call importer release" not in log.text()


@NEW_ONLY
def test_attaching_to_a_running_unnamed_container_needs_the_extraction_path(cluster: Cluster, generation) -> None:
    """pyxis's own exec.bats "attach to running unnamed container": a later step names the running step's
    container (<job>.<step>) to join it. A squashfuse start creates no container (pyxis_slurmstepd.c: "skipping
    container creation"), so there is nothing to join; a named container (--container-name) is always created,
    so joining it works on both paths: the documented workaround (docs/images.md)."""
    state, out = cluster.node.sbatch(
        "#!/bin/bash\n"
        f"srun --container-image={cluster.sqsh} sh -c 'sleep 5' &\n"
        "sleep 2.5\n"
        'if srun --overlap --container-name="${SLURM_JOB_ID}.0" cat /etc/os-release >/dev/null 2>&1; '
        "then echo UNNAMED=joined; else echo UNNAMED=refused; fi\n"
        "wait\n"
        f"srun --container-image={cluster.sqsh} --container-name=ckjoin sh -c 'sleep 5' &\n"
        "sleep 2.5\n"
        "if srun --overlap --container-name=ckjoin cat /etc/os-release >/dev/null 2>&1; "
        "then echo NAMED=joined; else echo NAMED=refused; fi\n"
        "wait\n", user="ckuser1", timeout=90)
    assert state == "COMPLETED", out
    expected = "UNNAMED=refused" if in_place(cluster, generation) else "UNNAMED=joined"
    assert expected in out.split() and "NAMED=joined" in out.split(), out


@NEW_ONLY
@pytest.mark.parametrize("node_profile", ["ubuntu2404"], indirect=True)  # an AMI whose line starts in place
def test_a_compute_node_that_cannot_run_the_lines_squashfuse_path_fails_its_boot(cluster: Cluster, generation) -> None:
    """The head node's AMI has squashfuse and wrote use_squashfuse=1; a queue whose AMI lacks it (a custom AMI)
    must not boot as if it could. squashfuse and squashfuse_ll are made unusable on this node (a non-executable
    file bound over each, as absent for `command -v`) and the compute script re-run, as that queue's node would run
    it: its squashfuse-reader removes ClusterKit's wrapper (its binary is gone), so nothing named squashfuse is
    left."""
    assert in_place(cluster, generation)
    script = "/opt/parallelcluster/shared/clusterkit/compute_node_configured.sh"
    node = cluster.node
    programs = ("/usr/bin/squashfuse", "/usr/bin/squashfuse_ll")
    node.run(["sh", "-c", "install -m 0644 /dev/null /run/ck-no-squashfuse && " + " && ".join(
        f"mount --bind /run/ck-no-squashfuse {p}" for p in programs)])
    try:
        proc = node.run(["bash", script, *cluster.compute_args], check=False)
    finally:
        for program in programs:
            node.run(["umount", program])
    assert proc.returncode == 1
    (line,) = [ln for ln in proc.stderr.splitlines() if " ERROR " in ln]
    assert "starts images in place (use_squashfuse=1, chosen on the head node) but this node cannot" in line
    assert "squashfuse not installed" in line and "use_squashfuse: false" in line, line
    assert "node ready for container jobs" not in proc.stdout
    assert node.run(["bash", script, *cluster.compute_args]).returncode == 0  # restored: boots again


@NEW_ONLY
def test_container_unshare_fails_every_step_on_pyxis_0_24_with_enroot_4_1_2(cluster: Cluster) -> None:
    """The pairing node_profiles.json records, measured: pyxis 0.24.0 accepts --container-unshare and exports
    ENROOT_UNSHARE_*, which enroot 4.1.2 never reads, so the container shares the node's namespaces and pyxis
    then fails the step (not silently ignored, as had been assumed). The node's fingerprint says so at boot, and
    `drift` on the head node lists such nodes."""
    for namespace, name in (("net", "network"), ("uts", "UTS")):
        proc = srun_container(cluster, "true", user="ckuser1", extra=(f"--container-unshare={namespace}",),
                              check=False)
        assert proc.returncode != 0
        assert (f"pyxis: error: --container-unshare={namespace} requested but the container is not in a separate "
                f"{name} namespace") in proc.stderr, proc.stderr
    assert srun_container(cluster, "true", user="ckuser1").returncode == 0  # the node itself is fine
    warning = [ln for ln in cluster.bootstrap_log.splitlines() if "--container-unshare=net,ipc,uts" in ln]
    assert warning and "enroot 4.1.2 does not read: every step that passes the option fails" in warning[0], warning
    (fingerprint,) = (cluster.node.fsx / ".containers.clusterkit" / "nodes").glob("*/*.json")
    doc = json.loads(fingerprint.read_text())
    assert [w["id"] for w in doc["pairing_warnings"]] == ["pyxis-unshare-fails-without-enroot-unshare"]
