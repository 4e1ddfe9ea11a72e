"""Silence jsii's Node-version banner wherever the CDK app runs (``app.py``, whether `make`, ``npx cdk`` or a
test started it).

jsii (the bridge aws_cdk runs on) prints a boxed "Node N is end-of-life" / "not tested" banner on stderr
when its runtime starts, which ``cdk`` relays line by line as Python bytes (``b'!!  Node 20 ...'``). It is
silenced only by ``JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION`` naming the running Node major version
(jsii's bin/jsii-runtime.js: the variable is split on "," and compared with ``majorVersion``) and by
``JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION`` / ``..._DEPRECATED_NODE_VERSION`` being set; the Makefile
exports the same. The "known broken" banner stays: that one is a real incompatibility. A value the user
already set is kept. Stdlib only; must run before ``import aws_cdk`` (jsii starts its runtime at import).
"""
from __future__ import annotations

import os
import shutil
import subprocess

SILENCED_FLAGS = ("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION")
END_OF_LIFE = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"


def node_major(node: str | None = None) -> str:
    """The major version of the ``node`` jsii will start ("" when there is none or it does not answer)."""
    node = node or os.environ.get("JSII_NODE") or shutil.which("node")
    if not node:
        return ""
    try:
        done = subprocess.run([node, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def silence_node_banners() -> None:
    """Set the JSII_SILENCE_* variables this process's jsii runtime reads, unless already set."""
    for name in SILENCED_FLAGS:
        os.environ.setdefault(name, "1")
    if END_OF_LIFE not in os.environ and (major := node_major()):
        os.environ[END_OF_LIFE] = major
