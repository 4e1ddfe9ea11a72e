"""The GPU path up to the driver, on a node root of EVERY OS profile: REAL enroot 4.1.2 + pyxis 0.24.0, REAL
nvidia-container-cli (built from ../shared/vendor, packaged as NVIDIA packages it:
tests/real_runtime/nvidia_packages.py),
ClusterKit's own install path (compute_node_configured.sh with a GPU queue's Args: gpu-runtime, the self-test).

What a job with a CUDA image meets (its environment sets NVIDIA_VISIBLE_DEVICES, so enroot's 98-nvidia.sh runs
nvidia-container-cli):
  - before ClusterKit installs the CLI (what ParallelCluster's AMIs are, and what ClusterKit did until now):
    "Command not found: nvidia-container-cli", for srun and for the GPU self-test, which fails the boot naming it;
  - after: the hook reaches the real CLI, and without a GPU here the failure is the driver's
    ("nvidia-container-cli: initialization error: ...") — everything up to the driver is proven; the driver itself
    only on a GPU machine (benchmarks/gpu_path.py).
Non-GPU queues (CK_GPU unset) keep today's boot: the cluster fixture boots that way and must pass.
The head node's fetch runs for real (packages-fetch against a loopback copy of NVIDIA's repository layout).
Stand-ins (see their modules): NVIDIA's packages (the real CLI, repackaged; nvidia_packages.py), FSx is a local
directory, an rpm OS's loader path (node_root.py).
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nvidia_packages
import pytest
import runtime_build
from cluster_flow import SHARED, STORE, Cluster, bring_up
from images_fakes import serve
from node_root import PROFILES
from tier import start_node

from clusterkit_node.contract.layout import package_set_dir
from clusterkit_node.node.selftest_image import write_rootfs
from clusterkit_node.store.package_set import normalize_arch

ARCH = normalize_arch(os.uname().machine)
CLI = "nvidia-container-cli"
VERSION = nvidia_packages.FULL_VERSION.split("-")[0]  # the stand-in's true version (1.17.0)
CUDA_IMAGE = "/fsx/cuda-style.sqsh"
NOT_FOUND = "Command not found: nvidia-container-cli"
DRIVER = "nvidia-container-cli: initialization error"


@pytest.fixture(scope="module", params=sorted(PROFILES.profiles))
def gpu_cluster(request, tmp_path_factory):
    """A cluster on a node root of one OS profile (gen4), brought up as a non-GPU queue's node, plus a CUDA-style
    image in /fsx (the self-test's GPU image: NVIDIA_VISIBLE_DEVICES=all, compute,utility)."""
    profile = str(request.param)
    node = start_node(runtime_build.GENERATIONS["gen4"], tmp_path_factory, profile)
    try:
        with serve() as registry:
            cluster = bring_up(node, registry, tmp_path_factory.mktemp(f"spec-gpu-{profile}"))
            for name, extra in (("cuda-style", ""), ("cuda-debug", "NVIDIA_DEBUG_LOG=1\n")):
                tree = tmp_path_factory.mktemp(f"{name}-rootfs-{profile}")
                write_rootfs(str(tree), os.uname().machine, gpu=True)
                with open(tree / "etc" / "environment", "a", encoding="utf-8") as fh:
                    fh.write(extra)
                image = node.fsx / f"{name}.sqsh"
                subprocess.run(["mksquashfs", str(tree), str(image), "-noappend", "-all-root", "-quiet"], check=True)
                image.chmod(0o644)
            yield cluster
    finally:
        node.stop()


def _gpu_args(cluster: Cluster, *extra: str) -> list[str]:
    """The cluster's compute Args as a GPU queue's (CK_GPU=1), pinned to the stand-in's version; ``extra`` wins."""
    args = dict(a.split("=", 1) for a in [*cluster.compute_args, "CK_GPU=1", f"CK_NVIDIA_CLI={VERSION}", *extra])
    return [f"{key}={value}" for key, value in args.items()]


def _boot(cluster: Cluster, *extra: str) -> subprocess.CompletedProcess:
    return cluster.node.run(["bash", f"{SHARED}/compute_node_configured.sh", *_gpu_args(cluster, *extra)],
                            check=False, timeout=300)


def _srun_cuda(cluster: Cluster, user: str | None) -> subprocess.CompletedProcess:
    return cluster.node.run(["srun", f"--container-image={CUDA_IMAGE}", "/bin/sh", "/dev/nvidiactl"], user=user,
                            check=False, timeout=120)


@contextmanager
def nvidia_repository() -> Iterator[str]:
    """NVIDIA's repository layout (deb/<arch>/Packages, rpm/<arch>/repodata) with the stand-in packages, served on
    loopback (the single-node root shares this machine's network); yields its root URL."""
    repo = nvidia_packages.build_repo()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    handler.log_message = lambda *_args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def publish_packages(cluster: Cluster) -> Path:
    """The head node's step, for real: `packages-fetch` from the bundle's zipapp reads the repository's index,
    downloads and checks each file, and publishes the set with its packages.json (store/package_fetch.py)."""
    with nvidia_repository() as url:
        proc = cluster.node.run(["python3", f"{SHARED}/clusterkit_node.pyz", "packages-fetch", "--store", STORE,
                                 "--os", cluster.node.profile, "--version", VERSION, "--repository", url])
    assert "error" not in proc.stdout.lower() + proc.stderr.lower(), proc.stdout + proc.stderr
    return Path(package_set_dir(str(cluster.node.host_path(STORE)), CLI, VERSION, cluster.node.profile, ARCH))


def _error_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if " ERROR " in ln]


def test_a_cuda_image_fails_command_not_found_where_the_cli_is_missing(gpu_cluster: Cluster) -> None:
    """What every PC AMI does today (the non-GPU boot installs nothing): pyxis -> enroot -> 98-nvidia.sh."""
    assert gpu_cluster.node.run(["sh", "-c", f"command -v {CLI}"], check=False).returncode != 0
    for user in (None, "ckuser1"):
        proc = _srun_cuda(gpu_cluster, user)
        assert proc.returncode != 0 and NOT_FOUND in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_gpu_boot_without_packages_fails_with_one_line(gpu_cluster: Cluster) -> None:
    proc = _boot(gpu_cluster)
    assert proc.returncode == 1, proc.stdout
    line = [ln for ln in _error_lines(proc.stdout + proc.stderr) if "gpu-runtime" in ln][0]
    assert f"{CLI} is not on this node and the store has no verified packages" in line
    assert "containers.nvidia_container_cli.install: false" in line  # the hint


def test_gpu_selftest_without_the_cli_fails_the_boot_naming_it(gpu_cluster: Cluster) -> None:
    """install: false on an AMI without it: gpu-runtime warns, the GPU self-test fails the boot naming the cause."""
    proc = _boot(gpu_cluster, "CK_NVIDIA_CLI=off")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "WARN gpu-runtime: nvidia-container-cli is not on this node" in out
    die = [ln for ln in _error_lines(out) if "container self-test failed" in ln]
    assert die and "nvidia-container-cli is not installed" in die[-1] and NOT_FOUND in die[-1], out


def test_a_corrupted_package_in_the_store_is_never_installed(gpu_cluster: Cluster) -> None:
    directory = publish_packages(gpu_cluster)
    record = json.loads((directory / "packages.json").read_text())
    victim = directory / record["files"][1]["file"]
    good = victim.read_bytes()
    victim.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    try:
        proc = _boot(gpu_cluster)
        assert proc.returncode == 1
        assert "does not match packages.json" in proc.stdout + proc.stderr
        assert gpu_cluster.node.run(["sh", "-c", f"command -v {CLI}"], check=False).returncode != 0
    finally:
        victim.write_bytes(good)


def test_gpu_boot_installs_the_cli_and_gets_as_far_as_the_driver(gpu_cluster: Cluster) -> None:
    publish_packages(gpu_cluster)
    proc = _boot(gpu_cluster)
    out = proc.stdout + proc.stderr
    fmt = PROFILES.profiles[gpu_cluster.node.profile].package_format.value
    assert f"INFO gpu-runtime: installed {CLI} {VERSION} from the store ({fmt}, 2 packages" in out, out
    # no GPU here: the self-test's GPU start fails at the driver, not at a missing command
    assert proc.returncode == 1, out
    die = [ln for ln in _error_lines(out) if "container self-test failed" in ln]
    assert die and "the NVIDIA driver does not answer it" in die[-1] and DRIVER in die[-1], out
    assert NOT_FOUND not in out
    version = gpu_cluster.node.run([CLI, "--version"]).stdout
    assert f"cli-version: {VERSION}" in version
    # the package manager knows it (rpm -q / dpkg -s), as a later `dnf`/`apt` run on the node would
    query = ["dpkg", "-s", nvidia_packages.TOOLS_PKG] if fmt == "deb" else ["rpm", "-q", nvidia_packages.TOOLS_PKG]
    assert gpu_cluster.node.run(query).returncode == 0


def test_a_second_boot_leaves_the_installed_cli_alone(gpu_cluster: Cluster) -> None:
    proc = _boot(gpu_cluster)
    out = proc.stdout + proc.stderr
    assert (f"INFO gpu-runtime: {CLI} {VERSION} is already on this node (the AMI's, or an earlier boot's install): "
            "left alone") in out, out


@pytest.mark.parametrize("user", [None, "ckuser1"])
def test_a_cuda_image_now_reaches_the_cli_and_fails_only_at_the_driver(gpu_cluster: Cluster, user) -> None:
    """srun --container-image as root and as a user: pyxis clears the step's environment but PATH, and the hook
    still finds the CLI (/usr/bin) and runs it with the image's NVIDIA_* (it got as far as loading the driver)."""
    proc = _srun_cuda(gpu_cluster, user)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert DRIVER in out and NOT_FOUND not in out, out


def test_the_images_and_the_jobs_nvidia_settings_reach_the_cli(gpu_cluster: Cluster) -> None:
    """What the hook hands the CLI comes from the image's environment AND the job's: pyxis clears slurmstepd's
    environment but then imports the job's into enroot's (pyxis 0.24.0 pyxis_slurmstepd.c enroot_set_env ->
    enroot_import_job_env, deny list without NVIDIA_*), and 98-nvidia.sh keeps a variable already set over the
    container's (`[ -v key ] || export`). Marker: NVIDIA_DEBUG_LOG, for which the hook passes --debug to the CLI."""
    debug_line = re.compile(r"nvc\.c:\d+\] ")  # "I1204 ... nvc.c:367] using root /" (pyxis prints the log's tail)

    def srun(image: str, env: dict | None = None) -> str:
        proc = gpu_cluster.node.run(["srun", f"--container-image={image}", "/bin/sh"], user="ckuser2", check=False,
                                    timeout=120, env=env)
        said = proc.stdout + proc.stderr
        assert proc.returncode != 0 and DRIVER in said, said
        return said

    assert debug_line.search(srun("/fsx/cuda-debug.sqsh"))  # from the image
    assert debug_line.search(srun(CUDA_IMAGE, {"NVIDIA_DEBUG_LOG": "1"}))  # from the job
    assert not debug_line.search(srun(CUDA_IMAGE))  # from neither


def test_a_non_gpu_image_still_starts(gpu_cluster: Cluster) -> None:
    out = gpu_cluster.node.run(["srun", f"--container-image={gpu_cluster.sqsh}", "sh", "-c", "echo ok"],
                               user="ckuser1").stdout
    assert out.strip() == "ok"


def test_non_gpu_queues_boot_as_before(gpu_cluster: Cluster) -> None:
    assert "compute_node_configured.sh INFO done: node ready for container jobs" in gpu_cluster.bootstrap_log
    assert "gpu-runtime" not in gpu_cluster.bootstrap_log
    proc = gpu_cluster.node.run(["bash", f"{SHARED}/compute_node_configured.sh", *gpu_cluster.compute_args])
    assert "done: node ready for container jobs" in proc.stdout
