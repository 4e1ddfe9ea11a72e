"""One ParallelCluster version: ``clusterkit.DEFAULT_PC_VERSION``.

The spec default, the newest version the rules accept, the pin in requirements-pcluster.txt and the
package installed in .venv-pcluster must all be that version: the moto fixtures and ParallelCluster's own
official-AMI lookup use the installed package's version, the rendered configs are checked against its
schema, and the CDK stacks deploy the spec's version.
"""
from __future__ import annotations

import dataclasses
import re
import subprocess

from pcluster_helpers import needs_pcluster_venv

from clusterkit import DEFAULT_PC_VERSION
from clusterkit.paths import PCLUSTER_REQUIREMENTS
from clusterkit.pcluster.runner import pcluster_python
from clusterkit.rules.common import parse_version
from clusterkit.rules.limits import MAX_PC_VERSION
from clusterkit.spec.model import ClusterSpec

PIN = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", re.MULTILINE)


def test_requirements_pin_exactly_the_default_version() -> None:
    text = PCLUSTER_REQUIREMENTS.read_text(encoding="utf-8")
    pins = {name.lower().replace("_", "-"): version for name, version in PIN.findall(text)}
    assert pins.get("aws-parallelcluster") == DEFAULT_PC_VERSION, (
        f"{PCLUSTER_REQUIREMENTS.name} must pin aws-parallelcluster=={DEFAULT_PC_VERSION} "
        "(clusterkit.DEFAULT_PC_VERSION)")


def test_spec_default_and_newest_accepted_version_are_the_default_version() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(ClusterSpec)}
    assert defaults["parallelcluster_version"] == DEFAULT_PC_VERSION
    assert MAX_PC_VERSION == parse_version(DEFAULT_PC_VERSION)


@needs_pcluster_venv
def test_installed_parallelcluster_is_the_default_version() -> None:
    code = "from pcluster.utils import get_installed_version; print(get_installed_version())"
    done = subprocess.run([str(pcluster_python()), "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == DEFAULT_PC_VERSION, f"{pcluster_python()}: reinstall with `make pcluster-venv`"
