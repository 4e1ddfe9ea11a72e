"""The node artifacts shipped to S3: per-file scripts for PC CustomActions and one bootstrap bundle zip.

Keys are content hashes under the cluster's own prefix (``artifact_prefix``), computed here without CDK,
so the committed rendered config names the exact objects a deploy uploads: a script or lock change shows
up in the pull-request diff. Nodes may read the whole prefix, not just today's keys: a node launched from
the previous launch template while ParallelCluster replaces the fleet still fetches the previous scripts.
The zip is built byte-for-byte deterministically (fixed timestamps and modes, sorted entries), and so is
the node package's zipapp inside it (``clusterkit_node.pyz``: every node tool, one file).

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

from clusterkit.effective.expand import expand
from clusterkit.images.lock_file import empty_lock, lock_text
from clusterkit.paths import COMPAT_RULES, NODE_PACKAGE_DIR, NODE_PROFILES, SCRIPTS_DIR
from clusterkit.pipeline.loader import Loaded
from clusterkit_node.contract import health_plan

SCRIPTS = SCRIPTS_DIR  # the name tests and callers use
LAUNCHER = "head_node_launcher.sh"  # HeadNode OnNodeUpdated (may change); also in the bundle for stage 0
# HeadNode OnNodeConfigured (UNSUPPORTED: never changes after creation): its bytes, and so its key, are frozen.
STAGE0 = "head_node_stage0.sh"
STAGE0_SHA256 = "0421a15b22841a16611e785eff3c41107af3dc376fc88dcf0322885b9ae1fe09"
# LoginNodes Pools[].CustomActions OnNodeStart/OnNodeConfigured (UNSUPPORTED in PC 3.16.1 too): frozen the same way;
# it runs the shared bundle's LOGIN (which runs the compute scripts with CK_NODE_ROLE=login).
LOGIN_STAGE0 = "login_node_stage0.sh"
LOGIN_STAGE0_SHA256 = "58885918a175234994e7a9d295ae775acf2502b4b4a5c6d28c0e1717b31f1e94"
LOGIN = "login_node.sh"
COMPUTE_START = "compute_node_start.sh"
COMPUTE_CONFIGURED = "compute_node_configured.sh"
# The node package as one zipapp (stdlib zipapp layout: a zip with __main__.py at its root, behind a shebang).
# The nodes run `python3 clusterkit_node.pyz sync|status|verify|fingerprint|drift ...`, and pyxis (>= 0.24) runs
# the file itself as its importer (plugstack importer=, as the job's user: `clusterkit_node.pyz get URI`).
ZIPAPP = "clusterkit_node.pyz"
PYXIS_IMPORTER = ZIPAPP
ZIPAPP_SHEBANG = b"#!/usr/bin/python3 -I\n"  # pyxis removes PATH; -I ignores the job's PYTHON* and user site
# The zipapp's own __main__.py. Python puts the archive on sys.path as named on the command line, and the nodes
# name it through /opt/parallelcluster/shared/clusterkit, a link head_node.sh switches to a new bundle with one
# rename; zipimport re-opens the archive by path for each module, so the package is imported from the real path:
# a command keeps reading the bundle it started from.
ZIPAPP_MAIN = (b"# ClusterKit node tools: the zipapp's entry point "
               b"(written by clusterkit/artifacts/bundle.py; the code is clusterkit_node/).\n"
               b"""import os
import sys

if sys.path and os.path.isfile(sys.path[0]):
    sys.path[0] = os.path.realpath(sys.path[0])

from clusterkit_node.__main__ import main  # noqa: E402

sys.exit(main())
""")
BUNDLE_FILES = ("enroot.sh", LAUNCHER, "head_node.sh", COMPUTE_START, COMPUTE_CONFIGURED, LOGIN)
# The previous bundles' entry points, as shims to the zipapp: while a cluster update rolls out, compute nodes
# launched from the previous launch template run their compute_node_configured.sh, which runs image_sync.py
# from the (new) shared bundle, and plugstack lines written before this head node run name pyxis_importer.py.
# Drop them once no deployed cluster runs a bundle older than the zipapp.
LEGACY_ENTRY_POINTS = ("image_sync.py", "pyxis_importer.py")
LEGACY_ENTRY = b"""#!/usr/bin/python3 -I
# An entry point of the previous ClusterKit bundles (written by clusterkit/artifacts/bundle.py): the node tools are one
# zipapp now, clusterkit_node.pyz next to this file; run it with the same arguments.
import os
import sys

zipapp = os.path.join(os.path.dirname(os.path.realpath(__file__)), "clusterkit_node.pyz")
os.execv(sys.executable, [sys.executable, "-I", zipapp, *sys.argv[1:]])
"""
# Data files copied to the zip root: the node tools read them next to the zipapp.
BUNDLE_DATA = {COMPAT_RULES.name: COMPAT_RULES, NODE_PROFILES.name: NODE_PROFILES}
_EPOCH = (2020, 1, 1, 0, 0, 0)
_EXECUTABLE = (".sh", ".pyz")


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
    login_stage0: Artifact | None = None  # only for a spec with login_nodes (no new asset for the others)

    def all(self) -> list[Artifact]:
        login = [self.login_stage0] if self.login_stage0 is not None else []
        return [self.stage0, self.launcher, self.compute_start, self.compute_configured, self.bundle, *login]


def _file(name: str) -> Artifact:
    return Artifact(name, (SCRIPTS / name).read_bytes())


def build_zip(files: dict[str, bytes], prefix: bytes = b"") -> bytes:
    """A deterministic zip of ``files`` (fixed timestamps and modes, sorted entries), after ``prefix``
    (a zipapp's shebang: zip readers find the archive from its end, as zipapp.create_archive writes it)."""
    out = io.BytesIO()
    out.write(prefix)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = (0o755 if name.endswith(_EXECUTABLE) or name in LEGACY_ENTRY_POINTS else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name])
    return out.getvalue()


def node_package_files() -> dict[str, bytes]:
    """Every module of clusterkit_node and its subpackages, under the package's name (what the zipapp imports)."""
    return {f"{NODE_PACKAGE_DIR.name}/{path.relative_to(NODE_PACKAGE_DIR).as_posix()}": path.read_bytes()
            for path in sorted(NODE_PACKAGE_DIR.rglob("*.py"))}


def build_zipapp() -> bytes:
    """clusterkit_node as one executable zipapp: shebang, then a zip of ``__main__.py`` and the package."""
    return build_zip({"__main__.py": ZIPAPP_MAIN, **node_package_files()}, prefix=ZIPAPP_SHEBANG)


def node_artifacts(loaded: Loaded) -> NodeArtifacts:
    """Everything the nodes of this cluster need, from the committed scripts, spec and image lock."""
    files = {name: (SCRIPTS / name).read_bytes() for name in BUNDLE_FILES}
    files[ZIPAPP] = build_zipapp()
    files.update(dict.fromkeys(LEGACY_ENTRY_POINTS, LEGACY_ENTRY))
    files.update({name: path.read_bytes() for name, path in BUNDLE_DATA.items()})
    lock = loaded.lock_path
    files["images.lock"] = lock.read_bytes() if lock.exists() else lock_text(empty_lock(loaded.spec.name)).encode()
    effective = expand(loaded)
    settings = effective.node
    # the nodes' health plan: checked against the nodes' own ranges first (PlanError: a plan they would refuse)
    files[health_plan.PLAN_NAME] = health_plan.dumps(effective.health).encode()
    files["node.args"] = ("\n".join(settings.head) + "\n").encode()
    # login nodes run the compute scripts, which refuse the head-only settings (the image gc's)
    files["compute.args"] = ("\n".join(settings.compute) + "\n").encode()
    return NodeArtifacts(
        stage0=_file(STAGE0),
        launcher=_file(LAUNCHER),
        compute_start=_file(COMPUTE_START),
        compute_configured=_file(COMPUTE_CONFIGURED),
        bundle=Artifact(f"{loaded.spec.name}-bundle.zip", build_zip(files)),
        login_stage0=_file(LOGIN_STAGE0) if loaded.spec.login_nodes else None,
    )
