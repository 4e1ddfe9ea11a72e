"""One in-process synth per shipped spec, shared by every test in this folder (first synth ~5 s)."""
from __future__ import annotations

import pytest

from tests import shipped

SPECS = sorted(shipped.SPECS)


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory):
    """name -> (stacks dict, cloud assembly); cdk-nag runs inside synth and raises on any finding."""
    import aws_cdk as cdk

    import app as cdk_app
    from clusterkit.pipeline.loader import load

    out = {}
    for name in SPECS:
        app = cdk.App(outdir=str(tmp_path_factory.mktemp(f"cdk-{name}")))
        stacks = cdk_app.build(app, load(name))
        out[name] = (stacks, app.synth())
    return out
