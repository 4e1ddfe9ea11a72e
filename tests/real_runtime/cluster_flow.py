"""One ClusterKit cluster brought up for real inside a node root (see node_root.py), image path included.

The flow, as on a ParallelCluster cluster (one node plays head and compute):
  1. a loopback registry serves an image the test builds (busybox-static rootfs + a CUDA version file);
  2. ClusterKit's own lock code resolves the spec's image against it (clusterkit/images/resolve.py, the code
     `clusterkit lock` runs; the registry client is told plain http is fine for loopback);
  3. ClusterKit's bundle for the spec is built (clusterkit/artifacts/bundle.py) and "uploaded" (aws stand-in);
  4. the head node's launcher runs, which runs head_node.sh from the bundle: enroot.conf, hooks, the
     pyxis plugstack line + `scontrol reconfigure`, the store, and the image-sync unit, whose ExecStart
     imports the image with the REAL `enroot import` into /fsx/containers;
  5. the compute scripts run (OnNodeStart, then OnNodeConfigured: pyxis check, `srun --help`, store
     verify, fingerprint), then slurmd restarts as PC's finalize phase starts it.
"""
from __future__ import annotations

import json
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from images_fakes import FakeRegistry, add_rootfs_image, serve
from node_root import NodeRoot

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.effective.expand import expand
from clusterkit.images import resolve as images
from clusterkit.images.lock_file import ImageLock, write_lock
from clusterkit.images.registry import RegistryClient
from clusterkit.pipeline.loader import image_specs, load, platform

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "bootstrap_scripts"
SHARED = "/opt/parallelcluster/shared/clusterkit"
STORE = "/fsx/containers"
IMAGE_NAME = "pytorch"       # the name jobs/hello-container.sbatch uses by default
CUDA_VERSION = "12.8.1"
OS_RELEASE = 'NAME="ClusterKit test image"\nPRETTY_NAME="ClusterKit test image (busybox)"\nID=cktest\n'
BUSYBOX_APPLETS = ("sh", "cat", "ls", "echo", "id", "grep", "true", "sleep", "env", "hostname", "test",
                   "touch", "mkdir", "rm", "stat", "head", "wc", "dd", "sync", "find", "readlink")
SYNC_UNIT = "clusterkit-image-sync.service"
# As NGC's PyTorch images set it: enroot's 50-slurm-pytorch.sh hook acts only on images that have it.
IMAGE_ENV = ("PYTORCH_VERSION=2.6.0",)


def rootfs(cuda: str = CUDA_VERSION, extra: dict | None = None) -> dict:
    """Files of a small runnable image: busybox-static as /bin/*, an os-release, and the NGC-style
    CUDA version file ClusterKit's image_versions reads (/usr/local/cuda -> cuda-X.Y/version.json)."""
    busybox = Path(shutil.which("busybox") or "/bin/busybox").read_bytes()
    majmin = ".".join(cuda.split(".")[:2])
    files: dict = {"bin/busybox": (busybox, 0o755), "etc/os-release": OS_RELEASE,
                   "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\n",
                   f"usr/local/cuda-{majmin}/version.json": json.dumps(
                       {"cuda": {"name": "CUDA SDK", "version": cuda}}, indent=3),
                   "usr/local/cuda": f"->cuda-{majmin}"}
    files.update({f"bin/{a}": "->busybox" for a in BUSYBOX_APPLETS})
    files.update(extra or {})
    return files


def spec_text(registry_host: str, repo: str, tag: str, os_name: str = "alinux2023") -> str:
    """The demo spec with its images replaced by the loopback image and its os by the node's profile
    (everything else as shipped)."""
    demo = re.sub(r"(?m)^os: .*$", f"os: {os_name}", (REPO / "cluster_configs" / "demo.yaml").read_text(), count=1)
    head, _, _ = demo.partition("  images:\n")
    tail = demo[demo.index("\nlifecycle:"):]
    return (head + "  images:\n"
            f"    - name: {IMAGE_NAME}\n"
            f"      uri: {registry_host}/{repo}:{tag}\n"
            "      expect:\n"
            f"        cuda: \"{'.'.join(CUDA_VERSION.split('.')[:2])}\"\n" + tail)


@dataclass
class Cluster:
    node: NodeRoot
    registry: FakeRegistry
    digest: str
    lock: ImageLock
    spec_path: Path
    bootstrap_log: str
    compute_args: list[str]

    @property
    def sqsh(self) -> str:
        return f"{STORE}/{IMAGE_NAME}.sqsh"

    def manifest(self) -> dict:
        return json.loads(self.node.host_path(f"{STORE}/manifest.json").read_text())

    def registry_uri(self, repo: str = "ck/pytorch", tag: str = "25.01") -> str:
        return f"{self.registry.host}#{repo}:{tag}"


def put_file(node: NodeRoot, path: str, data: bytes, mode: int = 0o644) -> None:
    staged = node.scratch / "put.tmp"
    staged.write_bytes(data)
    node.run(["install", "-D", "-m", f"{mode:o}", str(staged), path])
    staged.unlink()


def wait_unit(node: NodeRoot, unit: str, timeout: float = 180) -> str:
    """Wait until the systemctl stand-in's run of unit ends; returns its exit status."""
    rc_path = f"/run/ck-test/units/{unit}.rc"
    node.wait(lambda: node.run(["test", "-s", rc_path], check=False).returncode == 0, f"{unit} to end",
              timeout)
    return node.read(rc_path).strip()


@dataclass
class Prepared:
    """What exists before any node boots: the served image, the spec, its lock and the bundle in "S3"."""

    digest: str
    lock: ImageLock
    spec_path: Path
    compute_args: list[str]


LAUNCHER_ARGS = ("CK_REGION=us-east-1", "CK_BUNDLE_URI=s3://ck-test/bundle.zip")


def prepare(node: NodeRoot, registry: FakeRegistry, workdir: Path, *, with_image: bool = True) -> Prepared:
    """Steps 1-3 of the flow: serve the image, lock the spec against the registry, build and upload the
    bundle; plus the site drop-in that lets enroot talk plain http to the loopback registry."""
    digest = add_rootfs_image(registry, "ck/pytorch", "25.01", [rootfs()], env=IMAGE_ENV)
    spec_path = workdir / "demo.yaml"
    text = spec_text(registry.host, "ck/pytorch", "25.01", node.profile)
    if not with_image:
        text = text[:text.index("  images:\n")] + "  images: []\n" + text[text.index("\nlifecycle:") + 1:]
    spec_path.write_text(text)
    loaded = load(str(spec_path), check_lock=False)
    lock = images.resolve_lock(loaded.spec.name, image_specs(loaded.spec), platform(loaded.spec),
                               registry_client=RegistryClient(allow_loopback_http=True))
    write_lock(loaded.lock_path, lock)
    registry.log.clear()  # from here on the registry sees only the nodes' traffic
    loaded = load(str(spec_path))
    put_file(node, "/var/lib/ck-test/s3/ck-test/bundle.zip", node_artifacts(loaded).bundle.data)
    # A site drop-in (enroot reads /etc/enroot/enroot.conf.d/*.conf after enroot.conf): plain http to
    # the loopback registry. ClusterKit's own enroot.conf stays exactly as the head node writes it.
    node.write("/etc/enroot/enroot.conf.d/90-ck-test-http.conf", "ENROOT_ALLOW_HTTP yes\n")
    return Prepared(digest, lock, spec_path, own_network_args(node, list(expand(loaded).node.compute)))


def own_network_args(node: NodeRoot, args: list[str]) -> list[str]:
    """A node root without its own network namespace shares the test machine's: there the IMDS lock (real iptables,
    clusterkit_node/node/imds_lock.py) would change the machine's own OUTPUT chain, so such a node boots with
    CK_COMPUTE_IMDS=all_users (which only reads the chains). The lock itself runs in namespaces of its own: in
    tests/node_package/test_imds_lock_netns.py and on every fleet node (tests/multinode)."""
    if node.node_name:
        return args
    return [("CK_COMPUTE_IMDS=all_users" if a.startswith("CK_COMPUTE_IMDS=") else a) for a in args]


def run_stage0(node: NodeRoot) -> str:
    """The head node's OnNodeConfigured action (stage 0, which runs the bundle's launcher), as PC runs it."""
    return node.run(["bash", str(SCRIPTS / "head_node_stage0.sh"), *LAUNCHER_ARGS], timeout=120).stdout


def run_launcher(node: NodeRoot) -> str:
    """The head node's OnNodeUpdated action, as ParallelCluster runs it."""
    return node.run(["bash", str(SCRIPTS / "head_node_launcher.sh"), *LAUNCHER_ARGS], timeout=120).stdout


def bring_up(node: NodeRoot, registry: FakeRegistry, workdir: Path) -> Cluster:
    prep = prepare(node, registry, workdir)
    head = run_stage0(node)
    rc = wait_unit(node, SYNC_UNIT)
    sync_log = node.read(f"/run/ck-test/units/{SYNC_UNIT}.log")
    assert rc == "0", f"image sync exited {rc}:\n{sync_log}"
    start = node.run(["bash", f"{SHARED}/compute_node_start.sh", *prep.compute_args])
    configured = node.run(["bash", f"{SHARED}/compute_node_configured.sh", *prep.compute_args])
    node.restart_slurmd()  # PC's finalize phase starts slurmd after OnNodeConfigured
    return Cluster(node, registry, prep.digest, prep.lock, prep.spec_path,
                   "\n".join([head, sync_log, start.stdout, configured.stdout]), prep.compute_args)


@contextmanager
def unlocked_images(cluster: Cluster, policy: str) -> Iterator[None]:
    """The node configured with CK_UNLOCKED_IMAGES=policy (its compute script re-run with that Arg, as a
    spec change reaches a node), restored afterwards."""
    script = f"{SHARED}/compute_node_configured.sh"
    args = [a for a in cluster.compute_args if not a.startswith("CK_UNLOCKED_IMAGES=")]
    cluster.node.run(["bash", script, *args, f"CK_UNLOCKED_IMAGES={policy}"])
    try:
        yield
    finally:
        cluster.node.run(["bash", script, *cluster.compute_args])


def srun_container(cluster: Cluster, *cmd: str, image: str | None = None, user: str | None = None,
                   extra: tuple[str, ...] = (), check: bool = True, env: dict | None = None):
    return cluster.node.run(["srun", f"--container-image={image or cluster.sqsh}", *extra, *cmd],
                            user=user, check=check, env=env, timeout=120)


def slurmd_log(node: NodeRoot) -> str:
    return node.read("/var/log/slurmd.log")


def pyxis_version_logged(node: NodeRoot) -> str | None:
    found = re.findall(r"pyxis: version v(\d+\.\d+\.\d+)", slurmd_log(node))
    return found[-1] if found else None


ECR_HOST = "123456789012.dkr.ecr.us-east-1.amazonaws.com"


@contextmanager
def ecr_like_registry(node: NodeRoot, password: str) -> Iterator[tuple[FakeRegistry, str]]:
    """A loopback registry that answers ECR's scheme (Basic auth, user AWS) as ``ECR_HOST`` on the node, holding
    ``team/private:v1``; the node's ``aws ecr get-login-password`` stand-in prints ``password``. Yields (the
    registry, its port)."""
    with serve() as ecr:
        ecr.basic_auth = ("AWS", password)
        add_rootfs_image(ecr, "team/private", "v1", [rootfs()])
        node.sh(f"grep -q ' {ECR_HOST}$' /etc/hosts || echo '127.0.0.1 {ECR_HOST}' >> /etc/hosts")
        node.write("/var/lib/ck-test/ecr-password", password + "\n", 0o644)
        yield ecr, ecr.host.rsplit(":", 1)[1]
