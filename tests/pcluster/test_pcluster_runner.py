"""The main-venv side of the ParallelCluster checks: venv discovery and output formatting (no pcluster)."""
from __future__ import annotations

import pytest

from clusterkit.pcluster.runner import PclusterVenvMissing, format_problems, pcluster_python, run_check
from clusterkit.spec.errors import ClusterKitError


def test_missing_venv_names_the_make_target(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERKIT_PCLUSTER_PYTHON", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(PclusterVenvMissing) as caught:
        run_check([("demo", "demo.yaml", "Image: {}\n", "us-east-1")], "schema")
    assert str(caught.value).startswith("ParallelCluster venv missing: run `make pcluster-venv`")
    assert isinstance(caught.value, ClusterKitError)  # printed as one line by the CLI, exit 2


def test_venv_location_is_configurable_without_raising(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERKIT_PCLUSTER_PYTHON", str(tmp_path / "python"))
    assert pcluster_python() == tmp_path / "python" and not pcluster_python().exists()
    monkeypatch.delenv("CLUSTERKIT_PCLUSTER_PYTHON")
    assert pcluster_python().parts[-3:] == (".venv-pcluster", "bin", "python")


def test_bad_mode_is_rejected():
    with pytest.raises(ValueError):
        run_check([("demo", "demo.yaml", "", "us-east-1")], "lint")  # type: ignore[arg-type]


def test_format_problems():
    results = [
        {
            "path": "cluster_configs/rendered/demo.yaml",
            "errors": [
                {"level": "ERROR", "type": "EfaValidator", "line": None, "col": None,
                 "message": "Instance type 'c6i.xlarge' does not support EFA."},
                {"level": "ERROR", "type": "ConfigSchemaValidator", "message": "HeadNode.Bogus: Unknown field.",
                 "line": 12, "col": 3},
                {"level": "WARNING", "type": "KeyPairValidator", "message": "no key pair", "line": None, "col": None},
            ],
        }
    ]
    shown = "cluster_configs/rendered/demo.yaml"
    assert format_problems(results) == [
        f"{shown}: ParallelCluster EfaValidator: Instance type 'c6i.xlarge' does not support EFA.",
        f"{shown}:12:3: ParallelCluster ConfigSchemaValidator: HeadNode.Bogus: Unknown field.",
        f"{shown}: warning: ParallelCluster KeyPairValidator: no key pair",
    ]
    assert len(format_problems(results, warnings=False)) == 2
