"""head_node_stage0.sh: the HeadNode OnNodeConfigured action, frozen because PC never lets it change.

Real: stage 0 and the real head_node_launcher.sh under bash, python3's zipfile, sha256sum, and the bundle
clusterkit/artifacts/bundle.py builds for the demo spec (with head_node.sh swapped for a recorder: the real one has
its own tests). Stand-in: the `aws` CLI script of test_node_launcher.py (`ssm get-parameter`, `s3 cp` from a folder).
"""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from test_node_launcher import FAKE_AWS

from clusterkit.artifacts.bundle import LAUNCHER, SCRIPTS, STAGE0, STAGE0_SHA256, build_zip, node_artifacts
from clusterkit.pipeline.loader import load

STAGE0_PATH = SCRIPTS / STAGE0
RECORDER = b'printf "%s\\n" "$@" > "$RECORD"\n'


def test_stage0_bytes_are_frozen() -> None:
    """Its S3 key (a content hash) sits in HeadNode.CustomActions.OnNodeConfigured, which PC 3.16.1 never
    updates (UNSUPPORTED; tests/app/test_update_contract.py shows it): a changed byte would make every
    existing cluster's next update fail. Change head_node_launcher.sh (it ships in the bundle) instead."""
    actual = hashlib.sha256(STAGE0_PATH.read_bytes()).hexdigest()
    assert actual == STAGE0_SHA256, (
        f"{STAGE0_PATH.relative_to(SCRIPTS.parent)} changed (sha256 {actual}): it is the HeadNode OnNodeConfigured "
        f"script, which ParallelCluster never updates, so existing clusters could no longer be updated. Put the "
        f"change in {LAUNCHER}; only if clusters must be recreated anyway, set STAGE0_SHA256 in "
        f"clusterkit/artifacts/bundle.py")


@pytest.fixture
def world(tmp_path: Path):
    """A fake S3 holding the demo's real bundle (recorder head_node.sh) and a parameter naming it."""
    bin_dir, s3 = tmp_path / "bin", tmp_path / "s3"
    (s3 / "bucket").mkdir(parents=True)
    bin_dir.mkdir()
    (bin_dir / "aws").write_text(FAKE_AWS)
    (bin_dir / "aws").chmod(0o755)
    with zipfile.ZipFile(io.BytesIO(node_artifacts(load("demo")).bundle.data)) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    files["head_node.sh"] = RECORDER
    bundle = build_zip(files)
    (s3 / "bucket/b.zip").write_bytes(bundle)
    (s3 / "parameter").write_text("s3://bucket/b.zip\n")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_S3=str(s3), FAKE_LOG=str(tmp_path / "aws.log"),
               RECORD=str(tmp_path / "record"), CK_ROOT=str(tmp_path / "root"), TMPDIR=str(tmp_path))
    return tmp_path, env, files


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(STAGE0_PATH), *args], env=env, capture_output=True, text=True, timeout=60)


def test_runs_the_bundles_launcher_which_runs_head_node(world) -> None:
    tmp, env, files = world
    result = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_PARAMETER=/clusterkit/demo/bootstrap-bundle")
    assert result.returncode == 0, result.stdout + result.stderr
    node_args = files["node.args"].decode().splitlines()
    assert (tmp / "record").read_text().splitlines() == ["CK_BUNDLE=s3://bucket/b.zip", *node_args]
    calls = (tmp / "aws.log").read_text().splitlines()
    # stage 0 and then the launcher each read the parameter and fetch the bundle
    assert [c.split()[:2] for c in calls] == [["ssm", "get-parameter"], ["s3", "cp"]] * 2
    log = (tmp / "root/var/log/clusterkit/bootstrap.log").read_text()
    assert "stage0: bundle s3://bucket/b.zip: running its head_node_launcher.sh" in log
    assert "launcher: bundle s3://bucket/b.zip" in log
    assert not list(tmp.glob("clusterkit-stage0.*")) and not list(tmp.glob("clusterkit-launch.*"))


def test_stable_bundle_uri_needs_no_parameter(world) -> None:
    """`clusterkit export` clusters pass CK_BUNDLE_URI: no SSM call at all."""
    tmp, env, _ = world
    result = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_URI=s3://bucket/b.zip")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(not c.startswith("ssm") for c in (tmp / "aws.log").read_text().splitlines())


def test_launcher_failure_fails_stage0(world) -> None:
    """A failing launcher (here: an argument it refuses) fails OnNodeConfigured, so PC fails the head node."""
    _, env, _ = world
    result = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_PARAMETER=/p", "CK_BOGUS=1")
    assert result.returncode == 2 and "unknown argument 'CK_BOGUS'" in result.stdout


@pytest.mark.parametrize(("args", "rc", "message"), [
    (("CK_BUNDLE_PARAMETER=/p",), 2, "missing argument CK_REGION"),
    (("CK_REGION=us-east-1",), 2, "missing argument CK_BUNDLE_PARAMETER or CK_BUNDLE_URI"),
    (("CK_REGION=us-east-1", "CK_BUNDLE_URI=https://example.com/b.zip"), 1,
     "bundle location 'https://example.com/b.zip' is not an s3:// URI"),
    (("CK_REGION=us-east-1", "CK_BUNDLE_URI=s3://bucket/missing.zip"), 1, "cannot download s3://bucket/missing.zip"),
])
def test_errors_are_one_line(world, args, rc, message) -> None:
    _, env, _ = world
    result = _run(env, *args)
    assert result.returncode == rc, result.stdout + result.stderr
    assert f"stage0: ERROR: {message}" in result.stdout


def test_bundle_without_launcher_is_refused(world) -> None:
    tmp, env, files = world
    (tmp / "s3/bucket/old.zip").write_bytes(build_zip({k: v for k, v in files.items() if k != LAUNCHER}))
    result = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_URI=s3://bucket/old.zip")
    assert result.returncode == 1 and "has no head_node_launcher.sh" in result.stdout
