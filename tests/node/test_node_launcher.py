"""head_node_launcher.sh: the stable HeadNode OnNodeConfigured/OnNodeUpdated action.

Real: the launcher script under bash, python3's zipfile, sha256sum. Stand-ins: an `aws` CLI script that
answers `ssm get-parameter` and `s3 cp` from a local folder, and a bundle whose head_node.sh only
records the arguments it was given (the real head_node.sh has its own tests).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "bootstrap_scripts/head_node_launcher.sh"
FAKE_AWS = """#!/usr/bin/env bash
set -euo pipefail
echo "$*" >> "$FAKE_LOG"
case "$1 $2" in
  "ssm get-parameter") cat "$FAKE_S3/parameter" ;;
  "s3 cp") src="${@: -2:1}"; dst="${@: -1}"; cp "$FAKE_S3/${src#s3://}" "$dst" ;;
  *) echo "unexpected aws call: $*" >&2; exit 9 ;;
esac
"""
RECORDER = 'printf "%s\\n" "$@" > "$RECORD"\n'
NODE_ARGS = "CK_CLUSTER=demo\nENROOT_SQUASH_OPTIONS=-comp zstd -Xcompression-level 3 -b 1M\nCK_ECR_REGISTRIES=\n"


@pytest.fixture
def world(tmp_path):
    bin_dir, s3 = tmp_path / "bin", tmp_path / "s3"
    (s3 / "bucket").mkdir(parents=True)
    bin_dir.mkdir()
    aws = bin_dir / "aws"
    aws.write_text(FAKE_AWS)
    aws.chmod(0o755)
    with zipfile.ZipFile(s3 / "bucket/b.zip", "w") as zf:
        zf.writestr("head_node.sh", RECORDER)
        zf.writestr("node.args", NODE_ARGS)
    (s3 / "parameter").write_text("s3://bucket/b.zip\n")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_S3=str(s3), FAKE_LOG=str(tmp_path / "aws.log"),
               RECORD=str(tmp_path / "record"), CK_ROOT=str(tmp_path / "root"), TMPDIR=str(tmp_path))
    return tmp_path, env


def _run(env, *args):
    return subprocess.run(["bash", str(LAUNCHER), *args], env=env, capture_output=True, text=True, timeout=60)


def test_runs_bundle_head_script_with_settings(world):
    tmp, env = world
    sha = hashlib.sha256((tmp / "s3/bucket/b.zip").read_bytes()).hexdigest()
    result = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_PARAMETER=/clusterkit/demo/bootstrap-bundle",
                  f"CK_BUNDLE_SHA256={sha}")
    assert result.returncode == 0, result.stderr
    assert (tmp / "record").read_text().splitlines() == ["CK_BUNDLE=s3://bucket/b.zip", *NODE_ARGS.splitlines()]
    calls = (tmp / "aws.log").read_text().splitlines()
    assert calls[0].startswith("ssm get-parameter --region us-east-1 --name /clusterkit/demo/bootstrap-bundle")
    assert "bootstrap.log" in str(list((tmp / "root/var/log/clusterkit").iterdir())[0])
    assert not list(tmp.glob("clusterkit-launch.*")), "temp dir left behind"


def test_bundle_hash_mismatch_fails(world):
    _, env = world
    result = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_PARAMETER=/p", "CK_BUNDLE_SHA256=" + "0" * 64)
    assert result.returncode == 1 and "expects 000000" in result.stdout


def test_unknown_argument_exits_2(world):
    _, env = world
    result = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_PARAMETER=/p", "CK_BOGUS=1")
    assert result.returncode == 2 and "unknown argument 'CK_BOGUS'" in result.stdout


def test_parameter_must_hold_s3_uri(world):
    tmp, env = world
    (tmp / "s3/parameter").write_text("https://example.com/b.zip\n")
    result = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_PARAMETER=/p")
    assert result.returncode == 1 and "is not an s3:// URI" in result.stdout


def test_stable_uri_instead_of_parameter(world):
    """`clusterkit export` clusters name a stable S3 key; no SSM call is made."""
    tmp, env = world
    result = _run(env, "CK_REGION=eu-west-1", "CK_BUNDLE_URI=s3://bucket/b.zip")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(c.startswith("ssm ") for c in (tmp / "aws.log").read_text().splitlines())
    assert (tmp / "record").read_text().splitlines()[0] == "CK_BUNDLE=s3://bucket/b.zip"


def test_needs_exactly_one_bundle_location(world):
    _, env = world
    both = _run(env, "CK_REGION=us-east-1", "CK_BUNDLE_PARAMETER=/p", "CK_BUNDLE_URI=s3://bucket/b.zip")
    none = _run(env, "CK_REGION=us-east-1")
    assert both.returncode == none.returncode == 2 and "exactly one" in both.stdout


def test_shellcheck_clean():
    shellcheck = REPO / ".venv/bin/shellcheck"
    result = subprocess.run([str(shellcheck), "-S", "style", str(LAUNCHER)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
