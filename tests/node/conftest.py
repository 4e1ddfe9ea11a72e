"""Fixtures for the node-script sandbox tests (see node_sandbox.py for what is real and what is a stand-in)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from node_sandbox import Sandbox  # noqa: E402

for _k, _v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
    os.environ.setdefault(_k, _v)



@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    """A fresh fake node: official-AMI files present, /fsx and /scratch mounted."""
    return Sandbox(tmp_path, mounts={"/fsx", "/scratch"}).provide_ami()
