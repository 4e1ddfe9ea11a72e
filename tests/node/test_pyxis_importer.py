"""ClusterKit's pyxis importer (the node zipapp clusterkit_node.pyz, clusterkit_node/node/pyxis_importer.py) run as
pyxis runs it: `get URI` /
`release`, with the job's environment plus what pyxis sets (pyxis 0.24.0 pyxis_slurmstepd.c,
enroot_set_env: SLURM_JOB_UID/GID, PYXIS_RUNTIME_PATH; PATH removed), from a bundle directory holding the
image lock, under a throwaway root (CK_ROOT). The real pyxis calling it is tests/real_runtime.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from clusterkit.artifacts.bundle import PYXIS_IMPORTER, ZIPAPP_SHEBANG, build_zipapp
from clusterkit.images.lock_file import ImageLock, LockedImage, lock_text
from clusterkit_node.store import published

HEX_A = "a" * 64
HEX_B = "b" * 64
HEX_C = "c" * 64


def _image(name: str, source: str, registry: str, repository: str, hexdigest: str) -> LockedImage:
    digest = f"sha256:{hexdigest}"
    enroot_registry = "" if registry == "registry-1.docker.io" else f"{registry}#"
    return LockedImage(name=name, source=source, registry=registry, repository=repository, digest=digest,
                       enroot_uri=f"docker://{enroot_registry}{repository}@{digest}", platform="linux/amd64",
                       compressed_size=1, expect={})


LOCK = ImageLock(cluster="demo", lock_version=1, images=(
    _image("pytorch", f"nvcr.io/nvidia/pytorch:25.01-py3@sha256:{HEX_A}", "nvcr.io", "nvidia/pytorch", HEX_A),
    _image("ubuntu", "ubuntu:24.04", "registry-1.docker.io", "library/ubuntu", HEX_B),
    _image("pinned", f"localhost:5000/team/app@sha256:{HEX_C}", "localhost:5000", "team/app", HEX_C),
))
STORE = "/fsx/containers"


class Node:
    def __init__(self, root: Path, policy: str = "refuse"):
        self.root = root
        self.bundle = root / "opt/parallelcluster/shared/clusterkit"
        self.bundle.mkdir(parents=True)
        (self.bundle / PYXIS_IMPORTER).write_bytes(build_zipapp())
        (self.bundle / PYXIS_IMPORTER).chmod(0o755)  # head_node.sh makes it executable
        (self.bundle / "images.lock").write_text(lock_text(LOCK))
        (root / "etc/clusterkit").mkdir(parents=True)
        self.settings(f"CK_CLUSTER='demo'\nCK_STORE='{STORE}'\nCK_UNLOCKED_IMAGES='{policy}'\n")
        self.runtime = root / "run/pyxis"
        self.runtime.mkdir(parents=True)

    def settings(self, text: str) -> None:
        (self.root / "etc/clusterkit/node.env").write_text("# ClusterKit node settings\n" + text)

    def publish(self, name: str, hexdigest: str, mode: int = 0o644) -> str:
        """Put a file in the store and record it as the head node's sync does (published.py)."""
        path = self.root / STORE.lstrip("/") / name / f"{hexdigest}.sqsh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"hsqs")
        path.chmod(mode)
        record = self.root / "fsx/.containers.clusterkit/published.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.parent.chmod(0o755)
        files = json.loads(record.read_text())["files"] if record.exists() else {}
        files[f"{name}/{hexdigest}.sqsh"] = dict(published.identity(path.lstat()), digest=f"sha256:{hexdigest}",
                                                 sha256="0" * 64)
        record.write_text(json.dumps(published.record_doc(files)))
        return f"{STORE}/{name}/{hexdigest}.sqsh"

    def run(self, *args: str, step: str = "0", user: int | None = None) -> subprocess.CompletedProcess:
        env = {"CK_ROOT": str(self.root), "PYXIS_RUNTIME_PATH": str(self.runtime), "PYXIS_VERSION": "0.24.0",
               "SLURM_JOB_UID": str(user or 0), "SLURM_JOB_GID": "0", "SLURM_JOB_ID": "41",
               "SLURM_STEP_ID": step, "PYTHONPATH": "/nonexistent-job-setting"}
        cmd = [str(self.bundle / PYXIS_IMPORTER), *args]
        if user is not None:
            cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_importer_is_executable_by_its_shebang_and_isolated_from_the_job_environment(node: Node) -> None:
    first = (node.bundle / PYXIS_IMPORTER).read_bytes().splitlines()[0]
    # pyxis removes PATH; -I ignores the job's PYTHON*
    assert first + b"\n" == ZIPAPP_SHEBANG == b"#!/usr/bin/python3 -I\n"
    node.publish("pytorch", HEX_A)
    r = node.run("get", "docker://nvcr.io#nvidia/pytorch:25.01-py3")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("uri", [
    "docker://nvcr.io#nvidia/pytorch:25.01-py3",          # enroot's REGISTRY#IMAGE form
    "docker://nvcr.io/nvidia/pytorch:25.01-py3",          # docker's form (pyxis adds docker://)
    "docker://$oauthtoken@nvcr.io#nvidia/pytorch:25.01-py3",   # credentials user: not part of the match
    f"docker://nvcr.io#nvidia/pytorch@sha256:{HEX_A}",    # the locked digest
    f"docker://nvcr.io/nvidia/pytorch:other@sha256:{HEX_A}",   # enroot ignores a tag next to a digest
])
def test_locked_names_resolve_to_the_digest_file_in_the_store(node: Node, uri: str) -> None:
    expected = node.publish("pytorch", HEX_A)
    r = node.run("get", uri)
    assert (r.returncode, r.stdout, r.stderr) == (0, expected + "\n", "")


@pytest.mark.parametrize("uri", ["docker://ubuntu:24.04", "docker://library/ubuntu:24.04",
                                 "docker://registry-1.docker.io/library/ubuntu:24.04",
                                 "docker://registry-1.docker.io#library/ubuntu:24.04"])
def test_docker_hub_names_resolve_as_enroot_reads_them(node: Node, uri: str) -> None:
    expected = node.publish("ubuntu", HEX_B)
    assert node.run("get", uri).stdout == expected + "\n"


def test_digest_only_lock_entry_answers_its_digest_only(node: Node) -> None:
    expected = node.publish("pinned", HEX_C)
    assert node.run("get", f"docker://localhost:5000#team/app@sha256:{HEX_C}").stdout == expected + "\n"
    r = node.run("get", "docker://localhost:5000#team/app:latest")
    assert r.returncode == 1 and "not in the image lock" in r.stderr


@pytest.mark.parametrize("uri", [
    "docker://nvcr.io#nvidia/pytorch:25.02-py3",      # another tag of a locked repository
    "docker://nvcr.io#nvidia/pytorch",                # latest
    f"docker://nvcr.io#nvidia/pytorch@sha256:{HEX_B}",  # another digest
    "docker://docker.io/library/ubuntu:24.04",        # enroot would ask docker.io itself, not Docker Hub's API
    "docker://pytorch",                               # a store name is not a registry name
])
def test_unlocked_images_are_refused_with_one_line_naming_make_lock(node: Node, uri: str) -> None:
    node.publish("pytorch", HEX_A)
    node.publish("ubuntu", HEX_B)
    r = node.run("get", uri)
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"clusterkit importer: error: {uri} is not in the image lock of cluster demo")
    assert "`make lock CLUSTER=demo`" in line and f"--container-image={STORE}/<name>.sqsh" in line
    assert ("pytorch=nvcr.io/nvidia/pytorch:25.01-py3" in line
            and "ubuntu=registry-1.docker.io/library/ubuntu:24.04" in line)


def test_a_locked_image_not_synced_yet_says_so(node: Node) -> None:
    r = node.run("get", "docker://nvcr.io#nvidia/pytorch:25.01-py3")
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert (f"is locked as pytorch (sha256:{HEX_A[:12]}...) but {STORE}/pytorch/{HEX_A}.sqsh "
            "is not in the store yet") in line


def test_a_store_file_the_user_cannot_read_is_not_handed_out() -> None:
    import tempfile
    with tempfile.TemporaryDirectory(prefix="ck-importer-") as tmp:  # pytest's tmp dirs are root-only
        os.chmod(tmp, 0o755)
        node = Node(Path(tmp))
        node.publish("pytorch", HEX_A, mode=0o600)
        r = node.run("get", "docker://nvcr.io#nvidia/pytorch:25.01-py3", user=27001)
        assert r.returncode == 1 and "is not readable by uid 27001: store files must be mode 0644" in r.stderr
        node.publish("pytorch", HEX_A, mode=0o644)
        assert node.run("get", "docker://nvcr.io#nvidia/pytorch:25.01-py3", user=27001).returncode == 0


def test_a_file_the_sync_did_not_record_or_that_changed_since_is_refused_with_one_line(node: Node) -> None:
    uri = "docker://nvcr.io#nvidia/pytorch:25.01-py3"
    path = node.root / node.publish("pytorch", HEX_A).lstrip("/")
    path.write_bytes(b"hsqs-other")  # changed behind the sync's back (size, mtime, ctime)
    r = node.run("get", uri)
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"clusterkit importer: error: refusing {STORE}/pytorch/{HEX_A}.sqsh (locked pytorch): "
                           "it changed after the head node's image sync published it (size 10 (recorded 4)")
    node.publish("ubuntu", HEX_B)
    record = node.root / "fsx/.containers.clusterkit/published.json"
    doc = json.loads(record.read_text())
    del doc["files"][f"pytorch/{HEX_A}.sqsh"]
    record.write_text(json.dumps(doc))
    r = node.run("get", uri)
    assert r.returncode == 1 and "has not recorded it as published" in r.stderr
    record.unlink()
    r = node.run("get", "docker://ubuntu:24.04")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "published.json: missing" in r.stderr


@pytest.mark.parametrize("uri, says", [
    ("docker://nvcr.io#nvidia/pytorch:25.01-py3\nCK_STORE=/", "control characters"),
    ("docker://" + "a" * 5000, "over 4096 characters"),
    ("docker://Bad#Repo:x", "is not an image reference enroot understands"),
])
def test_malformed_requests_are_one_line(node: Node, uri: str, says: str) -> None:
    r = node.run("get", uri)
    assert r.returncode == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1 and says in r.stderr


@pytest.mark.parametrize("settings, says", [
    ("CK_STORE='/fsx/../etc'\n", "is not an absolute store path"),
    ("CK_STORE='relative'\n", "is not an absolute store path"),
    ("CK_STORE='/fsx/containers'\nCK_UNLOCKED_IMAGES='pull'\n",
     "CK_UNLOCKED_IMAGES='pull' is not one of refuse, import"),
])
def test_bad_node_settings_are_one_line(node: Node, settings: str, says: str) -> None:
    node.settings(settings)
    r = node.run("get", "docker://nvcr.io#nvidia/pytorch:25.01-py3")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and says in r.stderr


def test_missing_settings_and_bad_lock_are_one_line(node: Node) -> None:
    (node.bundle / "images.lock").write_text("{not json")
    r = node.run("get", "docker://ubuntu:24.04")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "not valid JSON" in r.stderr
    (node.root / "etc/clusterkit/node.env").unlink()
    r = node.run("get", "docker://ubuntu:24.04")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1
    assert "node.env: No such file or directory" in r.stderr


def test_release_is_idempotent_and_never_touches_the_store(node: Node) -> None:
    published = node.root / node.publish("pytorch", HEX_A).lstrip("/")
    assert node.run("get", "docker://nvcr.io#nvidia/pytorch:25.01-py3").returncode == 0
    step_file = node.runtime / "0" / "clusterkit.41.0.sqsh"
    step_file.parent.mkdir()
    step_file.write_bytes(b"per-step import")
    other_step = node.runtime / "0" / "clusterkit.41.1.sqsh"
    other_step.write_bytes(b"another step's import")
    for _ in range(2):  # pyxis calls release twice (after enroot create, and at task cleanup)
        r = node.run("release")
        assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert not step_file.exists() and other_step.exists() and published.read_bytes() == b"hsqs"


def test_batch_step_and_bad_pyxis_environment(node: Node) -> None:
    (node.runtime / "0").mkdir()
    batch = node.runtime / "0" / "clusterkit.41.batch.sqsh"
    batch.write_bytes(b"x")
    assert node.run("release", step="").returncode == 0 and not batch.exists()
    r = node.run("release", step="../../etc")
    assert r.returncode == 1 and "not run by pyxis" in r.stderr


def test_usage(node: Node) -> None:
    for args in (("get",), ("get", "a", "b"), ("release", "extra")):
        r = node.run(*args)
        assert r.returncode == 2 and r.stderr.startswith("usage: clusterkit_node.pyz get URI | release")
    for args in ((), ("fetch", "x")):  # not the importer's words: the zipapp's other commands
        r = node.run(*args)
        assert r.returncode == 2 and re.match(r"usage: clusterkit_node.pyz \[-h\]\s+\{sync,", r.stderr), r.stderr


def test_runs_on_python_3_9(node: Node, python39: str) -> None:
    """Node code is stdlib-only Python 3.9+ (alinux2023 and rhel9 ship 3.9): the importer runs there."""
    expected = node.publish("pytorch", HEX_A)
    env = {"CK_ROOT": str(node.root)}
    r = subprocess.run([python39, "-I", str(node.bundle / PYXIS_IMPORTER), "get", "docker://nvcr.io#nvidia/pytorch:25.01-py3"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout) == (0, expected + "\n"), r.stderr
