"""Helpers for the image_sync tests.

Real: the node zipapp (clusterkit_node.pyz, built by clusterkit.artifacts.bundle exactly as the bundle ships it, next
to compat_rules.json) run as a subprocess (as the head node runs it), NVIDIA enroot 4.1.2
built from the pinned source (real_enroot.py: registry pull, layer extraction, mksquashfs with our
options), squashfs-tools, flock, rename, tmpfs, su/runuser. Stand-ins: the loopback registry and the image
content (marker files of real stacks), see real_enroot.py.
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clusterkit.artifacts.bundle import BUNDLE_DATA, ZIPAPP, build_zipapp

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def write_zipapp(directory: Path) -> Path:
    """The node zipapp as the bundle ships it (mode 0755), with the data files the bundle puts next to it."""
    path = directory / ZIPAPP
    path.write_bytes(build_zipapp())
    path.chmod(0o755)
    for name, source in BUNDLE_DATA.items():
        shutil.copy(source, directory / name)
    return path


def _process_zipapp() -> Path:
    """One zipapp per test process, in a world-readable directory (some tests run it as nobody)."""
    directory = Path(tempfile.mkdtemp(prefix="ck-node-zipapp-"))
    directory.chmod(0o755)
    atexit.register(shutil.rmtree, directory, True)
    return write_zipapp(directory)


SCRIPT = _process_zipapp()

from real_enroot import Registry, enroot_env, imports, serve_image  # noqa: E402

FULL_VERSIONS = {"cuda": "12.8.1", "nccl": "2.25.1", "aws_ofi_nccl": "1.13.0",
                 "efa_installer": "1.38.0", "libfabric": "1.22.0amzn4.0",
                 "pytorch": "2.6.0a0+ecf3bae40a.nv25.01"}


def load_module():
    return importlib.import_module("clusterkit_node.commands")


@pytest.fixture(scope="session")
def image_sync():
    """The image store commands (clusterkit_node.commands), for in-process unit tests."""
    return load_module()


def sibling(name: str):
    """A module of the node package (clusterkit_node.<package>.<module>), imported from the checkout."""
    return importlib.import_module(f"clusterkit_node.{name}")


@pytest.fixture(scope="session")
def image_store():
    return sibling("store.manifest")


@pytest.fixture(scope="session")
def store_debris():
    return sibling("store.debris")


@pytest.fixture(scope="session")
def stable_names():
    return sibling("store.stable_names")


@pytest.fixture(scope="session")
def concurrency():
    return sibling("store.concurrency")


@pytest.fixture(scope="session")
def image_lock():
    return sibling("contract.lock")


@pytest.fixture(scope="session")
def image_versions():
    return sibling("image.versions")


@pytest.fixture(scope="session")
def squashfs_check():
    return sibling("image.squashfs")


@pytest.fixture(scope="session")
def sync_config():
    return sibling("store.sync_config")


@pytest.fixture(scope="session")
def disk_preflight():
    return sibling("store.disk_preflight")


def write_lock(path: Path, images: list[dict]) -> Path:
    doc = {"cluster": "demo", "images": sorted(images, key=lambda i: i["name"]), "lock_version": 1}
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path


CONTENT_KEYS = ("versions", "layout", "big_mb", "env")
FAULT_KEYS = ("fail", "sleep", "hold", "rate")


@dataclass
class Sandbox:
    """A store, the real enroot (real_enroot.py) with a loopback registry, and helpers to run
    the node zipapp's image store commands against them."""

    root: Path
    store: Path
    lock: Path
    log: Path
    registry: Registry
    env: dict = field(default_factory=dict)
    specs: dict = field(default_factory=dict)

    full_versions = FULL_VERSIONS

    def image(self, name: str, repository: str | None = None, generation: int = 0, expect=None,
              compressed_size: int | None = None) -> dict:
        """Serve an image for name (content from the current set_spec) and return its lock entry,
        shaped exactly like `python -m clusterkit lock` writes it. Same arguments, same digest."""
        repository = repository or f"test/{name}"
        spec = self.specs.get(repository, self.specs.get("*", {}))
        content = {k: spec[k] for k in CONTENT_KEYS if k in spec}
        digest, size = serve_image(self.registry, repository, f"{name}/{generation}", content)
        host = self.registry.host
        return {
            "compressed_size": size if compressed_size is None else compressed_size,
            "digest": digest,
            "enroot_uri": f"docker://{host}#{repository}@{digest}",
            "expect": dict(expect or {}),
            "name": name,
            "platform": "linux/amd64",
            "registry": host,
            "repository": repository,
            "source": f"{host}/{repository}:latest",
        }

    def write_lock(self, images: list[dict]) -> Path:
        return write_lock(self.lock, images)

    def set_spec(self, spec: dict) -> None:
        """Per repository (or "*"): image content (versions, layout, big_mb, env; used by image() calls
        made afterwards) and registry faults (fail: N | "always", sleep: seconds,
        hold: True until changed, rate: bytes/s; effective at once)."""
        self.specs = spec
        self.registry.faults = {repo: {k: v for k, v in s.items() if k in FAULT_KEYS}
                                for repo, s in spec.items()}
        self.registry.reset_counts()

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, str(SCRIPT), *args]

    def run(self, *args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(*args), env=env or self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120, **kw)

    def sync(self, *extra: str, **kw) -> subprocess.CompletedProcess:
        return self.run("sync", "--lock", str(self.lock), "--store", str(self.store),
                        "--backoff", "0.01", *extra, **kw)

    def popen_sync(self, *extra: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(self.cmd("sync", "--lock", str(self.lock), "--store", str(self.store),
                                         "--backoff", "0.01", *extra),
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, **kw)

    def fast_sync_then_verify_all(self) -> subprocess.CompletedProcess:
        """A sync on the O(1) path reads nothing (still one import logged); ``--verify-all`` reads every file and
        re-imports the bad one (two). Returns the ``--verify-all`` run, whose output says what it found."""
        fast = self.sync()
        assert fast.returncode == 0 and len(self.imports()) == 1, "the fast path must stay O(1) (no reads)"
        full = self.sync("--verify-all")
        assert full.returncode == 0, full.stderr
        assert len(self.imports()) == 2
        return full

    def importer(self, uri: str) -> subprocess.CompletedProcess:
        """Run the node zipapp as pyxis runs its importer (``get URI``) against this store, with the
        current lock in its bundle: CK_ROOT is the sandbox root and the node's CK_STORE /<store name>."""
        bundle = self.root / "bundle"
        if not bundle.is_dir():
            bundle.mkdir()
            write_zipapp(bundle)
            (self.root / "etc/clusterkit").mkdir(parents=True, exist_ok=True)
            (self.root / "etc/clusterkit/node.env").write_text(
                f"CK_CLUSTER='demo'\nCK_STORE='/{self.store.name}'\nCK_UNLOCKED_IMAGES='refuse'\n")
        shutil.copy(self.lock, bundle / "images.lock")
        env = {"CK_ROOT": str(self.root), "PYXIS_RUNTIME_PATH": str(self.root / "pyxis"), "SLURM_JOB_UID": "0",
               "SLURM_JOB_GID": "0", "SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0"}
        return subprocess.run([sys.executable, "-I", str(bundle / ZIPAPP), "get", uri], env=env,
                              capture_output=True, text=True, timeout=60)

    def as_bit_rot(self, final: Path) -> None:
        """Make a change the test wrote into final look like bit rot, which leaves the inode alone: the
        sync's record (published.json) is given final's current lstat identity. Only ``--verify-all``
        (and ``verify --deep``) can see such a change; any write changes the ctime the plain sync checks."""
        path = self.staging / "published.json"
        record = json.loads(path.read_text())
        st = final.lstat()
        record["files"][final.relative_to(self.store).as_posix()].update(mtime=st.st_mtime_ns, ctime=st.st_ctime_ns)
        path.write_text(json.dumps(record))

    def locked_uri(self, name: str) -> str:
        """What a job names an image by: the locked registry/repository and digest."""
        entry = {i["name"]: i for i in json.loads(self.lock.read_text())["images"]}[name]
        return f"docker://{entry['registry']}#{entry['repository']}@{entry['digest']}"

    def imports(self) -> list[str]:
        """URIs the real enroot was asked to import, one per attempt (from the wrapper's log)."""
        return imports(self.log)

    def manifest(self) -> dict:
        return json.loads((self.store / "manifest.json").read_text())

    @property
    def staging(self) -> Path:
        """Where image_sync keeps its lock, temp files and fingerprints: next to the store."""
        return staging_of(self.store)

    def unpublished(self) -> list[str]:
        """Everything under the store that is not published content (see unpublished_in)."""
        return unpublished_in(self.store)


def staging_of(store: Path) -> Path:
    return store.parent / f".{store.name}.clusterkit"


HEX_SQSH = re.compile(r"^[0-9a-f]{64}\.sqsh$")


def unpublished_in(store: Path) -> list[str]:
    """Walk the store: it may hold only manifest.json, <name>.sqsh symlinks to <name>/<hex>.sqsh and
    <name>/ directories of regular <hex>.sqsh files (what FSx may export to S3). Returns the rest."""
    bad = []
    for root, dirs, files in os.walk(store):
        here = Path(root)
        for name in sorted(dirs + files):
            path = here / name
            rel = path.relative_to(store).as_posix()
            if here == store:
                if name == "manifest.json" and path.is_file() and not path.is_symlink():
                    continue
                if name.endswith(".sqsh") and path.is_symlink():
                    target = os.readlink(path)
                    stem = name[:-len(".sqsh")]
                    if target.startswith(f"{stem}/") and HEX_SQSH.match(target[len(stem) + 1:]):
                        continue
                if not name.startswith(".") and path.is_dir() and not path.is_symlink():
                    continue
            elif here.parent == store and HEX_SQSH.match(name) and path.is_file() \
                    and not path.is_symlink():
                continue
            bad.append(rel)
    return bad


@pytest.fixture
def sandbox(tmp_path: Path):
    env = enroot_env(tmp_path)
    reg = Registry()
    try:
        yield Sandbox(root=tmp_path, store=tmp_path / "store", lock=tmp_path / "demo.images.lock",
                      log=tmp_path / "enroot.log", registry=reg, env=env)
    finally:
        reg.close()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 20 MiB filesystem; falls back to None where mounting is not allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        yield None
        return
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
