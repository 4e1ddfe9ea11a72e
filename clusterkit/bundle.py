"""The node artifacts shipped to S3: per-file scripts for PC CustomActions and one bootstrap bundle zip.

Keys are content hashes under the cluster's own prefix (``artifact_prefix``), computed here without CDK,
so the committed rendered config names the exact objects a deploy uploads: a script or lock change shows
up in the pull-request diff. Nodes may read the whole prefix, not just today's keys: a node launched from
the previous launch template while ParallelCluster replaces the fleet still fetches the previous scripts.
The zip is built byte-for-byte deterministically (fixed timestamps and modes, sorted entries).

The head node's OnNodeConfigured names ``head_node_stage0.sh``, whose bytes are frozen (STAGE0_SHA256):
ParallelCluster never lets that field change (update policy UNSUPPORTED), so everything that may change
lives in the bundle, the launcher included; stage 0 only fetches the current bundle and runs its launcher.
"""
from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .loader import Loaded
from .node_settings import head_settings
from .paths import COMPAT_RULES, SCRIPTS_DIR

SCRIPTS = SCRIPTS_DIR  # the name tests and callers use
LAUNCHER = "head_node_launcher.sh"  # HeadNode OnNodeUpdated (may change); also in the bundle for stage 0
# HeadNode OnNodeConfigured (UNSUPPORTED: never changes after creation): its bytes, and so its key, are frozen.
STAGE0 = "head_node_stage0.sh"
STAGE0_SHA256 = "0421a15b22841a16611e785eff3c41107af3dc376fc88dcf0322885b9ae1fe09"
COMPUTE_START = "compute_node_start.sh"
COMPUTE_CONFIGURED = "compute_node_configured.sh"
# image_sync.py imports these from its own directory (one job each; the zip's root is that directory).
IMAGE_SYNC_MODULES = ("compat_loader.py", "console.py", "disk_preflight.py", "enroot_uri.py", "image_import.py",
                      "image_lock.py", "image_store.py", "image_versions.py", "node_drift.py",
                      "node_facts.py", "node_fingerprint.py", "squashfs_check.py", "store_status.py",
                      "store_sync.py", "store_verify.py", "sync_config.py")
# pyxis (>= 0.24) runs the importer as the job's user (plugstack importer=); it imports image_sync's modules.
PYXIS_IMPORTER = "pyxis_importer.py"
BUNDLE_FILES = ("enroot.sh", LAUNCHER, "head_node.sh", "image_sync.py", *IMAGE_SYNC_MODULES, "compat.py", COMPUTE_START,
                COMPUTE_CONFIGURED, PYXIS_IMPORTER)
# Data files copied to the zip root: image_sync.py on the nodes reads them next to itself.
BUNDLE_DATA = {COMPAT_RULES.name: COMPAT_RULES}
_EPOCH = (2020, 1, 1, 0, 0, 0)
EMPTY_LOCK = '{\n  "cluster": "",\n  "images": [],\n  "lock_version": 1\n}\n'


def artifact_prefix(name: str) -> str:
    """The S3 key prefix of one cluster's node artifacts (the Cluster stack's assets, or ``export``'s)."""
    return f"clusterkit/{name}/"


@dataclass(frozen=True)
class Artifact:
    """One S3 object: its bytes, content hash and the key CDK uploads it under."""

    name: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def key(self) -> str:
        """The object key CDK publishes: it re-hashes a custom asset hash, so sha256(hex digest)."""
        return hashlib.sha256(self.sha256.encode()).hexdigest() + Path(self.name).suffix


@dataclass(frozen=True)
class NodeArtifacts:
    stage0: Artifact
    launcher: Artifact
    compute_start: Artifact
    compute_configured: Artifact
    bundle: Artifact

    def all(self) -> list[Artifact]:
        return [self.stage0, self.launcher, self.compute_start, self.compute_configured, self.bundle]


def _file(name: str) -> Artifact:
    return Artifact(name, (SCRIPTS / name).read_bytes())


def build_zip(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = (0o755 if name.endswith((".sh", ".py")) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name])
    return out.getvalue()


def node_artifacts(loaded: Loaded) -> NodeArtifacts:
    """Everything the nodes of this cluster need, from the committed scripts, spec and image lock."""
    files = {name: (SCRIPTS / name).read_bytes() for name in BUNDLE_FILES}
    files.update({name: path.read_bytes() for name, path in BUNDLE_DATA.items()})
    lock = loaded.lock_path
    files["images.lock"] = lock.read_bytes() if lock.exists() else EMPTY_LOCK.encode()
    files["node.args"] = ("\n".join(head_settings(loaded.spec)) + "\n").encode()
    return NodeArtifacts(
        stage0=_file(STAGE0),
        launcher=_file(LAUNCHER),
        compute_start=_file(COMPUTE_START),
        compute_configured=_file(COMPUTE_CONFIGURED),
        bundle=Artifact(f"{loaded.spec.name}-bundle.zip", build_zip(files)),
    )
