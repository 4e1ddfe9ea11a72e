"""``npx cdk ls`` straight from cdk.json (no Makefile exports) prints no jsii Node-version banner.

cdk relays the app's stderr line by line; jsii's boxed "Node N is end-of-life" banner came out as Python
bytes (``b'!!  Node 20 ...'``). app.py now sets the JSII_SILENCE_* variables before aws_cdk starts jsii
(clusterkit/artifacts/node_banner.py). The run strips those variables from the environment (tests/conftest.py and
the Makefile set them), so what is checked is a user's shell.
"""
from __future__ import annotations

import os
import subprocess

from clusterkit.artifacts import node_banner
from clusterkit.paths import ROOT

DUMMY_AWS = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
             "AWS_DEFAULT_REGION": "us-east-1"}


def test_cdk_ls_from_cdk_json_prints_no_jsii_banner() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE_") and k != "PYTHONPATH"}
    done = subprocess.run([str(ROOT / "node_modules" / ".bin" / "cdk"), "ls"], cwd=ROOT, env={**env, **DUMMY_AWS},
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Demo-Network", "Demo-Storage", "Demo-Cluster"]
    assert "b'!!" not in done.stderr and "!!  Node" not in done.stderr, done.stderr


def test_a_value_the_user_set_is_kept(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(node_banner.END_OF_LIFE, "18")
    monkeypatch.delenv("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", raising=False)
    node_banner.silence_node_banners()
    assert os.environ[node_banner.END_OF_LIFE] == "18"
    assert os.environ["JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION"] == "1"


def test_the_running_node_major_is_named(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(node_banner.END_OF_LIFE, raising=False)
    node_banner.silence_node_banners()
    assert os.environ[node_banner.END_OF_LIFE].isdigit()
