"""Every committed rendered config passes ParallelCluster 3.16.1's own schema and validators.

Real: ParallelCluster's marshmallow schema and its validate() (in .venv-pcluster). Stand-in: moto
serves the AWS calls the validators make; validators that fail only because of moto gaps are
suppressed by name (clusterkit/pcluster/check.py: MOTO_GAP_SUPPRESSIONS, each with its reason).
"""
from __future__ import annotations

import pytest

from clusterkit.pcluster.runner import format_problems, pcluster_python, run_check
from clusterkit.pipeline.loader import load
from clusterkit.render.rendered_files import rendered_path
from tests import shipped

pytestmark = pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`")


@pytest.fixture(scope="module")
def configs():
    out = []
    for path in shipped.spec_paths():
        loaded = load(path.stem)
        rendered = rendered_path(loaded)
        out.append((loaded.spec.name, f"cluster_configs/rendered/{rendered.name}", rendered.read_text(),
                    loaded.spec.region))
    return out


@pytest.mark.parametrize("mode", ["schema", "validate"])
def test_rendered_configs_pass_parallelcluster(configs, mode):
    results = run_check(configs, mode)
    errors = [line for line in format_problems(results, warnings=False)]
    assert errors == [] and all(r["ok"] for r in results)


def test_cli_validate_pcluster(capsys):
    from clusterkit.cli.main import main

    assert main(["validate", "--pcluster", "demo"]) == 0, capsys.readouterr().err
